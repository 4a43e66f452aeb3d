// comm (private): the abort state the network communicators share. The
// first Abort wins and keeps its reason; every later call fails with it.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <string>

#include "comm/communicator.h"

namespace fmstack::comm {

class AbortLatch {
 public:
  // True for the first call only: the caller then tears its transport down.
  bool Trip(const std::string& reason) {
    const std::lock_guard lock(mu_);
    if (tripped_.exchange(true)) return false;
    reason_ = reason;
    return true;
  }
  bool tripped() const { return tripped_.load(); }
  // Throws "<op> on rank <job_rank>: communicator was aborted: <reason>".
  void ThrowIfTripped(const char* op, int job_rank) const {
    if (!tripped_) return;
    const std::lock_guard lock(mu_);
    throw CommError(
        fmt::format("{} on rank {}: communicator was aborted: {}", op, job_rank, reason_), -1);
  }

 private:
  std::atomic<bool> tripped_{false};
  mutable std::mutex mu_;
  std::string reason_;
};

}  // namespace fmstack::comm
