// runtime: what the supervisor knows of each rank's health, from its
// heartbeats, step reports and failed collectives: which rank went silent
// (hung or stopped), which one stalled while its heartbeats went on, which
// one is persistently slower than its peers (a straggler), and how far the
// job got. No I/O and no clock of its own, so tests drive it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fmstack::runtime {

using Clock = std::chrono::steady_clock;

struct MonitorOptions {
  double heartbeat_timeout = 30;  // seconds of silence that make a rank hung
  double straggler_factor = 2;    // compute time vs the median of the other ranks
  int64_t straggler_steps = 5;    // in a row
};

struct SilentRank {
  int rank = 0;
  double silent_seconds = 0;
  int64_t step = 0;
  std::string phase;
};

// A rank whose main thread is stuck (a deadlock, a file system call that
// does not return) while its heartbeat thread still beats: the others'
// collectives time out waiting for it, and it alone does not say so.
struct StalledRank {
  int rank = 0;
  int64_t step = 0;  // its last heartbeat's
  std::string phase;
  std::vector<int> waiting;   // the ranks whose collectives failed
  double waited_seconds = 0;  // since the first of them said so
};

class RankMonitor {
 public:
  RankMonitor(int world, MonitorOptions options, Clock::time_point start);

  void OnHeartbeat(int rank, int64_t step, const std::string& phase, Clock::time_point now);
  // A completed step and the time the rank computed (its step time less the
  // time it waited for collectives).
  void OnStep(int rank, int64_t step, double compute_seconds);
  // The rank's process ended: silence from it is no longer news.
  void OnExit(int rank) { ranks_.at(static_cast<size_t>(rank)).exited = true; }
  // The rank is out of the job (its node dropped by an elastic shrink): it
  // is neither hung nor compared with the others until it is replaced.
  void Retire(int rank) {
    Rank& r = ranks_.at(static_cast<size_t>(rank));
    r.exited = r.retired = true;
  }
  // A replacement process took the rank over: its silence counts from now,
  // and the failed collectives of the generation it replaced are history.
  void OnReplaced(int rank, Clock::time_point now) {
    Rank& r = ranks_.at(static_cast<size_t>(rank));
    Rank fresh;
    fresh.last = now;
    fresh.heard = true;
    fresh.step = r.step;
    r = std::move(fresh);
    for (Rank& x : ranks_) x.collective_failed.reset();
  }
  // The rank's collective failed with no rank reported dead.
  void OnCollectiveFailed(int rank, Clock::time_point now);
  bool AnyCollectiveFailed() const {
    return std::any_of(ranks_.begin(), ranks_.end(),
                       [](const Rank& r) { return r.collective_failed.has_value(); });
  }

  // The rank silent longest beyond the timeout. A rank that never sent a
  // heartbeat is judged from `start` only once another rank has sent one,
  // so a program that does not speak the protocol is never called hung.
  std::optional<SilentRank> Hung(Clock::time_point now) const;
  // The same for any silence: a rank merely late, whose host may be gone.
  std::optional<SilentRank> SilentLongerThan(Clock::time_point now, double seconds) const;
  // Once ranks report failed collectives: the one live rank that has not,
  // as soon as every other one has; after `grace` seconds, of those still
  // silent about it, the one with the lowest step (then the lowest rank).
  // nullopt while waiting, and when every live rank reported: then no one
  // rank is the cause (a network fault), and the workers' exits decide.
  std::optional<StalledRank> Stalled(Clock::time_point now, double grace) const;
  // A rank slower than factor x the others' median for `steps` steps in a row.
  std::optional<int> Straggler() const { return straggler_; }
  int64_t StepOf(int rank) const { return ranks_[rank].step; }
  int64_t MaxStep() const;

 private:
  struct Rank {
    Clock::time_point last;
    bool heard = false;
    bool exited = false;
    bool retired = false;
    int64_t step = 0;
    std::string phase = "start";
    int64_t slow_streak = 0;
    std::optional<Clock::time_point> collective_failed;
  };
  MonitorOptions options_;
  Clock::time_point start_;
  std::vector<Rank> ranks_;
  bool any_heard_ = false;
  std::map<int64_t, std::vector<double>> compute_;  // step -> per rank (NaN = not yet)
  std::optional<int> straggler_;
};

}  // namespace fmstack::runtime
