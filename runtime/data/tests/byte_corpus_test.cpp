// fulcrum preprocess's pieces: the text splitter against an independent
// recount on random text, and the byte dataset writer read back through the
// MMIDIDX reader (indexed_dataset.cpp), which shares no code with it.
#include "data/byte_corpus.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/indexed_dataset.h"
#include "tests/test_support.h"

namespace fulcrum::data {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> as_strings(const std::vector<std::string_view>& views) {
  return {views.begin(), views.end()};
}

// The documents by a different route: cut the text into lines with their
// newlines, then group the lines between separators.
std::vector<std::string> recount(const std::string& text, bool blank_line,
                                 const std::string& separator) {
  std::vector<std::string> lines;
  std::string current;
  for (const char c : text) {
    current.push_back(c);
    if (c == '\n') {
      lines.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) lines.push_back(current);
  const auto is_separator = [&](std::string line) {
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (blank_line) return line.find_first_not_of(" \t\r\f\v") == std::string::npos;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line == separator;
  };
  const auto whitespace_only = [](const std::string& doc) {
    return doc.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
  };
  std::vector<std::string> docs;
  std::string doc;
  for (const std::string& line : lines) {
    if (is_separator(line)) {
      if (!whitespace_only(doc)) docs.push_back(doc);
      doc.clear();
    } else {
      doc += line;
    }
  }
  if (!whitespace_only(doc)) docs.push_back(doc);
  return docs;
}

TEST(SplitText, FortuneFileAtPercentLines) {
  const TextSplit split{TextSplit::Kind::kLine, "%"};
  EXPECT_EQ(as_strings(split_text("a\n%\nb\n\nc\n%\n", split)),
            (std::vector<std::string>{"a\n", "b\n\nc\n"}));
  // Windows line ends: the separator still matches; the document keeps its \r.
  EXPECT_EQ(as_strings(split_text("a\r\n%\r\nb", split)), (std::vector<std::string>{"a\r\n", "b"}));
  // A line that only starts with the separator is text.
  EXPECT_EQ(as_strings(split_text("%x\n%\n", split)), (std::vector<std::string>{"%x\n"}));
}

TEST(SplitText, BlankLinesAndWholeFiles) {
  std::int64_t dropped = -1;
  EXPECT_EQ(as_strings(split_text("\n\none\ntwo\n \t\n\nthree", TextSplit{}, &dropped)),
            (std::vector<std::string>{"one\ntwo\n", "three"}));
  EXPECT_EQ(dropped, 0);
  const TextSplit whole{TextSplit::Kind::kFile, ""};
  EXPECT_EQ(as_strings(split_text("a\n\nb\n", whole)), (std::vector<std::string>{"a\n\nb\n"}));
  EXPECT_TRUE(split_text("", whole, &dropped).empty());
  EXPECT_EQ(dropped, 0);
  EXPECT_TRUE(split_text(" \n\t\n", whole, &dropped).empty());
  EXPECT_EQ(dropped, 1);
  const TextSplit percent{TextSplit::Kind::kLine, "%"};
  EXPECT_TRUE(split_text("%\n  \n%\n\n", percent, &dropped).empty());
  EXPECT_EQ(dropped, 2);
}

TEST(SplitText, MatchesAnIndependentRecountOnRandomText) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "ab %\t\r\n\n\n";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) text.push_back(alphabet[rng() % alphabet.size()]);
    for (const bool blank_line : {true, false}) {
      const TextSplit split = blank_line ? TextSplit{} : TextSplit{TextSplit::Kind::kLine, "%"};
      const std::vector<std::string> got = as_strings(split_text(text, split));
      EXPECT_EQ(got, recount(text, blank_line, "%"))
          << "text (escaped): " << ::testing::PrintToString(text)
          << (blank_line ? " blank-line" : " line:%");
      // Every document is a piece of the text, in order, without overlap.
      std::size_t from = 0;
      for (const std::string& doc : got) {
        const std::size_t at = text.find(doc, from);
        ASSERT_NE(at, std::string::npos);
        from = at + doc.size();
      }
    }
  }
}

std::vector<std::int64_t> bytes_of(const std::string& s) {
  std::vector<std::int64_t> out;
  for (const char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

TEST(ByteDatasetWriter, ReadsBackThroughTheMegatronReader) {
  const test::TempDir dir;
  const std::string prefix = dir.at("corpus");
  std::mt19937_64 rng(11);
  std::vector<std::string> docs;
  for (int i = 0; i < 200; ++i) {
    std::string doc(1 + rng() % 300, '\0');
    for (char& c : doc) c = static_cast<char>(rng() % 256);  // any byte, NUL and 0xff too
    docs.push_back(doc);
  }
  {
    auto writer = ByteDatasetWriter::create(prefix);
    ASSERT_TRUE(writer.is_ok()) << writer.status().message();
    for (const std::string& doc : docs) ASSERT_TRUE(writer->add(doc).is_ok());
    ASSERT_TRUE(writer->commit().is_ok());
  }
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.is_ok()) << ds.status().message();
  EXPECT_EQ(ds->dtype(), TokenDtype::kUint8);
  ASSERT_EQ(ds->size(), static_cast<std::int64_t>(docs.size()));
  for (std::size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(ds->length(static_cast<std::int64_t>(i)), static_cast<std::int64_t>(docs[i].size()));
    EXPECT_EQ(ds->tokens(static_cast<std::int64_t>(i)), bytes_of(docs[i])) << "document " << i;
  }
  std::vector<std::int64_t> expected_index(docs.size() + 1);
  for (std::size_t j = 0; j < expected_index.size(); ++j) {
    expected_index[j] = static_cast<std::int64_t>(j);
  }
  EXPECT_EQ(ds->document_index(), expected_index);
  // Nothing but the pair is left in the directory.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 2);
}

TEST(ByteDatasetWriter, AnUncommittedWriterLeavesTheEarlierPair) {
  const test::TempDir dir;
  const std::string prefix = dir.at("corpus");
  {
    auto writer = ByteDatasetWriter::create(prefix);
    ASSERT_TRUE(writer.is_ok());
    ASSERT_TRUE(writer->add("old").is_ok());
    ASSERT_TRUE(writer->commit().is_ok());
  }
  {
    auto writer = ByteDatasetWriter::create(prefix);
    ASSERT_TRUE(writer.is_ok());
    ASSERT_TRUE(writer->add("a longer new document").is_ok());
    // Dropped before commit, as when a later input is refused.
  }
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.is_ok()) << ds.status().message();
  ASSERT_EQ(ds->size(), 1);
  EXPECT_EQ(ds->tokens(0), bytes_of("old"));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 2);
}

TEST(ByteDatasetWriter, ASecondWriterIntoTheSameDirectoryIsRefusedUntilTheFirstCommits) {
  const test::TempDir dir;
  auto first = ByteDatasetWriter::create(dir.at("a"));
  ASSERT_TRUE(first.is_ok());
  const auto second = ByteDatasetWriter::create(dir.at("b"));
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("another fulcrum preprocess"), std::string::npos);
  ASSERT_TRUE(first->add("x").is_ok());
  ASSERT_TRUE(first->commit().is_ok());
  EXPECT_TRUE(ByteDatasetWriter::create(dir.at("b")).is_ok());
}

TEST(ByteDatasetWriter, RefusesEmptyDocumentsAndBadOutputNames) {
  const test::TempDir dir;
  {
    auto writer = ByteDatasetWriter::create(dir.at("corpus"));
    ASSERT_TRUE(writer.is_ok());
    EXPECT_FALSE(writer->add("").is_ok());
  }
  EXPECT_FALSE(ByteDatasetWriter::create(dir.at()).is_ok());  // a directory
  EXPECT_FALSE(ByteDatasetWriter::create(dir.at("nowhere/corpus")).is_ok());
  EXPECT_FALSE(ByteDatasetWriter::create("").is_ok());
  fs::create_directory(dir.at("taken.idx"));
  const auto taken = ByteDatasetWriter::create(dir.at("taken"));
  ASSERT_FALSE(taken.is_ok());
  EXPECT_NE(taken.status().message().find("taken.idx"), std::string::npos);
}

}  // namespace
}  // namespace fulcrum::data
