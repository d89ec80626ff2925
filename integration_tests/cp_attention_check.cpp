// One rank of the CP attention equality check, started P times by the
// launcher (fulcrum_it_launch). For every CP strategy the plugin lists, every
// mask kind and a few rows (packed documents, lengths that force padding,
// lengths the preferred strategy cannot serve so the fallback plans them),
// the rank plans the row through the host's CpSelector exactly as training
// does, runs the differentiable CP attention on its shard in float64, and
// compares output, dQ, dK and dV, gathered and unsharded, against dense
// single-process attention written here from the mask definitions.
//
//   fulcrum_it_cp_attention PLUGIN_PATH
//
// Exit: 0 every case equal (and padded and fallback cases were seen), 1 a
// mismatch (a "FAIL" line per case on rank 0), 2 setup failure.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/compute_threads.h"
#include "attention/cp_attention.h"
#include "attention/sharding.h"
#include "comm/gloo_communicator.h"
#include "fulcrum/core/workload.h"
#include "fulcrum/host/plugin_loader.h"
#include "fulcrum/host/selection.h"
#include "launch/worker_env.h"

namespace {

using fulcrum::CpWorkload;
using fulcrum::MaskKind;
using fulcrum::MaskSpec;
using fulcrum::ShardPlan;

constexpr double kTolerance = 1e-10;

// allowed[q][k] over the whole row, straight from the mask definitions:
// same document, then the mask on offsets within the document.
at::Tensor reference_mask(const CpWorkload& w) {
  const std::int64_t n = w.tokens;
  std::vector<std::int64_t> doc_of(static_cast<std::size_t>(n));
  std::vector<std::int64_t> offset(static_cast<std::size_t>(n));
  std::int64_t pos = 0;
  for (std::size_t d = 0; d < w.doc_lengths.size(); ++d) {
    for (std::int64_t t = 0; t < w.doc_lengths[d]; ++t, ++pos) {
      doc_of[static_cast<std::size_t>(pos)] = static_cast<std::int64_t>(d);
      offset[static_cast<std::size_t>(pos)] = t;
    }
  }
  at::Tensor allowed = at::zeros({n, n}, at::kBool);
  auto a = allowed.accessor<bool, 2>();
  for (std::int64_t q = 0; q < n; ++q) {
    for (std::int64_t k = 0; k < n; ++k) {
      const auto uq = static_cast<std::size_t>(q);
      const auto uk = static_cast<std::size_t>(k);
      if (doc_of[uq] != doc_of[uk]) continue;
      const std::int64_t i = offset[uq];
      const std::int64_t j = offset[uk];
      switch (w.mask.kind) {
        case MaskKind::kCausal:
          a[q][k] = j <= i;
          break;
        case MaskKind::kFull:
          a[q][k] = true;
          break;
        case MaskKind::kSliding:
          a[q][k] = j <= i && j > i - w.mask.param;
          break;
        case MaskKind::kPrefix:
          a[q][k] = j <= i || j < w.mask.param;
          break;
        default:
          break;
      }
    }
  }
  return allowed;
}

// Softmax attention over [N, H, D]; differentiable through autograd.
at::Tensor dense_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& allowed) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  const at::Tensor scores = at::einsum("qhd,khd->hqk", {q, k}) * scale;
  const at::Tensor masked = scores.masked_fill(allowed.logical_not().unsqueeze(0),
                                               -std::numeric_limits<double>::infinity());
  return at::einsum("hqk,khd->qhd", {at::softmax(masked, -1), v});
}

struct Row {
  std::string name;
  std::vector<std::int64_t> doc_lengths;
};

// Packed documents with N divisible by 2P and by P*B; N with N % 2P != 0
// (head_tail and ptrr fall back; contiguous pads unless P | N); a single
// document of P*B*2 + 1 tokens (padding for every strategy).
std::vector<Row> test_rows(std::int32_t p, std::int64_t b) {
  const std::int64_t unit = 2 * p * b;
  return {
      {"packed", {unit + 3, 5, unit - 11, 1, unit + 2}},
      {"odd", {unit + 7, 2 * unit - 2}},
      {"single", {p * b * 2 + 1}},
  };
}

std::int64_t total(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (std::int64_t x : v) s += x;
  return s;
}

// The largest |difference| of the output, dQ, dK and dV of one case,
// gathered and unsharded, against dense attention.
struct CaseDiffs {
  double out = 0, q = 0, k = 0, v = 0;
  double worst() const { return std::max({out, q, k, v}); }
};

// One case on this rank of `cp`: the same tensors on every rank (the seed
// depends on the case only), CP attention on this rank's shard and dense
// attention of the whole row, forward and backward.
CaseDiffs run_case(const CpWorkload& w, const ShardPlan& plan,
                   const std::shared_ptr<fulcrum::comm::Communicator>& cp, int case_index) {
  using namespace fulcrum;
  const std::int32_t r = cp->rank();
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::manual_seed(static_cast<std::uint64_t>(case_index) * 7919u);
  const at::Tensor q = at::randn({w.tokens, 2, 8}, f64);
  const at::Tensor k = at::randn({w.tokens, 2, 8}, f64);
  const at::Tensor v = at::randn({w.tokens, 2, 8}, f64);
  const at::Tensor weight = at::randn({w.tokens, 2, 8}, f64);

  auto attention = attention::CpAttention::create(w, plan, cp);
  if (!attention) throw std::runtime_error(attention.status().message());
  at::Tensor ql = attention::shard(q, plan, r).requires_grad_();
  at::Tensor kl = attention::shard(k, plan, r).requires_grad_();
  at::Tensor vl = attention::shard(v, plan, r).requires_grad_();
  const at::Tensor out = (*attention)->apply(ql, kl, vl);
  (out * attention::shard(weight, plan, r)).sum().backward();

  const at::Tensor qr = q.clone().requires_grad_();
  const at::Tensor kr = k.clone().requires_grad_();
  const at::Tensor vr = v.clone().requires_grad_();
  const at::Tensor ref = dense_attention(qr, kr, vr, reference_mask(w));
  (ref * weight).sum().backward();

  auto diff = [&](const at::Tensor& local, const at::Tensor& expected) {
    const at::Tensor full = attention::unshard(cp->all_gather_cat(local.detach()), plan);
    return (full - expected).abs().max().item<double>();
  };
  return {diff(out, ref), diff(ql.grad(), qr.grad()), diff(kl.grad(), kr.grad()),
          diff(vl.grad(), vr.grad())};
}

fulcrum::comm::ProcessGroups connect(const fulcrum::launch::WorkerIdentity& id) {
  fulcrum::comm::GlooOptions g;
  g.rank = id.rank;
  g.world_size = id.world_size;
  g.dp_size = 1;
  g.cp_size = id.world_size;
  g.master_addr = id.master_addr;
  g.master_port = id.master_port;
  g.rendezvous_timeout = std::chrono::seconds(30);
  g.op_timeout = std::chrono::seconds(30);
  return fulcrum::comm::init_gloo_process_groups(g);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fulcrum;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PLUGIN_PATH\n", argv[0]);
    return 2;
  }
  attention::set_compute_threads(1);
  auto id = launch::detect_worker_identity();
  if (!id) {
    std::fprintf(stderr, "%s\n", id.status().message().c_str());
    return 2;
  }
  const bool rank0 = id->rank == 0;
  auto plugin = host::load_plugin(argv[1]);
  if (!plugin) {
    std::fprintf(stderr, "rank %d: %s\n", id->rank, plugin.status().message().c_str());
    return 2;
  }
  const std::int32_t p = id->world_size;
  const std::int64_t b = 8;  // small tiles: many per row, so skipping matters

  const std::vector<Row> rows = test_rows(p, b);
  const std::vector<std::string> masks = {"causal", "full", "sliding:7", "prefix:13"};

  try {
    const comm::ProcessGroups groups = connect(*id);
    const std::int32_t r = groups.cp->rank();

    int cases = 0, failures = 0, padded = 0, fallbacks = 0;
    for (const std::string& strategy : (*plugin)->cp_strategies()) {
      host::SelectorOptions so;
      so.preferred = strategy;
      so.fallback = "contiguous";
      so.log = [](host::LogLevel, const std::string&) {};
      host::CpSelector selector(*plugin, so);
      for (const std::string& mask_text : masks) {
        for (const Row& row : rows) {
          CpWorkload w;
          w.tokens = total(row.doc_lengths);
          w.doc_lengths = row.doc_lengths;
          w.mask = parse_mask(mask_text).value();
          w.block_size = b;
          w.cp_size = p;
          Result<ShardPlan> plan = selector.plan(w);
          if (!plan) {
            std::fprintf(stderr, "rank %d: planning %s failed: %s\n", r, strategy.c_str(),
                         plan.status().message().c_str());
            return 2;
          }
          ++cases;
          padded += plan->padding > 0 ? 1 : 0;
          fallbacks += plan->fallback_reason.empty() ? 0 : 1;
          const CaseDiffs d = run_case(w, *plan, groups.cp, cases);
          if (!(d.worst() < kTolerance)) {
            ++failures;
            if (rank0) {
              std::printf(
                  "FAIL P=%d strategy=%s (used %s) mask=%s row=%s N=%lld: max |diff| out %.3g "
                  "dq %.3g dk %.3g dv %.3g\n",
                  p, strategy.c_str(), plan->strategy_used.c_str(), mask_text.c_str(),
                  row.name.c_str(), static_cast<long long>(w.tokens), d.out, d.q, d.k, d.v);
            }
          }
        }
      }
    }
    groups.world->barrier();
    if (rank0) {
      std::printf("P=%d: %d cases (%d padded, %d fallback), %d failed\n", p, cases, padded,
                  fallbacks, failures);
    }
    if (failures > 0) return 1;
    if (padded == 0 || fallbacks == 0) {
      if (rank0) std::printf("FAIL P=%d: the cases covered no padded or no fallback plan\n", p);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", id->rank, comm::first_line(e).c_str());
    return 2;
  }
}
