// Test support: one forked process per rank, as a launcher would start them.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

namespace fmstack::testing {

// Starts body(rank) in a child process for every rank and returns their
// pids, by rank. A body that throws prints "rank r: what" to stderr and
// exits 1; one that returns exits 0.
inline std::vector<pid_t> SpawnRanks(int ranks, const std::function<void(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  return pids;
}

// SpawnRanks, then each child's wait status by rank (-1: not started or not
// reaped). Every child is started before any is waited for, so bodies may
// wait on each other.
inline std::vector<int> ForkRanks(int ranks, const std::function<void(int)>& body) {
  const std::vector<pid_t> pids = SpawnRanks(ranks, body);
  std::vector<int> status(pids.size(), -1);
  for (size_t r = 0; r < pids.size(); ++r) {
    if (pids[r] < 0 || ::waitpid(pids[r], &status[r], 0) != pids[r]) status[r] = -1;
  }
  return status;
}

inline bool ExitedCleanly(int status) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace fmstack::testing
