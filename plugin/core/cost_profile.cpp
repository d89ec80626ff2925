#include "fulcrum/core/cost_profile.h"

#include <cmath>
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

Status bad_field(const CostProfile& profile, const char* field, double value, const char* rule) {
  return invalid_argument("cost profile " + quote_text(profile.name) + ": " + field + " = " +
                          std::to_string(value) + " " + rule +
                          "; fix it in the profile (docs/HYBRID.md lists every field)");
}

}  // namespace

std::vector<std::string> builtin_cost_profile_names() { return {"h100_7b", "cpu_gloo"}; }

Result<CostProfile> builtin_cost_profile(std::string_view name) {
  if (name == "h100_7b") return h100_7b();
  if (name == "cpu_gloo") return cpu_gloo();
  std::string known;
  for (const std::string& n : builtin_cost_profile_names())
    known += (known.empty() ? "" : ", ") + n;
  return not_found("cost profile " + quote_text(name) + " is not bundled; use one of " + known +
                   " or a profile YAML file (docs/HYBRID.md)");
}

Status validate_cost_profile(const CostProfile& p) {
  struct Field {
    const char* name;
    double value;
    bool positive;
  };
  const Field fields[] = {
      {"tile_seconds", p.tile_seconds, false},
      {"token_seconds", p.token_seconds, false},
      {"slot_seconds", p.slot_seconds, false},
      {"kv_bytes_per_token", p.kv_bytes_per_token, true},
      {"intra_node_bytes_per_second", p.intra_node_bytes_per_second, true},
      {"inter_node_bytes_per_second", p.inter_node_bytes_per_second, true},
      {"latency_seconds", p.latency_seconds, false},
  };
  for (const Field& f : fields) {
    if (!std::isfinite(f.value)) return bad_field(p, f.name, f.value, "is not finite");
    if (f.positive && !(f.value > 0)) return bad_field(p, f.name, f.value, "must be > 0");
    if (!f.positive && f.value < 0) return bad_field(p, f.name, f.value, "must be >= 0");
  }
  if (p.ranks_per_node < 1) {
    return bad_field(p, "ranks_per_node", p.ranks_per_node, "must be >= 1");
  }
  return Status::ok();
}

}  // namespace fulcrum
