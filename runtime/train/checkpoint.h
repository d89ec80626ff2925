// Checkpoint files: a header plus a container of named byte blobs, written
// atomically and verified with checksums. No LibTorch here: the trainer turns
// tensors into blobs (encode_tensor_blob) in its own translation unit, so this
// format, its checks and its tests compile in seconds.
//
// File layout, every integer little-endian:
//
//   offset  size  field
//        0     8  magic "FULCCKPT"
//        8     4  format version (u32), kFormatVersion
//       12     4  reserved (u32), 0
//       16     8  step (i64): optimizer steps completed when it was written
//       24     4  dp_size (i32) of the run that wrote it
//       28     4  cp_size (i32)
//       32     8  config fingerprint (u64): FNV-1a 64 of the "config" text
//       40     8  payload size in bytes (u64)
//       48     4  payload CRC-32 (u32)
//       52     4  header CRC-32 (u32) over bytes [0, 52)
//       56        payload
//
//   payload: u32 blob count, then per blob
//            u32 name length, name bytes, u64 data length, data bytes
//
// CRC-32 is the ISO-HDLC one of zlib, gzip and PNG (reflected polynomial
// 0xEDB88320, initial value and final xor 0xFFFFFFFF): python3's
// zlib.crc32(data[56:]) reproduces the payload checksum. The header has its
// own CRC so that a flipped bit in the step or the sizes is caught before
// they are trusted. A file must end exactly where the payload ends.
//
// Files are named step-NNNNNNNN.ckpt (the step, zero-padded to 8 digits) in
// the checkpoint directory. A file is written as ".step-NNNNNNNN.ckpt.tmp" in
// the same directory, fsynced, renamed over its final name, and the directory
// is fsynced: a crash leaves either the old set of checkpoints or the new one,
// never a half-written file under a checkpoint's name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/status.h"

namespace fulcrum::train {

inline constexpr char kCheckpointMagic[9] = "FULCCKPT";
inline constexpr std::uint32_t kCheckpointFormatVersion = 1;
inline constexpr std::size_t kCheckpointHeaderSize = 56;

// CRC-32 (ISO-HDLC, as zlib.crc32) of `bytes`; pass a previous result as
// `crc` to continue over more bytes.
std::uint32_t crc32(std::string_view bytes, std::uint32_t crc = 0);
// FNV-1a, 64 bits: the config fingerprint.
std::uint64_t fnv1a64(std::string_view bytes);

struct CheckpointHeader {
  std::uint32_t version = kCheckpointFormatVersion;
  std::int64_t step = 0;
  std::int32_t dp_size = 1;
  std::int32_t cp_size = 1;
  std::uint64_t config_fingerprint = 0;
  // Filled by encode and decode; what a writer sets here is ignored.
  std::uint64_t payload_size = 0;
  std::uint32_t payload_crc32 = 0;
};

// A checkpoint in memory: the header and the blobs in the order they were
// added. Blob names are unique, 1 to 255 bytes.
class Checkpoint {
 public:
  CheckpointHeader header;

  // A duplicate or malformed name is a programming error (std::logic_error).
  void add(std::string name, std::string bytes);
  void add_i64s(std::string name, const std::vector<std::int64_t>& values);
  // The blob, or null.
  const std::string* find(std::string_view name) const;
  // A blob of exactly `count` int64 values; the error names the blob and
  // `source` (the file).
  Result<std::vector<std::int64_t>> i64s(std::string_view name, std::size_t count,
                                         const std::string& source) const;
  const std::vector<std::pair<std::string, std::string>>& blobs() const { return blobs_; }

 private:
  std::vector<std::pair<std::string, std::string>> blobs_;
};

// What a training mode keeps between steps besides the replicated model,
// optimizer, RNG and loader state (hybrid mode's refitted cost profile:
// checkpoint_profile.h), in entries of the same checkpoint.
class ModeCheckpoint {
 public:
  virtual ~ModeCheckpoint() = default;
  // Adds the mode's entries to a checkpoint about to be written.
  virtual void save(Checkpoint& checkpoint) const = 0;
  // Reads and checks the mode's entries of `checkpoint` (the file `path`)
  // and holds them for install(); a refusal (one line naming the file)
  // changes nothing. `rank0`: this rank reports.
  virtual Status read(const Checkpoint& checkpoint, const std::string& path, bool rank0) = 0;
  // Puts what read() held in place, once every other entry was accepted.
  virtual void install() = 0;
};

// The file's bytes. Fills nothing in `checkpoint`; the payload size and CRC
// are computed.
std::string encode_checkpoint(const Checkpoint& checkpoint);

// Parses and verifies file bytes: magic, version, header CRC, length (a
// truncated or over-long file), payload CRC, then the blob table. `source`
// names the file in the one-line error, which says what is wrong with it.
Result<Checkpoint> decode_checkpoint(std::string_view bytes, const std::string& source);

// The header alone, from the first kCheckpointHeaderSize bytes of a file of
// `file_size` bytes, checked as decode_checkpoint checks it (all but the
// payload's CRC): a reader refuses a file of the wrong length before it
// reads the payload into memory.
Result<CheckpointHeader> decode_checkpoint_header(std::string_view head, std::uint64_t file_size,
                                                  const std::string& source);

// A tensor as a blob: u8 dtype code, u8 number of dimensions (<= 8), i64 per
// dimension, then the elements, little-endian, row-major. The codes are
// this format's own, not LibTorch's enum values, so a LibTorch upgrade
// cannot change the meaning of old files.
enum class BlobDtype : std::uint8_t { kFloat32 = 1, kFloat64 = 2, kUint8 = 3, kInt64 = 4 };
std::size_t blob_dtype_size(BlobDtype dtype);
const char* blob_dtype_name(BlobDtype dtype);

struct TensorBlob {
  BlobDtype dtype = BlobDtype::kFloat64;
  std::vector<std::int64_t> shape;
  std::string data;  // numel * element size bytes
};
std::string encode_tensor_blob(const TensorBlob& tensor);
// The error names blob `name` of `source`.
Result<TensorBlob> decode_tensor_blob(std::string_view bytes, const std::string& name,
                                      const std::string& source);

// "step-00000042.ckpt".
std::string checkpoint_file_name(std::int64_t step);
// The step of a checkpoint file name, or nullopt for any other name
// (temporary files included).
std::optional<std::int64_t> checkpoint_step_of(std::string_view file_name);

struct CheckpointFile {
  std::int64_t step = 0;
  std::string path;
};
// The checkpoint files of `dir`, highest step first; none when `dir` does
// not exist.
Result<std::vector<CheckpointFile>> list_checkpoints(const std::string& dir);

// Reads and decodes `path`, and checks that the header's step is the one the
// file name gives (a renamed file would otherwise resume the wrong step).
Result<Checkpoint> read_checkpoint(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file in the same
// directory, fsync, rename, fsync of the directory. The directory must exist.
// A path naming the null device (/dev/null) is written as it is, never
// replaced.
Status write_file_atomically(const std::string& path, std::string_view bytes);

// Writes the checkpoint as dir/step-N.ckpt (creating dir) and then deletes
// the older checkpoints beyond the newest `keep` at or below its step, and
// stale temporary files. Files of later steps (left by an attempt that was
// abandoned for an earlier checkpoint) are kept: they are replaced when the
// run reaches their step. Returns the path written.
Result<std::string> save_checkpoint(const std::string& dir, const Checkpoint& checkpoint,
                                    std::int64_t keep);

// Creates `dir` when missing (no directory it makes wider than 0755) and
// checks that it is a writable directory that not every user may write
// (unless sticky), that no other user owns (unless shared with a group) or
// may repoint through a link on its path, so that a bad train.checkpoint_dir
// fails before training rather than at the first checkpoint.
Status prepare_checkpoint_dir(const std::string& dir);

// Takes the lock `fulcrum train` holds on train.checkpoint_dir for its
// whole run (an exclusive flock on the directory), held until this process
// exits: for rank 0 of a job another launcher started (torchrun, srun),
// which no fulcrum launcher locked for. Refused when another run holds it;
// a file system without flock is let through, as it was.
Status hold_checkpoint_dir_lock(const std::string& dir);

// Refuses the open checkpoint `fd` at `path` when neither root nor this user
// owns it: another user's file in the directory may have been planted.
Status check_checkpoint_owner(int fd, const std::string& path);

struct ResumePoint {
  std::string path;
  Checkpoint checkpoint;
  // One line per newer file that was refused (what is wrong with it).
  std::vector<std::string> refused;
};
// The newest checkpoint of `dir` that reads back intact. Corrupt or
// truncated newer ones are skipped and reported in `refused`; nullopt when
// `dir` holds no checkpoint file; an error when it holds some and none is
// intact.
Result<std::optional<ResumePoint>> latest_good_checkpoint(const std::string& dir);

// The settings that decide a checkpoint's meaning, as "key=value" lines. ""
// when `saved` and `current` agree, else one phrase naming every key that
// differs: "model.hidden_size is 32 in the checkpoint and 64 now".
std::string describe_difference(std::string_view saved, std::string_view current);

}  // namespace fulcrum::train
