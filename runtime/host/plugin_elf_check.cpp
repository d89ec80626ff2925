// Whether a plugin file is a whole shared library before dlopen maps it.
#include <elf.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "input_file.h"
#include "plugin_loader_internal.h"

namespace fulcrum::host::detail {

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

}  // namespace fulcrum::host::detail
