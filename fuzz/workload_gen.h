// Decodes fuzz bytes into a CP workload: usually a well-formed one within
// bounds a test machine plans in milliseconds, sometimes one broken in a
// single field, so that both "a valid plan" and "a clean error" are reached
// often. Shared by the planner and the plugin-ABI targets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "fulcrum/cp_types.h"
#include "fuzz_input.h"

namespace fulcrum::fuzz {

// Bounds of a well-formed workload. N <= 2^14 keeps one plan (and the
// recount that checks it) in the low milliseconds; 512 query blocks keep a
// dense block-sparse mask at a few hundred thousand entries.
inline constexpr std::int64_t kMaxTokens = std::int64_t{1} << 14;
inline constexpr std::int32_t kMaxCpSize = 64;
inline constexpr std::int64_t kMaxSparseBlocks = 512;
inline constexpr std::int64_t kMaxDocs = 64;

// Cuts [0, n) into `docs` non-empty pieces at fuzz-chosen points.
inline std::vector<std::int64_t> cut_documents(FuzzInput& in, std::int64_t n, std::int64_t docs) {
  docs = std::clamp<std::int64_t>(docs, 1, n);
  std::vector<std::int64_t> cuts;
  for (std::int64_t i = 1; i < docs; ++i) cuts.push_back(in.range(1, n - 1));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<std::int64_t> lengths;
  std::int64_t at = 0;
  for (std::int64_t cut : cuts) {
    lengths.push_back(cut - at);
    at = cut;
  }
  lengths.push_back(n - at);
  return lengths;
}

// A well-formed block-sparse mask over ceil(N/B) blocks; each query block row
// is empty, causal, a band or a short arbitrary list.
inline BlockSparseMask block_sparse_mask(FuzzInput& in, std::int64_t blocks) {
  BlockSparseMask m;
  m.offsets.push_back(0);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t shape = in.u8();
    switch (shape % 4) {
      case 0:
        break;
      case 1:
        for (std::int64_t k = 0; k <= b; ++k) m.kv_blocks.push_back(k);
        break;
      case 2: {
        const std::int64_t width = shape / 4 % 8;
        for (std::int64_t k = std::max<std::int64_t>(0, b - width); k <= b; ++k) {
          m.kv_blocks.push_back(k);
        }
        break;
      }
      default: {
        std::vector<std::int64_t> row;
        for (int k = shape / 4 % 8; k > 0; --k) row.push_back(in.range(0, blocks - 1));
        std::sort(row.begin(), row.end());
        row.erase(std::unique(row.begin(), row.end()), row.end());
        m.kv_blocks.insert(m.kv_blocks.end(), row.begin(), row.end());
      }
    }
    m.offsets.push_back(static_cast<std::int64_t>(m.kv_blocks.size()));
  }
  return m;
}

// A well-formed workload within the bounds above.
inline CpWorkload plausible_workload(FuzzInput& in) {
  CpWorkload w;
  w.cp_size = static_cast<std::int32_t>(in.range(1, kMaxCpSize));
  // Log-scale length: short rows (where rounding and padding corner cases
  // live) are as likely as long ones.
  const int bits = in.u8() % 15;
  w.tokens = in.range(std::int64_t{1} << bits >> 1, std::int64_t{1} << bits);
  w.tokens = std::max<std::int64_t>(w.tokens, 1);
  const std::uint8_t block_pick = in.u8();
  w.block_size = block_pick < 0x80 ? std::int64_t{1} << (block_pick % 9) : 1 + block_pick % 200;
  const std::int64_t docs = in.u8() % (kMaxDocs + 1);
  if (docs > 0) w.doc_lengths = cut_documents(in, w.tokens, docs);
  const std::uint8_t mask = in.u8();
  switch (mask % 5) {
    case 0:
      w.mask = MaskSpec::causal();
      break;
    case 1:
      w.mask = MaskSpec::full();
      break;
    case 2:
      w.mask = MaskSpec::sliding(mask >= 0xf0 ? std::numeric_limits<std::int64_t>::max()
                                              : in.range(1, w.tokens + 2));
      break;
    case 3:
      // L beyond the row and near int64's end are both legal and were a
      // source of overflow once (see git log); keep reaching them.
      w.mask = MaskSpec::prefix(mask >= 0xf0 ? std::numeric_limits<std::int64_t>::max()
                                             : in.range(0, w.tokens + 2));
      break;
    default: {
      w.mask.kind = MaskKind::kBlockSparse;
      w.block_size = std::max(w.block_size, (w.tokens + kMaxSparseBlocks - 1) / kMaxSparseBlocks);
      const std::int64_t blocks = (w.tokens + w.block_size - 1) / w.block_size;
      w.mask.block_sparse = block_sparse_mask(in, blocks);
    }
  }
  return w;
}

// Breaks one field of a workload (or, rarely, none: corruption may be a
// no-op and the workload still valid, which the targets handle).
inline void corrupt_workload(FuzzInput& in, CpWorkload& w) {
  switch (in.u8() % 9) {
    case 0:
      w.tokens = in.nasty_int64(-4, kMaxTokens + 4);
      break;
    case 1:
      w.cp_size = static_cast<std::int32_t>(in.nasty_int64(-4, kMaxCpSize + 4));
      break;
    case 2:
      w.block_size = in.nasty_int64(-4, 1024);
      break;
    case 3:
      if (w.doc_lengths.empty()) w.doc_lengths.push_back(w.tokens);
      w.doc_lengths[static_cast<std::size_t>(in.range(
          0, static_cast<std::int64_t>(w.doc_lengths.size()) - 1))] = in.nasty_int64(-4, 16);
      break;
    case 4:
      w.doc_lengths.push_back(in.nasty_int64(-4, 16));
      break;
    case 5:
      w.mask.kind = static_cast<MaskKind>(in.nasty_int64(-2, 8));
      break;
    case 6:
      w.mask.param = in.nasty_int64(-4, 4);
      break;
    case 7: {
      // A structurally broken block-sparse mask (whatever the kind was).
      w.mask.kind = MaskKind::kBlockSparse;
      auto& bs = w.mask.block_sparse;
      if (bs.offsets.empty()) bs.offsets.push_back(0);
      const auto pick = [&](std::size_t n) {
        return static_cast<std::size_t>(in.range(0, static_cast<std::int64_t>(n) - 1));
      };
      switch (in.u8() % 5) {
        case 0:
          bs.offsets.pop_back();
          break;
        case 1:
          bs.offsets[pick(bs.offsets.size())] = in.nasty_int64(-2, 8);
          break;
        case 2:
          bs.kv_blocks.push_back(in.nasty_int64(-2, 8));
          break;
        case 3:
          if (!bs.kv_blocks.empty())
            bs.kv_blocks[pick(bs.kv_blocks.size())] = in.nasty_int64(-2, 8);
          break;
        default:
          if (bs.kv_blocks.size() >= 2) std::swap(bs.kv_blocks.front(), bs.kv_blocks.back());
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace fulcrum::fuzz
