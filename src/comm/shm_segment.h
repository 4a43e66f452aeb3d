// comm internals: the layout of a node's shared-memory segment and the
// waiting primitives both shm_comm.cc and shm_small.cc use. Not part of the
// module's interface.
#pragma once
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <fstream>
#include <string>

#include "comm/path_tuner.h"
#include "comm/shm_comm.h"

namespace fmstack::comm {

inline constexpr uint32_t kMagic = 0x464d5348;  // "FMSH"
inline constexpr int kMaxLocal = 256;

inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds t) {
  timespec ts{static_cast<time_t>(t.count() / 1000000),
              static_cast<long>(t.count() % 1000000) * 1000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// True once the process is gone or a zombie waiting to be reaped.
inline bool ProcessDead(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

struct ShmCommunicator::Header {
  uint32_t magic;
  int32_t size;
  uint64_t slot_bytes;
  uint64_t window_bytes;         // StagedBytes(): every rank must stage the same
  uint64_t alt_window_bytes;     // all-reduce's second window; 0: none
  uint64_t cma_chunk_bytes;      // the single-copy path's read, and
  uint64_t alt_cma_chunk_bytes;  // all-reduce's second one; 0: none
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> epoch;  // the futex word of the barrier
  alignas(64) std::atomic<int32_t> aborted;
  std::atomic<int32_t> abort_rank;
  char abort_reason[256];
  std::atomic<int32_t> pids[kMaxLocal];
  // Cross-memory attach: the buffer each rank offers for the current call,
  // and whether every rank could read every other's memory at start-up.
  std::atomic<uint64_t> addr[kMaxLocal];
  std::atomic<int32_t> cma_failed;
  // Per allreduce size class, the way local rank 0's PathTuner chose for
  // the rest of the period: 1 = cross-memory attach, 0 = the slots.
  std::atomic<int32_t> reduce_choice[PathTuner::kClasses];
  // Likewise for the window of the slots' all-reduce: 1 = alt_window_bytes.
  std::atomic<int32_t> window_choice[PathTuner::kClasses];
  // And for the single-copy path's read: 1 = alt_cma_chunk_bytes.
  std::atomic<int32_t> chunk_choice[PathTuner::kClasses];
  // The small-message path: each rank's newest posted operation, on its own
  // cache line, and how many waiters sleep on one (posters wake only then).
  struct alignas(64) Posted {
    std::atomic<uint32_t> seq;
  };
  Posted posted[kMaxLocal];
  alignas(64) std::atomic<uint32_t> sleepers;
};

}  // namespace fmstack::comm
