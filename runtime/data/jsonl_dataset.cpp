#include "data/jsonl_dataset.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "host/input_file.h"

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

// A line of a JSONL file may hold one long sample, but not a whole sparse
// file of zeros: lines past this are refused before they fill memory.
constexpr std::size_t kMaxLineBytes = std::size_t{1} << 30;
// A sample is a flat list; some nesting is let through to be refused by the
// element check, with its clearer message.
constexpr int kMaxDepth = 64;

// Lines of a descriptor, refusing NUL bytes (binary data named as JSONL) and
// lines past kMaxLineBytes as they are met.
class LineReader {
 public:
  enum class Outcome { kLine, kEnd, kNulByte, kTooLong, kReadError };
  explicit LineReader(int fd) : fd_(fd) {}

  Outcome next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == len_) {
        if (eof_) return line.empty() ? Outcome::kEnd : Outcome::kLine;
        const ssize_t n = ::read(fd_, buffer_, sizeof buffer_);
        if (n < 0) {
          if (errno == EINTR) continue;
          error_ = std::strerror(errno);
          return Outcome::kReadError;
        }
        if (n == 0) {
          eof_ = true;
          continue;
        }
        pos_ = 0;
        len_ = static_cast<std::size_t>(n);
      }
      const char* start = buffer_ + pos_;
      const std::size_t avail = len_ - pos_;
      const void* newline = std::memchr(start, '\n', avail);
      const std::size_t take =
          newline ? static_cast<std::size_t>(static_cast<const char*>(newline) - start) : avail;
      if (std::memchr(start, '\0', take) != nullptr) return Outcome::kNulByte;
      if (line.size() + take > kMaxLineBytes) return Outcome::kTooLong;
      line.append(start, take);
      pos_ += take;
      if (newline) {
        ++pos_;
        return Outcome::kLine;
      }
    }
  }
  const std::string& error() const { return error_; }

 private:
  int fd_;
  char buffer_[1 << 16];
  std::size_t pos_ = 0, len_ = 0;
  bool eof_ = false;
  std::string error_;
};

}  // namespace

Result<JsonlDataset> JsonlDataset::open(const std::string& path) {
  Result<host::InputFile> opened =
      host::open_input_file(path, {path, "data.path must name the JSONL token file"});
  if (!opened) return opened.status();
  const host::InputFile file = std::move(opened).value();
  JsonlDataset ds;
  ds.path_ = path;
  LineReader lines(file.fd());
  std::string line;
  std::int64_t line_no = 0;
  for (;;) {
    const LineReader::Outcome got = lines.next(line);
    if (got == LineReader::Outcome::kEnd) break;
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    if (got == LineReader::Outcome::kReadError) {
      return invalid_argument(where + ": read error (" + lines.error() +
                              "); check the file system holding data.path");
    }
    if (got == LineReader::Outcome::kNulByte) {
      return invalid_argument(where +
                              ": holds a NUL byte; a JSONL token file is text, one list "
                              "of token ids like [1, 2, 3] per line");
    }
    if (got == LineReader::Outcome::kTooLong) {
      return invalid_argument(where + ": the line is longer than " + std::to_string(kMaxLineBytes) +
                              " bytes; split the sample, one list of token ids per line");
    }
    if (blank(line)) continue;
    if (std::size_t at = 0; !host::json_nesting_within(line, kMaxDepth, at)) {
      return invalid_argument(where + ":" + std::to_string(at) + ": lists nested more than " +
                              std::to_string(kMaxDepth) +
                              " deep; expected a list of token ids like [1, 2, 3]");
    }
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
        return invalid_argument(
            where + ": element " + std::to_string(j) + " is " + t.dump() +
            ", expected a non-negative integer token id; token ids are integers from 0 to "
            "model.vocab_size - 1");
      }
      ds.tokens_.push_back(t.get<std::int64_t>());
    }
    ds.offsets_.push_back(ds.tokens_.size());
  }
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
