#include "data/synthetic_dataset.h"

#include <fstream>
#include <random>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "fulcrum/core/random.h"
#include "fulcrum/core/synthetic.h"
#include "host/input_file.h"

namespace fulcrum::data {

namespace {
// A lengths list is flat; a little nesting is let through to be refused by
// the element check, with its clearer message.
constexpr int kMaxLengthsDepth = 64;
constexpr std::uint64_t kMaxLengthsFileBytes = 256u << 20;
}  // namespace

Result<std::vector<std::int64_t>> read_lengths_file(const std::string& path) {
  constexpr std::string_view kFix = "give a JSON list of positive integers like [512, 4096]";
  Result<std::string> text =
      host::read_input_file(path, {"lengths file " + path, kFix, kMaxLengthsFileBytes});
  if (!text) return text.status();
  if (const std::string wrong = host::json_text_refusal(text.value()); !wrong.empty()) {
    return invalid_argument("lengths file " + path + " " + wrong + "; " + std::string(kFix));
  }
  if (std::size_t at = 0; !host::json_nesting_within(text.value(), kMaxLengthsDepth, at)) {
    return invalid_argument(path + ": byte " + std::to_string(at) + ": lists nested more than " +
                            std::to_string(kMaxLengthsDepth) + " deep; " + std::string(kFix));
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.value());
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument(
        path + ": byte " + std::to_string(e.byte) +
        ": invalid JSON; expected a list of positive integers like [512, 4096]");
  } catch (const nlohmann::json::exception&) {
    // A number past a double's range (1E400) is out_of_range, not a parse error.
    return invalid_argument(path + ": a number out of range; " + std::string(kFix));
  }
  if (!doc.is_array() || doc.empty()) {
    return invalid_argument(
        path + ": expected a non-empty JSON list of positive integers, found " +
        (doc.is_array() ? std::string("an empty list") : "a JSON " + std::string(doc.type_name())));
  }
  std::vector<std::int64_t> lengths;
  lengths.reserve(doc.size());
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& v = doc[i];
    const bool positive =
        (v.is_number_unsigned() && v.get<std::uint64_t>() >= 1 &&
         v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)) ||
        (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() >= 1);
    if (!positive) {
      return invalid_argument(path + ": element " + std::to_string(i) + " is " + v.dump() +
                              ", expected a positive integer length");
    }
    lengths.push_back(v.get<std::int64_t>());
  }
  return lengths;
}

Result<SyntheticDataset> SyntheticDataset::from_lengths(std::vector<std::int64_t> lengths,
                                                        std::uint64_t seed,
                                                        std::int64_t vocab_size) {
  if (vocab_size < 1) {
    return invalid_argument("synthetic vocab_size is " + std::to_string(vocab_size) +
                            "; give at least 1");
  }
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      return invalid_argument("synthetic sample " + std::to_string(i) + " has length " +
                              std::to_string(lengths[i]) + "; lengths must be >= 0");
    }
  }
  SyntheticDataset ds;
  ds.lengths_ = std::move(lengths);
  ds.seed_ = seed;
  ds.vocab_size_ = vocab_size;
  ds.source_ = "given lengths";
  return ds;
}

Result<SyntheticDataset> SyntheticDataset::create(const SyntheticOptions& options) {
  if (options.num_samples < 0) {
    return invalid_argument("synthetic num_samples is " + std::to_string(options.num_samples) +
                            "; give a count >= 0");
  }
  std::vector<std::int64_t> lengths;
  std::string source;
  if (!options.lengths_file.empty()) {
    auto read = read_lengths_file(options.lengths_file);
    if (!read) return read.status();
    lengths = std::move(read).value();
    if (options.num_samples > 0) {
      if (options.num_samples > static_cast<std::int64_t>(lengths.size())) {
        return invalid_argument(options.lengths_file + " holds " + std::to_string(lengths.size()) +
                                " lengths, fewer than num_samples " +
                                std::to_string(options.num_samples) +
                                "; lower num_samples or set it to 0 for all");
      }
      lengths.resize(static_cast<std::size_t>(options.num_samples));
    }
    source = "lengths from " + options.lengths_file;
  } else {
    if (options.num_samples < 1 || options.max_length < 1) {
      return invalid_argument("synthetic data needs num_samples >= 1 and max_length >= 1 (got " +
                              std::to_string(options.num_samples) + " and " +
                              std::to_string(options.max_length) + ") or a lengths file");
    }
    lengths = synthetic_document_lengths(options.num_samples, options.seed, options.max_length);
    source = "synthetic lengths up to " + std::to_string(options.max_length);
  }
  auto ds = from_lengths(std::move(lengths), options.seed, options.vocab_size);
  if (!ds) return ds.status();
  ds->source_ = std::move(source);
  return ds;
}

std::vector<std::int64_t> SyntheticDataset::tokens(std::int64_t i) const {
  std::mt19937_64 rng(derive_seed(seed_, static_cast<std::uint64_t>(i)));
  std::vector<std::int64_t> out(static_cast<std::size_t>(length(i)));
  for (std::int64_t& t : out) {
    t = static_cast<std::int64_t>(draw_below(rng, static_cast<std::uint64_t>(vocab_size_)));
  }
  return out;
}

std::string SyntheticDataset::describe() const {
  return "synthetic dataset (" + std::to_string(size()) + " samples, " + source_ + ", vocab " +
         std::to_string(vocab_size_) + ", seed " + std::to_string(seed_) + ")";
}

}  // namespace fulcrum::data
