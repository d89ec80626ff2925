// The launcher's path checks: each mistake refused in one line naming the
// flag and the path, every usable path accepted, nothing created.
#include "launch/preflight.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace fulcrum::launch {
namespace {

namespace fs = std::filesystem;

class Preflight : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "fulcrum-preflight-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    file_ = (dir_ / "present.txt").string();
    std::ofstream(file_) << "x";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string at(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  std::string file_;
};

void expect_refused(const Status& s, const std::string& expected) {
  ASSERT_FALSE(s) << "accepted; expected: " << expected;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "not one line: " << s.message();
}

TEST_F(Preflight, OutputFileAcceptsNewAndExistingFilesAndCreatesNothing) {
  EXPECT_TRUE(check_output_file(at("new.bin"), "--save-params"));
  EXPECT_FALSE(fs::exists(at("new.bin")));
  EXPECT_TRUE(check_output_file(file_, "--save-params"));
}

TEST_F(Preflight, OutputFileRefusals) {
  expect_refused(check_output_file(at("no/dir/p.bin"), "--save-params"),
                 "cannot write --save-params " + at("no/dir/p.bin") + ": directory " +
                     at("no/dir") + " does not exist");
  expect_refused(check_output_file(dir_.string(), "--metrics"),
                 "--metrics " + dir_.string() + " is a directory");
  expect_refused(check_output_file(file_ + "/p.bin", "--save-params"), "does not exist");
  expect_refused(check_output_file("", "--metrics"), "--metrics is empty");
}

// An output written through another user's link lands where they chose
// (any file of this user's): refused, the link at the name itself or on
// the way to it; this user's own links are followed.
TEST_F(Preflight, OutputThroughAnotherUsersLinkIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a link to another user needs root";
  fs::create_symlink(file_, at("mine.jsonl"));
  fs::create_directory_symlink(dir_, at("via"));
  EXPECT_TRUE(check_output_file(at("mine.jsonl"), "--metrics"));
  EXPECT_TRUE(check_output_file(at("via/new.bin"), "--save-params"));
  ASSERT_EQ(::lchown(at("mine.jsonl").c_str(), 65534, 65534), 0);
  ASSERT_EQ(::lchown(at("via").c_str(), 65534, 65534), 0);
  expect_refused(check_output_file(at("mine.jsonl"), "--metrics"),
                 "--metrics " + at("mine.jsonl") + ": the symbolic link " + at("mine.jsonl") +
                     " on its path is owned by uid 65534");
  expect_refused(check_output_file(at("via/new.bin"), "--save-params"),
                 "the symbolic link " + at("via") + " on its path is owned by uid 65534");
}

// An existing output another user owns is theirs (in a group's or a
// sticky directory): refused, whichever flag names it.
TEST_F(Preflight, AnotherUsersOutputFileIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  ASSERT_EQ(::chown(file_.c_str(), 65534, 65534), 0);
  for (const char* what : {"--metrics", "--save-params"}) {
    expect_refused(check_output_file(file_, what),
                   std::string(what) + " " + file_ + " is owned by uid 65534");
  }
  ASSERT_EQ(::chown(file_.c_str(), 0, 0), 0);
  EXPECT_TRUE(check_output_file(file_, "--metrics"));
}

TEST_F(Preflight, InputFile) {
  EXPECT_TRUE(check_input_file(file_, "checkpoint", "fix it"));
  expect_refused(check_input_file(at("absent.ckpt"), "checkpoint", "give another"),
                 "checkpoint " + at("absent.ckpt") + " does not exist; give another");
  expect_refused(check_input_file(dir_.string(), "checkpoint", "give a file"),
                 "is not a regular file; give a file");
}

TEST_F(Preflight, OutputDirectoryMayExistOrBeCreatable) {
  EXPECT_TRUE(check_output_dir(dir_.string(), "train.checkpoint_dir"));
  EXPECT_TRUE(check_output_dir(at("a/b/c"), "train.checkpoint_dir"));
  EXPECT_FALSE(fs::exists(at("a")));
  expect_refused(check_output_dir(file_, "train.checkpoint_dir"),
                 "train.checkpoint_dir " + file_ + " exists and is not a directory");
  expect_refused(
      check_output_dir(file_ + "/ckpt", "train.checkpoint_dir"),
      "cannot create train.checkpoint_dir " + file_ + "/ckpt: " + file_ + " is not a directory");
  expect_refused(check_output_dir("", "train.checkpoint_dir"), "train.checkpoint_dir is empty");
}

// The bound, recounted by hand for a small model: v = 100, h = 8, f = 32,
// L = 2 layers, float32; rows of 64 tokens over CP 2, micro-batch 3.
TEST(MinimumMemory, CountsStateActivationsAndIndex) {
  MemoryInputs in;
  in.vocab_size = 100;
  in.hidden_size = 8;
  in.ffn_size = 32;
  in.num_layers = 2;
  in.seq_length = 64;
  in.micro_batch_size = 3;
  in.cp_size = 2;
  in.num_samples = 10;
  in.dtype_bytes = 4;
  const MemoryNeed need = minimum_memory(in);
  const double parameters = 2 * 100 * 8 + 2 * (4 * 8 * 8 + 2 * 8 * 32);  // 3,136
  EXPECT_DOUBLE_EQ(need.state_bytes, 4 * parameters * 4);
  EXPECT_DOUBLE_EQ(need.activation_bytes, 3 * 32 * (2 * 8 + 100) * 4.0);
  EXPECT_DOUBLE_EQ(need.index_bytes, 10 * 16.0);
  EXPECT_DOUBLE_EQ(need.total(), need.state_bytes + need.activation_bytes + need.index_bytes);
  // ffn_size 0 means 4 x hidden, as in the model.
  in.ffn_size = 0;
  EXPECT_DOUBLE_EQ(minimum_memory(in).state_bytes, need.state_bytes);
  // An odd row splits with the larger share counted.
  in.seq_length = 65;
  EXPECT_DOUBLE_EQ(minimum_memory(in).activation_bytes, 3 * 33 * (2 * 8 + 100) * 4.0);
}

TEST(MinimumMemory, RefusesOnlyWhatCannotFit) {
  MemoryNeed need;
  need.state_bytes = 1e9;
  need.activation_bytes = 2e9;
  need.index_bytes = 1e9;
  EXPECT_TRUE(check_memory(need, 4, 16e9));
  EXPECT_TRUE(check_memory(need, 4, 0));  // unknown host size: not refused
  const Status s = check_memory(need, 4, 15e9);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("4 ranks x"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("data.seq_length"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  // A quickstart-sized job fits on any machine that runs the tests.
  MemoryInputs small;
  small.vocab_size = 1024;
  small.hidden_size = 64;
  small.num_layers = 2;
  small.seq_length = 4096;
  small.micro_batch_size = 1;
  small.cp_size = 2;
  small.num_samples = 1024;
  EXPECT_LT(minimum_memory(small).total(), 16e6);
  EXPECT_GT(host_memory_bytes(), 64e6);
}

}  // namespace
}  // namespace fulcrum::launch
