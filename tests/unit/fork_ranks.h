// Test support: one forked process per rank, as a launcher would start them.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>
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

// SpawnRanks, then each child's wait status by rank (-1: not started).
// Every child is started before any is waited for, so bodies may wait on
// each other. A child still running at `deadline` is named on stderr and
// killed, so a hung rank fails the test instead of stalling it.
inline std::vector<int> ForkRanks(int ranks, const std::function<void(int)>& body,
                                  std::chrono::seconds deadline = std::chrono::seconds(300)) {
  std::vector<pid_t> running = SpawnRanks(ranks, body);  // 0 once reaped
  std::vector<int> status(running.size(), -1);
  const auto give_up = std::chrono::steady_clock::now() + deadline;
  bool killed = false;
  for (;;) {
    bool any = false;
    for (size_t r = 0; r < running.size(); ++r) {
      if (running[r] <= 0) continue;
      if (::waitpid(running[r], &status[r], WNOHANG) == running[r]) {
        running[r] = 0;
      } else {
        any = true;
      }
    }
    if (!any) return status;
    if (!killed && std::chrono::steady_clock::now() > give_up) {
      for (size_t r = 0; r < running.size(); ++r) {
        if (running[r] <= 0) continue;
        std::fprintf(stderr, "rank %zu: still running after %lld s, killed\n", r,
                     static_cast<long long>(deadline.count()));
        ::kill(running[r], SIGKILL);
      }
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

inline bool ExitedCleanly(int status) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace fmstack::testing
