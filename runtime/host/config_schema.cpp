// The schema of every configuration key fulcrum reads, in one table, plus the
// schema's own lookups (find, nearest).
//
// Adding a key is one line in ConfigSchema::fulcrum(); the loader, the
// overrides, the error messages and the defaults all follow from it.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/workload.h"
#include "fulcrum/host/config.h"

namespace fulcrum::host {
namespace {

using Check = std::function<std::optional<std::string>(const std::string&)>;
constexpr std::optional<double> kNoMax = std::nullopt;

// Small builders so that every key of the table reads as one line.
KeySpec int_key(std::string key, std::int64_t def, std::optional<double> min,
                std::optional<double> max, std::string help) {
  KeySpec s;
  s.key = std::move(key);
  s.type = ValueType::kInt;
  s.default_value = std::to_string(def);
  s.min = min;
  s.max = max;
  s.help = std::move(help);
  return s;
}

KeySpec double_key(std::string key, std::string def, std::optional<double> min, bool exclusive,
                   std::string help) {
  KeySpec s;
  s.key = std::move(key);
  s.type = ValueType::kDouble;
  s.default_value = std::move(def);
  s.min = min;
  s.min_exclusive = exclusive;
  s.help = std::move(help);
  return s;
}

KeySpec bool_key(std::string key, bool def, std::string help) {
  KeySpec s;
  s.key = std::move(key);
  s.type = ValueType::kBool;
  s.default_value = def ? "true" : "false";
  s.help = std::move(help);
  return s;
}

KeySpec string_key(std::string key, std::string def, std::vector<std::string> choices, Check check,
                   std::string help) {
  KeySpec s;
  s.key = std::move(key);
  s.type = ValueType::kString;
  s.default_value = std::move(def);
  s.choices = std::move(choices);
  s.check = std::move(check);
  s.help = std::move(help);
  return s;
}

std::optional<std::string> check_mask(const std::string& text) {
  auto mask = parse_mask(text);
  if (!mask) return mask.status().message();
  return std::nullopt;
}

std::optional<std::string> check_cost(const std::string& text) {
  auto cost = parse_cost_model(text);
  if (!cost) return cost.status().message();
  return std::nullopt;
}

std::optional<std::string> check_not_empty(const std::string& text) {
  if (text.empty()) return std::string("it is empty");
  return std::nullopt;
}

ConfigSchema build_fulcrum_schema() {
  ConfigSchema s;
  // clang-format off
  // parallel: the job's shape; WORLD = dp_size x cp_size, CP fastest-varying.
  s.add(int_key("parallel.dp_size", 1, 1, kNoMax, "data-parallel ranks; an integer >= 1"));
  s.add(int_key("parallel.cp_size", 1, 1, kNoMax, "context-parallel ranks; an integer >= 1"));
  // balancer: which plugin, and which strategies it is asked for.
  s.add(string_key("balancer.plugin", "fulcrum_balancer", {}, check_not_empty, "balancer plugin; a plugin name, a path to one, or builtin (the host's contiguous balancer)"));
  s.add(string_key("balancer.plugin_dirs", "", {}, {}, "directories searched for the plugin, colon-separated, before the defaults"));
  s.add(bool_key("balancer.check_permissions", true, "refuse a plugin that group or others may write"));
  s.add(string_key("balancer.cp.strategy", "auto", {}, check_not_empty, "preferred CP strategy; a name the plugin lists, or auto"));
  s.add(string_key("balancer.cp.fallback", "contiguous", {}, check_not_empty, "CP strategy used when the preferred one cannot serve a batch; a name the plugin lists"));
  s.add(int_key("balancer.cp.block_size", 128, 1, kNoMax, "kernel tile edge B in tokens; an integer >= 1"));
  s.add(string_key("balancer.cp.mask", "causal", {}, check_mask, "attention mask; causal, full, sliding:W with W >= 1, or prefix:L with L >= 0"));
  s.add(string_key("balancer.dp.strategy", "auto", {}, check_not_empty, "DP partition strategy; a name the plugin lists, or auto"));
  s.add(string_key("balancer.dp.cost", "tokens", {}, check_cost, "DP cost model; tokens, attention or attention:A with A >= 0"));
  s.add(bool_key("balancer.dp.equal_count", false, "give every DP rank floor(n/k) or ceil(n/k) samples"));
  s.add(int_key("balancer.dp.window", 1, 1, kNoMax, "global batches balanced together; an integer >= 1"));
  // data: where samples come from and how they are batched.
  s.add(string_key("data.source", "synthetic", {"synthetic", "jsonl", "megatron"}, {}, "sample source"));
  s.add(string_key("data.path", "", {}, {}, "JSONL file or Megatron dataset prefix (without .bin/.idx)"));
  s.add(int_key("data.seq_length", 4096, 1, kNoMax, "tokens per packed row; an integer >= 1"));
  s.add(bool_key("data.packing", true, "pack documents into rows with document boundaries"));
  s.add(int_key("data.global_batch_size", 8, 1, kNoMax, "samples per global batch, over all DP ranks; an integer >= 1"));
  s.add(int_key("data.micro_batch_size", 1, 1, kNoMax, "rows per micro-batch; an integer >= 1"));
  s.add(int_key("data.num_samples", 1024, 1, kNoMax, "synthetic documents generated; an integer >= 1"));
  s.add(int_key("data.seed", 1, 0, kNoMax, "seed of the synthetic data and the sampler; an integer >= 0"));
  s.add(int_key("data.max_length", 4096, 1, kNoMax, "longest synthetic document when data.path names no lengths file; an integer >= 1"));
  s.add(bool_key("data.shuffle", true, "shuffle the samples every epoch (seeded by data.seed); false keeps dataset order"));
  // model: a small GPT-style model.
  s.add(int_key("model.hidden_size", 64, 1, kNoMax, "model width; an integer >= 1"));
  s.add(int_key("model.num_layers", 2, 1, kNoMax, "transformer blocks; an integer >= 1"));
  s.add(int_key("model.num_heads", 4, 1, kNoMax, "attention heads; an integer >= 1"));
  s.add(int_key("model.vocab_size", 1024, 1, kNoMax, "vocabulary size; an integer >= 1"));
  s.add(int_key("model.ffn_size", 0, 0, kNoMax, "MLP inner width, 0 = 4 x hidden_size; an integer >= 0"));
  s.add(string_key("model.position", "rope", {"rope", "learned"}, {}, "position encoding, from each token's position in its document"));
  s.add(double_key("model.rope_base", "10000", 0.0, /*exclusive=*/true, "rotary embedding base; a number > 0"));
  // train: the loop.
  s.add(int_key("train.steps", 10, 1, kNoMax, "optimizer steps; an integer >= 1"));
  s.add(int_key("train.seed", 1234, 0, kNoMax, "seed of the model initialisation; an integer >= 0"));
  s.add(string_key("train.dtype", "float32", {"float32", "float64"}, {}, "parameter and activation dtype"));
  s.add(string_key("train.device", "cpu", {"cpu", "cuda"}, {}, "where the model, the attention and the collectives' tensors live; cuda needs a LibTorch built with CUDA and a GPU (rank r uses GPU r % GPUs)"));
  s.add(double_key("train.lr", "1e-3", 0.0, /*exclusive=*/true, "AdamW learning rate; a number > 0"));
  s.add(int_key("train.checkpoint_every", 0, 0, kNoMax, "steps between checkpoints, 0 = never; an integer >= 0"));
  s.add(string_key("train.checkpoint_dir", "", {}, {}, "directory of the checkpoint files (step-N.ckpt); needed by train.checkpoint_every and train.resume: auto"));
  s.add(int_key("train.checkpoint_keep", 2, 1, kNoMax, "newest checkpoints kept in train.checkpoint_dir; an integer >= 1"));
  s.add(string_key("train.resume", "none", {}, check_not_empty, "none (start at step 1), auto (the newest intact checkpoint in train.checkpoint_dir, if any) or a checkpoint file"));
  s.add(double_key("train.weight_decay", "0.01", 0.0, /*exclusive=*/false, "AdamW decoupled weight decay; a number >= 0"));
  s.add(int_key("train.threads", 0, 0, kNoMax, "intra-op threads per worker, 0 = the cores divided among this host's workers; an integer >= 0"));
  s.add(bool_key("train.log_samples", false, "add every micro-batch's document pieces to the metrics (exactly-once audits)"));
  // dist: rendezvous and collectives.
  s.add(string_key("dist.backend", "gloo", {"gloo", "nccl"}, {}, "c10d backend of every process group; nccl needs train.device: cuda, a LibTorch built with NCCL and one GPU per rank on this host"));
  s.add(double_key("dist.timeout_s", "60", 0.0, /*exclusive=*/true, "seconds a worker waits for the others at rendezvous; a number > 0"));
  s.add(double_key("dist.op_timeout_s", "300", 0.0, /*exclusive=*/true, "seconds any one collective may take; a number > 0"));
  s.add(int_key("dist.master_port", 0, 0, 65535, "rendezvous port fulcrum train hands its workers, 0 = a free one; an integer in [0, 65535]"));
  s.add(bool_key("dist.plan_consensus", true, "all-gather a fingerprint of every CP plan and DP partition, and of the workload it came from, before the collectives that use them; a divergence ends the job with an error naming the ranks"));
  // clang-format on
  return s;
}

std::string_view last_component(std::string_view key) {
  const auto dot = key.rfind('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

std::string_view parent_of(std::string_view key) {
  const auto dot = key.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : key.substr(0, dot);
}

// Edit distance counting a swap of two neighbouring letters as one edit
// (optimal string alignment), the commonest typo in a key.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// "Close" is about a third of the letters, at least one. For whole paths only
// the part after the common prefix counts, so that a shared "balancer.cp."
// does not make any two keys of that section look alike. Far-off suggestions
// are worse than none.
bool close_enough(std::size_t distance, std::string_view a, std::string_view b,
                  bool skip_common_prefix) {
  std::size_t common = 0;
  while (skip_common_prefix && common < a.size() && common < b.size() && a[common] == b[common]) {
    ++common;
  }
  const std::size_t differing = std::max(a.size(), b.size()) - common;
  return distance <= std::max<std::size_t>(1, differing / 3);
}

}  // namespace

void ConfigSchema::add(KeySpec spec) {
  if (spec.key.empty() || find(spec.key) != nullptr) {
    throw std::logic_error("config schema: empty or duplicate key '" + spec.key + "'");
  }
  keys_.push_back(std::move(spec));
}

const KeySpec* ConfigSchema::find(const std::string& key) const {
  for (const auto& spec : keys_) {
    if (spec.key == key) return &spec;
  }
  return nullptr;
}

std::string ConfigSchema::nearest(const std::string& key) const {
  // Candidates are the keys and the sections above them, so that a misspelt
  // section ("paralel") is also helped; sections match on the whole path only.
  struct Candidate {
    std::string name;
    bool is_key;
  };
  std::vector<Candidate> candidates;
  for (const auto& spec : keys_) {
    candidates.push_back({spec.key, true});
    for (std::string_view p = parent_of(spec.key); !p.empty(); p = parent_of(p)) {
      const bool known = std::any_of(candidates.begin(), candidates.end(),
                                     [&](const Candidate& c) { return c.name == p; });
      if (!known) candidates.push_back({std::string(p), false});
    }
  }
  constexpr std::size_t kFar = std::numeric_limits<std::size_t>::max();
  std::string best;
  std::size_t best_score = kFar;
  std::size_t best_full = kFar;
  for (const auto& candidate : candidates) {
    if (candidate.name == key) continue;
    const std::size_t full = edit_distance(key, candidate.name);
    std::size_t score = kFar;
    if (close_enough(full, key, candidate.name, /*skip_common_prefix=*/true)) score = full;
    // The right word in the wrong section ("train.block_size"), or a word cut
    // short ("seq_len"): compare last components, charging one for a
    // different section so that a same-section match wins a tie.
    const auto a = last_component(key);
    const auto b = last_component(candidate.name);
    const std::size_t last = edit_distance(a, b);
    if (candidate.is_key && a.size() >= 2 && close_enough(last, a, b, false)) {
      const std::size_t penalty = parent_of(key) == parent_of(candidate.name) ? 0 : 1;
      score = std::min(score, last + penalty);
    }
    if (score == kFar) continue;
    if (score < best_score || (score == best_score && full < best_full)) {
      best = candidate.name;
      best_score = score;
      best_full = full;
    }
  }
  return best;
}

const ConfigSchema& ConfigSchema::fulcrum() {
  static const ConfigSchema schema = build_fulcrum_schema();
  return schema;
}

Result<CostModel> parse_cost_model(std::string_view text) {
  const std::string what = "; use tokens, attention or attention:A with a number A >= 0";
  if (text == "tokens") return CostModel{CostKind::kTokens, kDefaultAttentionA};
  if (text == "attention") return CostModel{CostKind::kAttention, kDefaultAttentionA};
  constexpr std::string_view kPrefix = "attention:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    const std::string_view number = text.substr(kPrefix.size());
    double a = 0.0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), a);
    if (number.empty() || ec != std::errc() || end != number.data() + number.size() ||
        !std::isfinite(a) || a < 0.0) {
      return invalid_argument("cost model " + quote_text(text) +
                              " needs a number A >= 0 after 'attention:'" + what);
    }
    return CostModel{CostKind::kAttention, a};
  }
  return invalid_argument("unknown cost model " + quote_text(text) + what);
}

std::string cost_model_to_string(const CostModel& cost) {
  if (cost.kind == CostKind::kTokens) return "tokens";
  // Shortest text that reads back as the same double.
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), cost.a);
  return "attention:" + std::string(buffer, ec == std::errc() ? end : buffer);
}

}  // namespace fulcrum::host
