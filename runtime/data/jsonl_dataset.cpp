#include "data/jsonl_dataset.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

namespace fulcrum::data {
namespace {

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

// nlohmann's what() reads "[json.exception.parse_error.101] parse error at
// line 1, column 4: syntax error ..."; keep what follows the position.
std::string parse_error_reason(const std::string& what) {
  const auto colon = what.find(": ");
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

}  // namespace

Result<JsonlDataset> JsonlDataset::open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return invalid_argument(path + " is a directory; data.path must name the JSONL token file");
  }
  std::ifstream in(path);
  if (!in) return not_found(path + ": cannot open the JSONL token file; check the path");
  JsonlDataset ds;
  ds.path_ = path;
  std::string line;
  std::int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      return invalid_argument(where + ":" + std::to_string(e.byte) + ": invalid JSON (" +
                              parse_error_reason(e.what()) +
                              "); expected a list of token ids like [1, 2, 3]");
    } catch (const nlohmann::json::exception& e) {
      // A number too large for a double (e.g. 1E400) is out_of_range, not a
      // parse_error (found by fuzz/).
      const std::string what = e.what();
      const auto tag_end = what.find("] ");
      return invalid_argument(where + ": invalid JSON (" +
                              (tag_end == std::string::npos ? what : what.substr(tag_end + 2)) +
                              "); expected a list of token ids like [1, 2, 3]");
    }
    if (!value.is_array()) {
      return invalid_argument(where + ": found a JSON " + std::string(value.type_name()) +
                              ", expected a list of token ids like [1, 2, 3]");
    }
    for (std::size_t j = 0; j < value.size(); ++j) {
      const nlohmann::json& t = value[j];
      const bool non_negative_int =
          t.is_number_unsigned() || (t.is_number_integer() && t.get<std::int64_t>() >= 0);
      if (!non_negative_int ||
          (t.is_number_unsigned() &&
           t.get<std::uint64_t>() >
               static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
        return invalid_argument(where + ": element " + std::to_string(j) + " is " + t.dump() +
                                ", expected a non-negative integer token id");
      }
      ds.tokens_.push_back(t.get<std::int64_t>());
    }
    ds.offsets_.push_back(ds.tokens_.size());
  }
  if (in.bad())
    return invalid_argument(path + ": read error after line " + std::to_string(line_no));
  return ds;
}

std::int64_t JsonlDataset::length(std::int64_t i) const {
  const auto k = static_cast<std::size_t>(i);
  return static_cast<std::int64_t>(offsets_[k + 1] - offsets_[k]);
}

std::vector<std::int64_t> JsonlDataset::tokens(std::int64_t i) const {
  const auto k = static_cast<std::size_t>(i);
  return {tokens_.begin() + static_cast<std::ptrdiff_t>(offsets_[k]),
          tokens_.begin() + static_cast<std::ptrdiff_t>(offsets_[k + 1])};
}

std::string JsonlDataset::describe() const {
  return "JSONL dataset " + path_ + " (" + std::to_string(size()) + " samples)";
}

}  // namespace fulcrum::data
