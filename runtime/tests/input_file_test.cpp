// The one reader of users' files (host/input_file.h): every kind of path that
// is not a regular file is refused by what it is, without blocking, and the
// JSON nesting scan ignores brackets inside strings.
#include "host/input_file.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;

class ScratchDir {
 public:
  ScratchDir() {
    char pattern[] = "/tmp/fulcrum_input_file_XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::FILE* f = std::fopen(p.c_str(), "wb");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const InputFileRules kRules{"the file", "give a file", 1024};

std::string refusal(const std::string& path, const InputFileRules& rules = kRules) {
  Result<std::string> read = read_input_file(path, rules);
  EXPECT_FALSE(read.is_ok()) << path;
  return read ? std::string() : read.status().message();
}

TEST(InputFile, ReadsARegularFileWhole) {
  ScratchDir dir;
  const std::string text(1000, 'x');
  Result<std::string> read = read_input_file(dir.file("a", text), kRules);
  ASSERT_TRUE(read.is_ok()) << read.status().message();
  EXPECT_EQ(read.value(), text);
}

TEST(InputFile, RefusesEveryOtherKindByName) {
  ScratchDir dir;
  EXPECT_EQ(refusal(dir.path()), "the file is a directory, not a file; give a file");

  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(refusal(fifo), "the file is a FIFO (named pipe), not a file; give a file");
  // No writer ever comes: the open must not wait for one.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  const std::string socket_path = dir.path() + "/socket";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  socket_path.copy(address.sun_path, sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(refusal(socket_path), "the file is a socket, not a file; give a file");
  ::close(fd);

  EXPECT_EQ(refusal("/dev/zero"), "the file is a character device, not a file; give a file");
  EXPECT_EQ(refusal("/proc/self/status"),
            "the file is a /proc or /sys file, not a file of data; give a file");
  EXPECT_EQ(refusal(dir.path() + "/absent"), "the file does not exist; give a file");

  const std::string loop = dir.path() + "/loop";
  fs::create_symlink(loop, loop);
  EXPECT_EQ(refusal(loop), "the file is a symbolic link loop; give a file");
  const std::string plain = dir.file("plain", "x");
  EXPECT_NE(refusal(plain + "/below").find("a component of the path is not a directory"),
            std::string::npos);
  EXPECT_EQ(refusal(""), "the file is an empty path; give a file");
}

TEST(InputFile, RefusesAFilePastTheBoundBeforeReadingIt) {
  ScratchDir dir;
  const std::string big = dir.file("big", std::string(1025, 'x'));
  EXPECT_EQ(refusal(big), "the file holds 1025 bytes, more than the 1024 allowed; give a file");
  EXPECT_TRUE(read_input_file(dir.file("fits", std::string(1024, 'x')), kRules).is_ok());
}

TEST(InputFile, AbsentIsNotFoundAndTheRestInvalid) {
  ScratchDir dir;
  EXPECT_EQ(open_input_file(dir.path() + "/absent", kRules).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(open_input_file(dir.path(), kRules).status().code(), StatusCode::kInvalidArgument);
}

TEST(JsonNesting, CountsBracketsOutsideStringsOnly) {
  std::size_t at = 0;
  EXPECT_TRUE(json_nesting_within("[[1], {\"a\": [2]}]", 3, at));
  EXPECT_FALSE(json_nesting_within("[[[1]]]", 2, at));
  EXPECT_EQ(at, 2u);
  // Brackets in strings, escaped quotes included, do not nest.
  EXPECT_TRUE(json_nesting_within("[\"[[[[\", \"\\\"[[[[\"]", 1, at));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(json_nesting_within(deep, 64, at));
  EXPECT_EQ(at, 64u);
}

// nlohmann::json stops at a NUL byte and skips a byte order mark; the
// readers refuse both before parsing.
TEST(JsonText, NulAndByteOrderMarkAreRefused) {
  EXPECT_EQ(json_text_refusal("[100, 200]"), "");
  EXPECT_EQ(json_text_refusal(""), "");
  EXPECT_EQ(json_text_refusal(std::string("[100,200]\0garbage{{", 19)),
            "holds a NUL byte at byte 9, so it is not JSON text");
  EXPECT_EQ(json_text_refusal(std::string("\0", 1)),
            "holds a NUL byte at byte 0, so it is not JSON text");
  EXPECT_NE(json_text_refusal("\xEF\xBB\xBF[1]").find("byte order mark"), std::string::npos);
  // A BOM anywhere else is a character inside a string or an error the parser reports.
  EXPECT_EQ(json_text_refusal("[\"\xEF\xBB\xBF\"]"), "");
}

}  // namespace
}  // namespace fulcrum::host
