#include "fulcrum/core/cost_profile.h"

#include "fulcrum/core/workload.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace fulcrum {
namespace {

// Derivations in docs/HYBRID.md ("Profiles"); keep the two in step.
CostProfile h100_7b() {
  CostProfile p;
  p.name = "h100_7b";
  // 32 layers x 3.5 (fwd + bwd) x 4 x 128^2 x 4096 flops at 400 TFLOP/s.
  p.tile_seconds = 7.5e-5;
  // 6 x 7.2e9 flops per token at 45% of 989 TFLOP/s.
  p.token_seconds = 9.7e-5;
  // About 1,500 kernel boundaries per forward + backward at ~1.3 us each.
  p.slot_seconds = 2.0e-3;
  // 32 layers x (K + V) x 8 KV heads x 128 x 2 bytes.
  p.kv_bytes_per_token = 131072;
  p.intra_node_bytes_per_second = 3.6e11;  // NVLink 4, NCCL send/recv
  p.inter_node_bytes_per_second = 4.0e10;  // one 400 Gb/s NIC per GPU
  // 64 messages per peer (K/V forward, dK/dV backward, 32 layers) x 15 us.
  p.latency_seconds = 1.0e-3;
  p.ranks_per_node = 8;
  return p;
}

// h100_7b with FlashAttention-3-class attention: FA3 runs forward 1.5-2.0x and
// backward 1.5-1.75x as fast as FlashAttention-2 on H100 (BF16), so the
// same 3.0e10 flops of a tile at 1.5 x 400 = 600 TFLOP/s.
CostProfile h100_7b_fa3() {
  CostProfile p = h100_7b();
  p.name = "h100_7b_fa3";
  p.tile_seconds = 5.0e-5;
  return p;
}

// h100_7b with the point-to-point bandwidth NCCL's send/recv reaches between
// two NVLink-connected H100s (nccl-tests sendrecv_perf plateaus near 180 GB/s
// for large messages) instead of 80% of the NVLink 4 link; inter-node and
// the per-message latency stay h100_7b's, so only this figure moves.
CostProfile h100_7b_nccl() {
  CostProfile p = h100_7b();
  p.name = "h100_7b_nccl";
  p.intra_node_bytes_per_second = 1.8e11;
  return p;
}

CostProfile cpu_gloo() {
  CostProfile p;
  p.name = "cpu_gloo";
  // docs/RESULTS_RUNTIME.md section 1: the blocked attention kernel, one
  // head of dimension 64, float32, B = 128, forward + backward, one layer.
  p.tile_seconds = 2.027e-4;
  // That kernel has no token-linear layers; its token-linear work (the K/V
  // relayout) is fitted into the per-rank fixed term below.
  p.token_seconds = 0.0;
  p.slot_seconds = 6.6e-3;
  p.kv_bytes_per_token = 512;  // (K + V) x 64 x 4 bytes
  // One TCP stream over loopback, measured (docs/HYBRID.md); one host.
  p.intra_node_bytes_per_second = 3.3e9;
  p.inter_node_bytes_per_second = 3.3e9;
  // Two messages per peer per slot at the 449 us of a Gloo round trip
  // measured in docs/RELIABILITY.md.
  p.latency_seconds = 9.0e-4;
  p.ranks_per_node = 8;
  return p;
}

// A value as a message shows it: whole numbers below 1e15 in full (a count
// such as 1048576 must not read as 1.04858e+06), anything else with %g, which
// keeps 1e15 and 3.3e9 readable where std::to_string would print fifteen
// zeros or 0.000000.
std::string number(double value) {
  if (std::isfinite(value) && std::trunc(value) == value && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<long long>(value));
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

Status bad_field(const CostProfile& profile, const char* field, double value,
                 const std::string& rule) {
  return invalid_argument("cost profile " + quote_text(profile.name) + ": " + field + " = " +
                          number(value) + " " + rule +
                          "; fix it in the profile (docs/HYBRID.md lists every field)");
}

}  // namespace

std::vector<std::string> builtin_cost_profile_names() {
  return {"h100_7b", "cpu_gloo", "h100_7b_fa3", "h100_7b_nccl"};
}

Result<CostProfile> builtin_cost_profile(std::string_view name) {
  if (name == "h100_7b") return h100_7b();
  if (name == "cpu_gloo") return cpu_gloo();
  if (name == "h100_7b_fa3") return h100_7b_fa3();
  if (name == "h100_7b_nccl") return h100_7b_nccl();
  std::string known;
  for (const std::string& n : builtin_cost_profile_names())
    known += (known.empty() ? "" : ", ") + n;
  return not_found("cost profile " + quote_text(name) + " is not bundled; use one of " + known +
                   " or a profile YAML file (docs/HYBRID.md)");
}

Status validate_cost_profile(const CostProfile& p) {
  // The upper bounds keep every product the cost model forms finite and
  // every byte count it rounds inside int64: an hour per tile, token, slot
  // or message, 2^30 bytes of K/V per token and a petabyte per second are
  // each far past any machine; a profile beyond them is a typo.
  struct Field {
    const char* name;
    double value;
    double least;  // an exclusive bound where `positive`, else inclusive
    bool positive;
    double most;
  };
  constexpr double kHour = 3600;
  constexpr double kMaxKvBytes = static_cast<double>(kMaxKvBytesPerToken);
  constexpr double kMaxBandwidth = 1e15;
  const Field fields[] = {
      {"tile_seconds", p.tile_seconds, 0, false, kHour},
      {"token_seconds", p.token_seconds, 0, false, kHour},
      {"slot_seconds", p.slot_seconds, 0, false, kHour},
      {"kv_bytes_per_token", p.kv_bytes_per_token, 0, true, kMaxKvBytes},
      {"intra_node_bytes_per_second", p.intra_node_bytes_per_second, 1, false, kMaxBandwidth},
      {"inter_node_bytes_per_second", p.inter_node_bytes_per_second, 1, false, kMaxBandwidth},
      {"latency_seconds", p.latency_seconds, 0, false, kHour},
      {"exchange_overlap", p.exchange_overlap, 0, false, 1},
      {"row_token_seconds", p.row_token_seconds, 0, false, kHour},
      {"partial_tile_seconds", p.partial_tile_seconds, 0, false, kHour},
  };
  for (const Field& f : fields) {
    if (!std::isfinite(f.value)) return bad_field(p, f.name, f.value, "is not finite");
    if (f.positive && !(f.value > f.least)) return bad_field(p, f.name, f.value, "must be > 0");
    if (!f.positive && f.value < f.least) {
      return bad_field(p, f.name, f.value, f.least == 0 ? "must be >= 0" : "must be >= 1");
    }
    if (f.value > f.most) {
      return bad_field(p, f.name, f.value, "must be <= " + number(f.most));
    }
  }
  if (p.ranks_per_node < 1 || p.ranks_per_node > kMaxGroupSize) {
    return bad_field(p, "ranks_per_node", p.ranks_per_node,
                     "must be in [1, " + number(static_cast<double>(kMaxGroupSize)) + "]");
  }
  return Status::ok();
}

}  // namespace fulcrum
