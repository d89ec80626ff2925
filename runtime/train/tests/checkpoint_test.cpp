// The checkpoint container: its byte layout, round trips, and that every
// truncation, every flipped bit and every malformed table is refused with one
// line naming the file. No LibTorch.
#include "train/checkpoint.h"
#include "tests/test_support.h"
#include "train/job_schema.h"
#include "train/options.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fulcrum::train {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename T>
T load(const std::string& bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::string& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Recomputes both CRCs after a deliberate edit, so a test can reach the
// checks behind them.
void reseal(std::string& bytes) {
  store<std::uint64_t>(bytes, 40, bytes.size() - kCheckpointHeaderSize);
  store<std::uint32_t>(bytes, 48, crc32(std::string_view(bytes).substr(kCheckpointHeaderSize)));
  store<std::uint32_t>(bytes, 52, crc32(std::string_view(bytes).substr(0, 52)));
}

Checkpoint sample(std::int64_t step = 7) {
  Checkpoint c;
  c.header.step = step;
  c.header.dp_size = 2;
  c.header.cp_size = 4;
  c.header.config_fingerprint = 0x0123456789abcdefULL;
  c.add("config", "model.hidden_size=32\n");
  c.add("empty", "");
  c.add("binary", std::string("\0\xff\x01\x80", 4));
  c.add_i64s("loader/position", {3, -1});
  return c;
}

std::string decode_error(std::string_view bytes) {
  Result<Checkpoint> c = decode_checkpoint(bytes, "F.ckpt");
  if (c) return "";
  const std::string message = c.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find("F.ckpt"), std::string::npos) << "does not name the file: " << message;
  return message;
}

TEST(CheckpointChecksums, KnownValues) {
  // The standard check values of CRC-32/ISO-HDLC and FNV-1a 64.
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc32(""), 0u);
  EXPECT_EQ(crc32("56789", crc32("1234")), 0xCBF43926u);
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
}

TEST(CheckpointContainer, RoundTripKeepsHeaderAndBlobsInOrder) {
  const Checkpoint c = sample();
  Result<Checkpoint> back = decode_checkpoint(encode_checkpoint(c), "F.ckpt");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->header.version, kCheckpointFormatVersion);
  EXPECT_EQ(back->header.step, 7);
  EXPECT_EQ(back->header.dp_size, 2);
  EXPECT_EQ(back->header.cp_size, 4);
  EXPECT_EQ(back->header.config_fingerprint, 0x0123456789abcdefULL);
  EXPECT_EQ(back->blobs(), c.blobs());
  Result<std::vector<std::int64_t>> position = back->i64s("loader/position", 2, "F.ckpt");
  ASSERT_TRUE(position);
  EXPECT_EQ(*position, (std::vector<std::int64_t>{3, -1}));
  EXPECT_FALSE(back->i64s("loader/position", 3, "F.ckpt"));
  EXPECT_FALSE(back->i64s("missing", 1, "F.ckpt"));
  EXPECT_EQ(back->find("missing"), nullptr);
}

TEST(CheckpointContainer, ByteLayoutIsTheDocumentedOne) {
  const std::string bytes = encode_checkpoint(sample());
  ASSERT_GT(bytes.size(), kCheckpointHeaderSize);
  EXPECT_EQ(bytes.substr(0, 8), "FULCCKPT");
  EXPECT_EQ(load<std::uint32_t>(bytes, 8), kCheckpointFormatVersion);
  EXPECT_EQ(load<std::uint32_t>(bytes, 12), 0u);
  EXPECT_EQ(load<std::int64_t>(bytes, 16), 7);
  EXPECT_EQ(load<std::int32_t>(bytes, 24), 2);
  EXPECT_EQ(load<std::int32_t>(bytes, 28), 4);
  EXPECT_EQ(load<std::uint64_t>(bytes, 32), 0x0123456789abcdefULL);
  EXPECT_EQ(load<std::uint64_t>(bytes, 40), bytes.size() - kCheckpointHeaderSize);
  EXPECT_EQ(load<std::uint32_t>(bytes, 48), crc32(std::string_view(bytes).substr(56)));
  EXPECT_EQ(load<std::uint32_t>(bytes, 52), crc32(std::string_view(bytes).substr(0, 52)));
  // Payload: blob count, then the first blob "config".
  EXPECT_EQ(load<std::uint32_t>(bytes, 56), 4u);
  EXPECT_EQ(load<std::uint32_t>(bytes, 60), 6u);
  EXPECT_EQ(bytes.substr(64, 6), "config");
  EXPECT_EQ(load<std::uint64_t>(bytes, 70), 21u);
}

TEST(CheckpointContainer, EveryTruncationIsRefusedAsTruncated) {
  const std::string bytes = encode_checkpoint(sample());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string message = decode_error(std::string_view(bytes).substr(0, n));
    EXPECT_NE(message.find("truncated"), std::string::npos) << "length " << n << ": " << message;
  }
}

TEST(CheckpointContainer, EveryFlippedBitIsRefused) {
  const std::string bytes = encode_checkpoint(sample());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      const std::string message = decode_error(bad);
      ASSERT_FALSE(message.empty()) << "byte " << i << " bit " << bit << " went unnoticed";
      const char* expected = i < 8                       ? "not a fulcrum checkpoint"
                             : i < kCheckpointHeaderSize ? "corrupt header"
                                                         : "payload CRC-32";
      EXPECT_NE(message.find(expected), std::string::npos)
          << "byte " << i << " bit " << bit << ": " << message;
    }
  }
}

TEST(CheckpointContainer, TrailingBytesForeignFilesAndOtherVersionsAreRefused) {
  const std::string bytes = encode_checkpoint(sample());
  EXPECT_NE(decode_error(bytes + "x").find("1 unexpected bytes after"), std::string::npos);
  EXPECT_NE(decode_error("GIF89a....").find("not a fulcrum checkpoint"), std::string::npos);

  std::string newer = bytes;
  store<std::uint32_t>(newer, 8, 2);
  EXPECT_NE(decode_error(newer).find("unknown format version 2"), std::string::npos);
  reseal(newer);  // a well-formed version-2 file
  EXPECT_NE(decode_error(newer).find("format version 2; this build reads version 1"),
            std::string::npos);

  std::string impossible = bytes;
  store<std::int32_t>(impossible, 24, 0);
  reseal(impossible);
  EXPECT_NE(decode_error(impossible).find("impossible header"), std::string::npos);
}

// The header alone judges a file's length, so that a reader refuses a file
// longer than its payload (a sparse tail of gigabytes) before reading it.
TEST(CheckpointContainer, TheHeaderAloneJudgesTheFilesLength) {
  const std::string bytes = encode_checkpoint(sample(3));
  const std::string_view head(bytes.data(), kCheckpointHeaderSize);
  Result<CheckpointHeader> h = decode_checkpoint_header(head, bytes.size(), "f");
  ASSERT_TRUE(h) << h.status().message();
  EXPECT_EQ(h->step, 3);
  EXPECT_EQ(h->payload_size, bytes.size() - kCheckpointHeaderSize);
  const std::uint64_t tail = std::uint64_t{3} << 30;
  Result<CheckpointHeader> longer = decode_checkpoint_header(head, bytes.size() + tail, "f");
  ASSERT_FALSE(longer);
  EXPECT_NE(longer.status().message().find("checkpoint f has " + std::to_string(tail) +
                                           " unexpected bytes after its"),
            std::string::npos)
      << longer.status().message();
  Result<CheckpointHeader> shorter = decode_checkpoint_header(head, bytes.size() - 1, "f");
  ASSERT_FALSE(shorter);
  EXPECT_NE(shorter.status().message().find("is truncated"), std::string::npos);
  EXPECT_FALSE(decode_checkpoint_header(head.substr(0, 10), bytes.size(), "f"));
  std::string flipped(head);
  flipped[20] ^= 1;
  EXPECT_FALSE(decode_checkpoint_header(flipped, bytes.size(), "f"));
}

TEST(CheckpointContainer, MalformedBlobTablesAreRefusedEvenWithGoodChecksums) {
  const std::string bytes = encode_checkpoint(sample());
  // Blob 0's data length claims more than the payload holds.
  std::string past = bytes;
  store<std::uint64_t>(past, 70, 1u << 20);
  reseal(past);
  EXPECT_NE(decode_error(past).find("runs past the payload"), std::string::npos);
  // More blobs announced than present.
  std::string count = bytes;
  store<std::uint32_t>(count, 56, 5);
  reseal(count);
  EXPECT_NE(decode_error(count).find("malformed blob table"), std::string::npos);
  // Fewer announced: bytes left after the last one.
  std::string fewer = bytes;
  store<std::uint32_t>(fewer, 56, 3);
  reseal(fewer);
  EXPECT_NE(decode_error(fewer).find("after the last blob"), std::string::npos);
  // A zero-length name.
  std::string unnamed = bytes;
  store<std::uint32_t>(unnamed, 60, 0);
  reseal(unnamed);
  EXPECT_NE(decode_error(unnamed).find("bad name"), std::string::npos);
  // The same name twice: rename "binary" (6 bytes) to "config".
  std::string twice = bytes;
  const auto at = twice.find("binary");
  ASSERT_NE(at, std::string::npos);
  twice.replace(at, 6, "config");
  reseal(twice);
  EXPECT_NE(decode_error(twice).find("appears twice"), std::string::npos);
}

TEST(CheckpointContainer, AddRefusesDuplicateAndBadNames) {
  Checkpoint c;
  c.add("a", "1");
  EXPECT_THROW(c.add("a", "2"), std::logic_error);
  EXPECT_THROW(c.add("", "2"), std::logic_error);
  EXPECT_THROW(c.add(std::string(256, 'n'), "2"), std::logic_error);
}

TEST(CheckpointTensorBlobs, RoundTripAndEveryMismatchRefused) {
  TensorBlob t;
  t.dtype = BlobDtype::kFloat64;
  t.shape = {2, 3};
  const double values[6] = {1.0, -0.0, 1e-300, 3.5, -2.25, 0.1};
  t.data.assign(reinterpret_cast<const char*>(values), sizeof(values));
  const std::string bytes = encode_tensor_blob(t);
  Result<TensorBlob> back = decode_tensor_blob(bytes, "model/w", "F.ckpt");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->dtype, t.dtype);
  EXPECT_EQ(back->shape, t.shape);
  EXPECT_EQ(back->data, t.data);

  TensorBlob scalar;  // zero dimensions: one element
  scalar.dtype = BlobDtype::kUint8;
  scalar.data = "x";
  EXPECT_TRUE(decode_tensor_blob(encode_tensor_blob(scalar), "s", "F.ckpt"));

  auto error = [](const std::string& b) {
    Result<TensorBlob> r = decode_tensor_blob(b, "model/w", "F.ckpt");
    EXPECT_FALSE(r);
    const std::string m = r ? "" : r.status().message();
    EXPECT_NE(m.find("'model/w'"), std::string::npos) << m;
    EXPECT_NE(m.find("F.ckpt"), std::string::npos) << m;
    return m;
  };
  EXPECT_NE(error(bytes.substr(0, bytes.size() - 1)).find("data bytes"), std::string::npos);
  EXPECT_NE(error(bytes + "x").find("data bytes"), std::string::npos);
  EXPECT_NE(error("").find("too short"), std::string::npos);
  std::string dtype = bytes;
  dtype[0] = 9;
  EXPECT_NE(error(dtype).find("unknown dtype"), std::string::npos);
  std::string dims = bytes;
  dims[1] = 9;
  EXPECT_NE(error(dims).find("dimensions"), std::string::npos);
  std::string negative = bytes;
  store<std::int64_t>(negative, 2, -2);
  EXPECT_NE(error(negative).find("impossible dimension"), std::string::npos);
  std::string huge = bytes;
  store<std::int64_t>(huge, 2, std::int64_t{1} << 62);
  EXPECT_NE(error(huge).find("impossible dimension"), std::string::npos);
}

TEST(CheckpointFiles, NamesAndTheirSteps) {
  EXPECT_EQ(checkpoint_file_name(42), "step-00000042.ckpt");
  EXPECT_EQ(checkpoint_file_name(123456789), "step-123456789.ckpt");
  EXPECT_EQ(checkpoint_step_of("step-00000042.ckpt"), 42);
  EXPECT_EQ(checkpoint_step_of("step-123456789.ckpt"), 123456789);
  EXPECT_FALSE(checkpoint_step_of(".step-00000042.ckpt.tmp"));
  EXPECT_FALSE(checkpoint_step_of("step-.ckpt"));
  EXPECT_FALSE(checkpoint_step_of("step-12a.ckpt"));
  EXPECT_FALSE(checkpoint_step_of("step--1.ckpt"));
  EXPECT_FALSE(checkpoint_step_of("step-99999999999999999999.ckpt"));
  EXPECT_FALSE(checkpoint_step_of("notes.txt"));
}

TEST(CheckpointFiles, SaveWritesAtomicallyAndKeepsTheNewest) {
  test::TempDir dir("fulcrum_ckpt");
  const std::string ckpts = dir.at("run/ckpt");  // created on demand
  // A temporary file left by a writer that crashed.
  fs::create_directories(ckpts);
  write_all(ckpts + "/.step-00000009.ckpt.tmp", "half");
  write_all(ckpts + "/notes.txt", "the user's");
  for (std::int64_t step = 1; step <= 5; ++step) {
    Result<std::string> path = save_checkpoint(ckpts, sample(step), 2);
    ASSERT_TRUE(path) << path.status().message();
    EXPECT_EQ(*path, ckpts + "/" + checkpoint_file_name(step));
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ckpts)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"notes.txt", "step-00000004.ckpt", "step-00000005.ckpt"}));
  Result<Checkpoint> back = read_checkpoint(ckpts + "/step-00000005.ckpt");
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->header.step, 5);
  EXPECT_EQ(back->blobs(), sample(5).blobs());

  // Files of later steps (an abandoned attempt) are not pruned away.
  ASSERT_TRUE(save_checkpoint(ckpts, sample(2), 2));
  ASSERT_TRUE(save_checkpoint(ckpts, sample(3), 2));
  Result<std::vector<CheckpointFile>> files = list_checkpoints(ckpts);
  ASSERT_TRUE(files);
  std::vector<std::int64_t> steps;
  for (const CheckpointFile& f : *files) steps.push_back(f.step);
  EXPECT_EQ(steps, (std::vector<std::int64_t>{5, 4, 3, 2}));
}

// Keeping the newest prunes only what this job could have written: a
// directory, a link or another user's file named like an older checkpoint
// (planted in a group's or a sticky directory, or the user's own) is left
// where it is, and the run goes on; it never deletes another user's file.
TEST(CheckpointFiles, PruningLeavesWhatItDidNotWrite) {
  test::TempDir dir("fulcrum_ckpt");
  const std::string d = dir.at("ck");
  ASSERT_TRUE(prepare_checkpoint_dir(d));
  fs::create_directories(d + "/step-00000001.ckpt/inside");  // not empty
  write_all(dir.at("victim"), "keep");
  ASSERT_EQ(::symlink(dir.at("victim").c_str(), (d + "/step-00000002.ckpt").c_str()), 0);
  fs::create_directories(d + "/.step-00000003.ckpt.tmp/inside");
  const bool root = ::geteuid() == 0;
  if (root) {
    write_all(d + "/step-00000004.ckpt", "theirs");
    ASSERT_EQ(::chown((d + "/step-00000004.ckpt").c_str(), 65534, 65534), 0);
    write_all(d + "/.step-00000004.ckpt.tmp", "theirs too");
    ASSERT_EQ(::chown((d + "/.step-00000004.ckpt.tmp").c_str(), 65534, 65534), 0);
  }
  for (std::int64_t step = 5; step <= 7; ++step) {
    Result<std::string> path = save_checkpoint(d, sample(step), 1);
    ASSERT_TRUE(path) << path.status().message();
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  std::vector<std::string> expected = {".step-00000003.ckpt.tmp", "step-00000001.ckpt",
                                       "step-00000002.ckpt", "step-00000007.ckpt"};
  if (root) {
    expected.insert(expected.begin() + 1, ".step-00000004.ckpt.tmp");
    expected.insert(expected.end() - 1, "step-00000004.ckpt");
  }
  EXPECT_EQ(names, expected);
  std::ifstream victim(dir.at("victim"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(victim), {}), "keep");
}

TEST(CheckpointFiles, AtomicWriteFailsCleanly) {
  test::TempDir dir("fulcrum_ckpt");
  const Status s = write_file_atomically(dir.at("missing/x.ckpt"), "bytes");
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s.message();
  EXPECT_TRUE(fs::is_empty(dir.at()));
  ASSERT_TRUE(write_file_atomically(dir.at("x.ckpt"), "bytes"));
  EXPECT_EQ(read_all(dir.at("x.ckpt")), "bytes");
  ASSERT_TRUE(write_file_atomically(dir.at("x.ckpt"), "other"));
  EXPECT_EQ(read_all(dir.at("x.ckpt")), "other");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.at())) ++files;
  EXPECT_EQ(files, 1u) << "a temporary file stayed behind";
}

// The null device, named to discard the output (--save-params /dev/null),
// takes the bytes and stays a device: a rename over it would leave a
// regular file in its place, for every process, when the user is root. A
// node of the null device made here stands in for /dev/null itself, which a
// failing test must not replace.
TEST(CheckpointFiles, AtomicWriteLeavesTheNullDeviceInPlace) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a device node needs root";
  struct stat null_device {};
  ASSERT_EQ(::stat("/dev/null", &null_device), 0);
  test::TempDir dir("fulcrum_ckpt");
  const std::string node = dir.at("null");
  ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, null_device.st_rdev), 0);
  ASSERT_TRUE(write_file_atomically(node, "parameters"));
  struct stat after {};
  ASSERT_EQ(::lstat(node.c_str(), &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, null_device.st_rdev);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.at())) ++files;
  EXPECT_EQ(files, 1u) << "a temporary file stayed behind";
}

// Another user who can write in the checkpoint directory plants a symbolic
// link where the temporary file goes: the write must not follow it into the
// file it names (which the running user may own), only replace it.
TEST(CheckpointFiles, AtomicWriteDoesNotFollowALinkPlantedAtItsTemporaryName) {
  test::TempDir dir("fulcrum_ckpt");
  write_all(dir.at("victim"), "the user's own file");
  fs::create_symlink(dir.at("victim"), dir.at(".x.ckpt.tmp"));
  ASSERT_TRUE(write_file_atomically(dir.at("x.ckpt"), "checkpoint bytes"));
  EXPECT_EQ(read_all(dir.at("victim")), "the user's own file");
  EXPECT_EQ(read_all(dir.at("x.ckpt")), "checkpoint bytes");
  EXPECT_FALSE(fs::is_symlink(dir.at("x.ckpt")));
}

TEST(CheckpointFiles, PrepareDirCreatesOrRefuses) {
  test::TempDir dir("fulcrum_ckpt");
  EXPECT_TRUE(prepare_checkpoint_dir(dir.at("a/b")));
  EXPECT_TRUE(fs::is_directory(dir.at("a/b")));
  write_all(dir.at("file"), "x");
  const Status s = prepare_checkpoint_dir(dir.at("file"));
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("train.checkpoint_dir"), std::string::npos) << s.message();
}

TEST(CheckpointFiles, LatestGoodSkipsCorruptAndTruncatedNewerOnes) {
  test::TempDir dir("fulcrum_ckpt");
  const std::string d = dir.at();
  Result<std::optional<ResumePoint>> none = latest_good_checkpoint(dir.at("absent"));
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());

  ASSERT_TRUE(save_checkpoint(d, sample(2), 3));
  ASSERT_TRUE(save_checkpoint(d, sample(4), 3));
  ASSERT_TRUE(save_checkpoint(d, sample(6), 3));
  const std::string four = d + "/step-00000004.ckpt";
  const std::string six = d + "/step-00000006.ckpt";
  std::string bytes = read_all(six);
  bytes[bytes.size() - 3] ^= 0x10;
  write_all(six, bytes);
  write_all(four, read_all(four).substr(0, 100));

  Result<std::optional<ResumePoint>> point = latest_good_checkpoint(d);
  ASSERT_TRUE(point) << point.status().message();
  ASSERT_TRUE(point->has_value());
  EXPECT_EQ((*point)->path, d + "/step-00000002.ckpt");
  EXPECT_EQ((*point)->checkpoint.header.step, 2);
  ASSERT_EQ((*point)->refused.size(), 2u);
  EXPECT_NE((*point)->refused[0].find(six), std::string::npos);
  EXPECT_NE((*point)->refused[0].find("payload CRC-32"), std::string::npos);
  EXPECT_NE((*point)->refused[1].find(four), std::string::npos);
  EXPECT_NE((*point)->refused[1].find("truncated"), std::string::npos);

  write_all(d + "/step-00000002.ckpt", "");
  Result<std::optional<ResumePoint>> nothing = latest_good_checkpoint(d);
  ASSERT_FALSE(nothing);
  EXPECT_NE(nothing.status().message().find("none of the 3 checkpoints"), std::string::npos)
      << nothing.status().message();
}

TEST(CheckpointFiles, ARenamedCheckpointIsRefused) {
  test::TempDir dir("fulcrum_ckpt");
  ASSERT_TRUE(save_checkpoint(dir.at(), sample(2), 2));
  fs::copy_file(dir.at("step-00000002.ckpt"), dir.at("step-00000006.ckpt"));
  Result<Checkpoint> c = read_checkpoint(dir.at("step-00000006.ckpt"));
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("its name says step 6"), std::string::npos);
  Result<Checkpoint> missing = read_checkpoint(dir.at("nope.ckpt"));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("nope.ckpt"), std::string::npos);
}

// A directory any user may write (without the sticky bit) lets them delete
// or replace the job's checkpoints: refused before the job writes there.
TEST(CheckpointFiles, ADirectoryAnyUserMayWriteIsRefused) {
  test::TempDir dir("fulcrum_ckpt");
  const std::string open_dir = dir.at("open");
  ASSERT_TRUE(prepare_checkpoint_dir(open_dir));
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  const Status s = prepare_checkpoint_dir(open_dir);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("train.checkpoint_dir " + open_dir + " has mode 0777"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("chmod o-w " + open_dir), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);  // sticky, like /tmp: others cannot move ours
  EXPECT_TRUE(prepare_checkpoint_dir(open_dir));
  ASSERT_EQ(::chmod(open_dir.c_str(), 0775), 0);  // a group's shared directory
  EXPECT_TRUE(prepare_checkpoint_dir(open_dir));
  // A directory it makes is never wider than 0755, whatever the umask.
  const mode_t umask_before = ::umask(0);
  const Status made = prepare_checkpoint_dir(dir.at("new/deeper"));
  ::umask(umask_before);
  ASSERT_TRUE(made) << made.message();
  struct stat st {};
  ASSERT_EQ(::stat(dir.at("new/deeper").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::stat(dir.at("new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

// A directory another user owns is theirs to empty: the sticky bit keeps
// others from moving our files, never the directory's owner; and a link
// another user owns may be repointed by them. Both refused, links resolved;
// a group's shared directory stays allowed (read_checkpoint guards it) when
// this user is in the group.
TEST(CheckpointFiles, ADirectoryOrLinkAnotherUserControlsIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  test::TempDir dir("fulcrum_ckpt");
  const std::string theirs = dir.at("theirs");
  ASSERT_TRUE(prepare_checkpoint_dir(theirs));
  ASSERT_EQ(::chmod(theirs.c_str(), 01777), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  const std::string via_link = dir.at("mine");
  ASSERT_EQ(::symlink(theirs.c_str(), via_link.c_str()), 0);
  for (const std::string& named : {theirs, via_link}) {
    const Status s = prepare_checkpoint_dir(named);
    ASSERT_FALSE(s) << named;
    EXPECT_NE(s.message().find("train.checkpoint_dir " + named), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("owned by uid 65534"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
  ASSERT_EQ(::chmod(theirs.c_str(), 0755), 0);  // only its owner (and root) may write
  EXPECT_FALSE(prepare_checkpoint_dir(theirs));
  ASSERT_EQ(::chmod(theirs.c_str(), 0775), 0);  // shared with a group this user is not in
  EXPECT_FALSE(prepare_checkpoint_dir(theirs));
  ASSERT_EQ(::chown(theirs.c_str(), 65534, ::getegid()), 0);  // a group's shared directory
  EXPECT_TRUE(prepare_checkpoint_dir(theirs));
  // Our own directory behind a link another user owns (in /tmp, say).
  const std::string own = dir.at("own");
  ASSERT_TRUE(prepare_checkpoint_dir(own));
  const std::string planted = dir.at("planted");
  ASSERT_EQ(::symlink(own.c_str(), planted.c_str()), 0);
  ASSERT_EQ(::lchown(planted.c_str(), 65534, 65534), 0);
  const Status s = prepare_checkpoint_dir(planted);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("symbolic link " + planted + " on its path is owned by uid 65534"),
            std::string::npos)
      << s.message();
  ASSERT_EQ(::lchown(planted.c_str(), 0, 0), 0);
  EXPECT_TRUE(prepare_checkpoint_dir(planted));
}

// A directory above the checkpoint directory that another user could
// change lets them rename the run's directory away and put one of theirs in
// its place: refused when another user owns it (unless it is a group's
// shared one), sticky bit or not, and when every user may write it without
// the sticky bit; links are resolved first, and every level is examined.
TEST(CheckpointFiles, ADirectoryAboveItAnotherUserCouldChangeIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  test::TempDir dir("fulcrum_ckpt");
  const std::string above = dir.at("above");
  const std::string ck = above + "/mid/ck";
  ASSERT_TRUE(prepare_checkpoint_dir(ck));
  const std::string via_link = dir.at("link");
  ASSERT_EQ(::symlink(ck.c_str(), via_link.c_str()), 0);
  const auto refused = [&](const std::string& named, const std::string& why) {
    const Status s = prepare_checkpoint_dir(named);
    ASSERT_FALSE(s) << named << " " << why;
    EXPECT_NE(s.message().find("train.checkpoint_dir " + named + ": the directory " + why),
              std::string::npos)
        << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  };
  ASSERT_EQ(::chown(above.c_str(), 65534, 65534), 0);
  for (const mode_t mode : {0755, 01777, 0777}) {
    ASSERT_EQ(::chmod(above.c_str(), mode), 0);
    for (const std::string& named : {ck, via_link}) {
      refused(named, above + " above it is owned by uid 65534");
    }
  }
  ASSERT_EQ(::chmod(above.c_str(), 0775), 0);  // shared with a group this user is not in
  refused(ck, above + " above it is owned by uid 65534");
  ASSERT_EQ(::chown(above.c_str(), 65534, ::getegid()), 0);  // a group's shared directory
  EXPECT_TRUE(prepare_checkpoint_dir(ck));
  ASSERT_EQ(::chown(above.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(above.c_str(), 0777), 0);
  refused(ck, above + " above it has mode 0777");
  ASSERT_EQ(::chmod(above.c_str(), 01777), 0);  // sticky, like /tmp
  EXPECT_TRUE(prepare_checkpoint_dir(ck));
  // The level right above it, with the one above that trusted again.
  ASSERT_EQ(::chmod(above.c_str(), 0755), 0);
  ASSERT_EQ(::chown((above + "/mid").c_str(), 65534, 65534), 0);
  refused(via_link, above + "/mid above it is owned by uid 65534");
  ASSERT_EQ(::chown((above + "/mid").c_str(), 0, 0), 0);
  EXPECT_TRUE(prepare_checkpoint_dir(via_link));
}

// A link of this user's is only as safe as the directories holding it:
// where another user may write (or owns) the directory, they may move the
// link away and put one of theirs in its place. Refused, the link on the
// path as written or reached inside another link's target; and no
// directory is made through another user's link before the refusal.
TEST(CheckpointFiles, ALinkInADirectoryAnotherUserCouldChangeIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  test::TempDir dir("fulcrum_ckpt");
  const std::string ck = dir.at("mine/ck");
  ASSERT_TRUE(prepare_checkpoint_dir(ck));
  const std::string scratch = dir.at("scratch");
  ASSERT_EQ(::mkdir(scratch.c_str(), 0755), 0);
  const std::string link = scratch + "/ck";
  ASSERT_EQ(::symlink(ck.c_str(), link.c_str()), 0);
  const std::string outer = dir.at("outer");  // outer -> scratch/ck -> mine/ck
  ASSERT_EQ(::symlink(link.c_str(), outer.c_str()), 0);
  EXPECT_TRUE(prepare_checkpoint_dir(link));
  EXPECT_TRUE(prepare_checkpoint_dir(outer));
  const auto refused = [&](const std::string& named, const std::string& why) {
    const Status s = prepare_checkpoint_dir(named);
    ASSERT_FALSE(s) << named << " " << why;
    EXPECT_NE(s.message().find("train.checkpoint_dir " + named + ": the directory " + scratch +
                               " above the symbolic link " + link + " on its path " + why),
              std::string::npos)
        << s.message();
  };
  ASSERT_EQ(::chmod(scratch.c_str(), 0777), 0);
  for (const std::string& named : {link, outer}) refused(named, "has mode 0777");
  ASSERT_EQ(::chmod(scratch.c_str(), 01777), 0);  // sticky and this user's: the link stays
  EXPECT_TRUE(prepare_checkpoint_dir(outer));
  ASSERT_EQ(::chmod(scratch.c_str(), 0755), 0);
  ASSERT_EQ(::chown(scratch.c_str(), 65534, 65534), 0);
  for (const std::string& named : {link, outer}) refused(named, "is owned by uid 65534");
  ASSERT_EQ(::chown(scratch.c_str(), 0, 0), 0);
  EXPECT_TRUE(prepare_checkpoint_dir(outer));

  // A directory still to be made, behind another user's link: refused
  // before anything is made where the link points.
  const std::string victim = dir.at("victim");
  ASSERT_EQ(::mkdir(victim.c_str(), 0755), 0);
  const std::string planted = dir.at("planted");
  ASSERT_EQ(::symlink(victim.c_str(), planted.c_str()), 0);
  ASSERT_EQ(::lchown(planted.c_str(), 65534, 65534), 0);
  EXPECT_FALSE(prepare_checkpoint_dir(planted + "/a/b"));
  EXPECT_FALSE(fs::exists(victim + "/a"));
}

// A checkpoint another user owns could have been planted (a group's or a
// sticky directory lets them add files): never resumed from.
TEST(CheckpointFiles, ACheckpointAnotherUserOwnsIsNotResumedFrom) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  test::TempDir dir("fulcrum_ckpt");
  const std::string d = dir.at();
  ASSERT_TRUE(save_checkpoint(d, sample(2), 3));
  ASSERT_TRUE(save_checkpoint(d, sample(4), 3));
  const std::string four = d + "/step-00000004.ckpt";
  ASSERT_EQ(::chown(four.c_str(), 65534, 65534), 0);
  Result<Checkpoint> planted = read_checkpoint(four);
  ASSERT_FALSE(planted);
  EXPECT_NE(planted.status().message().find("checkpoint " + four + " is owned by uid 65534"),
            std::string::npos)
      << planted.status().message();
  EXPECT_EQ(planted.status().message().find('\n'), std::string::npos);
  Result<std::optional<ResumePoint>> point = latest_good_checkpoint(d);
  ASSERT_TRUE(point) << point.status().message();
  ASSERT_TRUE(point->has_value());
  EXPECT_EQ((*point)->checkpoint.header.step, 2);
  ASSERT_EQ((*point)->refused.size(), 1u);
  EXPECT_NE((*point)->refused[0].find("owned by uid 65534"), std::string::npos);
}

// A link another user planted, named like a newer checkpoint, that points
// at a checkpoint of this user's (another run's, in another directory):
// the file is this user's, but which one is resumed was the other user's
// choice. Refused like their own file; a link this user made is followed.
TEST(CheckpointFiles, ALinkAnotherUserOwnsIsNotResumedThrough) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a link to another user needs root";
  test::TempDir dir("fulcrum_ckpt");
  const std::string other_run = dir.at("other_run");
  const std::string d = dir.at("ck");
  ASSERT_TRUE(save_checkpoint(other_run, sample(4), 3));
  ASSERT_TRUE(save_checkpoint(d, sample(2), 3));
  const std::string link = d + "/step-00000004.ckpt";
  ASSERT_EQ(::symlink((other_run + "/step-00000004.ckpt").c_str(), link.c_str()), 0);
  ASSERT_EQ(::lchown(link.c_str(), 65534, 65534), 0);
  Result<Checkpoint> planted = read_checkpoint(link);
  ASSERT_FALSE(planted);
  EXPECT_NE(planted.status().message().find("checkpoint " + link +
                                            " is a symbolic link owned by uid 65534"),
            std::string::npos)
      << planted.status().message();
  Result<std::optional<ResumePoint>> point = latest_good_checkpoint(d);
  ASSERT_TRUE(point) << point.status().message();
  ASSERT_TRUE(point->has_value());
  EXPECT_EQ((*point)->checkpoint.header.step, 2);
  ASSERT_EQ(::lchown(link.c_str(), 0, 0), 0);
  EXPECT_TRUE(read_checkpoint(link));
}

// The owner check examines the name after the open: a name that no longer
// leads to the file opened (a planted link swapped away, or the file
// replaced) is refused, where the open file alone would pass.
TEST(CheckpointFiles, ANameReplacedAfterTheOpenIsRefused) {
  test::TempDir dir("fulcrum_ckpt");
  const std::string d = dir.at("ck");
  ASSERT_TRUE(save_checkpoint(d, sample(2), 3));
  const std::string name = d + "/step-00000002.ckpt";
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(check_checkpoint_owner(fd, name));
  const std::string moved = d + "/moved";
  ASSERT_EQ(::rename(name.c_str(), moved.c_str()), 0);
  Status gone = check_checkpoint_owner(fd, name);
  EXPECT_FALSE(gone);
  EXPECT_NE(gone.message().find("changed while it was opened"), std::string::npos)
      << gone.message();
  std::ofstream(name) << "another file under the name";
  EXPECT_FALSE(check_checkpoint_owner(fd, name));
  ::close(fd);
}

TEST(CheckpointSettings, DifferencesAreNamed) {
  EXPECT_EQ(describe_difference("a=1\nb=2\n", "a=1\nb=2\n"), "");
  EXPECT_EQ(describe_difference("a=1\nb=2\n", "a=1\nb=3\n"), "b is 2 in the checkpoint and 3 now");
  EXPECT_EQ(describe_difference("a=1\n", "a=1\nc=\n"), "c = '' is not in the checkpoint");
  EXPECT_EQ(describe_difference("a=1\nd=4\n", "a=2\n"),
            "a is 1 in the checkpoint and 2 now, d is 4 in the checkpoint and unknown now");
}

TEST(CheckpointSettings, OptionsAreCheckedAndPathsResolved) {
  test::TempDir dir("fulcrum_ckpt");
  const std::string yaml = dir.at("run.yaml");
  write_all(yaml, "train:\n  checkpoint_every: 3\n  checkpoint_dir: ckpts\n");
  Result<host::Config> config = load_job_config(yaml, {});
  ASSERT_TRUE(config) << config.status().message();
  Result<CheckpointOptions> o = checkpoint_options_from_config(*config);
  ASSERT_TRUE(o) << o.status().message();
  EXPECT_EQ(o->every, 3);
  EXPECT_EQ(o->keep, 2);
  EXPECT_EQ(o->dir, dir.at("ckpts"));  // next to the file that set it
  EXPECT_EQ(o->resume, CheckpointOptions::Resume::kNo);

  Result<host::Config> set =
      load_job_config(yaml, {"train.resume=some/step-00000003.ckpt", "train.checkpoint_keep=5"});
  ASSERT_TRUE(set);
  o = checkpoint_options_from_config(*set);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->resume, CheckpointOptions::Resume::kPath);
  EXPECT_EQ(o->resume_path, (fs::current_path() / "some/step-00000003.ckpt").string());
  EXPECT_EQ(o->keep, 5);

  Result<host::Config> no_dir =
      load_job_config_string("train: {checkpoint_every: 2}\n", "t.yaml", {});
  ASSERT_TRUE(no_dir);
  Result<CheckpointOptions> bad = checkpoint_options_from_config(*no_dir);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("needs train.checkpoint_dir"), std::string::npos);
  EXPECT_NE(bad.status().message().find("t.yaml:1"), std::string::npos) << bad.status().message();

  Result<host::Config> auto_no_dir = load_job_config_string("", "t.yaml", {"train.resume=auto"});
  ASSERT_TRUE(auto_no_dir);
  bad = checkpoint_options_from_config(*auto_no_dir);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("train.resume = auto"), std::string::npos)
      << bad.status().message();

  EXPECT_FALSE(load_job_config_string("", "t.yaml", {"train.checkpoint_keep=0"}));
  EXPECT_FALSE(load_job_config_string("", "t.yaml", {"train.resume="}));
}

}  // namespace
}  // namespace fulcrum::train
