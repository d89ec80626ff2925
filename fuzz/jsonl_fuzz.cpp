// Fuzz target: the JSON Lines token reader (JsonlDataset).
//
// The input is the file verbatim: one sample per line, a JSON list of
// non-negative integer token ids. It is written to a private temporary
// directory (the reader opens a path; there is no in-memory entry point) and
// opened. The reader must refuse a bad file with one line naming FILE:LINE
// (kInvalidArgument), or accept it and then hold one sample per non-blank
// line, each of the length it reports, with non-negative token ids.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/jsonl_dataset.h"
#include "fulcrum/status.h"
#include "fuzz_input.h"

namespace fulcrum::fuzz {
namespace {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                          "/fulcrum-jsonl-fuzz-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    FUZZ_CHECK(::mkdtemp(buffer.data()) != nullptr, "cannot create a temporary directory");
    dir_ = buffer.data();
  }
  ~TempDir() {
    std::remove(path().c_str());
    ::rmdir(dir_.c_str());
  }
  std::string path() const { return dir_ + "/data.jsonl"; }

 private:
  std::string dir_;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr, "cannot write " + path);
  FUZZ_CHECK(bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(),
             "short write to " + path);
  FUZZ_CHECK(std::fclose(f) == 0, "cannot close " + path);
}

// Samples the file should hold, counted without the reader: lines (split at
// '\n', a last line without one included) holding anything but spaces, tabs
// and carriage returns.
std::int64_t non_blank_lines(const std::string& text) {
  std::int64_t count = 0;
  bool blank = true;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      if (!blank) ++count;
      blank = true;
    } else if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r') {
      blank = false;
    }
  }
  return count;
}

}  // namespace
}  // namespace fulcrum::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace fulcrum;
  static const fuzz::TempDir dir;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::write_file(dir.path(), text);

  auto opened = data::JsonlDataset::open(dir.path());
  if (fuzz::verbose()) {
    std::fprintf(stderr, "jsonl: %zu bytes -> %s\n", size,
                 opened ? opened->describe().c_str() : opened.status().message().c_str());
  }
  if (!opened) {
    const Status& s = opened.status();
    FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument,
               std::string("refusal with code ") + status_code_name(s.code()) + ": " + s.message());
    FUZZ_CHECK(s.message().rfind(dir.path() + ":", 0) == 0,
               "refusal that does not start with FILE: " + s.message());
    FUZZ_CHECK(s.message().find_first_of("\n\r") == std::string::npos,
               "multi-line refusal: " + s.message());
    return 0;
  }
  const data::JsonlDataset& ds = *opened;
  FUZZ_CHECK(ds.size() == fuzz::non_blank_lines(text),
             std::to_string(ds.size()) + " samples from " +
                 std::to_string(fuzz::non_blank_lines(text)) + " non-blank lines");
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    const std::int64_t n = ds.length(i);
    FUZZ_CHECK(n >= 0, "sample " + std::to_string(i) + " has length " + std::to_string(n));
    const std::vector<std::int64_t> tokens = ds.tokens(i);
    FUZZ_CHECK(static_cast<std::int64_t>(tokens.size()) == n,
               "sample " + std::to_string(i) + " read " + std::to_string(tokens.size()) +
                   " tokens, length says " + std::to_string(n));
    for (std::int64_t t : tokens) {
      FUZZ_CHECK(t >= 0, "sample " + std::to_string(i) + " holds token " + std::to_string(t));
    }
    total += n;
  }
  // Every token is at least one byte of the file.
  FUZZ_CHECK(total <= static_cast<std::int64_t>(size),
             std::to_string(total) + " tokens from " + std::to_string(size) + " bytes");
  FUZZ_CHECK(!ds.describe().empty(), "empty description");
  return 0;
}
