// Loading a balancer plugin and presenting it as a fulcrum::LoadBalancer.
//
// Trust boundary: a plugin runs in every rank, so the loader refuses a file
// that anyone but root and this user owns or may write (the file and every
// directory above it), checks the table before calling through it, lends
// every call copies of what it borrows and refuses a plugin that wrote into
// them, checks every count before reading that many entries, holds text to
// the ABI's string rules, and validates every answer before the host uses
// it. Nothing C++ crosses the C table: requests are built into plain structs,
// answers are copied out and plan buffers are handed back with release_plan
// exactly once.
#include "fulcrum/host/plugin_loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "builtin_schedule.h"
#include "fulcrum/c_api.h"
#include "fulcrum/core/plan_check.h"
#include "fulcrum/core/schedule.h"
#include "fulcrum/core/text.h"
#include "fulcrum/core/work_model.h"
#include "fulcrum/core/workload.h"
#include "input_file.h"
#include "partition_summary.h"
#include "plugin_loader_internal.h"

#ifndef FULCRUM_PLUGIN_SUBDIR
#define FULCRUM_PLUGIN_SUBDIR "lib/fulcrum"
#endif

namespace fulcrum::host {
namespace {

namespace fs = std::filesystem;

// The v1.0 end of the table: later minor versions append after it, so this,
// not sizeof, is the smallest table the host accepts.
constexpr std::uint32_t kTableV1Size = FULCRUM_PLUGIN_V1_0_SIZE;
// struct_size, abi_major and abi_minor open every version of the table.
constexpr std::uint32_t kTableHeaderSize = FULCRUM_STRUCT_SIZE(fulcrum_plugin_v1, abi_minor);
// More strategies than this means the count field is garbage.
constexpr std::int32_t kMaxStrategies = 4096;

// ---------------------------------------------------------------------------
// Shared library handles: one per canonical path while any balancer uses it.

using LibraryHandle = std::shared_ptr<void>;

struct LibraryCache {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<void>> by_path;
};

LibraryCache& library_cache() {
  // Never destroyed: balancers held in static storage may outlive it otherwise.
  static auto* cache = new LibraryCache;
  return *cache;
}

Result<LibraryHandle> open_library(const std::string& path) {
  LibraryCache& cache = library_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  for (auto it = cache.by_path.begin(); it != cache.by_path.end();) {
    it = it->second.expired() ? cache.by_path.erase(it) : std::next(it);
  }
  if (auto found = cache.by_path.find(path); found != cache.by_path.end()) {
    if (LibraryHandle shared = found->second.lock()) return shared;
  }
  dlerror();  // clear a stale error
  void* raw = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (raw == nullptr) {
    const char* why = dlerror();
    return internal_error("cannot load plugin " + path + ": " +
                          (why != nullptr ? why : "dlopen failed without a message") +
                          "; check that it is a fulcrum plugin built for this platform and that "
                          "its dependencies resolve (ldd " +
                          path + ")");
  }
  LibraryHandle handle(raw, [](void* h) { dlclose(h); });
  cache.by_path[path] = handle;
  return handle;
}

// ---------------------------------------------------------------------------
// Text from a plugin. The ABI promises NUL-terminated UTF-8; the host reads at
// most a bound of it and takes it only when it is valid UTF-8 without control
// characters, so that what a plugin says can reach a terminal, a JSON file or
// a metrics line as it is (names and reasons), or escaped (errors and logs).

// Names: the table's, its strategies', the strategy an answer says it used.
constexpr std::size_t kMaxNameBytes = 256;
// Free text: fallback reasons, last_error, log lines.
constexpr std::size_t kMaxTextBytes = 4096;

// The length of the UTF-8 sequence opening s[0, n) and its code point, or 0
// when it is not valid UTF-8 (a stray continuation byte, an overlong form, a
// surrogate, past U+10FFFF, cut short).
std::size_t utf8_sequence(const unsigned char* s, std::size_t n, char32_t& code_point) {
  const unsigned char lead = s[0];
  std::size_t length = 0;
  char32_t min = 0;
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  }
  if ((lead & 0xe0) == 0xc0) {
    length = 2, min = 0x80, code_point = lead & 0x1f;
  } else if ((lead & 0xf0) == 0xe0) {
    length = 3, min = 0x800, code_point = lead & 0x0f;
  } else if ((lead & 0xf8) == 0xf0) {
    length = 4, min = 0x10000, code_point = lead & 0x07;
  } else {
    return 0;
  }
  if (length > n) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    code_point = (code_point << 6) | (s[i] & 0x3f);
  }
  if (code_point < min || code_point > 0x10ffff || (code_point >= 0xd800 && code_point <= 0xdfff)) {
    return 0;
  }
  return length;
}

// C0 and C1 controls, DEL, and the Unicode line and paragraph separators:
// what would break a line or steer a terminal.
bool is_control(char32_t c) {
  return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x2028 || c == 0x2029;
}

// The bytes of `text` up to its NUL, reading at most max_bytes + 1 of them;
// `terminated` says whether the NUL came within max_bytes.
std::string_view bounded_text(const char* text, std::size_t max_bytes, bool& terminated) {
  const std::size_t length = ::strnlen(text, max_bytes + 1);
  terminated = length <= max_bytes;
  return {text, std::min(length, max_bytes)};
}

// `text` as the ABI promises it, or why not (what a message says after the
// field's name).
Result<std::string> checked_text(const char* text, std::size_t max_bytes) {
  bool terminated = false;
  const std::string_view view = bounded_text(text, max_bytes, terminated);
  if (!terminated) {
    return plugin_fault("is not NUL-terminated within " + std::to_string(max_bytes) + " bytes");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(view.data());
  for (std::size_t i = 0; i < view.size();) {
    char32_t c = 0;
    const std::size_t length = utf8_sequence(bytes + i, view.size() - i, c);
    if (length == 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(bytes[i]));
      return plugin_fault("is not UTF-8 (byte " + std::to_string(i) + " is " + hex + ")");
    }
    if (is_control(c)) {
      char code[12];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(c));
      return plugin_fault("holds the control character " + std::string(code) + " at byte " +
                          std::to_string(i));
    }
    i += length;
  }
  return std::string(view);
}

// `text` made safe to print on one line whatever it holds: controls and
// bytes that are not UTF-8 escaped (\n, \xHH), cut after max_bytes with
// "...". For the plugin's error and log text, which the host shows rather
// than refuses.
std::string printable_text(const char* text, std::size_t max_bytes) {
  constexpr char kHex[] = "0123456789abcdef";
  bool terminated = false;
  const std::string_view view = bounded_text(text, max_bytes, terminated);
  const auto* bytes = reinterpret_cast<const unsigned char*>(view.data());
  std::string out;
  for (std::size_t i = 0; i < view.size();) {
    char32_t c = 0;
    const std::size_t length = utf8_sequence(bytes + i, view.size() - i, c);
    if (length == 0 || (length == 1 && is_control(c))) {
      if (c == '\n' && length == 1) {
        out += "\\n";
      } else if (c == '\r' && length == 1) {
        out += "\\r";
      } else if (c == '\t' && length == 1) {
        out += "\\t";
      } else {
        out += "\\x";
        out += kHex[bytes[i] >> 4];
        out += kHex[bytes[i] & 0xf];
      }
      ++i;
      continue;
    }
    if (is_control(c)) {
      char code[12];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out.append(view.substr(i, length));
    }
    i += length;
  }
  if (!terminated) out += "...";
  return out;
}

// ---------------------------------------------------------------------------
// Finding the file and deciding whether to trust it.

std::string library_file_name(std::string_view name) {
  if (name.size() > 3 && name.substr(name.size() - 3) == ".so") return std::string(name);
  return "lib" + std::string(name) + ".so";
}

// A per-rank work figure the plugin left out (its array was null).
constexpr std::int64_t kNotReported = std::numeric_limits<std::int64_t>::min();

// Where a plugin was found: the path as given or as found in a search
// directory (`dir/file`, links and all), and the file it resolves to. The
// permission check walks both, since a link on the path as found could be
// pointed elsewhere by whoever may write the directory holding it.
struct ResolvedPlugin {
  std::string found;
  std::string canonical;
};

Result<ResolvedPlugin> resolve_plugin_path(std::string_view name_or_path,
                                           const LoaderOptions& options) {
  std::error_code ec;
  if (name_or_path.empty()) {
    return invalid_argument(
        "empty plugin name; give a name such as 'fulcrum_balancer' or a path to a .so file");
  }
  fs::path path;
  if (name_or_path.find('/') != std::string_view::npos) {
    path = fs::path(name_or_path);
    const fs::file_status status = fs::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) {
      // A link loop or a file used as a directory: there, but unusable.
      return invalid_argument("plugin path " + path.string() + " cannot be resolved (" +
                              ec.message() + "); give the path of the plugin's .so file");
    }
    if (!fs::exists(status)) {
      return not_found("plugin file " + path.string() +
                       " does not exist; check the path, or give a plugin name to search "
                       "FULCRUM_PLUGIN_PATH and the install directories");
    }
  } else {
    const std::string file = library_file_name(name_or_path);
    const std::vector<std::string> dirs =
        options.search_dirs.empty() ? default_search_dirs() : options.search_dirs;
    for (const std::string& dir : dirs) {
      fs::path candidate = fs::path(dir) / file;
      if (fs::exists(candidate, ec)) {
        path = std::move(candidate);
        break;
      }
    }
    if (path.empty()) {
      return not_found("plugin '" + std::string(name_or_path) + "' not found: no " + file + " in " +
                       (dirs.empty() ? std::string("(no search directories)") : join(dirs, ", ")) +
                       "; install it there, add its directory to FULCRUM_PLUGIN_PATH, or give "
                       "the plugin's path");
    }
  }
  fs::path canonical = fs::canonical(path, ec);
  if (ec) {
    return not_found("cannot resolve plugin path " + path.string() + ": " + ec.message());
  }
  if (!fs::is_regular_file(canonical, ec)) {
    return invalid_argument("plugin path " + canonical.string() +
                            " is not a regular file; give the path of the plugin's .so file");
  }
  return ResolvedPlugin{path.string(), canonical.string()};
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Anyone who can write the file, or replace it or any directory on the way
// to it, can run code in every rank that loads it. So the file and every
// directory from / down to it must be owned by root or by this user (the
// owner may always chmod and write, whatever the mode bits say) and writable
// by the owner alone: on the path as given or as found in a search directory
// (where a symbolic link could be swapped; a link must be owned by root or
// this user too) and on the resolved path (where the file lives). The one exception
// to the mode rule is a sticky directory (mode +t, like /tmp) owned by root
// or by this user: the sticky bit keeps others from renaming or removing the
// entries they do not own, so such a directory may be writable by all and
// still cannot have the plugin swapped in it.
Status check_permissions(const std::string& given_path, const std::string& plugin_path) {
  const auto refuse = [&](const std::string& component, const char* what, mode_t mode) {
    return Status(StatusCode::kPermission,
                  "refusing plugin " + plugin_path + ": " + what + " " + component + " has mode " +
                      octal_mode(mode) +
                      ", writable by group or others, who could then run code in every rank; "
                      "run `chmod go-w " +
                      component + "`");
  };
  const uid_t self = ::geteuid();
  const auto refuse_owner = [&](const std::string& component, const char* what, uid_t owner) {
    return Status(StatusCode::kPermission,
                  "refusing plugin " + plugin_path + ": " + what + " " + component +
                      " is owned by uid " + std::to_string(owner) +
                      ", neither root nor this user (uid " + std::to_string(self) +
                      "), who could then swap it and run code in every rank; install the plugin "
                      "where only root or you own the file and every directory above it");
  };
  const auto trusted_owner = [&](uid_t owner) { return owner == 0 || owner == self; };
  struct stat st {};
  if (::stat(plugin_path.c_str(), &st) != 0) {
    return not_found("cannot stat " + plugin_path + " while checking plugin " + plugin_path);
  }
  if (!trusted_owner(st.st_uid)) return refuse_owner(plugin_path, "the file", st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return refuse(plugin_path, "the file", st.st_mode);

  std::vector<fs::path> directories;
  for (fs::path dir = fs::path(plugin_path).parent_path();; dir = dir.parent_path()) {
    directories.push_back(dir);
    if (dir == dir.parent_path()) break;
  }
  // The directories holding each component of the path as given, resolved:
  // a link in any of them could be pointed elsewhere by whoever may write it.
  std::error_code ec;
  const fs::path absolute = fs::absolute(given_path, ec);
  fs::path prefix;
  for (const fs::path& part : absolute) {
    prefix /= part;
    // A link's owner may repoint it even in a sticky directory.
    struct stat ls {};
    if (::lstat(prefix.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode) && !trusted_owner(ls.st_uid)) {
      return refuse_owner(prefix.string(), "the symbolic link on its path", ls.st_uid);
    }
    const fs::path holder = fs::canonical(prefix.parent_path(), ec);
    if (!ec) {
      for (fs::path dir = holder;; dir = dir.parent_path()) {
        directories.push_back(dir);
        if (dir == dir.parent_path()) break;
      }
    }
  }
  std::sort(directories.begin(), directories.end());
  directories.erase(std::unique(directories.begin(), directories.end()), directories.end());
  for (const fs::path& dir : directories) {
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0) {
      return not_found("cannot stat " + dir.string() + " while checking plugin " + plugin_path);
    }
    const bool holds_file = dir == fs::path(plugin_path).parent_path();
    const char* what = holds_file ? "its directory" : "the directory on its path";
    if (!trusted_owner(ds.st_uid)) return refuse_owner(dir.string(), what, ds.st_uid);
    if ((ds.st_mode & (S_IWGRP | S_IWOTH)) == 0) continue;
    if ((ds.st_mode & S_ISVTX) != 0) continue;  // owned by root or this user, checked above
    return refuse(dir.string(), what, ds.st_mode);
  }
  return Status::ok();
}

// A file cut short (a copy that ran out of space, a download that stopped)
// passes dlopen's header checks and faults with SIGBUS when the loader
// touches a page past its end. So the ELF header and every segment the
// loader maps must lie inside the file before it is handed to dlopen.
Status check_elf_complete(const std::string& path) {
  constexpr std::uint64_t kMaxPluginBytes = std::uint64_t{1} << 31;
  Result<InputFile> opened = open_input_file(
      path, {"plugin " + path, "give the path of the plugin's .so file", kMaxPluginBytes});
  if (!opened) return opened.status();
  const InputFile file = std::move(opened).value();
  const std::uint64_t size = file.size();
  const auto incomplete = [&](const std::string& why) {
    return invalid_argument(
        "plugin " + path + " is not a complete shared library (" + why + ", file size " +
        std::to_string(size) +
        " bytes); it was truncated or is not a plugin: rebuild or reinstall it");
  };
  const auto read_at = [&](void* out, std::size_t n, std::uint64_t offset) {
    if (offset > size || n > size - offset) return false;
    auto* bytes = static_cast<char*>(out);
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got =
          ::pread(file.fd(), bytes + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<std::size_t>(got);
    }
    return true;
  };
  Elf64_Ehdr header{};
  if (!read_at(&header, sizeof header, 0) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    return incomplete("no ELF header");
  }
  if (header.e_ident[EI_CLASS] != ELFCLASS64) return incomplete("not a 64-bit ELF file");
  const auto table_fits = [&](std::uint64_t offset, std::uint64_t count, std::uint64_t entry) {
    return offset <= size && (count == 0 || entry <= (size - offset) / count);
  };
  if (!table_fits(header.e_phoff, header.e_phnum, header.e_phentsize) ||
      header.e_phentsize < sizeof(Elf64_Phdr)) {
    return incomplete("the program header table ends past the end of the file");
  }
  if (!table_fits(header.e_shoff, header.e_shnum, header.e_shentsize)) {
    return incomplete("the section header table ends past the end of the file");
  }
  for (std::uint16_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    if (!read_at(&segment, sizeof segment,
                 header.e_phoff + std::uint64_t{i} * header.e_phentsize)) {
      return incomplete("program header " + std::to_string(i) + " cannot be read");
    }
    if (segment.p_offset > size || segment.p_filesz > size - segment.p_offset) {
      return incomplete("segment " + std::to_string(i) + " ends at byte " +
                        std::to_string(segment.p_offset + segment.p_filesz));
    }
  }
  return Status::ok();
}

// Whether the table has a scheduler: the 1.1 fields are read only when the
// table's struct_size says they are there.
bool has_schedule_hook(const fulcrum_plugin_v1* table) {
  return FULCRUM_HAS_FIELD(fulcrum_plugin_v1, release_schedule, table->struct_size) &&
         table->schedule != nullptr;
}

// Everything the host relies on before calling through the table.
Status check_table(const fulcrum_plugin_v1* table, const std::string& path) {
  if (table == nullptr) {
    return internal_error("plugin " + path + ": " + FULCRUM_PLUGIN_ENTRY +
                          "() returned no function table (the plugin failed to initialise); "
                          "run it under its own tests or rebuild it");
  }
  if (table->struct_size < kTableHeaderSize) {
    return internal_error("plugin " + path + " has a function table of " +
                          std::to_string(table->struct_size) +
                          " bytes, too small to hold its ABI version; rebuild it against this "
                          "fulcrum");
  }
  if (table->abi_major != FULCRUM_ABI_MAJOR) {
    return internal_error("plugin " + path + " was built for ABI major " +
                          std::to_string(table->abi_major) + ", this host speaks " +
                          std::to_string(FULCRUM_ABI_MAJOR) + "; rebuild it against this fulcrum");
  }
  if (table->struct_size < kTableV1Size) {
    return internal_error("plugin " + path + " has a function table of struct_size " +
                          std::to_string(table->struct_size) + " bytes, smaller than the " +
                          std::to_string(kTableV1Size) +
                          " bytes of ABI v1.0; it was built against a broken c_api.h, rebuild it "
                          "against this fulcrum");
  }
  const std::pair<bool, const char*> required[] = {
      {table->create != nullptr, "create"},
      {table->destroy != nullptr, "destroy"},
      {table->plan_cp != nullptr, "plan_cp"},
      {table->release_plan != nullptr, "release_plan"},
      {table->partition_dp != nullptr, "partition_dp"},
      {table->last_error != nullptr, "last_error"},
  };
  for (const auto& [present, field] : required) {
    if (!present) {
      return internal_error("plugin " + path + ": required function '" + field +
                            "' is null in its table; the plugin is incomplete, implement it and "
                            "rebuild");
    }
  }
  if (table->name == nullptr || table->name[0] == '\0') {
    return internal_error("plugin " + path +
                          " has no name in its table; set fulcrum_plugin_v1::name and rebuild");
  }
  // Names reach messages, JSON and metrics as they are: each must be what
  // the ABI promises (checked_text).
  const auto check_name = [&](const char* text, const std::string& field) {
    Result<std::string> checked = checked_text(text, kMaxNameBytes);
    if (checked) return Status::ok();
    return internal_error("plugin " + path + ": its " + field + " " + checked.status().message() +
                          "; names are UTF-8 without control characters, at most " +
                          std::to_string(kMaxNameBytes) + " bytes: fix the table and rebuild");
  };
  if (Status s = check_name(table->name, "name"); !s) return s;
  struct NameList {
    const char* const* names;
    std::int32_t count;
    const char* field;
  };
  std::vector<NameList> lists = {{table->cp_strategies, table->num_cp_strategies, "cp_strategies"},
                                 {table->dp_strategies, table->num_dp_strategies, "dp_strategies"}};
  // The 1.1 fields exist only in a table whose struct_size covers them; an
  // ABI 1.0 table ends before them and what lies there is not the plugin's.
  if (has_schedule_hook(table)) {
    if (table->release_schedule == nullptr) {
      return internal_error("plugin " + path +
                            ": schedule is set but release_schedule is null, so no schedule it "
                            "returns could be handed back; set both (or neither) and rebuild");
    }
    if (table->num_schedule_strategies < 1) {
      return internal_error("plugin " + path + ": schedule is set but it lists " +
                            std::to_string(table->num_schedule_strategies) +
                            " schedule_strategies; list at least one, or leave schedule null");
    }
    lists.push_back(
        {table->schedule_strategies, table->num_schedule_strategies, "schedule_strategies"});
  }
  for (const auto& list : lists) {
    if (list.count < 0 || list.count > kMaxStrategies) {
      return internal_error("plugin " + path + " lists " + std::to_string(list.count) + " " +
                            list.field + "; expected 0 to " + std::to_string(kMaxStrategies) +
                            ", its table is corrupt");
    }
    if (list.count > 0 && list.names == nullptr) {
      return internal_error("plugin " + path + ": " + list.field + " is null but its count is " +
                            std::to_string(list.count) + "; fix the table and rebuild");
    }
    for (std::int32_t i = 0; i < list.count; ++i) {
      if (list.names[i] == nullptr) {
        return internal_error("plugin " + path + ": " + list.field + "[" + std::to_string(i) +
                              "] is null; fix the table and rebuild");
      }
      if (Status s =
              check_name(list.names[i], std::string(list.field) + "[" + std::to_string(i) + "]");
          !s) {
        return s;
      }
    }
  }
  return Status::ok();
}

LogLevel to_log_level(std::int32_t level) {
  switch (level) {
    case FULCRUM_LOG_DEBUG:
      return LogLevel::kDebug;
    case FULCRUM_LOG_INFO:
      return LogLevel::kInfo;
    case FULCRUM_LOG_ERROR:
      return LogLevel::kError;
    default:
      return LogLevel::kWarning;
  }
}

// ---------------------------------------------------------------------------
// Memory lent to a plugin. A `const` pointer in a request is a promise the
// plugin can break, and the arrays behind it are the host's own batch. So the
// plugin is lent copies, made per call (a copy of the row's lengths costs
// little next to planning it), and after the call each copy is compared with
// the host's original: a plugin that wrote through a `const` pointer is
// named and refused, and never changes what the host schedules or trains.
class LentMemory {
 public:
  // A copy of `host` for the plugin to read: nullptr when it is empty.
  const std::int64_t* lend(const char* field, const std::vector<std::int64_t>& host) {
    Array& lent = arrays_.emplace_back(Array{field, &host, host});
    return lent.copy.empty() ? nullptr : lent.copy.data();
  }
  const char* lend(const char* field, const std::string& host) {
    return texts_.emplace_back(Text{field, &host, host}).copy.c_str();
  }
  // The request struct itself, compared byte for byte after the call.
  template <typename Struct>
  void watch(const char* field, const Struct& request) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&request);
    structs_.push_back(
        Bytes{field, bytes, std::vector<unsigned char>(bytes, bytes + sizeof request)});
  }

  // What the plugin wrote into, as a message names it ("doc_lengths[3]"), or
  // "" when it left everything as lent.
  std::string changed() const {
    for (const Bytes& s : structs_) {
      if (std::memcmp(s.live, s.before.data(), s.before.size()) != 0) {
        return std::string("the request struct ") + s.field;
      }
    }
    for (const Array& a : arrays_) {
      const auto [host, lent] = std::mismatch(a.host->begin(), a.host->end(), a.copy.begin());
      if (host != a.host->end()) {
        const auto at = host - a.host->begin();
        return std::string(a.field) + "[" + std::to_string(at) + "] (" + std::to_string(*host) +
               " lent, " + std::to_string(*lent) + " after the call)";
      }
    }
    for (const Text& t : texts_) {
      // The terminating NUL too: a plugin that overwrote it changed the text.
      if (std::memcmp(t.copy.c_str(), t.host->c_str(), t.host->size() + 1) != 0) {
        return std::string("the string ") + t.field;
      }
    }
    return "";
  }

 private:
  struct Array {
    const char* field;
    const std::vector<std::int64_t>* host;
    std::vector<std::int64_t> copy;
  };
  struct Text {
    const char* field;
    const std::string* host;
    std::string copy;
  };
  struct Bytes {
    const char* field;
    const unsigned char* live;
    std::vector<unsigned char> before;
  };
  // Deques: what was lent keeps its address while more is lent.
  std::deque<Array> arrays_;
  std::deque<Text> texts_;
  std::vector<Bytes> structs_;
};

// ---------------------------------------------------------------------------
// The loaded plugin as a LoadBalancer.

// Destroys a plugin instance through its table.
struct InstanceDeleter {
  void (*destroy)(void*) = nullptr;
  void operator()(void* instance) const noexcept {
    if (instance != nullptr && destroy != nullptr) destroy(instance);
  }
};
using Instance = std::unique_ptr<void, InstanceDeleter>;

// Hands a FULCRUM_OK plan back to the plugin when the copy is done.
class PlanRelease {
 public:
  PlanRelease(const fulcrum_plugin_v1* table, void* instance, fulcrum_cp_plan* plan)
      : table_(table), instance_(instance), plan_(plan) {}
  PlanRelease(const PlanRelease&) = delete;
  PlanRelease& operator=(const PlanRelease&) = delete;
  ~PlanRelease() { table_->release_plan(instance_, plan_); }

 private:
  const fulcrum_plugin_v1* table_;
  void* instance_;
  fulcrum_cp_plan* plan_;
};

// Hands a FULCRUM_OK schedule back to the plugin when the copy is done.
class ScheduleRelease {
 public:
  ScheduleRelease(const fulcrum_plugin_v1* table, void* instance, fulcrum_schedule* schedule)
      : table_(table), instance_(instance), schedule_(schedule) {}
  ScheduleRelease(const ScheduleRelease&) = delete;
  ScheduleRelease& operator=(const ScheduleRelease&) = delete;
  ~ScheduleRelease() { table_->release_schedule(instance_, schedule_); }

 private:
  const fulcrum_plugin_v1* table_;
  void* instance_;
  fulcrum_schedule* schedule_;
};

class PluginBalancer final : public LoadBalancer {
 public:
  PluginBalancer(LibraryHandle library, const fulcrum_plugin_v1* table, std::string path, LogFn log)
      : library_(std::move(library)),
        table_(table),
        path_(std::move(path)),
        name_(table->name),
        log_(std::move(log)) {
    for (std::int32_t i = 0; i < table_->num_cp_strategies; ++i) {
      cp_names_.emplace_back(table_->cp_strategies[i]);
    }
    for (std::int32_t i = 0; i < table_->num_dp_strategies; ++i) {
      dp_names_.emplace_back(table_->dp_strategies[i]);
    }
    if (has_schedule_hook(table_)) {
      for (std::int32_t i = 0; i < table_->num_schedule_strategies; ++i) {
        schedule_names_.emplace_back(table_->schedule_strategies[i]);
      }
    }
    services_.struct_size = FULCRUM_HOST_SERVICES_V1_0_SIZE;
    services_.user_data = this;
    services_.log = &PluginBalancer::forward_log;
  }

  // The instance goes before the library handle can: destroy() is code in
  // the library.
  ~PluginBalancer() override { instance_.reset(); }

  PluginBalancer(const PluginBalancer&) = delete;
  PluginBalancer& operator=(const PluginBalancer&) = delete;

  Status create_instance() {
    void* raw = nullptr;
    const fulcrum_status status = table_->create(&services_, &raw);
    if (status != FULCRUM_OK || raw == nullptr) {
      if (status == FULCRUM_OK) {
        return internal_error("plugin '" + name_ + "' (" + path_ +
                              ") returned no instance from create(); fix the plugin");
      }
      // A failed create() owns nothing the host could safely destroy.
      return internal_error("plugin '" + name_ + "' (" + path_ +
                            ") failed to create an instance (status " + std::to_string(status) +
                            "); see its log above, or run its own tests");
    }
    instance_ = Instance(raw, InstanceDeleter{table_->destroy});
    return Status::ok();
  }

  std::string name() const override { return name_; }
  std::vector<std::string> cp_strategies() const override { return cp_names_; }
  std::vector<std::string> dp_strategies() const override { return dp_names_; }
  std::vector<std::string> schedule_strategies() const override {
    return schedule_names_.empty() ? std::vector<std::string>{detail::kFixedScheduler}
                                   : schedule_names_;
  }

  Result<ShardPlan> plan_cp(std::string_view strategy, const CpWorkload& workload) override {
    // The plugin reads the request's arrays at the sizes N, B and the mask
    // imply; only a valid workload is safe to hand over.
    if (Status s = validate_workload(workload); !s) return s;
    const std::string name(strategy);

    LentMemory lent;
    fulcrum_cp_request request{};
    request.struct_size = FULCRUM_CP_REQUEST_V1_0_SIZE;
    request.cp_size = workload.cp_size;
    request.tokens = workload.tokens;
    request.block_size = workload.block_size;
    request.doc_lengths = lent.lend("doc_lengths", workload.doc_lengths);
    request.num_docs = static_cast<std::int64_t>(workload.doc_lengths.size());
    request.mask_kind = static_cast<std::int32_t>(workload.mask.kind);
    request.mask_param = workload.mask.param;
    if (workload.mask.kind == MaskKind::kBlockSparse) {
      const BlockSparseMask& sparse = workload.mask.block_sparse;
      request.sparse_offsets = lent.lend("sparse_offsets", sparse.offsets);
      request.sparse_kv_blocks = lent.lend("sparse_kv_blocks", sparse.kv_blocks);
    }
    request.strategy = lent.lend("strategy", name);
    lent.watch("fulcrum_cp_request", request);

    ShardPlan plan;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fulcrum_cp_plan answer{};
      answer.struct_size = FULCRUM_CP_PLAN_V1_0_SIZE;
      const fulcrum_status status = table_->plan_cp(instance_.get(), &request, &answer);
      // Handed back exactly once, however the checks below end.
      std::optional<PlanRelease> release;
      if (status == FULCRUM_OK) release.emplace(table_, instance_.get(), &answer);
      if (Status s = check_lent(lent, "strategy", name); !s) return s;
      if (status != FULCRUM_OK) return plugin_failure(status, name);
      if (Status s = copy_plan(answer, workload, name, plan); !s) {
        return with_fix(s, "strategies");
      }
    }
    if (Status s = validate_plan(workload, plan); !s) {
      return with_fix(plugin_fault("plugin '" + name_ + "' strategy " + quote_text(name) +
                                   " returned an invalid plan: " + s.message()),
                      "strategies");
    }
    // The host reports only work it counted: a plugin's own figures are
    // checked against the recount and refused when they differ
    // (docs/PLUGIN_ABI.md, "What the host checks before use", step 6).
    std::vector<RankWork> counted = compute_work(workload, plan);
    for (std::size_t r = 0; r < plan.work.size() && r < counted.size(); ++r) {
      const RankWork& said = plan.work[r];
      const RankWork& real = counted[r];
      const bool pairs_wrong = said.pairs != kNotReported && said.pairs != real.pairs;
      const bool tiles_wrong = said.tiles != kNotReported && said.tiles != real.tiles;
      if (pairs_wrong || tiles_wrong) {
        const char* which = pairs_wrong ? "pairs" : "tiles";
        return with_fix(
            plugin_fault("plugin '" + name_ + "' strategy " + quote_text(name) + " reports " +
                         std::to_string(pairs_wrong ? said.pairs : said.tiles) + " " + which +
                         " for rank " + std::to_string(r) + ", but its plan gives that rank " +
                         std::to_string(pairs_wrong ? real.pairs : real.tiles) + " " + which +
                         "; the host refuses work it cannot confirm"),
            "strategies");
      }
    }
    plan.work = std::move(counted);
    return plan;
  }

  Result<DpPartition> partition_dp(std::string_view strategy, const DpRequest& request) override {
    const std::string name(strategy);
    if (request.num_ranks < 1) {
      return invalid_argument("DP request has num_ranks " + std::to_string(request.num_ranks) +
                              "; it must be at least 1");
    }
    if (request.lengths.empty()) {
      return invalid_argument("DP request has no samples; give at least one length");
    }
    const auto k = static_cast<std::size_t>(request.num_ranks);
    const auto n = static_cast<std::int64_t>(request.lengths.size());
    // The answer goes into the host's buffers, each followed by a guard: a
    // plugin that writes a little past the sizes the request states is named
    // (a lot past faults, which no check after the call can prevent).
    constexpr std::size_t kGuard = 16;
    constexpr std::int64_t kGuardValue = std::numeric_limits<std::int64_t>::min() + 0x5afe;
    std::vector<std::int64_t> offsets(k + 1, 0);
    std::vector<std::int64_t> samples(static_cast<std::size_t>(n), -1);
    offsets.resize(offsets.size() + kGuard, kGuardValue);
    samples.resize(samples.size() + kGuard, kGuardValue);

    LentMemory lent;
    fulcrum_dp_request c_request{};
    c_request.struct_size = FULCRUM_DP_REQUEST_V1_0_SIZE;
    c_request.num_ranks = request.num_ranks;
    c_request.lengths = lent.lend("lengths", request.lengths);
    c_request.num_samples = n;
    c_request.cost_kind = static_cast<std::int32_t>(request.cost.kind);
    c_request.equal_count = request.equal_count ? 1 : 0;
    c_request.attention_a = request.cost.a;
    c_request.strategy = lent.lend("strategy", name);
    lent.watch("fulcrum_dp_request", c_request);

    fulcrum_dp_result result{};
    result.struct_size = FULCRUM_DP_RESULT_V1_0_SIZE;
    result.num_ranks = request.num_ranks;
    result.rank_offsets = offsets.data();
    result.samples = samples.data();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const fulcrum_status status = table_->partition_dp(instance_.get(), &c_request, &result);
      if (Status s = check_lent(lent, "strategy", name); !s) return s;
      for (const auto& [buffer, entries, field] :
           {std::tuple{&offsets, k + 1, "rank_offsets"},
            std::tuple{&samples, static_cast<std::size_t>(n), "samples"}}) {
        const auto past =
            std::find_if(buffer->begin() + static_cast<std::ptrdiff_t>(entries), buffer->end(),
                         [](std::int64_t v) { return v != kGuardValue; });
        if (past != buffer->end()) {
          return plugin_fault("plugin '" + name_ + "' strategy " + quote_text(name) +
                              " wrote past the end of " + field + " (" + std::to_string(entries) +
                              " entries, written at entry " +
                              std::to_string(past - buffer->begin()) +
                              "), memory the host did not lend it; fix the plugin (" + path_ + ")");
        }
      }
      if (status != FULCRUM_OK) return plugin_failure(status, name);
    }

    const std::string bad =
        "plugin '" + name_ + "' strategy " + quote_text(name) + " returned an invalid partition: ";
    const auto invalid = [&](const std::string& why) {
      return with_fix(plugin_fault(bad + why), "strategies");
    };
    if (result.num_ranks != request.num_ranks) {
      return invalid("it has " + std::to_string(result.num_ranks) +
                     " ranks, the request asked for " + std::to_string(request.num_ranks));
    }
    if (offsets[0] != 0 || offsets[k] != n) {
      return invalid("rank offsets span [" + std::to_string(offsets[0]) + ", " +
                     std::to_string(offsets[k]) + "), expected [0, " + std::to_string(n) + ")");
    }
    // Every offset in order before any is used to index samples: a later
    // rank's offset past n must not let an earlier rank read beyond them.
    for (std::size_t r = 0; r < k; ++r) {
      if (offsets[r + 1] < offsets[r]) {
        return invalid("rank " + std::to_string(r + 1) + " starts at offset " +
                       std::to_string(offsets[r + 1]) + ", before rank " + std::to_string(r) +
                       "'s offset " + std::to_string(offsets[r]));
      }
    }
    const std::int64_t fewest = n / request.num_ranks;
    const std::int64_t most = (n + request.num_ranks - 1) / request.num_ranks;
    std::vector<std::int32_t> owner(static_cast<std::size_t>(n), -1);
    DpPartition partition;
    partition.strategy = name;
    partition.ranks.resize(k);
    for (std::size_t r = 0; r < k; ++r) {
      const std::int64_t begin = offsets[r];
      const std::int64_t end = offsets[r + 1];
      if (end < begin) {
        return invalid("rank " + std::to_string(r + 1) + " starts at offset " +
                       std::to_string(end) + ", before rank " + std::to_string(r) + "'s offset " +
                       std::to_string(begin));
      }
      if (request.equal_count && (end - begin < fewest || end - begin > most)) {
        return invalid("rank " + std::to_string(r) + " has " + std::to_string(end - begin) +
                       " samples under equal_count, expected " + std::to_string(fewest) + " or " +
                       std::to_string(most));
      }
      for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t sample = samples[static_cast<std::size_t>(i)];
        if (sample < 0 || sample >= n) {
          return invalid("rank " + std::to_string(r) + " lists sample " + std::to_string(sample) +
                         ", outside [0, " + std::to_string(n) + ")");
        }
        std::int32_t& seen = owner[static_cast<std::size_t>(sample)];
        if (seen >= 0) {
          return invalid("sample " + std::to_string(sample) + " is listed twice (ranks " +
                         std::to_string(seen) + " and " + std::to_string(r) + ")");
        }
        seen = static_cast<std::int32_t>(r);
        partition.ranks[r].push_back(sample);
      }
    }
    // offsets[k] == n and no sample twice: every sample is listed exactly once.
    detail::summarize_partition(request, partition);
    return partition;
  }

  Result<Schedule> schedule(std::string_view strategy, const ScheduleRequest& request) override {
    // The plugin reads doc_lengths at the size the request states; only a
    // valid request is handed over.
    if (Status s = validate_schedule_request(request); !s) return s;
    const std::string name(strategy);
    if (schedule_names_.empty()) return host_fixed_schedule(name, request);

    LentMemory lent;
    fulcrum_schedule_request c_request{};
    c_request.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_2_SIZE;
    c_request.world_size = request.world_size;
    c_request.max_tokens_per_rank = request.max_tokens_per_rank;
    c_request.doc_lengths = lent.lend("doc_lengths", request.doc_lengths);
    c_request.num_docs = static_cast<std::int64_t>(request.doc_lengths.size());
    c_request.mask_kind = static_cast<std::int32_t>(request.mask.kind);
    c_request.cp_size = request.cp_size;
    c_request.mask_param = request.mask.param;
    c_request.block_size = request.block_size;
    c_request.strategy = lent.lend("strategy", name);
    const CostProfile& profile = request.profile;
    c_request.profile_name = lent.lend("profile_name", profile.name);
    c_request.tile_seconds = profile.tile_seconds;
    c_request.token_seconds = profile.token_seconds;
    c_request.slot_seconds = profile.slot_seconds;
    c_request.kv_bytes_per_token = profile.kv_bytes_per_token;
    c_request.intra_node_bytes_per_second = profile.intra_node_bytes_per_second;
    c_request.inter_node_bytes_per_second = profile.inter_node_bytes_per_second;
    c_request.latency_seconds = profile.latency_seconds;
    c_request.ranks_per_node = profile.ranks_per_node;
    // ABI 1.2. A 1.1 plugin does not see the shapes; the schedule it returns
    // is validated against them below all the same.
    const GroupShapes& shapes = request.group_shapes;
    c_request.group_sizes = shapes.sizes;
    c_request.group_flags = (shapes.world ? FULCRUM_GROUPS_WORLD : 0) |
                            (shapes.aligned ? FULCRUM_GROUPS_ALIGNED : 0) |
                            (shapes.every_wave ? FULCRUM_GROUPS_EVERY_WAVE : 0);
    c_request.wave_multiple = shapes.wave_multiple;
    lent.watch("fulcrum_schedule_request", c_request);

    Schedule schedule;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fulcrum_schedule answer{};
      answer.struct_size = FULCRUM_SCHEDULE_V1_1_SIZE;
      const fulcrum_status status = table_->schedule(instance_.get(), &c_request, &answer);
      std::optional<ScheduleRelease> release;
      if (status == FULCRUM_OK) release.emplace(table_, instance_.get(), &answer);
      if (Status s = check_lent(lent, "scheduler", name); !s) return s;
      if (status != FULCRUM_OK) return plugin_failure(status, name);
      if (Status s = copy_schedule(answer, request, name, schedule); !s) {
        return with_fix(s, "schedulers");
      }
    }
    if (Status s = validate_schedule(request, schedule); !s) {
      return with_fix(plugin_fault("plugin '" + name_ + "' scheduler " + quote_text(name) +
                                   " returned an invalid schedule: " + s.message()),
                      "schedulers");
    }
    return schedule;
  }

 private:
  static void forward_log(void* user_data, std::int32_t level, const char* message) noexcept {
    const auto* self = static_cast<const PluginBalancer*>(user_data);
    if (self == nullptr || message == nullptr || !self->log_) return;
    try {
      self->log_(to_log_level(level),
                 "plugin '" + self->name_ + "': " + printable_text(message, kMaxTextBytes));
    } catch (...) {
      // A throwing log sink must not unwind through the plugin's C frames.
    }
  }

  // A refusal of the plugin's answer, ending with what to do.
  Status with_fix(const Status& status, const char* others) const {
    return Status(status.code(), status.message() + "; fix the plugin (" + path_ +
                                     "), or use another of its " + others);
  }

  // Refuses the call when the plugin wrote into anything it was lent.
  Status check_lent(const LentMemory& lent, const char* kind, const std::string& strategy) const {
    const std::string changed = lent.changed();
    if (changed.empty()) return Status::ok();
    return plugin_fault("plugin '" + name_ + "' " + kind + " " + quote_text(strategy) +
                        " wrote into " + changed +
                        ", which the host lent it read-only; the host refuses its answer and "
                        "kept its own data; fix the plugin (" +
                        path_ + ")");
  }

  // Text a plugin answered with (a strategy name, a reason), refused unless
  // it is what the ABI promises.
  Result<std::string> answer_text(const char* text, std::size_t max_bytes, const std::string& bad,
                                  const std::string& field) const {
    Result<std::string> checked = checked_text(text, max_bytes);
    if (!checked) return plugin_fault(bad + field + " " + checked.status().message());
    return checked;
  }

  // Call with mutex_ held: last_error describes the instance's latest call.
  Status plugin_failure(fulcrum_status status, const std::string& strategy) const {
    const char* text = table_->last_error(instance_.get());
    // Shown, not refused: escaped to one line of UTF-8 whatever it holds.
    std::string said = "failed without a message";
    if (text != nullptr && text[0] != '\0') said = printable_text(text, kMaxTextBytes);
    // kUnsupported is an answer, not a failure: its text is the reason a
    // plan records, the plugin's words alone (as the Python package shows it).
    if (status == FULCRUM_UNSUPPORTED && text != nullptr && text[0] != '\0') {
      return unsupported(std::move(said));
    }
    std::string message = "plugin '" + name_ + "' strategy " + quote_text(strategy) + ": " + said;
    switch (status) {
      case FULCRUM_INVALID_ARGUMENT:
        return invalid_argument(std::move(message));
      case FULCRUM_UNSUPPORTED:
        return unsupported(std::move(message));
      case FULCRUM_NOT_FOUND:
        return not_found(std::move(message));
      case FULCRUM_INTERNAL:
        return plugin_fault(message + "; see the plugin's own log or tests (" + path_ + ")");
      default:
        return plugin_fault(message + " (unknown status " +
                            std::to_string(static_cast<int>(status)) + "); fix the plugin (" +
                            path_ + ")");
    }
  }

  // Copies what the plugin owns into host memory; checks only what the copy
  // itself needs (validate_plan judges the rest).
  Status copy_plan(const fulcrum_cp_plan& answer, const CpWorkload& workload,
                   const std::string& strategy, ShardPlan& plan) const {
    const std::string bad =
        "plugin '" + name_ + "' strategy " + quote_text(strategy) + " returned an invalid plan: ";
    if (answer.cp_size != workload.cp_size) {
      return plugin_fault(bad + "cp_size " + std::to_string(answer.cp_size) +
                          ", the workload has cp_size " + std::to_string(workload.cp_size));
    }
    // The counts say how much the host reads from the plugin's buffers: they
    // must agree with each other and stay within what validate_plan accepts
    // before anything is read.
    const std::int64_t longest = (workload.tokens + 1) * kMaxShardFactor;
    if (answer.shard_len < 0 || answer.shard_len > longest) {
      return plugin_fault(bad + "shard_len " + std::to_string(answer.shard_len) +
                          " is outside [0, " + std::to_string(longest) + "]");
    }
    const std::int64_t total = answer.shard_len * answer.cp_size;
    if (answer.padding < 0 || answer.padding != total - workload.tokens) {
      return plugin_fault(bad + std::to_string(answer.cp_size) + " shards of " +
                          std::to_string(answer.shard_len) + " positions hold " +
                          std::to_string(total - workload.tokens) + " pads for " +
                          std::to_string(workload.tokens) + " tokens, but it reports padding " +
                          std::to_string(answer.padding));
    }
    if (total > 0 && answer.positions == nullptr) {
      return plugin_fault(bad + "positions is null with shard_len " +
                          std::to_string(answer.shard_len));
    }
    plan.cp_size = answer.cp_size;
    plan.shard_len = answer.shard_len;
    plan.positions.assign(answer.positions, answer.positions + total);
    plan.padding = answer.padding;
    plan.strategy_used = strategy;
    if (answer.strategy_used != nullptr) {
      Result<std::string> used =
          answer_text(answer.strategy_used, kMaxNameBytes, bad, "strategy_used");
      if (!used) return used.status();
      plan.strategy_used = std::move(used).value();
    }
    if (answer.fallback_reason != nullptr) {
      Result<std::string> reason =
          answer_text(answer.fallback_reason, kMaxTextBytes, bad, "fallback_reason");
      if (!reason) return reason.status();
      plan.fallback_reason = std::move(reason).value();
    }
    // The work the plugin reports is kept only to be checked against the
    // host's own recount in plan_cp; an array it leaves null reads as
    // kNotReported. Either array may come alone.
    plan.work.clear();
    if (answer.rank_pairs != nullptr || answer.rank_tiles != nullptr) {
      plan.work.resize(static_cast<std::size_t>(answer.cp_size));
      for (std::int32_t r = 0; r < answer.cp_size; ++r) {
        RankWork& w = plan.work[static_cast<std::size_t>(r)];
        w.pairs = answer.rank_pairs != nullptr ? answer.rank_pairs[r] : kNotReported;
        w.tiles = answer.rank_tiles != nullptr ? answer.rank_tiles[r] : kNotReported;
      }
    }
    return Status::ok();
  }

  // A plugin without a scheduler still gets a schedule, the host's fixed one
  // built from the plugin's own CP plans and DP partitions; the answer says
  // so. A row the plugin cannot plan is sharded contiguously, as plan_cp's
  // callers fall back elsewhere.
  Result<Schedule> host_fixed_schedule(const std::string& requested,
                                       const ScheduleRequest& request) {
    const std::string cp = detail::fixed_schedule_strategy(cp_names_);
    const std::string dp = detail::fixed_schedule_strategy(dp_names_);
    const bool abi_1_0 =
        !FULCRUM_HAS_FIELD(fulcrum_plugin_v1, release_schedule, table_->struct_size);
    std::string why = "plugin '" + name_ + "' " +
                      (abi_1_0 ? "speaks ABI 1." + std::to_string(table_->abi_minor) +
                                     ", which has no schedule hook"
                               : std::string("has no scheduler")) +
                      "; the host's built-in fixed schedule served";
    if (requested != detail::kFixedScheduler) why += " instead of " + quote_text(requested);
    why += " (CP plans from its " + quote_text(cp) + ", DP from its " + quote_text(dp) + ")";
    PlanFn plan = [this, cp](const CpWorkload& w) -> Result<ShardPlan> {
      if (!cp.empty()) {
        Result<ShardPlan> planned = plan_cp(cp, w);
        if (planned) return planned;
      }
      ShardPlan fallback = contiguous_plan(w);
      fallback.fallback_reason = "the plugin's CP planner could not serve this row";
      return fallback;
    };
    PartitionFn partition = [this, dp](const DpRequest& r) -> Result<DpPartition> {
      if (dp.empty()) return builtin_balancer()->partition_dp("round_robin", r);
      return partition_dp(dp, r);
    };
    return detail::builtin_fixed_schedule(request, plan, partition, why);
  }

  // Copies what the plugin owns into host memory, checking only what the
  // copy itself needs: offsets in order and within bounds the batch implies,
  // so that no array is read past what a valid schedule could hold.
  // validate_schedule judges the rest.
  Status copy_schedule(const fulcrum_schedule& answer, const ScheduleRequest& request,
                       const std::string& strategy, Schedule& schedule) const {
    const std::string bad = "plugin '" + name_ + "' scheduler " + quote_text(strategy) +
                            " returned an invalid schedule: ";
    const auto num_pieces = static_cast<std::int64_t>(schedule_pieces(request).size());
    const std::int64_t world = request.world_size;
    std::int64_t batch_tokens = 0;
    for (std::int64_t length : request.doc_lengths) batch_tokens += length;
    // Every slot runs at least one piece, so a valid schedule has no more
    // slots than pieces.
    if (answer.num_slots < 0 || answer.num_slots > num_pieces) {
      return plugin_fault(bad + "num_slots " + std::to_string(answer.num_slots) +
                          " is outside [0, " + std::to_string(num_pieces) +
                          "], the batch's piece count");
    }
    const auto slots = static_cast<std::size_t>(answer.num_slots);
    if (answer.slot_rank_offsets == nullptr || answer.slot_piece_offsets == nullptr ||
        (slots > 0 && (answer.ranks == nullptr || answer.piece_docs == nullptr ||
                       answer.piece_starts == nullptr || answer.piece_lengths == nullptr ||
                       answer.slot_waves == nullptr || answer.slot_shard_lens == nullptr ||
                       answer.slot_padding == nullptr))) {
      return plugin_fault(bad + "an array it needs is null (" + std::to_string(slots) + " slots)");
    }
    if (answer.slot_rank_offsets[0] != 0 || answer.slot_piece_offsets[0] != 0) {
      return plugin_fault(bad + "its offset arrays do not start at 0");
    }
    schedule.slots.resize(slots);
    std::int64_t position_at = 0;
    for (std::size_t s = 0; s < slots; ++s) {
      const std::string where = "slot " + std::to_string(s) + ": ";
      const std::int64_t rank_begin = answer.slot_rank_offsets[s];
      const std::int64_t rank_end = answer.slot_rank_offsets[s + 1];
      if (rank_end - rank_begin < 1 || rank_end - rank_begin > world) {
        return plugin_fault(bad + where + "rank offsets [" + std::to_string(rank_begin) + ", " +
                            std::to_string(rank_end) + ") give a group of " +
                            std::to_string(rank_end - rank_begin) + " ranks, expected 1 to " +
                            std::to_string(world));
      }
      const std::int64_t piece_begin = answer.slot_piece_offsets[s];
      const std::int64_t piece_end = answer.slot_piece_offsets[s + 1];
      if (piece_end < piece_begin || piece_end > num_pieces) {
        return plugin_fault(bad + where + "piece offsets [" + std::to_string(piece_begin) + ", " +
                            std::to_string(piece_end) + ") are out of order or past the batch's " +
                            std::to_string(num_pieces) + " pieces");
      }
      ScheduleSlot& slot = schedule.slots[s];
      slot.ranks.assign(answer.ranks + rank_begin, answer.ranks + rank_end);
      std::int64_t row_tokens = 0;
      for (std::int64_t p = piece_begin; p < piece_end; ++p) {
        const DocPiece piece{answer.piece_docs[p], answer.piece_starts[p], answer.piece_lengths[p]};
        if (piece.length < 1 || piece.length > batch_tokens) {
          return plugin_fault(bad + where + "piece " + std::to_string(p - piece_begin) +
                              " has length " + std::to_string(piece.length) + ", outside [1, " +
                              std::to_string(batch_tokens) + "]");
        }
        row_tokens += piece.length;  // at most num_pieces * batch_tokens: no overflow
        slot.pieces.push_back(piece);
      }
      slot.wave = answer.slot_waves[s];
      const auto g = static_cast<std::int32_t>(rank_end - rank_begin);
      const std::int64_t shard_len = answer.slot_shard_lens[s];
      // Bounds the copy only: a valid plan holds at most T per member, and
      // validate_schedule names a shard past T; past row + T it is garbage.
      const std::int64_t longest = row_tokens + request.max_tokens_per_rank;
      if (shard_len < 0 || shard_len > longest) {
        return plugin_fault(bad + where + "shard_len " + std::to_string(shard_len) +
                            " is outside [0, " + std::to_string(longest) +
                            "], the row plus the budget");
      }
      slot.plan.cp_size = g;
      slot.plan.shard_len = shard_len;
      slot.plan.padding = answer.slot_padding[s];
      const std::int64_t entries = shard_len * g;
      if (entries > 0 && answer.positions == nullptr) {
        return plugin_fault(bad + where + "positions is null with shard_len " +
                            std::to_string(shard_len));
      }
      slot.plan.positions.assign(answer.positions + position_at,
                                 answer.positions + position_at + entries);
      position_at += entries;
      const char* plan_strategy =
          answer.slot_plan_strategies != nullptr ? answer.slot_plan_strategies[s] : nullptr;
      slot.plan.strategy_used = strategy;
      if (plan_strategy != nullptr) {
        Result<std::string> used = answer_text(plan_strategy, kMaxNameBytes, bad + where,
                                               "slot_plan_strategies[" + std::to_string(s) + "]");
        if (!used) return used.status();
        slot.plan.strategy_used = std::move(used).value();
      }
    }
    schedule.strategy_used = strategy;
    if (answer.strategy_used != nullptr) {
      Result<std::string> used =
          answer_text(answer.strategy_used, kMaxNameBytes, bad, "strategy_used");
      if (!used) return used.status();
      schedule.strategy_used = std::move(used).value();
    }
    if (answer.fallback_reason != nullptr) {
      Result<std::string> reason =
          answer_text(answer.fallback_reason, kMaxTextBytes, bad, "fallback_reason");
      if (!reason) return reason.status();
      schedule.fallback_reason = std::move(reason).value();
    }
    return Status::ok();
  }

  // Declaration order is destruction order in reverse: instance_ goes first,
  // library_ last.
  LibraryHandle library_;
  const fulcrum_plugin_v1* table_;
  std::string path_;
  std::string name_;
  std::vector<std::string> cp_names_;
  std::vector<std::string> dp_names_;
  std::vector<std::string> schedule_names_;  // empty: the plugin has no scheduler
  LogFn log_;
  fulcrum_host_services services_{};
  std::mutex mutex_;  // one thread at a time per instance (c_api.h)
  Instance instance_;
};

}  // namespace

std::vector<std::string> default_search_dirs() {
  std::vector<std::string> dirs;
  auto add = [&dirs](std::string dir) {
    if (dir.empty()) return;
    for (const std::string& known : dirs) {
      if (known == dir) return;
    }
    dirs.push_back(std::move(dir));
  };
  if (const char* env = std::getenv("FULCRUM_PLUGIN_PATH"); env != nullptr) {
    std::string_view rest(env);
    while (!rest.empty()) {
      const std::size_t colon = rest.find(':');
      add(std::string(rest.substr(0, colon)));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  // Build and install trees alike: <prefix>/bin/<exe> and <prefix>/<libdir>/fulcrum.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path()) {
    const fs::path prefix = exe.parent_path().parent_path();
    add((prefix / "lib" / "fulcrum").lexically_normal().string());
    add((prefix / FULCRUM_PLUGIN_SUBDIR).lexically_normal().string());
  }
  return dirs;
}

Result<std::shared_ptr<LoadBalancer>> load_plugin(std::string_view name_or_path,
                                                  const LoaderOptions& options) {
  Result<ResolvedPlugin> resolved = resolve_plugin_path(name_or_path, options);
  if (!resolved) return resolved.status();
  const std::string& path = resolved->canonical;
  if (options.check_permissions) {
    if (Status s = check_permissions(resolved->found, path); !s) return s;
  }
  if (Status s = check_elf_complete(path); !s) return s;
  Result<LibraryHandle> library = open_library(path);
  if (!library) return library.status();

  dlerror();
  void* entry = dlsym(library->get(), FULCRUM_PLUGIN_ENTRY);
  if (entry == nullptr) {
    const char* why = dlerror();
    return internal_error("plugin " + path + " does not export " + FULCRUM_PLUGIN_ENTRY + " (" +
                          (why != nullptr ? why : "symbol is null") +
                          "); is it a fulcrum plugin? Export one with FULCRUM_EXPORT_PLUGIN");
  }
  const fulcrum_plugin_v1* table = nullptr;
  try {
    table = reinterpret_cast<fulcrum_get_plugin_fn>(entry)();
  } catch (...) {
    return internal_error("plugin " + path + ": " + FULCRUM_PLUGIN_ENTRY +
                          "() threw an exception; it must not, fix the plugin");
  }
  if (Status s = check_table(table, path); !s) return s;

  auto balancer = std::make_shared<PluginBalancer>(*library, table, path, options.log);
  if (Status s = balancer->create_instance(); !s) return s;
  if (options.log) {
    std::string message = "loaded plugin '" + balancer->name() + "' (ABI " +
                          std::to_string(table->abi_major) + "." +
                          std::to_string(table->abi_minor) + ") from " + path;
    if (table->abi_minor > FULCRUM_ABI_MINOR) {
      message += "; it is newer than this host's ABI " + std::to_string(FULCRUM_ABI_MAJOR) + "." +
                 std::to_string(FULCRUM_ABI_MINOR) + ", so its newer functions go unused";
    }
    if (!has_schedule_hook(table)) {
      message += "; it has no scheduler, so schedules come from the host's built-in fixed one";
    }
    options.log(LogLevel::kDebug, message);
  }
  return std::shared_ptr<LoadBalancer>(std::move(balancer));
}

namespace detail {

long library_use_count(const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(path, ec);
  if (ec) return 0;
  LibraryCache& cache = library_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const auto found = cache.by_path.find(canonical.string());
  return found == cache.by_path.end() ? 0 : found->second.use_count();
}

}  // namespace detail
}  // namespace fulcrum::host
