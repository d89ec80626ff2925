#include "attention/slot_attention.h"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attention/exchange_thread.h"

namespace fulcrum::attention {
namespace {

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

// Hybrid mode's exchange: each member sends each peer the K/V rows that
// peer's tiles read and receives its own needs, all in one exchange over the
// world group; backward is its mirror.
class PeerKvExchange final : public KvExchange {
 public:
  PeerKvExchange(const std::vector<std::int32_t>& ranks, std::int32_t member, const ShardPlan& plan,
                 const KvExchangePlan& exchange, std::shared_ptr<comm::Communicator> world,
                 std::string label, std::optional<OverlapPlan> overlap)
      : overlap_(std::move(overlap)),
        world_(std::move(world)),
        label_(label.empty() ? std::string("slot") : std::move(label)),
        tokens_(exchange.tokens),
        shard_len_(plan.shard_len) {
    std::vector<std::int64_t> own_rows, own_positions;
    const std::int64_t* held = plan.rank_begin(member);
    for (std::int64_t r = 0; r < plan.shard_len; ++r) {
      if (held[r] == kPadPosition) continue;
      own_rows.push_back(r);
      own_positions.push_back(held[r]);
    }
    own_rows_ = index_tensor(own_rows);
    own_positions_ = index_tensor(own_positions);
    for (const KvTransfer* t : exchange.incoming(member)) {
      incoming_.push_back(
          {ranks[t->from], t->from, index_tensor(t->rows), index_tensor(t->positions)});
    }
    for (const KvTransfer* t : exchange.outgoing(member)) {
      outgoing_.push_back({ranks[t->to], t->to, index_tensor(t->rows), index_tensor(t->positions)});
    }
  }

  const OverlapPlan* overlap() const override { return overlap_ ? &*overlap_ : nullptr; }

  // Own rows and received ones placed at their global positions; key
  // blocks no tile touches are never filled and never read.
  at::Tensor gather(const at::Tensor& kv, AttentionStats& stats) override {
    const at::Device device = kv.device();
    std::vector<comm::PeerMessage> sends, receives;
    for (const TransferIndex& t : outgoing_) {
      sends.push_back({t.peer_rank, kv.index_select(0, t.rows.to(device))});
      stats.bytes_sent += bytes_of(sends.back().tensor);
    }
    for (const TransferIndex& t : incoming_) {
      receives.push_back(
          {t.peer_rank, at::empty({t.rows.size(0), kv.size(1), kv.size(2)}, kv.options())});
      stats.bytes_received += bytes_of(receives.back().tensor);
    }
    stats.peers = peer_count(sends, receives);
    exchange("forward", sends, receives);
    at::Tensor kv_global = at::zeros({tokens_, kv.size(1), kv.size(2)}, kv.options());
    kv_global.index_copy_(0, own_positions_.to(device), kv.index_select(0, own_rows_.to(device)));
    for (std::size_t i = 0; i < incoming_.size(); ++i) {
      kv_global.index_copy_(0, incoming_[i].positions.to(device), receives[i].tensor);
    }
    return kv_global;
  }

  // The mirror of `gather`: the gradient of every key received goes back to
  // its owner; the gradient of every key sent comes back and is added to
  // the owner's own share.
  at::Tensor return_grads(const at::Tensor& dkv_global, AttentionStats& stats) override {
    const at::Device device = dkv_global.device();
    const std::int64_t heads = dkv_global.size(1);
    const std::int64_t width = dkv_global.size(2);
    std::vector<comm::PeerMessage> sends, receives;
    for (const TransferIndex& t : incoming_) {
      sends.push_back({t.peer_rank, dkv_global.index_select(0, t.positions.to(device))});
      stats.bytes_sent += bytes_of(sends.back().tensor);
    }
    for (const TransferIndex& t : outgoing_) {
      receives.push_back(
          {t.peer_rank, at::empty({t.rows.size(0), heads, width}, dkv_global.options())});
      stats.bytes_received += bytes_of(receives.back().tensor);
    }
    stats.peers = peer_count(sends, receives);
    exchange("backward", sends, receives);
    at::Tensor dkv = at::zeros({shard_len_, heads, width}, dkv_global.options());
    dkv.index_copy_(0, own_rows_.to(device), dkv_global.index_select(0, own_positions_.to(device)));
    // Peers' shares are added in peer order, so the sum is the same on every
    // run.
    for (std::size_t i = 0; i < outgoing_.size(); ++i) {
      dkv.index_add_(0, outgoing_[i].rows.to(device), receives[i].tensor);
    }
    return dkv;
  }

  // The forward exchange one peer at a time on a background thread; the
  // own-key tiles compute meanwhile, group i + 1 once peer i's rows are in
  // (under two calls a pass, every group between is empty and the last holds
  // the rest).
  at::Tensor gather_overlapped(
      const at::Tensor& kv, AttentionStats& stats,
      const std::function<void(std::size_t, const at::Tensor&)>& compute) override {
    const at::Device device = kv.device();
    std::vector<ExchangeThread::Step> steps(overlap_->peers.size());
    std::vector<at::Tensor> received(steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (const TransferIndex* t = find(outgoing_, overlap_->peers[i])) {
        steps[i].sends.push_back({t->peer_rank, kv.index_select(0, t->rows.to(device))});
        stats.bytes_sent += bytes_of(steps[i].sends.back().tensor);
      }
      if (const TransferIndex* t = find(incoming_, overlap_->peers[i])) {
        received[i] = at::empty({t->rows.size(0), kv.size(1), kv.size(2)}, kv.options());
        steps[i].receives.push_back({t->peer_rank, received[i]});
        stats.bytes_received += bytes_of(received[i]);
      }
    }
    stats.peers = static_cast<std::int32_t>(steps.size());
    ExchangeThread thread(world_, label_ + " forward", std::move(steps));
    at::Tensor kv_global = at::zeros({tokens_, kv.size(1), kv.size(2)}, kv.options());
    kv_global.index_copy_(0, own_positions_.to(device), kv.index_select(0, own_rows_.to(device)));
    compute(0, kv_global);
    for (std::size_t i = 0; i < received.size(); ++i) {
      thread.wait(i);
      if (received[i].defined()) {  // else a peer that only receives from this one
        kv_global.index_copy_(0, find(incoming_, overlap_->peers[i])->positions.to(device),
                              received[i]);
      }
      // Whatever peer i sent: under two calls a pass the last group holds the
      // rest, due once the last peer is done.
      compute(i + 1, kv_global);
    }
    thread.finish();
    stats.exchange_ms += thread.exchange_ms();
    stats.wait_ms += thread.wait_ms();
    return kv_global;
  }

  // The mirror: group i's tiles, then peer i's dK/dV leave on the background
  // thread while group i + 1 computes; the own-key tiles last (under two
  // calls a pass, group 0 holds every peer's tiles, so all their dK/dV leave
  // while the own-key tiles compute).
  at::Tensor return_grads_overlapped(
      const at::Tensor& like, AttentionStats& stats,
      const std::function<at::Tensor(std::size_t)>& compute) override {
    const at::Device device = like.device();
    const std::int64_t heads = like.size(1);
    const std::int64_t width = 2 * like.size(2);
    const std::size_t peers = overlap_->peers.size();
    std::vector<ExchangeThread::Step> steps(peers);
    std::vector<at::Tensor> received(peers);
    for (std::size_t i = 0; i < peers; ++i) {
      steps[i].sends_later = find(incoming_, overlap_->peers[i]) != nullptr;
      if (const TransferIndex* t = find(outgoing_, overlap_->peers[i])) {
        received[i] = at::empty({t->rows.size(0), heads, width}, like.options());
        steps[i].receives.push_back({t->peer_rank, received[i]});
        stats.bytes_received += bytes_of(received[i]);
      }
    }
    stats.peers = static_cast<std::int32_t>(peers);
    ExchangeThread thread(world_, label_ + " backward", std::move(steps));
    at::Tensor acc = at::zeros({tokens_, heads, width}, like.options());  // dK/dV so far
    for (std::size_t i = 0; i <= peers; ++i) {
      const at::Tensor part = compute(i);
      if (part.defined()) acc.add_(part);
      const TransferIndex* t = i < peers ? find(incoming_, overlap_->peers[i]) : nullptr;
      if (t == nullptr) continue;
      at::Tensor send = acc.index_select(0, t->positions.to(device));
      stats.bytes_sent += bytes_of(send);
      thread.provide(i, {{t->peer_rank, std::move(send)}});
    }
    thread.finish();
    stats.exchange_ms += thread.exchange_ms();
    stats.wait_ms += thread.wait_ms();
    at::Tensor dkv = at::zeros({shard_len_, heads, width}, like.options());
    dkv.index_copy_(0, own_rows_.to(device), acc.index_select(0, own_positions_.to(device)));
    for (std::size_t i = 0; i < peers; ++i) {  // peer order, as return_grads
      if (received[i].defined()) {
        dkv.index_add_(0, find(outgoing_, overlap_->peers[i])->rows.to(device), received[i]);
      }
    }
    return dkv;
  }

 private:
  // Rows and global positions of one transfer, as index tensors.
  struct TransferIndex {
    std::int32_t peer_rank = 0;  // world rank of the other member
    std::int32_t peer = 0;       // its member index
    at::Tensor rows;             // int64, the sender's local rows
    at::Tensor positions;        // int64, their global positions
  };

  static const TransferIndex* find(const std::vector<TransferIndex>& list, std::int32_t peer) {
    for (const TransferIndex& t : list) {
      if (t.peer == peer) return &t;
    }
    return nullptr;
  }

  // The world's exchange, its CommError prefixed with the label and pass.
  void exchange(const char* pass, const std::vector<comm::PeerMessage>& sends,
                const std::vector<comm::PeerMessage>& receives) {
    try {
      world_->exchange(sends, receives);
    } catch (const comm::CommError& e) {
      throw comm::CommError(label_ + " " + pass + ": " + e.what());
    }
  }

  std::optional<OverlapPlan> overlap_;
  std::shared_ptr<comm::Communicator> world_;
  std::string label_;
  std::int64_t tokens_ = 0;
  std::int64_t shard_len_ = 0;
  at::Tensor own_rows_;                  // int64: this member's non-pad local rows
  at::Tensor own_positions_;             // int64: their global positions
  std::vector<TransferIndex> incoming_;  // keys this member receives, by peer
  std::vector<TransferIndex> outgoing_;  // keys this member sends, by peer
};

// This rank's index in the slot's `ranks`, or the reason it cannot run it.
Result<std::int32_t> slot_member(const std::vector<std::int32_t>& ranks,
                                 const comm::Communicator& world) {
  std::set<std::int32_t> distinct;
  std::int32_t member = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::int32_t r = ranks[i];
    if (r < 0 || r >= world.size()) {
      return invalid_argument("slot attention: rank " + std::to_string(r) +
                              " of the slot is outside group " + world.name() + " [0, " +
                              std::to_string(world.size()) + ")");
    }
    if (!distinct.insert(r).second) {
      return invalid_argument("slot attention: rank " + std::to_string(r) +
                              " appears twice in the slot; a slot's ranks are distinct");
    }
    if (r == world.rank()) member = static_cast<std::int32_t>(i);
  }
  if (member < 0) {
    return invalid_argument("slot attention: rank " + std::to_string(world.rank()) +
                            " is not a member of the slot; only its members run it");
  }
  return member;
}

}  // namespace

SlotAttention::SlotAttention(const ShardPlan& plan, TileSchedule schedule,
                             std::unique_ptr<KvExchange> exchange,
                             const SlotAttentionOptions& options)
    : ShardedAttention("slot attention", plan, std::move(schedule), options.kernel,
                       std::move(exchange)) {}

Result<std::shared_ptr<SlotAttention>> SlotAttention::create(
    const CpWorkload& row, const ShardPlan& plan, std::vector<std::int32_t> ranks,
    std::shared_ptr<comm::Communicator> world, const SlotAttentionOptions& options) {
  if (!world) return invalid_argument("slot attention needs the world communicator; got none");
  if (static_cast<std::int64_t>(ranks.size()) != plan.cp_size) {
    return invalid_argument("slot attention: the slot lists " + std::to_string(ranks.size()) +
                            " ranks but its plan has cp_size " + std::to_string(plan.cp_size) +
                            "; plan the slot over its own members");
  }
  Result<std::int32_t> member = slot_member(ranks, *world);
  if (!member) return member.status();
  Result<TileSchedule> schedule = make_tile_schedule(row, plan, *member);
  if (!schedule) return schedule.status();
  Result<KvExchangePlan> exchange = make_kv_exchange_plan(row, plan);
  if (!exchange) return exchange.status();

  std::optional<OverlapPlan> overlap;
  if (options.overlap && plan.cp_size > 1) {
    overlap = make_overlap_plan(*schedule, plan, *exchange, *member, options.overlap_calls);
  }
  auto peers = std::make_unique<PeerKvExchange>(ranks, *member, plan, *exchange, std::move(world),
                                                options.label, std::move(overlap));
  std::shared_ptr<SlotAttention> a(
      new SlotAttention(plan, std::move(schedule).value(), std::move(peers), options));
  a->ranks_ = std::move(ranks);
  a->member_ = *member;
  a->exchange_ = std::move(exchange).value();
  return a;
}

}  // namespace fulcrum::attention
