// An in-process group: `size` communicators, one per thread, that meet in
// shared memory. Tests and benchmarks simulate P ranks in one process with
// it, exercising the same call sequence a multi-process job makes.
//
// It also checks what a real backend cannot: every member must call the same
// collective (a mismatch throws on every member, naming both operations). A
// timeout marks the group broken, so every later call fails at once instead
// of waiting for a rank that will never come. Point-to-point sends are
// buffered (a send never waits) and a receive whose sender's shape or dtype
// differs is reported on the receiver.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace fulcrum::comm {

// Communicator r is rank r; hand each to its own thread.
std::vector<std::shared_ptr<Communicator>> make_thread_group(
    int size, const std::string& name = "threads",
    Timeout default_timeout = std::chrono::seconds(20));

}  // namespace fulcrum::comm
