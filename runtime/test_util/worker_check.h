// The check of a multi-process test worker (a process a gtest launches once
// per rank): a failed check prints one "FAIL: rank R: what" line and exits 1,
// which the launching test reports with the line. Header-only, LibTorch-free.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fulcrum::test_util {

// The rank FAIL lines name: -1 until the worker knows its own.
inline int& worker_rank() {
  static int rank = -1;
  return rank;
}

inline void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAIL: rank %d: %s\n", worker_rank(), what.c_str());
  std::fflush(stderr);
  std::exit(1);
}

}  // namespace fulcrum::test_util
