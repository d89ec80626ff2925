#include "comm/progress_board.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

namespace fulcrum::comm {
namespace {

// How long a rank whose collective timed out spends reading its peers'
// progress. The store is hosted by rank 0, which may be the stalled rank (its
// store thread still answers then) or already gone (reads fail at once); a
// host that does not answer at all costs this much, never a hang.
constexpr auto kProgressReadDeadline = std::chrono::milliseconds(1000);

std::string progress_key(int rank) { return "fulcrum/progress/" + std::to_string(rank); }

std::vector<std::uint8_t> as_bytes(const std::string& text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

// How often at most a rank's progress is written to the store. A rank that
// waits in a collective has published it within this long, far below any
// collective timeout; one that went on has a record at most this stale,
// which does not change who is found stalled (progress.h).
constexpr auto kPublishInterval = std::chrono::milliseconds(20);

// Creates `path` and writes `text`: never an existing file and never through
// a link, so that a report directory someone else could write into cannot
// make this rank write anywhere else. False, with errno, when that fails.
bool write_new_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      errno = err;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return ::close(fd) == 0;
}

}  // namespace

ProgressBoard::ProgressBoard(c10::intrusive_ptr<c10d::Store> store, const GlooOptions& o,
                             std::string report_dir)
    : store_(std::move(store)),
      rank_(o.rank),
      world_size_(o.world_size),
      members_of_(job_groups(o.world_size, o.dp_size, o.cp_size)),
      report_dir_(std::move(report_dir)),
      shared_(std::make_shared<Shared>()) {
  shared_->dirty = true;  // "entered nothing yet", as opposed to "unknown"
  publisher_ = std::thread(publish_loop, shared_, store_, progress_key(rank_));
}

ProgressBoard::~ProgressBoard() {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
  }
  shared_->wake.notify_all();
  // After a failed collective the process is ending and the store may not
  // answer: do not wait for a write in flight (the thread owns its state).
  if (abandoned_) {
    publisher_.detach();
  } else {
    publisher_.join();
  }
}

// Called as this rank enters collective `op` on `group`; returns its
// sequence number there.
std::int64_t ProgressBoard::enter(const std::string& group, const std::string& op) {
  std::int64_t seq;
  bool was_clean;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    seq = shared_->record.enter(group, op);
    was_clean = !shared_->dirty;
    shared_->dirty = true;
  }
  if (was_clean) shared_->wake.notify_one();
  return seq;
}

// The rank now waits in its latest operation on `group` (ProgressRecord::wait_in).
void ProgressBoard::wait_in(const std::string& group) {
  bool was_clean;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->record.wait_in(group);
    was_clean = !shared_->dirty;
    shared_->dirty = true;
  }
  if (was_clean) shared_->wake.notify_one();
}

// What the error line of a timed-out collective adds, e.g. "; rank 3 never
// entered it (last seen in ...)"; also writes the report for the launcher.
// Empty when nothing could be learnt.
std::string ProgressBoard::explain_timeout(const CollectiveRef& collective,
                                           const std::vector<int>& members, Timeout timeout) {
  abandoned_ = true;
  std::vector<std::optional<ProgressRecord>> records = read_all();
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    records[static_cast<std::size_t>(rank_)] = shared_->record;  // ours is the freshest
  }
  const StallAnalysis analysis = analyse_stall(rank_, collective, members, records, members_of_);
  if (!analysis.stalled.empty()) {
    StallReport report;
    report.reporter = rank_;
    report.timeout_ms = timeout.count();
    report.timed_out = collective;
    report.stalled = analysis.stalled;
    report.waiting = analysis.waiting;
    write_report(report);
  }
  return describe_stall(analysis);
}

// A collective failed because a peer went away: tells the launcher that
// this failure is a consequence, so that a stall another rank reported
// is named rather than this rank.
void ProgressBoard::note_lost_peer() const {
  if (report_dir_.empty()) return;
  write_new_file(report_dir_ + "/" + lost_peer_note_name(rank_), "fulcrum-lost-peer 1\n");
}

void ProgressBoard::publish_loop(std::shared_ptr<Shared> shared,
                                 c10::intrusive_ptr<c10d::Store> store, std::string key) {
  std::unique_lock<std::mutex> lock(shared->mutex);
  for (;;) {
    shared->wake.wait(lock, [&] { return shared->dirty || shared->stop; });
    if (shared->stop) return;
    const std::string text = shared->record.encode();
    shared->dirty = false;
    lock.unlock();
    try {
      store->set(key, as_bytes(text));
    } catch (const std::exception&) {
      // The store is gone (rank 0 exited): the collectives will say so.
      return;
    }
    lock.lock();
    shared->wake.wait_for(lock, kPublishInterval, [&] { return shared->stop; });
  }
}

// Every rank's record, read on a helper thread so that a store that does
// not answer costs kProgressReadDeadline, not a hang. A thread still
// blocked then is left behind: the process is about to exit.
std::vector<std::optional<ProgressRecord>> ProgressBoard::read_all() {
  struct ReadState {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::vector<std::optional<ProgressRecord>> records;
  };
  auto shared = std::make_shared<ReadState>();
  shared->records.resize(static_cast<std::size_t>(world_size_));
  std::thread([shared, store = store_, n = world_size_] {
    for (int r = 0; r < n; ++r) {
      std::optional<ProgressRecord> record;
      try {
        const std::string key = progress_key(r);
        if (store->check({key})) {
          const std::vector<std::uint8_t> bytes = store->get(key);
          Result<ProgressRecord> decoded =
              ProgressRecord::decode(std::string(bytes.begin(), bytes.end()));
          if (decoded) record = std::move(decoded).value();
        }
      } catch (const std::exception&) {
        break;  // the store is gone: every later read would fail too
      }
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->records[static_cast<std::size_t>(r)] = std::move(record);
    }
    std::lock_guard<std::mutex> lock(shared->mutex);
    shared->done = true;
    shared->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->mutex);
  shared->done_cv.wait_for(lock, kProgressReadDeadline, [&] { return shared->done; });
  return shared->records;
}

// Written whole under a temporary name and renamed, so the launcher never
// reads half a report.
void ProgressBoard::write_report(const StallReport& report) const {
  if (report_dir_.empty()) return;
  const std::string final_path = report_dir_ + "/" + stall_report_name(rank_);
  const std::string temp_path = report_dir_ + "/." + stall_report_name(rank_) + ".tmp";
  // A report that cannot be written costs the launcher its verdict, not
  // the job its error: say so, once, and leave the rank's own line to name
  // the stalled rank.
  const auto warn = [&](const std::string& path) {
    const int err = errno;
    std::fprintf(stderr,
                 "fulcrum-worker: rank %d: warning: cannot write the stall report %s (%s); the "
                 "launcher's last line may not name the stalled rank, this rank's error does\n",
                 rank_, path.c_str(), err != 0 ? std::strerror(err) : "write failed");
  };
  errno = 0;
  ::unlink(temp_path.c_str());  // a leftover (or a planted link) is removed, never followed
  if (!write_new_file(temp_path, report.encode())) {
    warn(temp_path);
    ::unlink(temp_path.c_str());
    return;
  }
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    warn(final_path);
    std::remove(temp_path.c_str());
  }
}

}  // namespace fulcrum::comm
