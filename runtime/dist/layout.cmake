# fulcrum_dist_layout: the part of fulcrum::dist that needs no LibTorch (the
# group-layout math, the progress records and stall analysis the launcher also
# reads, GLOO_SOCKET_IFNAME's parsing). Defined here once and included by
# runtime/CMakeLists.txt before runtime/dist (LibTorch builds only) and
# runtime/launch (every build) use it.
add_library(fulcrum_dist_layout STATIC
  ${CMAKE_CURRENT_LIST_DIR}/group_layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/progress.cpp
  ${CMAKE_CURRENT_LIST_DIR}/socket_interface.cpp)
# Headers are included as "dist/progress.h", relative to runtime/.
target_include_directories(fulcrum_dist_layout PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(fulcrum_dist_layout PUBLIC fulcrum_sdk PRIVATE fulcrum_core fulcrum_warnings)
