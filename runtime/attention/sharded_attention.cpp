#include "attention/sharded_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <limits>
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
  total.exchange_ms += one.exchange_ms;
  total.wait_ms += one.wait_ms;
  total.groups += one.groups;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

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

// Both are softmax-weighted means, so the merged one weighs each by its
// share exp(L_i - L) of the total, L = log(e^L1 + e^L2).
void merge_partial(at::Tensor& out, at::Tensor& lse, LocalForward part) {
  if (!out.defined()) {
    out = std::move(part.out);
    lse = std::move(part.lse);
    return;
  }
  const at::Tensor m = at::maximum(lse, part.lse);
  const at::Tensor m_safe = m.masked_fill(m.isinf(), 0.0);  // both -inf: exp() gives 0, not NaN
  const at::Tensor a = (lse - m_safe).exp_();
  const at::Tensor b = (part.lse - m_safe).exp_();
  const at::Tensor sum = a + b;
  const at::Tensor sum_safe = sum.masked_fill(sum.eq(0), 1.0);
  out = out * (a / sum_safe).unsqueeze(-1) + part.out * (b / sum_safe).unsqueeze(-1);
  lse = m_safe + sum.log();  // log(0) = -inf: no key
}

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
  if (const OverlapPlan* overlap = exchange_->overlap()) {
    ShardedForward f = forward_overlapped(q.detach(), kv, *overlap, stats);
    stats.comm_ms = ms_since(comm_start) - stats.compute_ms;
    finish_forward(stats);
    return f;
  }
  const at::Tensor kv_global = exchange_->gather(kv, stats);  // [N, H, 2D]
  ShardedForward f;
  f.k_global = kv_global.narrow(-1, 0, dim);
  f.v_global = kv_global.narrow(-1, dim, dim);
  stats.comm_ms = ms_since(comm_start);

  const auto compute_start = Clock::now();
  LocalForward local =
      local_attention_forward(schedule_, q.detach(), f.k_global, f.v_global, kernel_);
  stats.compute_ms = ms_since(compute_start);
  stats.tiles = local.tiles;
  stats.groups = 1;
  f.out = std::move(local.out);
  f.lse = std::move(local.lse);
  finish_forward(stats);
  return f;
}

void ShardedAttention::finish_forward(const AttentionStats& stats) {
  last_forward_ = stats;
  accumulate(total_forward_, stats);
}

void ShardedAttention::finish_backward(const AttentionStats& stats) {
  last_backward_ = stats;
  accumulate(total_backward_, stats);
}

// Group by group as the keys arrive (OverlapPlan::forward; empty groups
// skipped), each group's partial (O, L) merged in.
ShardedForward ShardedAttention::forward_overlapped(const at::Tensor& q, const at::Tensor& kv,
                                                    const OverlapPlan& overlap,
                                                    AttentionStats& stats) {
  const std::int64_t dim = q.size(2);
  ShardedForward f;
  auto compute = [&](std::size_t i, const at::Tensor& kv_global) {
    const TileSchedule& group = overlap.forward[i];
    if (group.tiles == 0) return;
    const auto start = Clock::now();
    LocalForward part = local_attention_forward(group, q, kv_global.narrow(-1, 0, dim),
                                                kv_global.narrow(-1, dim, dim), kernel_);
    stats.tiles += part.tiles;
    merge_partial(f.out, f.lse, std::move(part));
    stats.groups += 1;
    stats.compute_ms += ms_since(start);
  };
  const at::Tensor kv_global = exchange_->gather_overlapped(kv, stats, compute);
  f.k_global = kv_global.narrow(-1, 0, dim);
  f.v_global = kv_global.narrow(-1, dim, dim);
  if (!f.out.defined()) {  // no tile at all: zero rows, L = -inf
    f.out = at::zeros_like(q);
    f.lse = at::full({q.size(0), q.size(1)}, -kInf, q.options());
  }
  return f;
}

// Group by group (OverlapPlan::backward; empty groups skipped): the tiles of
// a peer's keys, then its dK/dV leave while the next group computes; the
// own-key tiles last.
ShardedGrads ShardedAttention::backward_overlapped(const at::Tensor& q, const ShardedForward& f,
                                                   const at::Tensor& dout,
                                                   const OverlapPlan& overlap,
                                                   AttentionStats& stats) {
  const std::int64_t dim = q.size(2);
  ShardedGrads g;
  auto compute = [&](std::size_t i) -> at::Tensor {
    const TileSchedule& group = overlap.backward[i];
    if (group.tiles == 0) return {};
    const auto start = Clock::now();
    LocalGrads part =
        local_attention_backward(group, q, f.k_global, f.v_global, f.out, f.lse, dout, kernel_);
    g.dq = g.dq.defined() ? g.dq.add_(part.dq) : std::move(part.dq);
    at::Tensor dkv = at::cat({part.dk, part.dv}, -1);
    stats.tiles += part.tiles;
    stats.groups += 1;
    stats.compute_ms += ms_since(start);
    return dkv;
  };
  const at::Tensor dkv = exchange_->return_grads_overlapped(q, stats, compute);
  if (!g.dq.defined()) g.dq = at::zeros_like(q);
  g.dk = dkv.narrow(-1, 0, dim).contiguous();
  g.dv = dkv.narrow(-1, dim, dim).contiguous();
  return g;
}

at::Tensor KvExchange::gather_overlapped(
    const at::Tensor&, AttentionStats&,
    const std::function<void(std::size_t, const at::Tensor&)>&) {
  throw std::logic_error("this K/V exchange has no overlapped gather; overlap() is nullptr");
}

at::Tensor KvExchange::return_grads_overlapped(const at::Tensor&, AttentionStats&,
                                               const std::function<at::Tensor(std::size_t)>&) {
  throw std::logic_error("this K/V exchange has no overlapped return; overlap() is nullptr");
}

ShardedGrads ShardedAttention::backward(const at::Tensor& q, const ShardedForward& f,
                                        const at::Tensor& dout) {
  check_local(name_, q, "q", plan_.shard_len, at::Tensor());
  check_local(name_, dout, "dout", plan_.shard_len, q);
  const std::int64_t dim = q.size(2);
  AttentionStats stats;
  stats.heads = q.size(1);
  if (const OverlapPlan* overlap = exchange_->overlap()) {
    const auto start = Clock::now();
    ShardedGrads g = backward_overlapped(q.detach(), f, dout.detach(), *overlap, stats);
    stats.comm_ms = ms_since(start) - stats.compute_ms;
    finish_backward(stats);
    return g;
  }

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
  stats.groups = 1;
  finish_backward(stats);
  return g;
}

}  // namespace fulcrum::attention
