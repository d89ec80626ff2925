#include "train/checkpoint.h"

#include "fulcrum/core/bytes.h"
#include "host/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <stdexcept>
#include <system_error>

namespace fulcrum::train {
namespace {

namespace fs = std::filesystem;

// The format is little-endian on disk (the core's byte codec writes it so on
// any host); tensor payloads and i64 blobs are copied as host bytes.
static_assert(std::endian::native == std::endian::little,
              "checkpoint encoding assumes a little-endian host");

constexpr std::size_t kMaxBlobName = 255;
constexpr std::size_t kMaxDims = 8;
constexpr std::string_view kFilePrefix = "step-";
constexpr std::string_view kFileSuffix = ".ckpt";
constexpr std::string_view kTempSuffix = ".tmp";

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// An owned POSIX file descriptor, closed exactly once. close() is checked on
// the success path (it can report a failed write-back, e.g. on NFS); the
// destructor only releases on error paths, where a second error adds nothing.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd);
  }

 private:
  int fd_;
};

std::string errno_text() { return std::strerror(errno); }

Status write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return invalid_argument("cannot write " + path + ": " + errno_text() +
                              "; free space or choose another train.checkpoint_dir");
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return Status::ok();
}

// "key=value" lines in order; later duplicates win, as in a config.
std::vector<std::pair<std::string, std::string>> parse_lines(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    out.emplace_back(std::string(line.substr(0, eq)),
                     eq == std::string_view::npos ? "" : std::string(line.substr(eq + 1)));
  }
  return out;
}

// The loader's rules for paths written in a config (options.cpp): relative to
// the file that set them, or to the working directory for --set and
// defaults. Repeated here because options.cpp keeps its helper private.
std::string resolve_config_path(const host::Config& config, const std::string& key) {
  const std::string text = config.get_string(key);
  if (text.empty()) return text;
  fs::path path(text);
  if (path.is_relative()) {
    std::string origin = config.is_set(key) ? config.origin(key) : "";
    bool from_file = false;
    for (int i = 0; i < 2; ++i) {  // origin is FILE:LINE:COL; FILE may hold colons
      const auto colon = origin.rfind(':');
      if (colon == std::string::npos) break;
      origin.resize(colon);
      from_file = i == 1 && !origin.empty();
    }
    path = from_file ? fs::absolute(fs::path(origin)).parent_path() / path : fs::absolute(path);
  }
  return path.lexically_normal().string();
}

std::string where(const host::Config& config, const std::string& key) {
  return key + " = " + (config.get_string(key).empty() ? "''" : config.get_string(key)) + " (" +
         (config.is_set(key) ? "set at " + config.origin(key) : std::string("the default")) + ")";
}

}  // namespace

std::uint32_t crc32(std::string_view bytes, std::uint32_t crc) {
  static const std::array<std::uint32_t, 256> table = make_crc_table();
  crc = ~crc;
  for (const char ch : bytes) {
    crc = table[(crc ^ static_cast<std::uint8_t>(ch)) & 0xffu] ^ (crc >> 8);
  }
  return ~crc;
}

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char ch : bytes) {
    h ^= static_cast<std::uint8_t>(ch);
    h *= 0x100000001b3ULL;
  }
  return h;
}

void Checkpoint::add(std::string name, std::string bytes) {
  if (name.empty() || name.size() > kMaxBlobName) {
    throw std::logic_error("checkpoint blob name '" + name + "' must be 1 to 255 bytes");
  }
  if (find(name) != nullptr) throw std::logic_error("checkpoint blob '" + name + "' added twice");
  blobs_.emplace_back(std::move(name), std::move(bytes));
}

void Checkpoint::add_i64s(std::string name, const std::vector<std::int64_t>& values) {
  ByteWriter<std::string> bytes;
  for (std::int64_t v : values) bytes.i64(v);
  add(std::move(name), bytes.take());
}

const std::string* Checkpoint::find(std::string_view name) const {
  for (const auto& [n, bytes] : blobs_) {
    if (n == name) return &bytes;
  }
  return nullptr;
}

Result<std::vector<std::int64_t>> Checkpoint::i64s(std::string_view name, std::size_t count,
                                                   const std::string& source) const {
  const std::string* bytes = find(name);
  if (bytes == nullptr) {
    return invalid_argument("checkpoint " + source + " has no '" + std::string(name) +
                            "' entry; it was not written by this trainer");
  }
  if (bytes->size() != count * sizeof(std::int64_t)) {
    return invalid_argument("checkpoint " + source + " entry '" + std::string(name) + "' holds " +
                            std::to_string(bytes->size()) + " bytes, expected " +
                            std::to_string(count * sizeof(std::int64_t)));
  }
  std::vector<std::int64_t> values(count);
  std::memcpy(values.data(), bytes->data(), bytes->size());
  return values;
}

std::string encode_checkpoint(const Checkpoint& checkpoint) {
  std::string payload;
  ByteWriter<std::string> p(payload);
  p.put(static_cast<std::uint32_t>(checkpoint.blobs().size()));
  for (const auto& [name, bytes] : checkpoint.blobs()) {
    p.put(static_cast<std::uint32_t>(name.size())).raw(name);
    p.put(static_cast<std::uint64_t>(bytes.size())).raw(bytes);
  }
  const CheckpointHeader& h = checkpoint.header;
  std::string out;
  out.reserve(kCheckpointHeaderSize + payload.size());
  ByteWriter<std::string> w(out);
  w.raw(std::string_view(kCheckpointMagic, 8)).put(kCheckpointFormatVersion).put(std::uint32_t{0});
  w.put(h.step).put(h.dp_size).put(h.cp_size).put(h.config_fingerprint);
  w.put(static_cast<std::uint64_t>(payload.size())).put(crc32(payload));
  w.put(crc32(out));  // the header's own CRC covers everything before it
  out += payload;
  return out;
}

Result<Checkpoint> decode_checkpoint(std::string_view bytes, const std::string& source) {
  const std::string name = "checkpoint " + source;
  if (bytes.empty()) return invalid_argument(name + " is truncated: the file is empty");
  // A short file that starts like a checkpoint is a truncated one, not a
  // foreign file.
  const std::size_t magic_bytes = std::min<std::size_t>(bytes.size(), 8);
  if (bytes.substr(0, magic_bytes) != std::string_view(kCheckpointMagic, magic_bytes)) {
    return invalid_argument(name + " is not a fulcrum checkpoint (it does not start with '" +
                            kCheckpointMagic + "')");
  }
  if (bytes.size() < kCheckpointHeaderSize) {
    return invalid_argument(name + " is truncated: " + std::to_string(bytes.size()) +
                            " bytes, shorter than the " + std::to_string(kCheckpointHeaderSize) +
                            "-byte header");
  }
  ByteReader r(bytes.substr(8, kCheckpointHeaderSize - 8));
  Checkpoint c;
  CheckpointHeader& h = c.header;
  std::uint32_t reserved = 0, header_crc = 0;
  r.get(h.version);
  r.get(reserved);
  r.get(h.step);
  r.get(h.dp_size);
  r.get(h.cp_size);
  r.get(h.config_fingerprint);
  r.get(h.payload_size);
  r.get(h.payload_crc32);
  r.get(header_crc);
  const std::uint32_t header_computed = crc32(bytes.substr(0, kCheckpointHeaderSize - 4));
  if (header_crc != header_computed) {
    // A newer format may lay its header out differently, so its CRC would
    // not match here either: name the version when it is not ours.
    const std::string version = h.version == kCheckpointFormatVersion
                                    ? ""
                                    : " or an unknown format version " + std::to_string(h.version) +
                                          " (this build reads " +
                                          std::to_string(kCheckpointFormatVersion) + ")";
    return invalid_argument(name + " has a corrupt header" + version + " (header CRC-32 " +
                            hex32(header_crc) + " stored, " + hex32(header_computed) +
                            " computed)");
  }
  if (h.version != kCheckpointFormatVersion) {
    return invalid_argument(name + " has format version " + std::to_string(h.version) +
                            "; this build reads version " +
                            std::to_string(kCheckpointFormatVersion));
  }
  if (reserved != 0 || h.step < 0 || h.dp_size < 1 || h.cp_size < 1) {
    return invalid_argument(name + " has an impossible header (step " + std::to_string(h.step) +
                            ", dp_size " + std::to_string(h.dp_size) + ", cp_size " +
                            std::to_string(h.cp_size) + ", reserved " + std::to_string(reserved) +
                            ")");
  }
  const std::uint64_t held = bytes.size() - kCheckpointHeaderSize;
  if (held < h.payload_size) {
    return invalid_argument(name + " is truncated: its header promises " +
                            std::to_string(h.payload_size) + " payload bytes, the file holds " +
                            std::to_string(held));
  }
  if (held > h.payload_size) {
    return invalid_argument(name + " has " + std::to_string(held - h.payload_size) +
                            " unexpected bytes after its " + std::to_string(h.payload_size) +
                            "-byte payload");
  }
  const std::string_view payload = bytes.substr(kCheckpointHeaderSize);
  const std::uint32_t payload_computed = crc32(payload);
  if (payload_computed != h.payload_crc32) {
    return invalid_argument(name + " is corrupt: payload CRC-32 " + hex32(h.payload_crc32) +
                            " stored, " + hex32(payload_computed) + " computed");
  }

  // The CRC matched, so a malformed table means a writer bug, not bit rot;
  // still never trust a length.
  ByteReader p(payload);
  auto malformed = [&](const std::string& what) {
    return invalid_argument(name + " has a malformed blob table at payload byte " +
                            std::to_string(p.offset()) + ": " + what);
  };
  std::uint32_t count = 0;
  if (!p.get(count)) return malformed("no blob count");
  for (std::uint32_t i = 0; i < count; ++i) {
    std::uint32_t name_size = 0;
    std::uint64_t size = 0;
    std::string_view blob_name, data;
    if (!p.get(name_size) || name_size == 0 || name_size > kMaxBlobName ||
        !p.get_bytes(name_size, blob_name)) {
      return malformed("blob " + std::to_string(i) + " has a bad name");
    }
    if (!p.get(size) || size > p.left() || !p.get_bytes(static_cast<std::size_t>(size), data)) {
      return malformed("blob '" + std::string(blob_name) + "' runs past the payload");
    }
    if (c.find(blob_name) != nullptr) {
      return malformed("blob '" + std::string(blob_name) + "' appears twice");
    }
    c.add(std::string(blob_name), std::string(data));
  }
  if (p.left() != 0) return malformed(std::to_string(p.left()) + " bytes after the last blob");
  return c;
}

std::size_t blob_dtype_size(BlobDtype dtype) {
  switch (dtype) {
    case BlobDtype::kFloat32:
      return 4;
    case BlobDtype::kFloat64:
    case BlobDtype::kInt64:
      return 8;
    case BlobDtype::kUint8:
      return 1;
  }
  return 0;
}

const char* blob_dtype_name(BlobDtype dtype) {
  switch (dtype) {
    case BlobDtype::kFloat32:
      return "float32";
    case BlobDtype::kFloat64:
      return "float64";
    case BlobDtype::kInt64:
      return "int64";
    case BlobDtype::kUint8:
      return "uint8";
  }
  return "unknown";
}

std::string encode_tensor_blob(const TensorBlob& tensor) {
  ByteWriter<std::string> out;
  out.put(static_cast<std::uint8_t>(tensor.dtype))
      .put(static_cast<std::uint8_t>(tensor.shape.size()));
  for (std::int64_t d : tensor.shape) out.i64(d);
  out.raw(tensor.data);
  return out.take();
}

Result<TensorBlob> decode_tensor_blob(std::string_view bytes, const std::string& name,
                                      const std::string& source) {
  auto bad = [&](const std::string& what) {
    return invalid_argument("checkpoint " + source + " entry '" + name + "' " + what);
  };
  ByteReader r(bytes);
  std::uint8_t code = 0, dims = 0;
  if (!r.get(code) || !r.get(dims)) return bad("is too short for a tensor");
  TensorBlob t;
  t.dtype = static_cast<BlobDtype>(code);
  if (blob_dtype_size(t.dtype) == 0) return bad("has unknown dtype code " + std::to_string(code));
  if (dims > kMaxDims) return bad("has " + std::to_string(dims) + " dimensions");
  std::uint64_t numel = 1;
  for (std::uint8_t i = 0; i < dims; ++i) {
    std::int64_t d = 0;
    if (!r.get(d)) return bad("is too short for its shape");
    if (d < 0 || (d > 0 && numel > std::numeric_limits<std::uint64_t>::max() /
                                       static_cast<std::uint64_t>(d) / 8)) {
      return bad("has an impossible dimension " + std::to_string(d));
    }
    numel *= static_cast<std::uint64_t>(d);
    t.shape.push_back(d);
  }
  const std::uint64_t expected = numel * blob_dtype_size(t.dtype);
  if (r.left() != expected) {
    return bad("holds " + std::to_string(r.left()) + " data bytes, its shape needs " +
               std::to_string(expected));
  }
  t.data.assign(bytes.substr(r.offset()));
  return t;
}

std::string checkpoint_file_name(std::int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%08lld", static_cast<long long>(step));
  return std::string(kFilePrefix) + digits + std::string(kFileSuffix);
}

std::optional<std::int64_t> checkpoint_step_of(std::string_view file_name) {
  if (!file_name.starts_with(kFilePrefix) || !file_name.ends_with(kFileSuffix)) return {};
  const std::string_view digits = file_name.substr(
      kFilePrefix.size(), file_name.size() - kFilePrefix.size() - kFileSuffix.size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return {};
  }
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return {};
  return step;
}

Result<std::vector<CheckpointFile>> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> files;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (std::optional<std::int64_t> step = checkpoint_step_of(file)) {
      files.push_back({*step, it->path().string()});
    }
  }
  if (ec) {
    return invalid_argument("cannot list checkpoint directory " + dir + ": " + ec.message() +
                            "; check train.checkpoint_dir and its permissions");
  }
  std::sort(files.begin(), files.end(),
            [](const CheckpointFile& a, const CheckpointFile& b) { return a.step > b.step; });
  return files;
}

Result<Checkpoint> read_checkpoint(const std::string& path) {
  Result<host::InputFile> opened = host::open_input_file(
      path, {"checkpoint " + path,
             "give a checkpoint file written by fulcrum train, or train.resume: auto"});
  if (!opened) return opened.status();
  Fd fd(std::move(opened).value().release());
  // The magic first: a large file of something else (a sparse file of
  // zeros named like a checkpoint) is refused without reading it all.
  char magic[sizeof kCheckpointMagic - 1] = {};
  const ssize_t got = ::pread(fd.get(), magic, sizeof magic, 0);
  if (got == static_cast<ssize_t>(sizeof magic) &&
      std::memcmp(magic, kCheckpointMagic, sizeof magic) != 0) {
    return invalid_argument("checkpoint " + path +
                            " is not a fulcrum checkpoint (it does not start with '" +
                            std::string(kCheckpointMagic) + "')");
  }
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return invalid_argument("cannot read checkpoint " + path + ": " + errno_text());
    if (n == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  Result<Checkpoint> c = decode_checkpoint(bytes, path);
  if (!c) return c;
  const std::optional<std::int64_t> named = checkpoint_step_of(fs::path(path).filename().string());
  if (named && *named != c->header.step) {
    return invalid_argument("checkpoint " + path + " holds step " + std::to_string(c->header.step) +
                            " but its name says step " + std::to_string(*named) +
                            "; it was renamed or copied over another");
  }
  return c;
}

Status write_file_atomically(const std::string& path, std::string_view bytes) {
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string temp =
      (dir / ("." + target.filename().string() + std::string(kTempSuffix))).string();
  // On any failure below the temporary file must not stay behind.
  struct Unlink {
    const std::string& path;
    bool armed = true;
    ~Unlink() {
      if (armed) ::unlink(path.c_str());
    }
  } cleanup{temp};

  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return invalid_argument("cannot create " + temp + ": " + errno_text() +
                            "; check that train.checkpoint_dir is writable");
  }
  if (Status s = write_all(fd.get(), bytes, temp); !s) return s;
  // The data must be on disk before the rename makes it the checkpoint:
  // otherwise a power loss can leave a complete name over incomplete data.
  if (::fsync(fd.get()) != 0) return invalid_argument("fsync of " + temp + ": " + errno_text());
  if (fd.close() != 0) return invalid_argument("closing " + temp + ": " + errno_text());
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return invalid_argument("cannot rename " + temp + " to " + path + ": " + errno_text());
  }
  cleanup.armed = false;
  // The rename is a change to the directory; it survives a crash only once
  // the directory itself is synced.
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd.valid() || ::fsync(dir_fd.get()) != 0) {
    return invalid_argument("fsync of directory " + dir.string() + ": " + errno_text());
  }
  return Status::ok();
}

Result<std::string> save_checkpoint(const std::string& dir, const Checkpoint& checkpoint,
                                    std::int64_t keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return invalid_argument("cannot create checkpoint directory " + dir + ": " + ec.message() +
                            "; check train.checkpoint_dir");
  }
  const std::int64_t step = checkpoint.header.step;
  const std::string path = (fs::path(dir) / checkpoint_file_name(step)).string();
  if (Status s = write_file_atomically(path, encode_checkpoint(checkpoint)); !s) return s;

  Result<std::vector<CheckpointFile>> files = list_checkpoints(dir);
  if (!files) return files.status();
  std::int64_t kept = 0;
  for (const CheckpointFile& f : *files) {
    if (f.step > step) continue;
    if (++kept <= keep) continue;
    if (!fs::remove(f.path, ec) && ec) {
      return invalid_argument("cannot delete old checkpoint " + f.path + ": " + ec.message());
    }
  }
  // Temporary files of an earlier writer that crashed mid-write.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > kTempSuffix.size() + 1 && name.front() == '.' &&
        name.ends_with(kTempSuffix) &&
        checkpoint_step_of(
            std::string_view(name).substr(1, name.size() - 1 - kTempSuffix.size()))) {
      std::error_code ignored;  // best effort: a stale temporary file is only wasted space
      fs::remove(it->path(), ignored);
    }
  }
  return path;
}

Status prepare_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    return invalid_argument("cannot create checkpoint directory " + dir + ": " +
                            (ec ? ec.message() : std::string("a file of that name exists")) +
                            "; fix train.checkpoint_dir");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return invalid_argument("checkpoint directory " + dir + " is not writable: " + errno_text() +
                            "; fix its permissions or train.checkpoint_dir");
  }
  return Status::ok();
}

Result<std::optional<ResumePoint>> latest_good_checkpoint(const std::string& dir) {
  Result<std::vector<CheckpointFile>> files = list_checkpoints(dir);
  if (!files) return files.status();
  if (files->empty()) return std::optional<ResumePoint>();
  ResumePoint point;
  for (const CheckpointFile& f : *files) {
    Result<Checkpoint> c = read_checkpoint(f.path);
    if (c) {
      point.path = f.path;
      point.checkpoint = std::move(c).value();
      return std::optional<ResumePoint>(std::move(point));
    }
    point.refused.push_back(c.status().message());
  }
  return invalid_argument("none of the " + std::to_string(files->size()) + " checkpoints in " +
                          dir + " is intact (the newest: " + point.refused.front() +
                          "); restore one from a backup, or start afresh with "
                          "train.resume=none and an empty train.checkpoint_dir");
}

std::string describe_difference(std::string_view saved, std::string_view current) {
  const auto before = parse_lines(saved);
  const auto now = parse_lines(current);
  std::map<std::string, std::string> before_map(before.begin(), before.end());
  std::map<std::string, std::string> now_map(now.begin(), now.end());
  std::string out;
  auto add = [&out](const std::string& phrase) { out += (out.empty() ? "" : ", ") + phrase; };
  auto shown = [](const std::string& v) { return v.empty() ? std::string("''") : v; };
  for (const auto& [key, value] : before) {
    const auto it = now_map.find(key);
    if (it == now_map.end()) {
      add(key + " is " + shown(value) + " in the checkpoint and unknown now");
    } else if (it->second != value) {
      add(key + " is " + shown(value) + " in the checkpoint and " + shown(it->second) + " now");
    }
  }
  for (const auto& [key, value] : now) {
    if (before_map.count(key) == 0) add(key + " = " + shown(value) + " is not in the checkpoint");
  }
  return out;
}

Result<CheckpointOptions> checkpoint_options_from_config(const host::Config& config) {
  CheckpointOptions o;
  o.every = config.get_int("train.checkpoint_every");
  o.keep = config.get_int("train.checkpoint_keep");
  o.dir = resolve_config_path(config, "train.checkpoint_dir");
  const std::string resume = config.get_string("train.resume");
  if (resume == "auto") {
    o.resume = CheckpointOptions::Resume::kAuto;
  } else if (resume != "none" && !resume.empty()) {
    o.resume = CheckpointOptions::Resume::kPath;
    o.resume_path = resolve_config_path(config, "train.resume");
  }
  if (o.every > 0 && o.dir.empty()) {
    return invalid_argument("train.checkpoint_every = " + std::to_string(o.every) + " (set at " +
                            config.origin("train.checkpoint_every") +
                            ") needs train.checkpoint_dir, the directory to write them to; "
                            "set it, or set train.checkpoint_every: 0");
  }
  if (o.resume == CheckpointOptions::Resume::kAuto && o.dir.empty()) {
    return invalid_argument(where(config, "train.resume") +
                            " needs train.checkpoint_dir, the directory to resume from; set it, "
                            "or name a checkpoint file in train.resume");
  }
  return o;
}

}  // namespace fulcrum::train
