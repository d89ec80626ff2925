// Small pieces the LibTorch benchmarks share: pinning the math libraries to
// one thread, medians, and a line describing the machine, so every figure
// in docs/RESULTS_RUNTIME.md says where and under which load it was taken.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attention/compute_threads.h"

namespace fulcrum::bench {

using BenchClock = std::chrono::steady_clock;

inline double ms_since(BenchClock::time_point start) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - start).count();
}

// CPU time of the calling thread. With ATen and OpenBLAS pinned to one
// thread all the work runs here, and unlike the wall clock it does not count
// the time other processes of a shared machine hold the core.
inline double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// One core, as the tile model assumes for a rank (attention/compute_threads.h:
// ATen's threads and OpenBLAS's pool). Returns a line saying what was set.
inline std::string use_one_core() { return fulcrum::attention::set_compute_threads(1); }

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one.empty() ? std::string("n/a") : one + " " + five + " " + fifteen;
}

// "CPU model, N hardware threads, load averages": the benchmarks run on a
// shared, noisy machine, and the load says how noisy a run was.
inline std::string machine_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  }
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) +
         " hardware threads, load average " + load_average();
}

// Solves the normal equations of least squares y ~ X b (X rows of size N),
// with partial pivoting; empty when the columns do not separate (a pivot
// vanishes against its column's own size, so columns in any units fit).
template <std::size_t N>
std::vector<double> least_squares(const std::vector<std::array<double, N>>& x,
                                  const std::vector<double>& y) {
  double a[N][N + 1] = {};
  double size[N] = {};  // each column's X^T X diagonal, before elimination
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (std::size_t r = 0; r < N; ++r) {
      for (std::size_t c = 0; c < N; ++c) a[r][c] += x[i][r] * x[i][c];
      a[r][N] += x[i][r] * y[i];
    }
  }
  for (std::size_t r = 0; r < N; ++r) size[r] = a[r][r];
  for (std::size_t i = 0; i < N; ++i) {
    std::size_t pivot = i;
    for (std::size_t j = i + 1; j < N; ++j) {
      if (std::abs(a[j][i]) > std::abs(a[pivot][i])) pivot = j;
    }
    if (!(std::abs(a[pivot][i]) > 1e-12 * size[i])) return {};
    for (std::size_t c = 0; c <= N; ++c) std::swap(a[i][c], a[pivot][c]);
    for (std::size_t j = i + 1; j < N; ++j) {
      const double f = a[j][i] / a[i][i];
      for (std::size_t c = i; c <= N; ++c) a[j][c] -= f * a[i][c];
    }
  }
  std::vector<double> b(N, 0.0);
  for (std::size_t i = N; i-- > 0;) {
    double v = a[i][N];
    for (std::size_t c = i + 1; c < N; ++c) v -= a[i][c] * b[c];
    b[i] = v / a[i][i];
  }
  return b;
}

}  // namespace fulcrum::bench
