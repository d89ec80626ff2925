// The intra-op threads of this process's compute. at::set_num_threads sets
// ATen's (OpenMP, MKL), but a system OpenBLAS built with pthreads keeps a pool
// of its own, sized when it loads (from OPENBLAS_NUM_THREADS,
// GOTO_NUM_THREADS or OMP_NUM_THREADS, else the core count), which
// at::set_num_threads does not reach. Left alone, that pool splits every
// large enough matrix product across the host's cores: the product's work
// then lands partly on threads whose CPU time the caller's thread clock does
// not see, its idle threads spin (sched_yield) on cores the other ranks need,
// and a rank set to one thread uses several. OpenBLAS's setter is looked up
// at run time, so another BLAS still works. Call it before compute starts:
// OpenBLAS's setter is not safe while products run on other threads.
#pragma once

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <string>

namespace fulcrum::attention {

// Sets both to `threads` (>= 1); returns a line saying what was set.
inline std::string set_compute_threads(int threads) {
  at::set_num_threads(threads);
  std::string blas = "openblas_set_num_threads not found (BLAS is not OpenBLAS?)";
  using SetThreads = void (*)(int);
  if (auto* set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(threads);
    using GetThreads = int (*)();
    auto* get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    // What OpenBLAS took: it caps the count at its build's maximum.
    blas = "OpenBLAS threads " + std::to_string(get != nullptr ? get() : threads);
    using GetConfig = char* (*)();
    if (auto* config = reinterpret_cast<GetConfig>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
      blas += std::string(" (") + config() + ")";
    }
  }
  return "threads: ATen " + std::to_string(at::get_num_threads()) + ", " + blas;
}

}  // namespace fulcrum::attention
