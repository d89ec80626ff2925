// One rank of the CP attention over real Gloo process groups, launched by
// gloo_attention_test.cpp. Every rank builds the same row, plan and tensors
// from fixed seeds (the plan is replicated, as in training), runs the
// differentiable CP attention on its shard, gathers the results over the
// world group and compares them with dense attention.
//
//   fulcrum_gloo_attention_worker <mask> <dp_size> <cp_size>
//
// Exit codes: 0 equal, 1 a check failed ("FAIL:" line), 2 a CommError.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attention/cp_attention.h"
#include "attention/sharding.h"
#include "comm/gloo_communicator.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "reference.h"
#include "test_util/worker_check.h"

int main(int argc, char** argv) {
  using namespace fulcrum;
  using namespace fulcrum::attention;
  using test_util::check;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <mask> <dp> <cp>\n", argv[0]);
    return 3;
  }
  at::set_num_threads(1);
  auto options = comm::GlooOptions::from_env(std::atoi(argv[2]), std::atoi(argv[3]));
  check(options.is_ok(), options.status().message());
  options->rendezvous_timeout = std::chrono::seconds(20);
  options->op_timeout = std::chrono::seconds(20);
  test_util::worker_rank() = options->rank;
  try {
    const comm::ProcessGroups groups = comm::init_gloo_process_groups(*options);
    const std::int32_t p = groups.cp->size();

    CpWorkload w;
    w.tokens = 150;
    w.doc_lengths = {61, 3, 50, 36};
    const Result<MaskSpec> mask = parse_mask(argv[1]);
    check(mask.is_ok(), mask.status().message());
    w.mask = *mask;
    w.block_size = 16;
    w.cp_size = p;
    // Each CP group gets its own row (seeded by dp_rank) and the same plan.
    const ShardPlan plan = testing::random_plan(w.tokens, p, 2, 77);
    at::manual_seed(500 + groups.layout.dp_rank);
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    const at::Tensor q = at::randn({w.tokens, 2, 8}, opts);
    const at::Tensor k = at::randn({w.tokens, 2, 8}, opts);
    const at::Tensor v = at::randn({w.tokens, 2, 8}, opts);
    const at::Tensor weight = at::randn({w.tokens, 2, 8}, opts);

    auto attention = CpAttention::create(w, plan, groups.cp);
    check(attention.is_ok(), attention.status().message());
    const std::int32_t r = groups.cp->rank();
    at::Tensor ql = shard(q, plan, r).requires_grad_();
    at::Tensor kl = shard(k, plan, r).requires_grad_();
    at::Tensor vl = shard(v, plan, r).requires_grad_();
    const at::Tensor out = (*attention)->apply(ql, kl, vl);
    (out * shard(weight, plan, r)).sum().backward();

    const at::Tensor qr = q.clone().requires_grad_();
    const at::Tensor kr = k.clone().requires_grad_();
    const at::Tensor vr = v.clone().requires_grad_();
    const at::Tensor ref = testing::dense_attention(qr, kr, vr, testing::brute_mask(w));
    (ref * weight).sum().backward();

    const auto diff = [&](const at::Tensor& local, const at::Tensor& expected) {
      const at::Tensor full = unshard(groups.cp->all_gather_cat(local.detach()), plan);
      return (full - expected).abs().max().item<double>();
    };
    check(diff(out, ref) < 1e-10, "forward differs from dense attention");
    check(diff(ql.grad(), qr.grad()) < 1e-10, "dq differs from dense attention");
    check(diff(kl.grad(), kr.grad()) < 1e-10, "dk differs from dense attention");
    check(diff(vl.grad(), vr.grad()) < 1e-10, "dv differs from dense attention");
    const std::int64_t tiles = compute_work(w, plan)[r].tiles;
    check((*attention)->last_forward().tiles == tiles,
          "forward tiles " + std::to_string((*attention)->last_forward().tiles) +
              " != work model " + std::to_string(tiles));
    check((*attention)->last_backward().tiles == tiles, "backward tiles != work model");
    groups.world->barrier();
    return 0;
  } catch (const comm::CommError& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 2;
  }
}
