# fulcrum_comm_layout: the part of fulcrum::comm that needs no LibTorch (the
# group-layout math, the progress records and stall analysis the launcher also
# reads, GLOO_SOCKET_IFNAME's parsing). Defined here once and included by
# runtime/CMakeLists.txt before runtime/comm (LibTorch builds only) and
# runtime/launch (every build) use it.
add_library(fulcrum_comm_layout STATIC
  ${CMAKE_CURRENT_LIST_DIR}/group_layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/progress.cpp
  ${CMAKE_CURRENT_LIST_DIR}/socket_interface.cpp)
# Headers are included as "comm/progress.h", relative to runtime/.
target_include_directories(fulcrum_comm_layout PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(fulcrum_comm_layout PUBLIC fulcrum_sdk PRIVATE fulcrum_core fulcrum_warnings)
