// The fingerprints the ranks compare (train/consensus.h): 64-bit words
// folded by MurmurHash3's finaliser.
#include <bit>
#include <string_view>
#include <vector>

#include "train/consensus.h"

namespace fulcrum::train {
namespace {

// MurmurHash3's 64-bit finaliser: a bijection, every input bit flips each
// output bit with probability ~1/2.
std::uint64_t fmix64(std::uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

}  // namespace

// --- fingerprints ------------------------------------------------------------

Fingerprint& Fingerprint::add(std::uint64_t word) {
  state_ = fmix64(state_ ^ word);
  return *this;
}

Fingerprint& Fingerprint::add(const std::vector<std::int64_t>& words) {
  add(static_cast<std::uint64_t>(words.size()));
  for (std::int64_t w : words) add(w);
  return *this;
}

Fingerprint& Fingerprint::add(std::string_view text) {
  add(static_cast<std::uint64_t>(text.size()));
  for (std::size_t i = 0; i < text.size(); i += 8) {
    std::uint64_t word = 0;
    for (std::size_t j = 0; j < 8 && i + j < text.size(); ++j) {
      word |= std::uint64_t{static_cast<unsigned char>(text[i + j])} << (8 * j);
    }
    add(word);
  }
  return *this;
}

std::uint64_t workload_fingerprint(const CpWorkload& w) {
  Fingerprint f;
  f.add(w.tokens)
      .add(w.doc_lengths)
      .add(static_cast<std::int64_t>(w.mask.kind))
      .add(w.mask.param)
      .add(w.mask.block_sparse.offsets)
      .add(w.mask.block_sparse.kv_blocks)
      .add(w.block_size)
      .add(static_cast<std::int64_t>(w.cp_size));
  return f.value();
}

std::uint64_t schedule_fingerprint(const Schedule& schedule) {
  Fingerprint f;
  f.add(std::string_view(schedule.strategy_used))
      .add(static_cast<std::int64_t>(schedule.slots.size()));
  for (const ScheduleSlot& slot : schedule.slots) {
    f.add(static_cast<std::int64_t>(slot.wave))
        .add(std::vector<std::int64_t>(slot.ranks.begin(), slot.ranks.end()))
        .add(static_cast<std::int64_t>(slot.pieces.size()));
    for (const DocPiece& p : slot.pieces) f.add(p.doc).add(p.offset).add(p.length);
    // The plan as the compact answer states it (its rule and shape), never
    // its positions: each rank writes only its own slots' (ABI 1.4), and
    // they are a function of what is fingerprinted here.
    f.add(std::string_view(slot.plan.strategy_used))
        .add(static_cast<std::int64_t>(slot.plan.cp_size))
        .add(slot.plan.shard_len)
        .add(slot.plan.padding);
    // Its member weights (ABI 1.5), bit for bit, where its rule takes them.
    if (!slot.member_weights.empty()) {
      std::vector<std::int64_t> bits;
      for (const double w : slot.member_weights) bits.push_back(std::bit_cast<std::int64_t>(w));
      f.add(bits);
    }
  }
  return f.value();
}

std::uint64_t plan_fingerprint(const ShardPlan& plan) {
  Fingerprint f;
  f.add(std::string_view(plan.strategy_used))
      .add(static_cast<std::int64_t>(plan.cp_size))
      .add(plan.shard_len)
      .add(plan.positions);
  return f.value();
}

}  // namespace fulcrum::train
