// A configuration schema's own lookups (find, nearest), the builders its
// tables are written with, and the DP cost model's text form. The job's
// schema itself lives with the trainer (runtime/train/job_schema.cpp).

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/host/config.h"

namespace fulcrum::host {
namespace {

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

namespace {

// The fields every key has; the builders below add their type's own.
KeySpec key_spec(std::string key, ValueType type, std::string def, std::string help) {
  KeySpec s;
  s.key = std::move(key);
  s.type = type;
  s.default_value = std::move(def);
  s.help = std::move(help);
  return s;
}

}  // namespace

KeySpec int_key(std::string key, std::int64_t def, std::optional<double> min,
                std::optional<double> max, std::string help) {
  KeySpec s = key_spec(std::move(key), ValueType::kInt, std::to_string(def), std::move(help));
  s.min = min;
  s.max = max;
  return s;
}

KeySpec double_key(std::string key, std::string def, std::optional<double> min, bool exclusive,
                   std::string help) {
  KeySpec s = key_spec(std::move(key), ValueType::kDouble, std::move(def), std::move(help));
  s.min = min;
  s.min_exclusive = exclusive;
  return s;
}

KeySpec bool_key(std::string key, bool def, std::string help) {
  return key_spec(std::move(key), ValueType::kBool, def ? "true" : "false", std::move(help));
}

KeySpec string_key(std::string key, std::string def, std::vector<std::string> choices,
                   KeySpec::Check check, std::string help) {
  KeySpec s = key_spec(std::move(key), ValueType::kString, std::move(def), std::move(help));
  s.choices = std::move(choices);
  s.check = std::move(check);
  return s;
}

Result<CostModel> parse_cost_model(std::string_view text) {
  const std::string what =
      "; use tokens, attention or attention:A with a number A from 0 to 2^40 (1099511627776)";
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
    if (a > kMaxAttentionA) {
      return invalid_argument("cost model " + quote_text(text) +
                              ": A is more than 2^40, where costs overflow" + what);
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
