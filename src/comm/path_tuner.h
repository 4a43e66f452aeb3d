// comm: picks the faster of two ways to run one collective by timing the
// calls themselves, per power-of-two size class. Which way wins can change
// while a job runs: on the 2-vCPU AMD VM of 2026-11-26, a 1 MiB allreduce
// through the shared-memory slots ran at 5.3-8.2 GB/s in some stretches of
// minutes and at 2.8-3.0 in others, where reading the peers' buffers
// (process_vm_readv) held 3.3-3.7 (docs/comm.md). So every period of calls
// starts again: its first calls alternate the two ways, the deciding rank
// keeps the faster, and the rest of the period uses it.
//
// Every rank of a group must take the same way on every call. Each rank
// keeps its own tuner, and ranks make the same calls in the same order, so
// Next() gives all of them the same plan; only the decision itself crosses
// between ranks, and the caller carries it (the shared-memory segment).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace fmstack::comm {

class PathTuner {
 public:
  // Calls that alternate: first, second, first, ... Four of each way, since
  // one call's time moved by up to 2x from one call to the next on a VM.
  static constexpr int kExplore = 8;
  static constexpr int kPeriod = 256;  // calls per period, exploring ones included
  static constexpr int kClasses = 64;  // size classes: floor(log2(bytes))

  struct Plan {
    bool explore = false;  // time this call (the deciding rank) with Record()
    bool second = false;   // while exploring: which way this call takes
    bool decide = false;   // the first call after exploring: publish Decide() first
  };

  static int SizeClass(size_t bytes) {
    return bytes == 0 ? 0 : static_cast<int>(std::bit_width(bytes)) - 1;
  }

  // The plan for the next call of this size class.
  Plan Next(int size_class) {
    Class& c = classes_.at(static_cast<size_t>(size_class));
    const uint64_t at = c.calls++ % kPeriod;
    Plan p;
    if (at == 0) c.best = {kNever, kNever};
    p.explore = at < kExplore;
    p.second = p.explore && at % 2 == 1;
    p.decide = at == kExplore;
    return p;
  }

  // The deciding rank: how long an exploring call took.
  void Record(int size_class, bool second, double seconds) {
    double& best = classes_.at(static_cast<size_t>(size_class)).best[second ? 1 : 0];
    if (seconds < best) best = seconds;
  }

  // The deciding rank: true when the second way was faster in this period's
  // exploring calls (each way's best: noise only ever adds time), false on a
  // tie or without timings.
  bool Decide(int size_class) const {
    const Class& c = classes_.at(static_cast<size_t>(size_class));
    return c.best[1] < c.best[0];
  }

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  struct Class {
    uint64_t calls = 0;
    std::array<double, 2> best = {kNever, kNever};
  };
  std::array<Class, kClasses> classes_{};
};

}  // namespace fmstack::comm
