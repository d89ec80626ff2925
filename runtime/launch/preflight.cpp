#include "launch/preflight.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include "host/trusted_directory.h"

namespace fulcrum::launch {
namespace {

namespace fs = std::filesystem;

std::string gib(double bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  char text[48];
  if (bytes < 1024 * kMiB) {
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / kMiB);
  } else {
    std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024 * kMiB));
  }
  return text;
}

bool writable_dir(const fs::path& dir) {
  return ::access(dir.empty() ? "." : dir.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

Status check_output_file(const std::string& path, std::string_view what) {
  if (path.empty()) {
    return invalid_argument(std::string(what) + " is empty; give a file path");
  }
  // Whoever owns a link on the way chooses the file written (an output
  // written through another user's link could overwrite any file of this
  // user's): refused, as for plugins and checkpoint directories.
  if (const std::optional<host::PathLink> link = host::foreign_link_on_path(path)) {
    return invalid_argument(std::string(what) + " " + path + ": " + host::foreign_link_text(*link) +
                            ", who may point it at a file of yours to overwrite; remove the "
                            "link or choose another path");
  }
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);
  if (fs::is_directory(st)) {
    return invalid_argument(std::string(what) + " " + path +
                            " is a directory; give a file path inside it");
  }
  if (fs::exists(st)) {
    // A device, FIFO or socket takes writes that are lost (/dev/full fails
    // them, a FIFO without a reader blocks): only /dev/null, chosen on
    // purpose, stands in for a file.
    if (!fs::is_regular_file(st) && fs::canonical(p, ec) != fs::path("/dev/null")) {
      return invalid_argument(std::string(what) + " " + path +
                              " is not a regular file (a device, FIFO or socket); give a file "
                              "path, or /dev/null to discard the output");
    }
    if (::access(p.c_str(), W_OK) != 0) {
      return invalid_argument("cannot write " + std::string(what) + " " + path + ": " +
                              std::strerror(errno) + "; choose another path or fix its mode");
    }
    // Another user's file (in a group's or a sticky directory) is theirs to
    // read, change or remove whatever the run writes there, and writing it
    // would destroy what they put there.
    struct stat owned {};
    if (fs::is_regular_file(st) && ::stat(p.c_str(), &owned) == 0 &&
        !host::trusted_owner(owned.st_uid)) {
      return invalid_argument(std::string(what) + " " + path + " is owned by uid " +
                              std::to_string(owned.st_uid) + ", neither root nor this user (uid " +
                              std::to_string(::geteuid()) +
                              "): it is theirs, and so would the run's output be; choose a path "
                              "of your own");
    }
    return Status::ok();
  }
  const fs::path parent = p.parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    return invalid_argument("cannot write " + std::string(what) + " " + path + ": directory " +
                            parent.string() + " does not exist; create it first");
  }
  if (!writable_dir(parent)) {
    return invalid_argument("cannot write " + std::string(what) + " " + path + ": directory " +
                            (parent.empty() ? std::string(".") : parent.string()) +
                            " is not writable (" + std::strerror(errno) + "); choose another path");
  }
  return Status::ok();
}

Status check_input_file(const std::string& path, std::string_view what, std::string_view fix) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    return invalid_argument(std::string(what) + " " + path + " does not exist; " +
                            std::string(fix));
  }
  if (!fs::is_regular_file(st)) {
    return invalid_argument(std::string(what) + " " + path + " is not a regular file; " +
                            std::string(fix));
  }
  if (::access(path.c_str(), R_OK) != 0) {
    return invalid_argument("cannot read " + std::string(what) + " " + path + ": " +
                            std::strerror(errno) + "; " + std::string(fix));
  }
  return Status::ok();
}

Status check_output_dir(const std::string& path, std::string_view what) {
  if (path.empty()) return invalid_argument(std::string(what) + " is empty; give a directory");
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = path;
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) {
    return invalid_argument(std::string(what) + " " + path +
                            " exists and is not a directory; choose a directory");
  }
  // The nearest ancestor that exists must be a directory we may write into.
  fs::path existing = p;
  while (!existing.empty() && !fs::exists(existing, ec)) {
    const fs::path up = existing.parent_path();
    if (up == existing) break;
    existing = up;
  }
  if (!fs::is_directory(existing, ec)) {
    return invalid_argument("cannot create " + std::string(what) + " " + path + ": " +
                            existing.string() + " is not a directory; choose another directory");
  }
  if (!writable_dir(existing)) {
    return invalid_argument("cannot write " + std::string(what) + " " + path + ": " +
                            existing.string() + " is not writable (" + std::strerror(errno) +
                            "); choose another directory or fix its mode");
  }
  return Status::ok();
}

MemoryNeed minimum_memory(const MemoryInputs& in) {
  const double h = in.hidden_size;
  const double f = in.ffn_size > 0 ? in.ffn_size : 4 * h;
  // Token embedding and LM head, then per block the attention projections
  // (4 h^2) and the MLP (2 h f); biases and norms only add to it.
  const double parameters = 2 * in.vocab_size * h + in.num_layers * (4 * h * h + 2 * h * f);
  MemoryNeed need;
  need.state_bytes = 4 * parameters * in.dtype_bytes;
  // This rank's share of a micro-batch's rows: backward needs at least every
  // block's input, and the loss the logits.
  const double tokens = in.micro_batch_size * std::ceil(in.seq_length / std::max(1.0, in.cp_size));
  need.activation_bytes = tokens * (in.num_layers * h + in.vocab_size) * in.dtype_bytes;
  need.index_bytes = in.num_samples * 2 * sizeof(std::int64_t);  // offset and length
  return need;
}

double host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

Status check_memory(const MemoryNeed& need, int ranks, double host_bytes) {
  const double job = need.total() * ranks;
  if (host_bytes <= 0 || job <= host_bytes) return Status::ok();
  return invalid_argument(
      "the job needs at least " + gib(job) + " of memory, " + std::to_string(ranks) + " ranks x " +
      gib(need.total()) + " (parameters, gradients and AdamW state " + gib(need.state_bytes) +
      ": model.*; one micro-batch's activations " + gib(need.activation_bytes) +
      ": data.seq_length, data.micro_batch_size, model.*; sample "
      "index " +
      gib(need.index_bytes) + ": data.num_samples), but this host has " + gib(host_bytes) +
      "; make the model, the rows or the dataset smaller, or run on a larger host");
}

}  // namespace fulcrum::launch
