#include "attention/slot_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fulcrum::attention {
namespace {

void accumulate(SlotAttentionStats& total, const SlotAttentionStats& one) {
  total.tiles += one.tiles;
  total.heads = one.heads;
  total.bytes_sent += one.bytes_sent;
  total.bytes_received += one.bytes_received;
  total.peers = std::max(total.peers, one.peers);
  total.compute_ms += one.compute_ms;
  total.comm_ms += one.comm_ms;
}

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::int64_t bytes_of(const at::Tensor& t) {
  return t.numel() * static_cast<std::int64_t>(t.element_size());
}

std::int32_t peer_count(const std::vector<comm::PeerMessage>& sends,
                        const std::vector<comm::PeerMessage>& receives) {
  std::set<int> peers;
  for (const auto& m : sends) peers.insert(m.peer);
  for (const auto& m : receives) peers.insert(m.peer);
  return static_cast<std::int32_t>(peers.size());
}

at::Tensor index_tensor(const std::vector<std::int64_t>& values) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong));
}

// Carries the SlotAttention through the autograd graph (saved_data holds
// IValues only; a capsule is the IValue of an arbitrary C++ object).
struct SlotAttentionHolder : torch::CustomClassHolder {
  explicit SlotAttentionHolder(std::shared_ptr<SlotAttention> a) : attention(std::move(a)) {}
  std::shared_ptr<SlotAttention> attention;
};

class SlotAttentionFunction : public torch::autograd::Function<SlotAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            std::shared_ptr<SlotAttention> attention) {
    SlotForward f = attention->forward(q, k, v);
    ctx->save_for_backward({q, f.out, f.lse, f.k_global, f.v_global});
    ctx->saved_data["attention"] =
        c10::IValue::make_capsule(c10::make_intrusive<SlotAttentionHolder>(std::move(attention)));
    return f.out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const auto holder = c10::static_intrusive_pointer_cast<SlotAttentionHolder>(
        ctx->saved_data["attention"].toCapsule());
    const SlotForward f{saved[1], saved[2], saved[3], saved[4]};
    SlotGrads g = holder->attention->backward(saved[0], f, grad_outputs[0]);
    return {g.dq, g.dk, g.dv, at::Tensor()};
  }
};

void check_local(const at::Tensor& t, const char* name, std::int64_t rows, const at::Tensor& q) {
  const bool ok =
      t.defined() && t.dim() == 3 && t.size(0) == rows &&
      (!q.defined() || (t.sizes().equals(q.sizes()) && t.scalar_type() == q.scalar_type()));
  if (!ok) {
    throw std::invalid_argument(
        std::string("slot attention: ") + name + " is " +
        (t.defined() ? c10::str(t.sizes()) + " " + std::string(c10::toString(t.scalar_type()))
                     : std::string("undefined")) +
        "; expected [" + std::to_string(rows) + " local rows, heads, head_dim]" +
        (q.defined() ? ", the shape and dtype of q " + c10::str(q.sizes()) : std::string()));
  }
}

}  // namespace

Result<std::shared_ptr<SlotAttention>> SlotAttention::create(
    const CpWorkload& row, const ShardPlan& plan, std::vector<std::int32_t> ranks,
    std::shared_ptr<comm::Communicator> world, const SlotAttentionOptions& options) {
  if (!world) return invalid_argument("slot attention needs the world communicator; got none");
  if (static_cast<std::int64_t>(ranks.size()) != plan.cp_size) {
    return invalid_argument("slot attention: the slot lists " + std::to_string(ranks.size()) +
                            " ranks but its plan has cp_size " + std::to_string(plan.cp_size) +
                            "; plan the slot over its own members");
  }
  std::set<std::int32_t> distinct;
  std::int32_t member = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::int32_t r = ranks[i];
    if (r < 0 || r >= world->size()) {
      return invalid_argument("slot attention: rank " + std::to_string(r) +
                              " of the slot is outside group " + world->name() + " [0, " +
                              std::to_string(world->size()) + ")");
    }
    if (!distinct.insert(r).second) {
      return invalid_argument("slot attention: rank " + std::to_string(r) +
                              " appears twice in the slot; a slot's ranks are distinct");
    }
    if (r == world->rank()) member = static_cast<std::int32_t>(i);
  }
  if (member < 0) {
    return invalid_argument("slot attention: rank " + std::to_string(world->rank()) +
                            " is not a member of the slot; only its members run it");
  }
  Result<TileSchedule> schedule = make_tile_schedule(row, plan, member);
  if (!schedule) return schedule.status();
  Result<KvExchangePlan> exchange = make_kv_exchange_plan(row, plan);
  if (!exchange) return exchange.status();

  std::shared_ptr<SlotAttention> a(new SlotAttention());
  a->plan_ = plan;
  a->ranks_ = std::move(ranks);
  a->member_ = member;
  a->schedule_ = std::move(schedule).value();
  a->exchange_ = std::move(exchange).value();
  a->world_ = std::move(world);
  a->options_ = options;
  std::vector<std::int64_t> own_rows, own_positions;
  const std::int64_t* held = plan.rank_begin(member);
  for (std::int64_t r = 0; r < plan.shard_len; ++r) {
    if (held[r] == kPadPosition) continue;
    own_rows.push_back(r);
    own_positions.push_back(held[r]);
  }
  a->own_rows_ = index_tensor(own_rows);
  a->own_positions_ = index_tensor(own_positions);
  for (const KvTransfer* t : a->exchange_.incoming(member)) {
    a->incoming_.push_back({a->ranks_[t->from], index_tensor(t->rows), index_tensor(t->positions)});
  }
  for (const KvTransfer* t : a->exchange_.outgoing(member)) {
    a->outgoing_.push_back({a->ranks_[t->to], index_tensor(t->rows), index_tensor(t->positions)});
  }
  return a;
}

void SlotAttention::exchange(const char* pass, const std::vector<comm::PeerMessage>& sends,
                             const std::vector<comm::PeerMessage>& receives) {
  try {
    world_->exchange(sends, receives);
  } catch (const comm::CommError& e) {
    throw comm::CommError((options_.label.empty() ? std::string("slot") : options_.label) + " " +
                          pass + ": " + e.what());
  }
}

at::Tensor SlotAttention::apply(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return SlotAttentionFunction::apply(q, k, v, shared_from_this());
}

SlotForward SlotAttention::forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_local(q, "q", plan_.shard_len, at::Tensor());
  check_local(k, "k", plan_.shard_len, q);
  check_local(v, "v", plan_.shard_len, q);
  const std::int64_t heads = q.size(1);
  const std::int64_t dim = q.size(2);
  const at::Device device = q.device();
  SlotAttentionStats stats;
  stats.heads = heads;

  const auto comm_start = Clock::now();
  // K and V travel together: one message per peer instead of two.
  const at::Tensor kv = at::cat({k.detach(), v.detach()}, -1);  // [S, H, 2D]
  std::vector<comm::PeerMessage> sends, receives;
  for (const TransferIndex& t : outgoing_) {
    sends.push_back({t.peer_rank, kv.index_select(0, t.rows.to(device))});
    stats.bytes_sent += bytes_of(sends.back().tensor);
  }
  for (const TransferIndex& t : incoming_) {
    receives.push_back({t.peer_rank, at::empty({t.rows.size(0), heads, 2 * dim}, kv.options())});
    stats.bytes_received += bytes_of(receives.back().tensor);
  }
  stats.peers = peer_count(sends, receives);
  exchange("forward", sends, receives);
  at::Tensor kv_global = at::zeros({exchange_.tokens, heads, 2 * dim}, kv.options());
  kv_global.index_copy_(0, own_positions_.to(device), kv.index_select(0, own_rows_.to(device)));
  for (std::size_t i = 0; i < incoming_.size(); ++i) {
    kv_global.index_copy_(0, incoming_[i].positions.to(device), receives[i].tensor);
  }
  SlotForward f;
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
  accumulate(total_forward_, stats);
  return f;
}

SlotGrads SlotAttention::backward(const at::Tensor& q, const SlotForward& f,
                                  const at::Tensor& dout) {
  check_local(q, "q", plan_.shard_len, at::Tensor());
  check_local(dout, "dout", plan_.shard_len, q);
  const std::int64_t heads = q.size(1);
  const std::int64_t dim = q.size(2);
  const at::Device device = q.device();
  SlotAttentionStats stats;
  stats.heads = heads;

  const auto compute_start = Clock::now();
  LocalGrads local = local_attention_backward(schedule_, q.detach(), f.k_global, f.v_global, f.out,
                                              f.lse, dout.detach(), options_.kernel);
  stats.compute_ms = ms_since(compute_start);
  stats.tiles = local.tiles;

  const auto comm_start = Clock::now();
  // The mirror of the forward exchange: the gradient of every key received
  // goes back to its owner; the gradient of every key sent comes back.
  const at::Tensor dkv_global = at::cat({local.dk, local.dv}, -1);  // [N, H, 2D]
  std::vector<comm::PeerMessage> sends, receives;
  for (const TransferIndex& t : incoming_) {
    sends.push_back({t.peer_rank, dkv_global.index_select(0, t.positions.to(device))});
    stats.bytes_sent += bytes_of(sends.back().tensor);
  }
  for (const TransferIndex& t : outgoing_) {
    receives.push_back(
        {t.peer_rank, at::empty({t.rows.size(0), heads, 2 * dim}, dkv_global.options())});
    stats.bytes_received += bytes_of(receives.back().tensor);
  }
  stats.peers = peer_count(sends, receives);
  exchange("backward", sends, receives);
  at::Tensor dkv = at::zeros({plan_.shard_len, heads, 2 * dim}, dkv_global.options());
  dkv.index_copy_(0, own_rows_.to(device), dkv_global.index_select(0, own_positions_.to(device)));
  // Peers' shares are added in peer order, so the sum is the same on every
  // run.
  for (std::size_t i = 0; i < outgoing_.size(); ++i) {
    dkv.index_add_(0, outgoing_[i].rows.to(device), receives[i].tensor);
  }
  SlotGrads g;
  g.dq = std::move(local.dq);
  g.dk = dkv.narrow(-1, 0, dim).contiguous();
  g.dv = dkv.narrow(-1, dim, dim).contiguous();
  stats.comm_ms = ms_since(comm_start);
  last_backward_ = stats;
  accumulate(total_backward_, stats);
  return g;
}

}  // namespace fulcrum::attention
