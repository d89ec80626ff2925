#include "attention/sharded_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace fulcrum::attention {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void accumulate(AttentionStats& total, const AttentionStats& one) {
  total.tiles += one.tiles;
  total.heads = one.heads;
  total.bytes_sent += one.bytes_sent;
  total.bytes_received += one.bytes_received;
  total.peers = std::max(total.peers, one.peers);
  total.compute_ms += one.compute_ms;
  total.comm_ms += one.comm_ms;
}

// Carries the attention through the autograd graph: saved_data holds
// IValues only, and a capsule is the IValue for an arbitrary C++ object.
struct AttentionHolder : torch::CustomClassHolder {
  explicit AttentionHolder(std::shared_ptr<ShardedAttention> a) : attention(std::move(a)) {}
  std::shared_ptr<ShardedAttention> attention;
};

class ShardedAttentionFunction : public torch::autograd::Function<ShardedAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            std::shared_ptr<ShardedAttention> attention) {
    ShardedForward f = attention->forward(q, k, v);
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
    const ShardedForward f{saved[1], saved[2], saved[3], saved[4]};
    ShardedGrads g = holder->attention->backward(saved[0], f, grad_outputs[0]);
    return {g.dq, g.dk, g.dv, at::Tensor()};
  }
};

void check_local(const std::string& who, const at::Tensor& t, const char* name, std::int64_t rows,
                 const at::Tensor& q) {
  const bool ok =
      t.defined() && t.dim() == 3 && t.size(0) == rows &&
      (!q.defined() || (t.sizes().equals(q.sizes()) && t.scalar_type() == q.scalar_type()));
  if (!ok) {
    throw std::invalid_argument(
        who + ": " + name + " is " +
        (t.defined() ? c10::str(t.sizes()) + " " + std::string(c10::toString(t.scalar_type()))
                     : std::string("undefined")) +
        "; expected [" + std::to_string(rows) + " local rows, heads, head_dim]" +
        (q.defined() ? ", the shape and dtype of q " + c10::str(q.sizes()) : std::string()));
  }
}

}  // namespace

ShardedAttention::ShardedAttention(std::string name, ShardPlan plan, TileSchedule schedule,
                                   KernelOptions kernel, std::unique_ptr<KvExchange> exchange)
    : name_(std::move(name)),
      plan_(std::move(plan)),
      schedule_(std::move(schedule)),
      kernel_(kernel),
      exchange_(std::move(exchange)) {}

at::Tensor ShardedAttention::apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return ShardedAttentionFunction::apply(q, k, v, shared_from_this());
}

ShardedForward ShardedAttention::forward(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v) {
  check_local(name_, q, "q", plan_.shard_len, at::Tensor());
  check_local(name_, k, "k", plan_.shard_len, q);
  check_local(name_, v, "v", plan_.shard_len, q);
  const std::int64_t dim = q.size(2);
  AttentionStats stats;
  stats.heads = q.size(1);

  const auto comm_start = Clock::now();
  // K and V travel together: one collective or message instead of two.
  const at::Tensor kv = at::cat({k.detach(), v.detach()}, -1);  // [S, H, 2D]
  const at::Tensor kv_global = exchange_->gather(kv, stats);    // [N, H, 2D]
  ShardedForward f;
  f.k_global = kv_global.narrow(-1, 0, dim);
  f.v_global = kv_global.narrow(-1, dim, dim);
  stats.comm_ms = ms_since(comm_start);

  const auto compute_start = Clock::now();
  LocalForward local =
      local_attention_forward(schedule_, q.detach(), f.k_global, f.v_global, kernel_);
  stats.compute_ms = ms_since(compute_start);
  stats.tiles = local.tiles;
  f.out = std::move(local.out);
  f.lse = std::move(local.lse);
  last_forward_ = stats;
  accumulate(total_forward_, stats);
  return f;
}

ShardedGrads ShardedAttention::backward(const at::Tensor& q, const ShardedForward& f,
                                        const at::Tensor& dout) {
  check_local(name_, q, "q", plan_.shard_len, at::Tensor());
  check_local(name_, dout, "dout", plan_.shard_len, q);
  const std::int64_t dim = q.size(2);
  AttentionStats stats;
  stats.heads = q.size(1);

  const auto compute_start = Clock::now();
  LocalGrads local = local_attention_backward(schedule_, q.detach(), f.k_global, f.v_global, f.out,
                                              f.lse, dout.detach(), kernel_);
  stats.compute_ms = ms_since(compute_start);
  stats.tiles = local.tiles;

  const auto comm_start = Clock::now();
  // Every rank holds a share of the gradient of every key it read; the
  // key's owner needs the sum.
  const at::Tensor dkv_global = at::cat({local.dk, local.dv}, -1);    // [N, H, 2D]
  const at::Tensor dkv = exchange_->return_grads(dkv_global, stats);  // [S, H, 2D]
  ShardedGrads g;
  g.dq = std::move(local.dq);
  g.dk = dkv.narrow(-1, 0, dim).contiguous();
  g.dv = dkv.narrow(-1, dim, dim).contiguous();
  stats.comm_ms = ms_since(comm_start);
  last_backward_ = stats;
  accumulate(total_backward_, stats);
  return g;
}

}  // namespace fulcrum::attention
