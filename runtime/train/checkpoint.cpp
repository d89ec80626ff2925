#include "train/checkpoint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>

#include "fulcrum/core/bytes.h"

namespace fulcrum::train {
namespace {

// The format is little-endian on disk (the core's byte codec writes it so on
// any host); tensor payloads and i64 blobs are copied as host bytes.
static_assert(std::endian::native == std::endian::little,
              "checkpoint encoding assumes a little-endian host");

constexpr std::size_t kMaxBlobName = 255;
constexpr std::size_t kMaxDims = 8;

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

namespace {

// The header in the first kCheckpointHeaderSize bytes of `bytes`, checked:
// its own CRC first, then the version, then values no writer produces, then
// the payload's size against a file of `file_size` bytes.
Result<CheckpointHeader> decode_header_fields(std::string_view bytes, std::uint64_t file_size,
                                              const std::string& name) {
  ByteReader r(bytes.substr(8, kCheckpointHeaderSize - 8));
  CheckpointHeader h;
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
  const std::uint64_t held = file_size - kCheckpointHeaderSize;
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
  return h;
}

// The header of `bytes` (at least kCheckpointHeaderSize of them), checked
// against what follows it: the payload's size, then its CRC.
Result<CheckpointHeader> decode_header(std::string_view bytes, const std::string& name) {
  Result<CheckpointHeader> header = decode_header_fields(bytes, bytes.size(), name);
  if (!header) return header;
  const CheckpointHeader& h = *header;
  const std::uint32_t payload_computed = crc32(bytes.substr(kCheckpointHeaderSize));
  if (payload_computed != h.payload_crc32) {
    return invalid_argument(name + " is corrupt: payload CRC-32 " + hex32(h.payload_crc32) +
                            " stored, " + hex32(payload_computed) + " computed");
  }
  return h;
}

// The payload's blobs into `c`. The CRC matched, so a malformed table means
// a writer bug, not bit rot; still never trust a length.
Status decode_blob_table(std::string_view payload, const std::string& name, Checkpoint& c) {
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
  return Status::ok();
}

}  // namespace

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
  Result<CheckpointHeader> header = decode_header(bytes, name);
  if (!header) return header.status();
  Checkpoint c;
  c.header = *header;
  if (Status s = decode_blob_table(bytes.substr(kCheckpointHeaderSize), name, c); !s) return s;
  return c;
}

Result<CheckpointHeader> decode_checkpoint_header(std::string_view head, std::uint64_t file_size,
                                                  const std::string& source) {
  if (head.size() < kCheckpointHeaderSize || file_size < kCheckpointHeaderSize) {
    return invalid_argument("checkpoint " + source + " is truncated: " + std::to_string(file_size) +
                            " bytes, shorter than the " + std::to_string(kCheckpointHeaderSize) +
                            "-byte header");
  }
  return decode_header_fields(head, file_size, "checkpoint " + source);
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

}  // namespace fulcrum::train
