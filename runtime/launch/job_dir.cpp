#include "launch/job_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host/input_file.h"
#include "host/trusted_directory.h"

namespace fulcrum::launch {
namespace {

// A stall report names a few ranks and collectives; anything longer is not one.
constexpr std::size_t kMaxStallReportBytes = 1 << 20;

}  // namespace

JobDir::JobDir() {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::temp_directory_path(ec);
  if (ec) parent = "/tmp";
  // The real directory, links resolved once: a link another user owns must
  // not be able to point the job elsewhere later.
  std::filesystem::path real = std::filesystem::canonical(parent, ec);
  if (!ec) {
    if (std::string why = host::untrusted_directory(real); !why.empty()) {
      error_ = "the job's private directory would be made in " + parent.string() + ", but " + why +
               ": that user could replace it and make the ranks write where they "
               "choose; set TMPDIR to a directory only you or root can change (like /tmp)";
      return;
    }
    parent = real;
  }
  std::string pattern = (parent / "fulcrum-launch-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    error_ = "cannot create the job's private directory " + pattern + " (" + std::strerror(errno) +
             "); set TMPDIR to a directory this user can write";
    return;
  }
  path_ = pattern;
  if (::mkdir(rendezvous_path().c_str(), 0700) != 0) {
    error_ = "cannot create the job's rendezvous directory " + rendezvous_path() + " (" +
             std::strerror(errno) + "); set TMPDIR to a directory this user can write";
  }
}

JobDir::~JobDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

bool JobDir::has(const std::string& name) const {
  struct stat st {};
  return !path_.empty() && ::lstat((path_ + "/" + name).c_str(), &st) == 0;
}

std::optional<std::vector<comm::StallReport>> JobDir::read(int first) const {
  if (path_.empty()) return std::nullopt;
  std::vector<comm::StallReport> reports;
  bool have_first = false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(path_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 7 || name.compare(name.size() - 6, 6, ".stall") != 0 || name[0] == '.') {
      continue;
    }
    const std::optional<std::string> text =
        host::read_transient_file(entry.path().string(), kMaxStallReportBytes);
    if (!text) continue;
    Result<comm::StallReport> report = comm::StallReport::decode(*text);
    if (!report) continue;
    if (report->reporter == first) {
      have_first = true;
      reports.insert(reports.begin(), std::move(report).value());
    } else {
      reports.push_back(std::move(report).value());
    }
  }
  if (reports.empty()) return std::nullopt;
  if (!have_first && !noted_lost_peer(first)) return std::nullopt;
  return reports;
}

}  // namespace fulcrum::launch
