#include "comm/gloo_communicator.h"

#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef FULCRUM_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/directory_store.h"
#include "comm/local_communicator.h"
#include "comm/progress.h"
#include "comm/socket_interface.h"

namespace fulcrum::comm {
namespace {

using Clock = std::chrono::steady_clock;

bool mentions_timeout(const std::string& text) {
  return text.find("timed out") != std::string::npos ||
         text.find("Timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

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

// This rank's progress in the store, shared by its groups' communicators.
// The training thread only updates the record in memory (a lock and a
// counter); a publisher thread writes it to the store, at most once per
// kPublishInterval, so collectives never wait for the store.
class ProgressBoard {
 public:
  ProgressBoard(c10::intrusive_ptr<c10d::Store> store, const GlooOptions& o, std::string report_dir)
      : store_(std::move(store)),
        rank_(o.rank),
        world_size_(o.world_size),
        members_of_(job_groups(o.world_size, o.dp_size, o.cp_size)),
        report_dir_(std::move(report_dir)),
        shared_(std::make_shared<Shared>()) {
    shared_->dirty = true;  // "entered nothing yet", as opposed to "unknown"
    publisher_ = std::thread(publish_loop, shared_, store_, progress_key(rank_));
  }

  ~ProgressBoard() {
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
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // Called as this rank enters collective `op` on `group`; returns its
  // sequence number there.
  std::int64_t enter(const std::string& group, const std::string& op) {
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
  void wait_in(const std::string& group) {
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
  std::string explain_timeout(const CollectiveRef& collective, const std::vector<int>& members,
                              Timeout timeout) {
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

  // A collective failed: the process is ending.
  void abandon() { abandoned_ = true; }
  bool abandoned() const { return abandoned_; }

  // A collective failed because a peer went away: tells the launcher that
  // this failure is a consequence, so that a stall another rank reported
  // is named rather than this rank.
  void note_lost_peer() const {
    if (report_dir_.empty()) return;
    write_new_file(report_dir_ + "/" + lost_peer_note_name(rank_), "fulcrum-lost-peer 1\n");
  }

 private:
  struct Shared {
    std::mutex mutex;
    std::condition_variable wake;
    ProgressRecord record;
    bool dirty = false;
    bool stop = false;
  };

  static void publish_loop(std::shared_ptr<Shared> shared, c10::intrusive_ptr<c10d::Store> store,
                           std::string key) {
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
  std::vector<std::optional<ProgressRecord>> read_all() {
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
  void write_report(const StallReport& report) const {
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

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  MembersOf members_of_;
  std::string report_dir_;
  std::shared_ptr<Shared> shared_;
  std::thread publisher_;
  bool abandoned_ = false;
};

// One c10d process group behind Communicator: ProcessGroupGloo (CPU tensors,
// or CUDA tensors where LibTorch has CUDA) or, with dist.backend: nccl,
// ProcessGroupNCCL. Both take the same c10d calls. NCCL moves only device
// tensors, while some callers (plan consensus, byte all-gathers) hand CPU
// ones: with a staging device, such tensors travel through it and come back.
template <class Group>
class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<Group> group, const char* backend_name, const GroupSpec& spec,
                   Timeout timeout, std::shared_ptr<ProgressBoard> board,
                   std::optional<at::Device> staging = std::nullopt)
      : Communicator(spec.name, timeout),
        group_(std::move(group)),
        backend_name_(backend_name),
        staging_(staging),
        members_(spec.ranks),
        board_(std::move(board)) {}

  // A group whose collective failed is abandoned, not destroyed: its Gloo
  // worker thread may still be blocked in I/O until Gloo's own deadline, and
  // ~ProcessGroupGloo joins that thread, which would hang the exit the
  // caller is heading for. The process is ending; the leak is deliberate.
  // The rank's other groups are kept too: destroying them would close their
  // connections while the error unwinds, and a peer waiting on one would
  // fail (and exit) before this rank, taking the blame in the launcher.
  ~C10dCommunicator() override {
    if (failed_ || (board_ && board_->abandoned())) static_cast<void>(group_.release());
  }

  int rank() const override { return group_->getRank(); }
  int size() const override { return group_->getSize(); }
  const char* backend() const override { return backend_name_; }

 protected:
  std::vector<at::Tensor> do_all_gather(const at::Tensor& input, Timeout timeout) override {
    std::vector<at::Tensor> inputs{staged(input).contiguous()};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty_like(inputs[0]));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout;
    run("all_gather", timeout, [&] { return group_->allgather(outputs, inputs, opts); });
    for (at::Tensor& out : outputs[0]) out = back_to(out, input);
    return outputs[0];
  }

  void do_all_reduce_sum(std::vector<at::Tensor>& tensors, Timeout timeout) override {
    // c10d reads a list of tensors as copies of one tensor (one per device)
    // and would sum them together; the contract here is one reduction per
    // tensor. One flat buffer per dtype keeps it to few Gloo calls (the
    // gradient all-reduce passes every parameter at once).
    std::map<at::ScalarType, std::vector<std::size_t>> by_dtype;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      by_dtype[tensors[i].scalar_type()].push_back(i);
    }
    for (const auto& [dtype, indices] : by_dtype) {
      std::vector<at::Tensor> flat;
      for (std::size_t i : indices) flat.push_back(tensors[i].reshape({-1}));
      std::vector<at::Tensor> buffer{
          staged(flat.size() == 1 ? flat[0].contiguous().clone() : at::cat(flat, 0))};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::SUM;
      opts.timeout = timeout;
      run("all_reduce_sum", timeout, [&] { return group_->allreduce(buffer, opts); });
      std::int64_t offset = 0;
      for (std::size_t i : indices) {
        const std::int64_t n = tensors[i].numel();
        tensors[i].copy_(buffer[0].narrow(0, offset, n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  }

  at::Tensor do_reduce_scatter_sum(const at::Tensor& input, Timeout timeout) override {
    // ProcessGroupGloo in LibTorch 1.13 has no reduce_scatter: all-reduce the
    // whole buffer and keep this rank's chunk. It moves size() times the
    // bytes of a ring reduce-scatter, acceptable on CPU; an NCCL backend
    // would call reduce_scatter directly.
    std::vector<at::Tensor> buffer{staged(input.contiguous().clone())};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = timeout;
    run("reduce_scatter_sum", timeout, [&] { return group_->allreduce(buffer, opts); });
    const std::int64_t chunk = input.size(0) / size();
    return back_to(buffer[0].narrow(0, rank() * chunk, chunk).clone(), input);
  }

  void do_broadcast(at::Tensor& tensor, int root, Timeout timeout) override {
    std::vector<at::Tensor> buffer{staged(tensor.is_contiguous() ? tensor : tensor.contiguous())};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.rootTensor = 0;
    opts.timeout = timeout;
    run("broadcast", timeout, [&] { return group_->broadcast(buffer, opts); });
    if (!buffer[0].is_same(tensor)) tensor.copy_(buffer[0]);
  }

  void do_barrier(Timeout timeout) override {
    c10d::BarrierOptions opts;
    opts.timeout = timeout;
    run("barrier", timeout, [&] { return group_->barrier(opts); });
  }

  // Every receive, then every send, is posted before the first wait, so the
  // order peers list their messages in cannot matter. In the progress board
  // the call is an operation of the pair group of each peer (pair_group,
  // progress.h), entered at once; before each wait the rank says which pair
  // it waits in. A timeout names the message it was waiting for and, from
  // the peers' records, the rank at the end of the chain of waits.
  void do_exchange(const std::vector<PeerMessage>& sends, const std::vector<PeerMessage>& receives,
                   Timeout timeout) override {
    struct Posted {
      const char* kind;
      int peer;
      std::vector<at::Tensor> buffer;  // c10d keeps a reference; kept alive here too
      c10::intrusive_ptr<c10d::Work> work;
    };
    std::vector<Posted> posted;
    posted.reserve(sends.size() + receives.size());
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    std::size_t waiting = 0;  // sends and receives before it have completed
    bool all_posted = false;
    // The pair group of each peer, and this call's sequence number there.
    std::map<int, std::pair<std::string, std::int64_t>> pairs;
    if (board_) {
      for (const auto* list : {&receives, &sends}) {
        for (const PeerMessage& m : *list) {
          if (pairs.count(m.peer) != 0) continue;
          const std::string group = pair_group(global_rank(rank()), global_rank(m.peer));
          pairs[m.peer] = {group, board_->enter(group, "exchange")};
        }
      }
    }
    try {
      for (const PeerMessage& r : receives) {
        posted.push_back({"receive from", r.peer, {r.tensor}, {}});
        posted.back().work = group_->recv(posted.back().buffer, r.peer, kExchangeTag);
      }
      for (const PeerMessage& s : sends) {
        posted.push_back({"send to", s.peer, {s.tensor.contiguous()}, {}});
        posted.back().work = group_->send(posted.back().buffer, s.peer, kExchangeTag);
      }
      all_posted = true;
      for (; waiting < posted.size(); ++waiting) {
        if (board_) board_->wait_in(pairs.at(posted[waiting].peer).first);
        const auto left = std::chrono::duration_cast<Timeout>(deadline - Clock::now());
        posted[waiting].work->wait(std::max(left, Timeout(1)));
      }
    } catch (const std::exception& e) {
      failed_ = true;
      if (board_) board_->abandon();
      const std::string what = first_line(e);
      // The message whose wait failed is the one known to be stuck. The later
      // ones were not waited for; c10d marks a send or receive completed only
      // once waited for, so they are listed as unchecked, not as stuck.
      auto describe = [&](std::size_t i) {
        return std::string(posted[i].kind) + " rank " + std::to_string(posted[i].peer);
      };
      std::string unchecked;
      for (std::size_t i = waiting + 1; all_posted && i < posted.size(); ++i) {
        unchecked += (unchecked.empty() ? "" : ", ") + describe(i);
      }
      const std::string where =
          "on rank " + std::to_string(rank()) +
          (all_posted ? " (waiting for the " + describe(waiting) +
                            (unchecked.empty() ? std::string() : "; not yet checked: " + unchecked)
                      : " (posting the " + describe(posted.size() - 1)) +
          ")";
      if (mentions_timeout(what) || Clock::now() - start >= timeout) {
        const int peer = posted[std::min(waiting, posted.size() - 1)].peer;
        std::string stall;
        if (board_ && all_posted) {
          const auto& [group, seq] = pairs.at(peer);
          stall = board_->explain_timeout({"exchange", seq, group},
                                          {global_rank(rank()), global_rank(peer)}, timeout);
        }
        throw CommError(timeout_message("exchange", name(), timeout) + " " + where +
                        (stall.empty()
                             ? "; that peer failed, exited or did not post the matching message"
                             : stall));
      }
      if (board_) board_->note_lost_peer();
      throw CommError("exchange on group " + name() + " failed " + where + ": " + what +
                      "; a peer rank may have exited, check its log");
    }
  }

 private:
  // The global rank of this group's rank `r`.
  int global_rank(int r) const {
    return r >= 0 && static_cast<std::size_t>(r) < members_.size()
               ? members_[static_cast<std::size_t>(r)]
               : r;
  }
  // One tag for every message: an exchange holds at most one message per
  // direction and peer, and completes before the next begins.
  static constexpr int kExchangeTag = 0;
  // On the staging device when there is one (a no-op for Gloo).
  at::Tensor staged(const at::Tensor& t) const {
    return staging_ && t.device() != *staging_ ? t.to(*staging_) : t;
  }
  at::Tensor back_to(const at::Tensor& t, const at::Tensor& like) const {
    return t.device() != like.device() ? t.to(like.device()) : t;
  }

  // Launches one c10d operation and waits at most `timeout`. c10d reports a
  // timeout in several ways (its own wait, Gloo's I/O deadline); all become
  // the same one-line CommError.
  void run(const std::string& op, Timeout timeout,
           const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) {
    const std::int64_t seq = board_ ? board_->enter(name(), op) : 0;
    const auto start = Clock::now();
    try {
      c10::intrusive_ptr<c10d::Work> work = launch();
      work->wait(timeout);
    } catch (const std::exception& e) {
      failed_ = true;
      if (board_) board_->abandon();
      const std::string what = first_line(e);
      const auto elapsed = Clock::now() - start;
      if (mentions_timeout(what) || elapsed >= timeout) {
        const std::string stall =
            board_ ? board_->explain_timeout({op, seq, name()}, members_, timeout) : "";
        if (!stall.empty()) {
          throw CommError(timeout_message(op, name(), timeout) + " (collective #" +
                          std::to_string(seq) + " of the group)" + stall);
        }
        throw CommError(timeout_message(op, name(), timeout) + " (" + what +
                        "); a peer rank failed, exited or skipped this collective");
      }
      if (board_) board_->note_lost_peer();
      throw CommError(op + " on group " + name() + " failed: " + what +
                      "; a peer rank may have exited, check its log");
    }
  }

  c10::intrusive_ptr<Group> group_;
  const char* backend_name_;  // "gloo" or "nccl"
  std::optional<at::Device> staging_;
  std::vector<int> members_;  // global ranks, group-rank order
  std::shared_ptr<ProgressBoard> board_;
  bool failed_ = false;
};

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

std::optional<std::string> env_text(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::nullopt;
  return std::string(text);
}

// The interfaces to bind: o.interface, else GLOO_SOCKET_IFNAME; none = choose.
std::optional<std::vector<std::string>> chosen_interfaces(const GlooOptions& o) {
  const std::optional<std::string> text =
      o.interface.empty() ? env_text(kSocketIfnameVariable) : o.interface;
  Result<std::optional<std::vector<std::string>>> names =
      parse_socket_ifname(text, host_interfaces());
  if (!names) throw ConfigError(names.status().message());
  return *names;
}

// One device per interface named (torch does the same); otherwise one.
std::vector<std::shared_ptr<::gloo::transport::Device>> make_devices(
    const GlooOptions& o, const std::optional<std::vector<std::string>>& interfaces,
    const std::string& who) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  std::string current = "the default device";
  try {
    if (interfaces) {
      for (const std::string& name : *interfaces) {
        current = "interface '" + name + "' (" + std::string(kSocketIfnameVariable) + ")";
        devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      }
    } else if (is_loopback(o.master_addr)) {
      current = "the loopback device";
      devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      current = "the address of this host's name";
      devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
  } catch (const std::exception& e) {
    throw ConfigError("gloo could not open a network device for " + who + " on " + current + ": " +
                      first_line(e) + "; set " + kSocketIfnameVariable +
                      " to an interface with an address that reaches MASTER_ADDR " + o.master_addr);
  }
  return devices;
}

// A MASTER_ADDR no resolver knows is this rank's input error: said at once,
// not after dist.timeout_s of c10d retrying it.
void check_resolves(const std::string& addr, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc != 0) {
    throw ConfigError("MASTER_ADDR=" + quote_text(addr) + " does not resolve on " + who + " (" +
                      ::gai_strerror(rc) + "); set it to rank 0's host name or address");
  }
}

// Reads an integer environment variable; nullopt when unset.
Result<std::optional<long>> env_int(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return std::optional<long>();
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || end == nullptr || *end != '\0') {
    return invalid_argument(std::string("environment variable ") + name + "='" + text +
                            "' is not an integer");
  }
  return std::optional<long>(value);
}

// Every rank adds itself to a counter in the store and waits until all
// world_size ranks have, so a missing rank is reported here, by count, with
// the address, rather than as a socket timeout deep inside Gloo.
// `local`: the ranks meet in a directory of this host, not at an address.
void join_store(c10d::Store& store, const GlooOptions& o, const std::string& where,
                const std::string& who, bool local) {
  const std::string key = "fulcrum/joined";
  // Each rank also leaves its own mark, so that a rendezvous that times out
  // can name the ranks that never came.
  auto mark = [](int rank) { return "fulcrum/joined/" + std::to_string(rank); };
  const auto deadline = Clock::now() + o.rendezvous_timeout;
  std::int64_t joined = 0;
  try {
    store.set(mark(o.rank), {1});
    joined = store.add(key, 1);
    while (joined < o.world_size) {
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      joined = store.add(key, 0);
    }
  } catch (const std::exception& e) {
    throw CommError("rendezvous at " + where + " failed for " + who +
                    ": the store stopped answering (" + first_line(e) + "); " +
                    (local ? "check that the directory is still there and writable"
                           : "rank 0, which hosts it, may have exited"));
  }
  if (joined < o.world_size) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < o.world_size && missing.size() < 16; ++r) {
        if (!store.check({mark(r)})) missing.push_back(r);
      }
    } catch (const std::exception&) {
      missing.clear();  // the store went away: the count says enough
    }
    const std::string absent = missing.empty()
                                   ? std::string()
                                   : " (" + ranks_phrase(missing) +
                                         (missing.size() == 1 ? " has" : " have") + " not joined)";
    throw CommError("rendezvous at " + where + " timed out after " +
                    format_timeout(o.rendezvous_timeout) + " for " + who + ": " +
                    std::to_string(joined) + " of " + std::to_string(o.world_size) +
                    " ranks joined" + absent + "; check that every rank started with the same " +
                    (local ? "WORLD_SIZE" : "MASTER_ADDR, MASTER_PORT and WORLD_SIZE"));
  }
}

}  // namespace

Result<GlooOptions> GlooOptions::from_env(int dp_size, int cp_size) {
  GlooOptions o;
  o.dp_size = dp_size;
  o.cp_size = cp_size;
  // torchrun first, then the launchers' own variables (SLURM srun, Open MPI).
  const std::pair<const char*, const char*> sources[] = {
      {"RANK", "WORLD_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}};
  bool found = false;
  for (const auto& [rank_var, size_var] : sources) {
    Result<std::optional<long>> rank = env_int(rank_var);
    if (!rank) return rank.status();
    if (!rank->has_value()) continue;
    Result<std::optional<long>> size = env_int(size_var);
    if (!size) return size.status();
    if (!size->has_value()) {
      return invalid_argument(std::string(rank_var) + " is set but " + size_var +
                              " is not; the launcher must set both");
    }
    o.rank = static_cast<int>(**rank);
    o.world_size = static_cast<int>(**size);
    found = true;
    break;
  }
  if (!found) {
    o.rank = 0;
    o.world_size = 1;
  }
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    o.master_addr = addr;
  }
  Result<std::optional<long>> port = env_int("MASTER_PORT");
  if (!port) return port.status();
  if (port->has_value()) {
    if (**port < 1 || **port > 65535) {
      return invalid_argument("MASTER_PORT=" + std::to_string(**port) + " is outside [1, 65535]");
    }
    o.master_port = static_cast<int>(**port);
  }
  // Checked (against this host's interfaces) by init_gloo_process_groups.
  if (const char* ifname = std::getenv(kSocketIfnameVariable); ifname != nullptr) {
    o.interface = ifname;
  }
  Result<GroupLayout> layout = make_group_layout(o.rank, o.world_size, o.dp_size, o.cp_size);
  if (!layout) return layout.status();
  return o;
}

ProcessGroups init_gloo_process_groups(const GlooOptions& o) {
  Result<GroupLayout> layout = make_group_layout(o.rank, o.world_size, o.dp_size, o.cp_size);
  if (!layout) throw CommError("init_gloo_process_groups: " + layout.status().message());
  ProcessGroups groups;
  groups.layout = *layout;
  if (o.world_size == 1) {
    groups.world = std::make_shared<LocalCommunicator>(layout->world.name, o.op_timeout);
    groups.dp = std::make_shared<LocalCommunicator>(layout->dp.name, o.op_timeout);
    groups.cp = std::make_shared<LocalCommunicator>(layout->cp.name, o.op_timeout);
    return groups;
  }
  std::string rendezvous_dir = o.rendezvous_dir;
  if (rendezvous_dir.empty()) rendezvous_dir = env_text(kRendezvousDirVariable).value_or("");
  if (rendezvous_dir.empty() && (o.master_port < 1 || o.master_port > 65535)) {
    throw CommError("init_gloo_process_groups: master_port " + std::to_string(o.master_port) +
                    " is outside [1, 65535]; set MASTER_PORT");
  }
  const std::string where = rendezvous_dir.empty()
                                ? o.master_addr + ":" + std::to_string(o.master_port)
                                : "directory " + rendezvous_dir;
  const std::string who = "rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size);

  // Local settings first: a wrong interface is this rank's input error, found
  // before it makes the others wait at the rendezvous.
  const std::vector<std::shared_ptr<::gloo::transport::Device>> devices =
      make_devices(o, chosen_interfaces(o), who);

  c10::intrusive_ptr<c10d::Store> store;
  if (!rendezvous_dir.empty()) {
    // Every rank is on this host: they meet in a directory only this user can
    // reach, and nothing listens on the network for the rendezvous.
    Result<c10::intrusive_ptr<DirectoryStore>> opened =
        DirectoryStore::open(rendezvous_dir, o.rendezvous_timeout);
    if (!opened) throw ConfigError(opened.status().message());
    store = std::move(opened).value();
  } else {
    check_resolves(o.master_addr, who);
    try {
      c10d::TCPStoreOptions so;
      so.port = static_cast<std::uint16_t>(o.master_port);
      so.isServer = o.rank == 0;
      // LibTorch 1.13's own wait for workers gives up silently at the
      // deadline; join_store below counts the ranks and says who is missing.
      so.waitWorkers = false;
      so.timeout = o.rendezvous_timeout;
      store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
    } catch (const std::exception& e) {
      throw CommError("rendezvous at " + where + " failed for " + who + " within " +
                      format_timeout(o.rendezvous_timeout) + " (" +
                      (o.rank == 0 ? "hosting the store, waiting for the other ranks"
                                   : "connecting to the store hosted by rank 0") +
                      "): " + first_line(e) + "; check MASTER_ADDR/MASTER_PORT and that all " +
                      std::to_string(o.world_size) + " ranks started");
    }
  }

  join_store(*store, o, where, who, !rendezvous_dir.empty());

  std::shared_ptr<ProgressBoard> board;
  if (o.record_progress) {
    std::string report_dir = o.stall_report_dir;
    if (report_dir.empty()) report_dir = env_text(kStallReportDirVariable).value_or("");
    board = std::make_shared<ProgressBoard>(store, o, std::move(report_dir));
  }

  auto make_group = [&](const GroupSpec& spec) -> std::shared_ptr<Communicator> {
    if (spec.size() == 1) return std::make_shared<LocalCommunicator>(spec.name, o.op_timeout);
    // A prefix per group keeps the groups' rendezvous keys apart in the one
    // store.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fulcrum/" + spec.name, store);
    // Gloo waits for the group's members with this timeout, and uses it as
    // its I/O deadline afterwards; each collective's own deadline is
    // op_timeout (Work::wait in GlooCommunicator::run).
    if (o.backend == CommBackend::kNccl) {
#ifdef FULCRUM_WITH_NCCL
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = std::max(o.rendezvous_timeout, o.op_timeout);
      try {
        auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, spec.group_rank,
                                                                 spec.size(), nccl_options);
        return std::make_shared<C10dCommunicator<c10d::ProcessGroupNCCL>>(
            std::move(group), "nccl", spec, o.op_timeout, board,
            at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o.cuda_device)));
      } catch (const std::exception& e) {
        throw CommError("NCCL group " + spec.name + " at " + where + " failed for " + who + ": " +
                        first_line(e) + "; check that every rank has its own GPU");
      }
#else
      throw ConfigError(
          "dist.backend is nccl, but this fulcrum was built against a LibTorch without NCCL; "
          "set dist.backend: gloo, or rebuild against a CUDA LibTorch with NCCL");
#endif
    }
    auto options =
        c10d::ProcessGroupGloo::Options::create(std::max(o.rendezvous_timeout, o.op_timeout));
    options->devices = devices;
    options->threads = o.threads;
    try {
      auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, spec.group_rank,
                                                               spec.size(), options);
      return std::make_shared<C10dCommunicator<c10d::ProcessGroupGloo>>(std::move(group), "gloo",
                                                                        spec, o.op_timeout, board);
    } catch (const std::exception& e) {
      throw CommError("rendezvous of group " + spec.name + " at " + where + " failed for " + who +
                      " within " + format_timeout(o.rendezvous_timeout) + ": " + first_line(e) +
                      "; a member rank did not join, check that every rank started");
    }
  };
  groups.world = make_group(layout->world);
  groups.cp = make_group(layout->cp);
  groups.dp = make_group(layout->dp);
  return groups;
}

}  // namespace fulcrum::comm
