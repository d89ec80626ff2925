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

}  // namespace
}  // namespace fulcrum::launch
