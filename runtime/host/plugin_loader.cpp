// Loading a balancer plugin and presenting it as a fulcrum::LoadBalancer.
//
// Trust boundary: a plugin runs in every rank, so the loader refuses a file
// anyone but its owner may write, checks the table before calling through it,
// and validates every answer before the host uses it. Nothing C++ crosses the
// C table: requests are built into plain structs, answers are copied out and
// plan buffers are handed back with release_plan exactly once.
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
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
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
// Finding the file and deciding whether to trust it.

std::string library_file_name(std::string_view name) {
  if (name.size() > 3 && name.substr(name.size() - 3) == ".so") return std::string(name);
  return "lib" + std::string(name) + ".so";
}

Result<std::string> resolve_plugin_path(std::string_view name_or_path,
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
  return canonical.string();
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Anyone who can write the file, or replace it or any directory on the way
// to it, can run code in every rank that loads it. So the file and every
// directory from / down to it must be writable by the owner alone: on the
// path as given (where a symbolic link could be swapped) and on the resolved
// path (where the file lives). The one exception is a sticky directory (mode
// +t, like /tmp) owned by root or by this user: the sticky bit keeps others
// from renaming or removing the entries they do not own, so such a directory
// may be writable by all and still cannot have the plugin swapped in it.
Status check_permissions(const std::string& given_path, const std::string& plugin_path) {
  const auto refuse = [&](const std::string& component, const char* what, mode_t mode) {
    return Status(StatusCode::kPermission,
                  "refusing plugin " + plugin_path + ": " + what + " " + component + " has mode " +
                      octal_mode(mode) +
                      ", writable by group or others, who could then run code in every rank; "
                      "run `chmod go-w " +
                      component + "`");
  };
  struct stat st {};
  if (::stat(plugin_path.c_str(), &st) != 0) {
    return not_found("cannot stat " + plugin_path + " while checking plugin " + plugin_path);
  }
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
    if ((ds.st_mode & (S_IWGRP | S_IWOTH)) == 0) continue;
    const bool trusted_sticky =
        (ds.st_mode & S_ISVTX) != 0 && (ds.st_uid == 0 || ds.st_uid == ::geteuid());
    if (trusted_sticky) continue;
    const bool holds_file = dir == fs::path(plugin_path).parent_path();
    return refuse(dir.string(), holds_file ? "its directory" : "the directory on its path",
                  ds.st_mode);
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

    fulcrum_cp_request request{};
    request.struct_size = FULCRUM_CP_REQUEST_V1_0_SIZE;
    request.cp_size = workload.cp_size;
    request.tokens = workload.tokens;
    request.block_size = workload.block_size;
    request.doc_lengths = workload.doc_lengths.empty() ? nullptr : workload.doc_lengths.data();
    request.num_docs = static_cast<std::int64_t>(workload.doc_lengths.size());
    request.mask_kind = static_cast<std::int32_t>(workload.mask.kind);
    request.mask_param = workload.mask.param;
    if (workload.mask.kind == MaskKind::kBlockSparse) {
      const BlockSparseMask& sparse = workload.mask.block_sparse;
      request.sparse_offsets = sparse.offsets.data();
      request.sparse_kv_blocks = sparse.kv_blocks.empty() ? nullptr : sparse.kv_blocks.data();
    }
    request.strategy = name.c_str();

    ShardPlan plan;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fulcrum_cp_plan answer{};
      answer.struct_size = FULCRUM_CP_PLAN_V1_0_SIZE;
      const fulcrum_status status = table_->plan_cp(instance_.get(), &request, &answer);
      if (status != FULCRUM_OK) return plugin_failure(status, name);
      // Handed back exactly once, however the copy below ends.
      const PlanRelease release{table_, instance_.get(), &answer};
      if (Status s = copy_plan(answer, workload, name, plan); !s) return s;
    }
    if (Status s = validate_plan(workload, plan); !s) {
      return internal_error("plugin '" + name_ + "' strategy " + quote_text(name) +
                            " returned an invalid plan: " + s.message());
    }
    if (plan.work.empty()) plan.work = compute_work(workload, plan);
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
    std::vector<std::int64_t> offsets(k + 1, 0);
    std::vector<std::int64_t> samples(static_cast<std::size_t>(n), -1);

    fulcrum_dp_request c_request{};
    c_request.struct_size = FULCRUM_DP_REQUEST_V1_0_SIZE;
    c_request.num_ranks = request.num_ranks;
    c_request.lengths = request.lengths.data();
    c_request.num_samples = n;
    c_request.cost_kind = static_cast<std::int32_t>(request.cost.kind);
    c_request.equal_count = request.equal_count ? 1 : 0;
    c_request.attention_a = request.cost.a;
    c_request.strategy = name.c_str();

    fulcrum_dp_result result{};
    result.struct_size = FULCRUM_DP_RESULT_V1_0_SIZE;
    result.num_ranks = request.num_ranks;
    result.rank_offsets = offsets.data();
    result.samples = samples.data();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const fulcrum_status status = table_->partition_dp(instance_.get(), &c_request, &result);
      if (status != FULCRUM_OK) return plugin_failure(status, name);
    }

    const std::string bad =
        "plugin '" + name_ + "' strategy " + quote_text(name) + " returned an invalid partition: ";
    if (result.num_ranks != request.num_ranks) {
      return internal_error(bad + "it has " + std::to_string(result.num_ranks) +
                            " ranks, the request asked for " + std::to_string(request.num_ranks));
    }
    if (offsets[0] != 0 || offsets[k] != n) {
      return internal_error(bad + "rank offsets span [" + std::to_string(offsets[0]) + ", " +
                            std::to_string(offsets[k]) + "), expected [0, " + std::to_string(n) +
                            ")");
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
        return internal_error(bad + "rank " + std::to_string(r + 1) + " starts at offset " +
                              std::to_string(end) + ", before rank " + std::to_string(r) +
                              "'s offset " + std::to_string(begin));
      }
      if (request.equal_count && (end - begin < fewest || end - begin > most)) {
        return internal_error(bad + "rank " + std::to_string(r) + " has " +
                              std::to_string(end - begin) +
                              " samples under equal_count, expected " + std::to_string(fewest) +
                              " or " + std::to_string(most));
      }
      for (std::int64_t i = begin; i < end; ++i) {
        const std::int64_t sample = samples[static_cast<std::size_t>(i)];
        if (sample < 0 || sample >= n) {
          return internal_error(bad + "rank " + std::to_string(r) + " lists sample " +
                                std::to_string(sample) + ", outside [0, " + std::to_string(n) +
                                ")");
        }
        std::int32_t& seen = owner[static_cast<std::size_t>(sample)];
        if (seen >= 0) {
          return internal_error(bad + "sample " + std::to_string(sample) +
                                " is listed twice (ranks " + std::to_string(seen) + " and " +
                                std::to_string(r) + ")");
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

    fulcrum_schedule_request c_request{};
    c_request.struct_size = FULCRUM_SCHEDULE_REQUEST_V1_2_SIZE;
    c_request.world_size = request.world_size;
    c_request.max_tokens_per_rank = request.max_tokens_per_rank;
    c_request.doc_lengths = request.doc_lengths.data();
    c_request.num_docs = static_cast<std::int64_t>(request.doc_lengths.size());
    c_request.mask_kind = static_cast<std::int32_t>(request.mask.kind);
    c_request.cp_size = request.cp_size;
    c_request.mask_param = request.mask.param;
    c_request.block_size = request.block_size;
    c_request.strategy = name.c_str();
    const CostProfile& profile = request.profile;
    c_request.profile_name = profile.name.c_str();
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

    Schedule schedule;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fulcrum_schedule answer{};
      answer.struct_size = FULCRUM_SCHEDULE_V1_1_SIZE;
      const fulcrum_status status = table_->schedule(instance_.get(), &c_request, &answer);
      if (status != FULCRUM_OK) return plugin_failure(status, name);
      const ScheduleRelease release{table_, instance_.get(), &answer};
      if (Status s = copy_schedule(answer, request, name, schedule); !s) return s;
    }
    if (Status s = validate_schedule(request, schedule); !s) {
      return internal_error("plugin '" + name_ + "' scheduler " + quote_text(name) +
                            " returned an invalid schedule: " + s.message() +
                            "; fix the plugin, or use another of its schedulers");
    }
    return schedule;
  }

 private:
  static void forward_log(void* user_data, std::int32_t level, const char* message) noexcept {
    const auto* self = static_cast<const PluginBalancer*>(user_data);
    if (self == nullptr || message == nullptr || !self->log_) return;
    try {
      self->log_(to_log_level(level), "plugin '" + self->name_ + "': " + message);
    } catch (...) {
      // A throwing log sink must not unwind through the plugin's C frames.
    }
  }

  // Call with mutex_ held: last_error describes the instance's latest call.
  Status plugin_failure(fulcrum_status status, const std::string& strategy) const {
    const char* text = table_->last_error(instance_.get());
    // The plugin's text is quoted unchecked elsewhere; keep it one line here.
    std::string said = "failed without a message";
    if (text != nullptr && text[0] != '\0') {
      const std::string_view view(text);
      said = quote_text(view, view.size());
      said = said.substr(1, said.size() - 2);
    }
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
        return internal_error(std::move(message));
      default:
        return internal_error(message + " (unknown status " +
                              std::to_string(static_cast<int>(status)) + ")");
    }
  }

  // Copies what the plugin owns into host memory; checks only what the copy
  // itself needs (validate_plan judges the rest).
  Status copy_plan(const fulcrum_cp_plan& answer, const CpWorkload& workload,
                   const std::string& strategy, ShardPlan& plan) const {
    const std::string bad =
        "plugin '" + name_ + "' strategy " + quote_text(strategy) + " returned an invalid plan: ";
    if (answer.cp_size != workload.cp_size) {
      return internal_error(bad + "cp_size " + std::to_string(answer.cp_size) +
                            ", the workload has cp_size " + std::to_string(workload.cp_size));
    }
    if (answer.shard_len < 0 ||
        answer.shard_len > std::numeric_limits<std::int64_t>::max() / answer.cp_size) {
      return internal_error(bad + "shard_len " + std::to_string(answer.shard_len) +
                            " is out of range");
    }
    const std::int64_t total = answer.shard_len * answer.cp_size;
    if (total > 0 && answer.positions == nullptr) {
      return internal_error(bad + "positions is null with shard_len " +
                            std::to_string(answer.shard_len));
    }
    plan.cp_size = answer.cp_size;
    plan.shard_len = answer.shard_len;
    plan.positions.assign(answer.positions, answer.positions + total);
    plan.padding = answer.padding;
    plan.strategy_used = answer.strategy_used != nullptr ? answer.strategy_used : strategy;
    plan.fallback_reason = answer.fallback_reason != nullptr ? answer.fallback_reason : "";
    if (answer.rank_pairs != nullptr && answer.rank_tiles != nullptr) {
      plan.work.resize(static_cast<std::size_t>(answer.cp_size));
      for (std::int32_t r = 0; r < answer.cp_size; ++r) {
        RankWork& w = plan.work[static_cast<std::size_t>(r)];
        w.pairs = answer.rank_pairs[r];
        w.tiles = answer.rank_tiles[r];
        for (const std::int64_t* p = plan.rank_begin(r); p != plan.rank_end(r); ++p) {
          if (*p != kPadPosition) ++w.tokens;
        }
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
      return internal_error(bad + "num_slots " + std::to_string(answer.num_slots) +
                            " is outside [0, " + std::to_string(num_pieces) +
                            "], the batch's piece count");
    }
    const auto slots = static_cast<std::size_t>(answer.num_slots);
    if (answer.slot_rank_offsets == nullptr || answer.slot_piece_offsets == nullptr ||
        (slots > 0 && (answer.ranks == nullptr || answer.piece_docs == nullptr ||
                       answer.piece_starts == nullptr || answer.piece_lengths == nullptr ||
                       answer.slot_waves == nullptr || answer.slot_shard_lens == nullptr ||
                       answer.slot_padding == nullptr))) {
      return internal_error(bad + "an array it needs is null (" + std::to_string(slots) +
                            " slots)");
    }
    if (answer.slot_rank_offsets[0] != 0 || answer.slot_piece_offsets[0] != 0) {
      return internal_error(bad + "its offset arrays do not start at 0");
    }
    schedule.slots.resize(slots);
    std::int64_t position_at = 0;
    for (std::size_t s = 0; s < slots; ++s) {
      const std::string where = "slot " + std::to_string(s) + ": ";
      const std::int64_t rank_begin = answer.slot_rank_offsets[s];
      const std::int64_t rank_end = answer.slot_rank_offsets[s + 1];
      if (rank_end - rank_begin < 1 || rank_end - rank_begin > world) {
        return internal_error(bad + where + "rank offsets [" + std::to_string(rank_begin) + ", " +
                              std::to_string(rank_end) + ") give a group of " +
                              std::to_string(rank_end - rank_begin) + " ranks, expected 1 to " +
                              std::to_string(world));
      }
      const std::int64_t piece_begin = answer.slot_piece_offsets[s];
      const std::int64_t piece_end = answer.slot_piece_offsets[s + 1];
      if (piece_end < piece_begin || piece_end > num_pieces) {
        return internal_error(bad + where + "piece offsets [" + std::to_string(piece_begin) + ", " +
                              std::to_string(piece_end) +
                              ") are out of order or past the batch's " +
                              std::to_string(num_pieces) + " pieces");
      }
      ScheduleSlot& slot = schedule.slots[s];
      slot.ranks.assign(answer.ranks + rank_begin, answer.ranks + rank_end);
      std::int64_t row_tokens = 0;
      for (std::int64_t p = piece_begin; p < piece_end; ++p) {
        const DocPiece piece{answer.piece_docs[p], answer.piece_starts[p], answer.piece_lengths[p]};
        if (piece.length < 1 || piece.length > batch_tokens) {
          return internal_error(bad + where + "piece " + std::to_string(p - piece_begin) +
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
        return internal_error(bad + where + "shard_len " + std::to_string(shard_len) +
                              " is outside [0, " + std::to_string(longest) +
                              "], the row plus the budget");
      }
      slot.plan.cp_size = g;
      slot.plan.shard_len = shard_len;
      slot.plan.padding = answer.slot_padding[s];
      const std::int64_t entries = shard_len * g;
      if (entries > 0 && answer.positions == nullptr) {
        return internal_error(bad + where + "positions is null with shard_len " +
                              std::to_string(shard_len));
      }
      slot.plan.positions.assign(answer.positions + position_at,
                                 answer.positions + position_at + entries);
      position_at += entries;
      const char* plan_strategy =
          answer.slot_plan_strategies != nullptr ? answer.slot_plan_strategies[s] : nullptr;
      slot.plan.strategy_used = plan_strategy != nullptr ? plan_strategy : strategy;
    }
    schedule.strategy_used = answer.strategy_used != nullptr ? answer.strategy_used : strategy;
    schedule.fallback_reason = answer.fallback_reason != nullptr ? answer.fallback_reason : "";
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
  Result<std::string> resolved = resolve_plugin_path(name_or_path, options);
  if (!resolved) return resolved.status();
  const std::string& path = *resolved;
  if (options.check_permissions) {
    if (Status s = check_permissions(std::string(name_or_path).find('/') != std::string::npos
                                         ? std::string(name_or_path)
                                         : path,
                                     path);
        !s) {
      return s;
    }
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
