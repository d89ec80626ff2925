// Private to fulcrum::host and its tests: the steps of loading a plugin
// (finding it, deciding whether to trust it, opening it, checking its table)
// and the bounds on text from it, shared by the files that implement them.
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fulcrum/c_api.h"
#include "fulcrum/host/plugin_loader.h"
#include "fulcrum/status.h"

namespace fulcrum::host::detail {

// The v1.0 end of the table: later minor versions append after it, so this,
// not sizeof, is the smallest table the host accepts.
constexpr std::uint32_t kTableV1Size = FULCRUM_PLUGIN_V1_0_SIZE;
// struct_size, abi_major and abi_minor open every version of the table.
constexpr std::uint32_t kTableHeaderSize = FULCRUM_STRUCT_SIZE(fulcrum_plugin_v1, abi_minor);
// More strategies than this means the count field is garbage.
constexpr std::int32_t kMaxStrategies = 4096;

// Names: the table's, its strategies', the strategy an answer says it used.
constexpr std::size_t kMaxNameBytes = 256;
// Free text: fallback reasons, last_error, log lines.
constexpr std::size_t kMaxTextBytes = 4096;

// ---------------------------------------------------------------------------
// Shared library handles (plugin_library.cpp): one per canonical path while
// any balancer uses it.

using LibraryHandle = std::shared_ptr<void>;

// The open library at canonical `path`, shared with every live balancer
// loaded from it, or dlopen's reason it cannot be opened.
Result<LibraryHandle> open_library(const std::string& path);

// Owners of the shared handle of the plugin file at `path` (canonicalised):
// one per live balancer loaded from it; 0 when no balancer holds it.
long library_use_count(const std::string& path);

// ---------------------------------------------------------------------------
// Finding the file (plugin_search.cpp) and deciding whether to trust it
// (plugin_permissions.cpp, plugin_elf_check.cpp, plugin_table_check.cpp).

// Where a plugin was found: the path as given or as found in a search
// directory (`dir/file`, links and all), and the file it resolves to. The
// permission check walks both, since a link on the path as found could be
// pointed elsewhere by whoever may write the directory holding it.
struct ResolvedPlugin {
  std::string found;
  std::string canonical;
};

Result<ResolvedPlugin> resolve_plugin_path(std::string_view name_or_path,
                                           const LoaderOptions& options);

// OK when the file at `plugin_path`, found at `given_path`, and every
// directory above either may be written only by root or this user.
Status check_permissions(const std::string& given_path, const std::string& plugin_path);

// OK when the ELF header and every segment the loader maps lie inside the
// file at `path`.
Status check_elf_complete(const std::string& path);

// Whether the table has a scheduler: the 1.1 fields are read only when the
// table's struct_size says they are there.
bool has_schedule_hook(const fulcrum_plugin_v1* table);

// Everything the host relies on before calling through the table.
Status check_table(const fulcrum_plugin_v1* table, const std::string& path);

// ---------------------------------------------------------------------------
// Text from a plugin (plugin_text.cpp).

// `text` as the ABI promises it (NUL-terminated within max_bytes, UTF-8
// without control characters), or why not (what a message says after the
// field's name).
Result<std::string> checked_text(const char* text, std::size_t max_bytes);

// `text` made safe to print on one line whatever it holds, cut after
// max_bytes.
std::string printable_text(const char* text, std::size_t max_bytes);

}  // namespace fulcrum::host::detail
