// The dataset readers. The .idx/.bin pairs are produced by a writer in this
// file that follows the published MMIDIDX layout byte by byte and shares no
// code with the reader, so a reader that misreads the layout fails here.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/indexed_dataset.h"
#include "data/jsonl_dataset.h"
#include "data/synthetic_dataset.h"
#include "data/token_dataset.h"
#include "fulcrum/core/synthetic.h"
#include "tests/test_support.h"

namespace fulcrum::data {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Little-endian bytes of the low `n` bytes of v, written out by shifting so
// the host's byte order plays no part.
void put_le(std::string& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// The independent writer: the token values as stored by dtype `code`.
struct Pair {
  std::string idx;
  std::string bin;
};

std::string encode_token(int code, std::int64_t v) {
  std::string out;
  switch (code) {
    case 1:
    case 2:
      put_le(out, static_cast<std::uint64_t>(v), 1);
      break;
    case 3:
    case 8:
      put_le(out, static_cast<std::uint64_t>(v), 2);
      break;
    case 4:
      put_le(out, static_cast<std::uint64_t>(v), 4);
      break;
    case 5:
      put_le(out, static_cast<std::uint64_t>(v), 8);
      break;
    case 6: {
      const double d = static_cast<double>(v);
      std::uint64_t bits;
      std::memcpy(&bits, &d, 8);
      put_le(out, bits, 8);
      break;
    }
    case 7: {
      const float f = static_cast<float>(v);
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      put_le(out, bits, 4);
      break;
    }
  }
  return out;
}

Pair build_pair(int code, const std::vector<std::vector<std::int64_t>>& sequences,
                const std::vector<std::int64_t>& doc_idx) {
  Pair p;
  std::vector<std::int64_t> pointers;
  for (const auto& seq : sequences) {
    pointers.push_back(static_cast<std::int64_t>(p.bin.size()));
    for (std::int64_t v : seq) p.bin += encode_token(code, v);
  }
  p.idx = std::string("MMIDIDX\0\0", 9);
  put_le(p.idx, 1, 8);
  put_le(p.idx, static_cast<std::uint64_t>(code), 1);
  put_le(p.idx, sequences.size(), 8);
  put_le(p.idx, doc_idx.size(), 8);
  for (const auto& seq : sequences) put_le(p.idx, seq.size(), 4);
  for (std::int64_t ptr : pointers) put_le(p.idx, static_cast<std::uint64_t>(ptr), 8);
  for (std::int64_t d : doc_idx) put_le(p.idx, static_cast<std::uint64_t>(d), 8);
  return p;
}

std::string write_pair(const test::TempDir& dir, const Pair& p, const std::string& name = "ds") {
  write_file(dir.at(name + ".idx"), p.idx);
  write_file(dir.at(name + ".bin"), p.bin);
  return dir.at(name);
}

// Sequences whose values exercise each dtype's range.
std::vector<std::vector<std::int64_t>> sample_sequences(int code) {
  switch (code) {
    case 1:
      return {{0, 1, 255}, {}, {7}};
    case 2:
      return {{-128, 0, 127}, {}, {-1}};
    case 3:
      return {{-32768, 5, 32767}, {}, {-2, 2}};
    case 4:
      return {{std::numeric_limits<std::int32_t>::min(), 50256,
               std::numeric_limits<std::int32_t>::max()},
              {},
              {3}};
    case 5:
      return {
          {std::numeric_limits<std::int64_t>::min(), 1, std::numeric_limits<std::int64_t>::max()},
          {},
          {4}};
    case 6:
      return {{0, 151935, std::int64_t{1} << 52}, {}, {-5}};
    case 7:
      return {{0, 128255, 1 << 24}, {}, {6}};
    case 8:
      return {{0, 50256, 65535}, {}, {8}};
  }
  return {};
}

class IndexedDtype : public ::testing::TestWithParam<int> {};

TEST_P(IndexedDtype, ReadsBackExactly) {
  test::TempDir dir;
  const int code = GetParam();
  const auto sequences = sample_sequences(code);
  const std::string prefix = write_pair(dir, build_pair(code, sequences, {0, 1, 3}));
  for (const std::string& path : {prefix, prefix + ".idx", prefix + ".bin"}) {
    auto ds = IndexedDataset::open(path);
    ASSERT_TRUE(ds) << ds.status().message();
    EXPECT_EQ(static_cast<int>(ds->dtype()), code);
    ASSERT_EQ(ds->size(), static_cast<std::int64_t>(sequences.size()));
    for (std::size_t i = 0; i < sequences.size(); ++i) {
      EXPECT_EQ(ds->length(static_cast<std::int64_t>(i)),
                static_cast<std::int64_t>(sequences[i].size()));
      EXPECT_EQ(ds->tokens(static_cast<std::int64_t>(i)), sequences[i]) << "sequence " << i;
    }
    EXPECT_EQ(ds->document_index(), (std::vector<std::int64_t>{0, 1, 3}));
    EXPECT_HAS(ds->describe(), dtype_name(ds->dtype()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, IndexedDtype, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return std::string(dtype_name(static_cast<TokenDtype>(param.param)));
                         });

TEST(IndexedDataset, EmptyDatasetIsValid) {
  test::TempDir dir;
  const std::string prefix = write_pair(dir, build_pair(4, {}, {0}));
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds) << ds.status().message();
  EXPECT_EQ(ds->size(), 0);
}

TEST(IndexedDataset, StaysValidAfterMove) {
  test::TempDir dir;
  const std::string prefix = write_pair(dir, build_pair(4, {{1, 2, 3}}, {0, 1}));
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds);
  IndexedDataset moved = std::move(ds).value();
  EXPECT_EQ(moved.tokens(0), (std::vector<std::int64_t>{1, 2, 3}));
}

// A file that changes under an open dataset is refused when read, in one
// line naming it; the old bytes are never returned and nothing faults (a
// mapped page past a truncated end would raise SIGBUS).
TEST(IndexedDataset, FileChangedAfterOpeningIsRefusedWhenRead) {
  test::TempDir dir;
  const Pair pair = build_pair(4, {{1, 2, 3}, {4, 5}}, {0, 2});
  const std::string prefix = write_pair(dir, pair);
  auto expect_changed = [](const IndexedDataset& ds, std::int64_t i, const std::string& says) {
    try {
      (void)ds.tokens(i);
      ADD_FAILURE() << "read sequence " << i << " of a changed file";
    } catch (const DatasetChanged& e) {
      const std::string m = e.what();
      EXPECT_HAS(m, "ds.bin changed while the job reads it");
      EXPECT_HAS(m, says);
      EXPECT_HAS(m, "; ");
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  {
    // Truncated to nothing, as `: > ds.bin` or a copy that starts over does.
    auto ds = IndexedDataset::open(prefix);
    ASSERT_TRUE(ds) << ds.status().message();
    ASSERT_EQ(::truncate(dir.at("ds.bin").c_str(), 0), 0);
    expect_changed(*ds, 0, "it had 20 bytes when opened and has 0 now");
    expect_changed(*ds, 1, "it had 20 bytes when opened and has 0 now");
  }
  {
    // Rewritten in place with other tokens of the same size.
    write_file(dir.at("ds.bin"), pair.bin);
    auto ds = IndexedDataset::open(prefix);
    ASSERT_TRUE(ds) << ds.status().message();
    EXPECT_EQ(ds->tokens(1), (std::vector<std::int64_t>{4, 5}));
    const struct timespec later[2] = {{0, UTIME_OMIT}, {1, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, dir.at("ds.bin").c_str(), later, 0), 0);
    expect_changed(*ds, 1, "it was written to after the job opened it");
  }
  {
    // The index is read whole when opened: truncating it afterwards changes
    // nothing the dataset answers.
    write_file(dir.at("ds.bin"), pair.bin);
    auto ds = IndexedDataset::open(prefix);
    ASSERT_TRUE(ds) << ds.status().message();
    ASSERT_EQ(::truncate(dir.at("ds.idx").c_str(), 0), 0);
    EXPECT_EQ(ds->length(0), 3);
    EXPECT_EQ(ds->tokens(0), (std::vector<std::int64_t>{1, 2, 3}));
    EXPECT_EQ(ds->document_index(), (std::vector<std::int64_t>{0, 2}));
  }
}

// A corrupt pair must be refused with the file, the byte offset and what was
// expected.
void expect_corrupt(const std::string& prefix, const std::string& file, std::uint64_t offset,
                    const std::string& expected) {
  auto ds = IndexedDataset::open(prefix);
  ASSERT_FALSE(ds) << "accepted a corrupt pair: expected '" << expected << "'";
  const std::string m = ds.status().message();
  EXPECT_HAS(m, file + ": byte offset " + std::to_string(offset) + ":");
  EXPECT_HAS(m, expected);
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

class IndexedCorruption : public ::testing::Test {
 protected:
  // Two sequences of int32 (3 and 2 tokens) and doc_idx [0, 1, 2].
  void SetUp() override { good_ = build_pair(4, {{10, 11, 12}, {20, 21}}, {0, 1, 2}); }
  // Byte offsets of the .idx arrays for S = 2, D = 3.
  static constexpr std::uint64_t kSizes = 34, kPointers = 34 + 8, kDocs = 34 + 24;

  std::string write(const Pair& p) { return write_pair(dir_, p); }
  std::string idx() const { return dir_.at("ds.idx"); }
  std::string bin() const { return dir_.at("ds.bin"); }

  test::TempDir dir_;
  Pair good_;
};

TEST_F(IndexedCorruption, BadMagic) {
  Pair p = good_;
  p.idx[0] = 'X';
  expect_corrupt(write(p), idx(), 0, "expected the magic");
  p.idx = "MMID";  // too short to hold the magic at all
  expect_corrupt(write(p), idx(), 0, "expected the magic");
}

TEST_F(IndexedCorruption, UnsupportedVersion) {
  Pair p = good_;
  p.idx[9] = 2;
  expect_corrupt(write(p), idx(), 9, "unsupported version 2, expected 1");
}

TEST_F(IndexedCorruption, UnknownDtype) {
  for (char code : {char(0), char(9), char(200)}) {
    Pair p = good_;
    p.idx[17] = code;
    expect_corrupt(write(p), idx(), 17,
                   "unknown dtype code " + std::to_string(static_cast<unsigned char>(code)));
  }
}

TEST_F(IndexedCorruption, FileTooShortForItsCounts) {
  Pair p = good_;
  p.idx.resize(20);  // inside the header
  expect_corrupt(write(p), idx(), 20, "inside the 34-byte header");
  p = good_;
  p.idx.resize(p.idx.size() - 3);  // inside doc_idx
  expect_corrupt(write(p), idx(), p.idx.size(),
                 "2 sequences and 3 document entries, which need 82");
  p = good_;
  p.idx[18] = 100;  // S = 100: the arrays would need far more
  expect_corrupt(write(p), idx(), good_.idx.size(), "100 sequences");
  p = good_;
  p.idx[25] = 0x7f;  // S near 2^63
  expect_corrupt(write(p), idx(), good_.idx.size(), "more bytes than any file holds");
}

TEST_F(IndexedCorruption, TrailingBytes) {
  Pair p = good_;
  p.idx += "junk";
  expect_corrupt(write(p), idx(), good_.idx.size(), "4 bytes follow the document index");
}

TEST_F(IndexedCorruption, PointerPastEndOfBin) {
  Pair p = good_;
  std::string ptr;
  put_le(ptr, 1000, 8);
  p.idx.replace(kPointers + 8, 8, ptr);  // sequence 1
  expect_corrupt(write(p), idx(), kPointers + 8, "runs past the end of " + bin());
  p = good_;
  put_le(ptr.assign(""), static_cast<std::uint64_t>(-4), 8);  // negative pointer
  p.idx.replace(kPointers, 8, ptr);
  expect_corrupt(write(p), idx(), kPointers, "sequence 0");
}

TEST_F(IndexedCorruption, SizePastEndOfBin) {
  Pair p = good_;
  p.idx[kSizes + 4] = 3;  // sequence 1 claims 3 tokens, the .bin holds 2
  expect_corrupt(write(p), idx(), kPointers + 8, "runs past the end of " + bin());
  p = good_;
  std::string size;
  put_le(size, static_cast<std::uint32_t>(-5), 4);
  p.idx.replace(kSizes, 4, size);
  expect_corrupt(write(p), idx(), kSizes, "has size -5, expected a token count >= 0");
}

TEST_F(IndexedCorruption, TruncatedBin) {
  Pair p = good_;
  p.bin.resize(p.bin.size() - 1);
  expect_corrupt(write(p), idx(), kPointers + 8, "runs past the end of " + bin());
}

TEST_F(IndexedCorruption, DocumentIndexDecreasingOrPastSequences) {
  Pair p = good_;
  p.idx[kDocs + 16] = 0;  // [0, 1, 0]
  expect_corrupt(write(p), idx(), kDocs + 16, "document index entry 2 is 0, expected");
  p = good_;
  p.idx[kDocs + 16] = 3;  // past S = 2
  expect_corrupt(write(p), idx(), kDocs + 16, "document index entry 2 is 3, expected");
}

TEST_F(IndexedCorruption, FloatTokenThatIsNotAWholeNumber) {
  Pair p = build_pair(7, {{1, 2}, {3}}, {0, 2});
  const float bad = 2.5f;
  std::uint32_t bits;
  std::memcpy(&bits, &bad, 4);
  std::string enc;
  put_le(enc, bits, 4);
  p.bin.replace(4, 4, enc);  // token 1 of sequence 0
  expect_corrupt(write(p), bin(), 4, "expected a whole number");
}

TEST_F(IndexedCorruption, MissingBin) {
  write(good_);
  fs::remove(bin());
  auto ds = IndexedDataset::open(dir_.at("ds"));
  ASSERT_FALSE(ds);
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(ds.status().message(), bin());
}

// --- JSONL ------------------------------------------------------------------

TEST(JsonlDataset, ReadsListsAndSkipsBlankLines) {
  test::TempDir dir;
  const std::string path = dir.at("tokens.jsonl");
  write_file(path, "[1, 2, 3]\n\n  \n[]\n[9223372036854775807, 0]\r\n[42]");
  auto ds = JsonlDataset::open(path);
  ASSERT_TRUE(ds) << ds.status().message();
  ASSERT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->tokens(0), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(ds->length(1), 0);
  EXPECT_EQ(ds->tokens(2),
            (std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::max(), 0}));
  EXPECT_EQ(ds->tokens(3), (std::vector<std::int64_t>{42}));
}

TEST(JsonlDataset, RefusesBadLinesNamingFileAndLine) {
  test::TempDir dir;
  const std::string path = dir.at("bad.jsonl");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[1, 2", ":2:"},  // not JSON
      {"{\"tokens\": [1]}", ":2: found a JSON object"},
      {"[1, -2]", ":2: element 1 is -2"},
      {"[1.5]", ":2: element 0 is 1.5"},
      {"[\"a\"]", ":2: element 0 is \"a\""},
      {"[18446744073709551615]", ":2: element 0 is 18446744073709551615"},
      {"7", ":2: found a JSON number"},
  };
  for (const auto& [line, expected] : cases) {
    write_file(path, "[1]\n" + line + "\n[2]\n");
    auto ds = JsonlDataset::open(path);
    ASSERT_FALSE(ds) << "accepted: " << line;
    EXPECT_HAS(ds.status().message(), path + expected);
    EXPECT_EQ(ds.status().message().find('\n'), std::string::npos);
  }
  auto missing = JsonlDataset::open(dir.at("nope.jsonl"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto directory = JsonlDataset::open(dir.at(""));
  ASSERT_FALSE(directory);
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(directory.status().message(),
             "is a directory, not a file; data.path must name the JSONL");
}

// --- synthetic -----------------------------------------------------------------

TEST(SyntheticDataset, LengthsFromTheCoreGenerator) {
  SyntheticOptions o;
  o.num_samples = 50;
  o.seed = 3;
  o.max_length = 2048;
  o.vocab_size = 100;
  auto ds = SyntheticDataset::create(o);
  ASSERT_TRUE(ds) << ds.status().message();
  const auto expected = synthetic_document_lengths(50, 3, 2048);
  ASSERT_EQ(ds->size(), 50);
  for (std::int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(ds->length(i), expected[static_cast<std::size_t>(i)]);
    const auto toks = ds->tokens(i);
    ASSERT_EQ(static_cast<std::int64_t>(toks.size()), ds->length(i));
    for (std::int64_t t : toks) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 100);
    }
  }
}

TEST(SyntheticDataset, TokensAreSeededAndIndependentOfReadOrder) {
  auto a = SyntheticDataset::from_lengths({5, 8, 3}, 11, 1000);
  auto b = SyntheticDataset::from_lengths({5, 8, 3}, 11, 1000);
  auto c = SyntheticDataset::from_lengths({5, 8, 3}, 12, 1000);
  ASSERT_TRUE(a && b && c);
  const auto b2 = b->tokens(2);  // read out of order first
  EXPECT_EQ(a->tokens(2), b2);
  EXPECT_EQ(a->tokens(0), b->tokens(0));
  EXPECT_NE(a->tokens(1), c->tokens(1));
  // Pinned: mt19937_64 and the bounded draw are specified exactly, so these
  // are the same on every platform and standard library.
  EXPECT_EQ(a->tokens(0), (std::vector<std::int64_t>{310, 93, 795, 398, 944}));
}

TEST(SyntheticDataset, LengthsFile) {
  test::TempDir dir;
  const std::string path = dir.at("lengths.json");
  write_file(path, "[3, 1, 4, 1, 5]");
  SyntheticOptions o;
  o.lengths_file = path;
  auto ds = SyntheticDataset::create(o);
  ASSERT_TRUE(ds) << ds.status().message();
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->length(4), 5);
  o.num_samples = 2;
  ds = SyntheticDataset::create(o);
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->size(), 2);
  o.num_samples = 6;
  EXPECT_FALSE(SyntheticDataset::create(o));

  o.num_samples = 0;
  for (const char* bad : {"[3, 0]", "[3, -1]", "[2.5]", "{}", "[]", "[1,"}) {
    write_file(path, bad);
    auto r = SyntheticDataset::create(o);
    ASSERT_FALSE(r) << "accepted " << bad;
    EXPECT_HAS(r.status().message(), path);
  }
}

TEST(SyntheticDataset, SharedWorkloadFileWhenPresent) {
  // The shared workloads are a sibling of the repository; skip when absent.
  const fs::path path =
      fs::path(FULCRUM_SOURCE_DIR) / ".." / "shared" / "workloads" / "dist_prolong.json";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present";
  SyntheticOptions o;
  o.lengths_file = path.string();
  o.num_samples = 100;
  auto ds = SyntheticDataset::create(o);
  ASSERT_TRUE(ds) << ds.status().message();
  EXPECT_EQ(ds->size(), 100);
}

TEST(OpenTokenDataset, PicksTheReaderByPath) {
  test::TempDir dir;
  write_file(dir.at("a.jsonl"), "[1, 2]\n");
  const std::string prefix = write_pair(dir, build_pair(8, {{7, 8, 9}}, {0, 1}), "b");
  auto jsonl = open_token_dataset(dir.at("a.jsonl"));
  ASSERT_TRUE(jsonl) << jsonl.status().message();
  EXPECT_EQ((*jsonl)->tokens(0), (std::vector<std::int64_t>{1, 2}));
  auto indexed = open_token_dataset(prefix);
  ASSERT_TRUE(indexed) << indexed.status().message();
  EXPECT_EQ((*indexed)->tokens(0), (std::vector<std::int64_t>{7, 8, 9}));
  EXPECT_FALSE(open_token_dataset(dir.at("missing")));
}

}  // namespace
}  // namespace fulcrum::data
