#include "fulcrum/core/workload.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace fulcrum {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// A double as text, nan and inf included.
std::string real_text(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

Result<std::int64_t> parse_int(std::string_view text, std::string_view what) {
  std::int64_t value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return invalid_argument("mask " + std::string(what) + " " + quote_text(text) +
                            " is not an integer");
  }
  return value;
}

Status validate_block_sparse(const CpWorkload& w) {
  const auto& bs = w.mask.block_sparse;
  const std::int64_t blocks = ceil_div(w.tokens, w.block_size);
  // size - 1 against blocks, not size against blocks + 1: N = int64 max in
  // blocks of 1 has int64-max blocks (found by fuzz/).
  if (static_cast<std::int64_t>(bs.offsets.size()) - 1 != blocks) {
    return invalid_argument("block-sparse mask has " + str(bs.offsets.size()) +
                            " offsets; a row of " + str(w.tokens) + " tokens in blocks of " +
                            str(w.block_size) + " needs one per block plus one (" + str(blocks) +
                            " blocks)");
  }
  if (bs.offsets.front() != 0) {
    return invalid_argument("block-sparse mask offsets[0] is " + str(bs.offsets.front()) +
                            "; it must be 0");
  }
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (bs.offsets[b + 1] < bs.offsets[b]) {
      return invalid_argument("block-sparse mask offsets decrease at query block " + str(b) + " (" +
                              str(bs.offsets[b]) + " -> " + str(bs.offsets[b + 1]) + ")");
    }
  }
  if (bs.offsets.back() != static_cast<std::int64_t>(bs.kv_blocks.size())) {
    return invalid_argument("block-sparse mask lists " + str(bs.kv_blocks.size()) +
                            " kv blocks but offsets end at " + str(bs.offsets.back()));
  }
  for (std::int64_t b = 0; b < blocks; ++b) {
    for (std::int64_t i = bs.offsets[b]; i < bs.offsets[b + 1]; ++i) {
      const std::int64_t kv = bs.kv_blocks[i];
      if (kv < 0 || kv >= blocks) {
        return invalid_argument("block-sparse mask entry " + str(i) + " names kv block " + str(kv) +
                                "; blocks are 0.." + str(blocks - 1));
      }
      // Sorted and unique, so that a tile is never counted twice.
      if (i > bs.offsets[b] && kv <= bs.kv_blocks[i - 1]) {
        return invalid_argument("block-sparse mask kv blocks of query block " + str(b) +
                                " are not strictly increasing at entry " + str(i) +
                                "; list each kv block once, in ascending order");
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status validate_workload(const CpWorkload& w) {
  if (w.tokens < 1) {
    return invalid_argument("row has " + str(w.tokens) + " tokens; a row needs at least 1 token");
  }
  if (w.tokens > kMaxRowTokens) {
    return invalid_argument("row has " + str(w.tokens) + " tokens, more than the " +
                            str(kMaxRowTokens) +
                            " (2^31) fulcrum plans; split it into rows of at most 2^31 tokens");
  }
  if (w.cp_size < 1) {
    return invalid_argument("cp_size is " + str(w.cp_size) + "; it must be at least 1");
  }
  if (w.cp_size > kMaxGroupSize) {
    return invalid_argument("cp_size is " + str(w.cp_size) + ", more than the " +
                            str(kMaxGroupSize) +
                            " (2^20) ranks fulcrum plans for; use a smaller "
                            "CP group");
  }
  if (w.block_size < 1) {
    return invalid_argument("block_size is " + str(w.block_size) + "; it must be at least 1");
  }
  if (w.block_size > kMaxBlockSize) {
    return invalid_argument("block_size is " + str(w.block_size) + ", more than " +
                            str(kMaxBlockSize) +
                            " (2^31); use the attention kernel's tile edge, e.g. 128");
  }
  if (!w.doc_lengths.empty()) {
    std::int64_t sum = 0;
    for (std::size_t d = 0; d < w.doc_lengths.size(); ++d) {
      const std::int64_t len = w.doc_lengths[d];
      if (len < 1) {
        return invalid_argument("document " + str(static_cast<std::int64_t>(d)) + " has length " +
                                str(len) + "; document lengths must be at least 1");
      }
      if (len > std::numeric_limits<std::int64_t>::max() - sum) {
        return invalid_argument("document lengths overflow a 64-bit total");
      }
      sum += len;
    }
    if (sum != w.tokens) {
      return invalid_argument("document lengths sum to " + str(sum) + " but the row has " +
                              str(w.tokens) + " tokens; they must be equal");
    }
  }
  if (Status status = validate_member_weights(w.member_weights, w.cp_size); !status) return status;
  switch (w.mask.kind) {
    case MaskKind::kCausal:
    case MaskKind::kFull:
      return Status::ok();
    case MaskKind::kSliding:
      if (w.mask.param < 1) {
        return invalid_argument("sliding window is " + str(w.mask.param) +
                                "; use sliding:W with W >= 1");
      }
      return Status::ok();
    case MaskKind::kPrefix:
      if (w.mask.param < 0) {
        return invalid_argument("prefix length is " + str(w.mask.param) +
                                "; use prefix:L with L >= 0");
      }
      return Status::ok();
    case MaskKind::kBlockSparse:
      return validate_block_sparse(w);
  }
  return invalid_argument("mask kind " + str(static_cast<std::int64_t>(w.mask.kind)) +
                          " is unknown; use causal, full, sliding:W, prefix:L or block-sparse");
}

Status validate_member_weights(const std::vector<double>& weights, std::int64_t members) {
  if (weights.empty()) return Status::ok();
  if (static_cast<std::int64_t>(weights.size()) != members) {
    return invalid_argument("member_weights has " + str(static_cast<std::int64_t>(weights.size())) +
                            " entries for " + str(members) +
                            " members; give one weight per member, or none");
  }
  double sum = 0;
  for (std::size_t r = 0; r < weights.size(); ++r) {
    const double x = weights[r];
    if (!std::isfinite(x) || x < 0) {
      return invalid_argument("member weight " + str(static_cast<std::int64_t>(r)) + " is " +
                              real_text(x) + "; each weight must be finite and >= 0");
    }
    sum += x;
  }
  if (!(sum > 0) || !std::isfinite(sum)) {
    return invalid_argument("member weights sum to " + real_text(sum) +
                            "; their sum must be finite and > 0");
  }
  return Status::ok();
}

Result<MaskSpec> parse_mask(std::string_view text) {
  if (text == "causal") return MaskSpec::causal();
  if (text == "full") return MaskSpec::full();
  const auto colon = text.find(':');
  const std::string_view head = text.substr(0, colon);
  if (colon != std::string_view::npos && (head == "sliding" || head == "prefix")) {
    auto value = parse_int(text.substr(colon + 1), head == "sliding" ? "window" : "prefix length");
    if (!value) return value.status();
    if (head == "sliding") {
      if (*value < 1) {
        return invalid_argument("mask " + quote_text(text) + " has window " + str(*value) +
                                "; use sliding:W with W >= 1");
      }
      return MaskSpec::sliding(*value);
    }
    if (*value < 0) {
      return invalid_argument("mask " + quote_text(text) + " has prefix length " + str(*value) +
                              "; use prefix:L with L >= 0");
    }
    return MaskSpec::prefix(*value);
  }
  return invalid_argument("unknown mask " + quote_text(text) +
                          "; use causal, full, sliding:W or prefix:L");
}

std::string mask_to_string(const MaskSpec& mask) {
  switch (mask.kind) {
    case MaskKind::kCausal:
      return "causal";
    case MaskKind::kFull:
      return "full";
    case MaskKind::kSliding:
      return "sliding:" + str(mask.param);
    case MaskKind::kPrefix:
      return "prefix:" + str(mask.param);
    case MaskKind::kBlockSparse:
      return "block_sparse";
  }
  return "unknown";
}

RowLayout::RowLayout(const CpWorkload& w) {
  doc_start_.reserve(w.doc_lengths.size() + 1);
  doc_start_.push_back(0);
  if (w.doc_lengths.empty()) {
    doc_start_.push_back(w.tokens);
    return;
  }
  for (std::int64_t len : w.doc_lengths) doc_start_.push_back(doc_start_.back() + len);
}

std::int64_t RowLayout::doc_of(std::int64_t pos) const {
  const auto it = std::upper_bound(doc_start_.begin(), doc_start_.end(), pos);
  return static_cast<std::int64_t>(it - doc_start_.begin()) - 1;
}

}  // namespace fulcrum
