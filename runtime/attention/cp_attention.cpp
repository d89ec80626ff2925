#include "attention/cp_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "attention/sharding.h"

namespace fulcrum::attention {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Carries the CpAttention through the autograd graph: saved_data holds
// IValues only, and a capsule is the IValue for an arbitrary C++ object.
struct AttentionHolder : torch::CustomClassHolder {
  explicit AttentionHolder(std::shared_ptr<CpAttention> a) : attention(std::move(a)) {}
  std::shared_ptr<CpAttention> attention;
};

class CpAttentionFunction : public torch::autograd::Function<CpAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            std::shared_ptr<CpAttention> attention) {
    CpForward f = attention->forward(q, k, v);
    ctx->save_for_backward({q, f.out, f.lse, f.k_global, f.v_global});
    ctx->saved_data["attention"] =
        c10::IValue::make_capsule(c10::make_intrusive<AttentionHolder>(std::move(attention)));
    return f.out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const auto holder = c10::static_intrusive_pointer_cast<AttentionHolder>(
        ctx->saved_data["attention"].toCapsule());
    const CpForward f{saved[1], saved[2], saved[3], saved[4]};
    CpGrads g = holder->attention->backward(saved[0], f, grad_outputs[0]);
    return {g.dq, g.dk, g.dv, at::Tensor()};
  }
};

void check_local(const at::Tensor& t, const char* name, std::int64_t rows, const at::Tensor& q) {
  const bool ok =
      t.defined() && t.dim() == 3 && t.size(0) == rows &&
      (!q.defined() || (t.sizes().equals(q.sizes()) && t.scalar_type() == q.scalar_type()));
  if (!ok) {
    throw std::invalid_argument(
        std::string("cp attention: ") + name + " is " +
        (t.defined() ? c10::str(t.sizes()) + " " + std::string(c10::toString(t.scalar_type()))
                     : std::string("undefined")) +
        "; expected [" + std::to_string(rows) + " local rows, heads, head_dim]" +
        (q.defined() ? ", the shape and dtype of q " + c10::str(q.sizes()) : std::string()));
  }
}

}  // namespace

Result<std::shared_ptr<CpAttention>> CpAttention::create(const CpWorkload& workload,
                                                         const ShardPlan& plan,
                                                         std::shared_ptr<comm::Communicator> group,
                                                         const CpAttentionOptions& options) {
  if (!group) return invalid_argument("cp attention needs a CP group communicator; got none");
  if (group->size() != plan.cp_size) {
    return invalid_argument("cp attention: group " + group->name() + " has " +
                            std::to_string(group->size()) + " ranks but the plan has cp_size " +
                            std::to_string(plan.cp_size) + "; plan with the CP group's size");
  }
  Result<TileSchedule> schedule = make_tile_schedule(workload, plan, group->rank());
  if (!schedule) return schedule.status();
  std::shared_ptr<CpAttention> a(new CpAttention());
  a->plan_ = plan;
  a->schedule_ = std::move(schedule).value();
  a->group_ = std::move(group);
  a->options_ = options;
  a->restore_ = restore_tensor(plan);
  return a;
}

at::Tensor CpAttention::apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return CpAttentionFunction::apply(q, k, v, shared_from_this());
}

CpForward CpAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_local(q, "q", plan_.shard_len, at::Tensor());
  check_local(k, "k", plan_.shard_len, q);
  check_local(v, "v", plan_.shard_len, q);
  const std::int64_t dim = q.size(2);
  AttentionStats stats;
  stats.heads = q.size(1);

  const auto comm_start = Clock::now();
  // K and V travel together: one collective instead of two.
  const at::Tensor kv = at::cat({k.detach(), v.detach()}, -1);
  const at::Tensor gathered = group_->all_gather_cat(kv);  // [P * S, H, 2D], rank-major
  const at::Tensor kv_global = gathered.index_select(0, restore_.to(gathered.device()));
  CpForward f;
  f.k_global = kv_global.narrow(-1, 0, dim);
  f.v_global = kv_global.narrow(-1, dim, dim);
  stats.comm_ms = ms_since(comm_start);

  const auto compute_start = Clock::now();
  LocalForward local =
      local_attention_forward(schedule_, q.detach(), f.k_global, f.v_global, options_.kernel);
  stats.compute_ms = ms_since(compute_start);
  stats.tiles = local.tiles;
  f.out = std::move(local.out);
  f.lse = std::move(local.lse);
  last_forward_ = stats;
  return f;
}

CpGrads CpAttention::backward(const at::Tensor& q, const CpForward& f, const at::Tensor& dout) {
  check_local(q, "q", plan_.shard_len, at::Tensor());
  check_local(dout, "dout", plan_.shard_len, q);
  const std::int64_t dim = q.size(2);
  AttentionStats stats;
  stats.heads = q.size(1);

  const auto compute_start = Clock::now();
  LocalGrads local = local_attention_backward(schedule_, q.detach(), f.k_global, f.v_global, f.out,
                                              f.lse, dout.detach(), options_.kernel);
  stats.compute_ms = ms_since(compute_start);
  stats.tiles = local.tiles;

  const auto comm_start = Clock::now();
  // Every rank holds a share of every key's gradient; the key's owner needs
  // the sum, in its plan order. Pad rows receive zeros.
  const at::Tensor dkv_global = at::cat({local.dk, local.dv}, -1);  // [N, H, 2D]
  const at::Tensor dkv_plan = shard_all(dkv_global, plan_);         // [P * S, H, 2D]
  const at::Tensor dkv = group_->reduce_scatter_sum(dkv_plan);      // [S, H, 2D]
  CpGrads g;
  g.dq = std::move(local.dq);
  g.dk = dkv.narrow(-1, 0, dim).contiguous();
  g.dv = dkv.narrow(-1, dim, dim).contiguous();
  stats.comm_ms = ms_since(comm_start);
  last_backward_ = stats;
  return g;
}

}  // namespace fulcrum::attention
