// comm: picks the faster of two ways to run one collective by timing the
// calls themselves, per power-of-two size class. Which way wins can change
// while a job runs: on the 2-vCPU AMD VM of 2026-11-26, a 1 MiB allreduce
// through the shared-memory slots ran at 5.3-8.2 GB/s in some stretches of
// minutes and at 2.8-3.0 in others, where reading the peers' buffers
// (process_vm_readv) held 3.3-3.7 (docs/comm.md). So every period of calls
// starts again: its first calls alternate the two ways in pairs, the
// deciding rank times the second call of each pair and keeps the faster,
// and the rest of the period uses it.
//
// Every rank of a group must take the same way on every call. Each rank
// keeps its own tuner, and ranks make the same calls in the same order, so
// Next() gives all of them the same plan; only the decision itself crosses
// between ranks, and the caller carries it (the shared-memory segment, a
// broadcast over TCP): see Call().
#pragma once

#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace fmstack::comm {

class PathTuner {
 public:
  // How each way's exploring calls are summed up. kBest, each way's fastest
  // call: noise only ever adds time. kMedian, each way's middle call: with
  // more ranks than cores a call's time depends on how the scheduler deals
  // the cores out, and the luckiest call favours the way with fewer
  // barriers.
  enum class Statistic { kBest, kMedian };
  explicit PathTuner(Statistic statistic = Statistic::kBest) : statistic_(statistic) {}

  // Calls that alternate in pairs: first, first, second, second, ...; the
  // second call of each pair is timed, three of each way, since one call's
  // time moved by up to 2x from one call to the next on a VM. Timing a call
  // that follows one of its own kind finds the caches as that way leaves
  // them: with single calls alternating, all-reduce through 512 KiB windows
  // came after one through 4 MiB windows that had flushed its slots, and
  // looked slower than it runs when kept.
  static constexpr int kExplore = 12;
  static constexpr int kPeriod = 256;  // calls per period, exploring ones included
  static constexpr int kClasses = 64;  // size classes: floor(log2(bytes))

  struct Plan {
    bool explore = false;  // one of the period's first kExplore calls
    bool second = false;   // while exploring: which way this call takes
    bool time = false;     // while exploring: the deciding rank times it, Record()
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
    if (at == 0) c.timed = {};
    p.explore = at < kExplore;
    p.second = p.explore && at / 2 % 2 == 1;
    p.time = p.explore && at % 2 == 1;
    p.decide = at == kExplore;
    return p;
  }

  // The deciding rank: how long a timed exploring call took.
  void Record(int size_class, bool second, double seconds) {
    Timed& way = classes_.at(static_cast<size_t>(size_class)).timed[second ? 1 : 0];
    if (way.n == way.seconds.size()) return;
    size_t i = way.n++;  // kept in order: insert from the back
    for (; i > 0 && way.seconds[i - 1] > seconds; --i) way.seconds[i] = way.seconds[i - 1];
    way.seconds[i] = seconds;
  }

  // The deciding rank: true when the second way was faster in this period's
  // exploring calls (by the statistic), false on a tie or without timings.
  bool Decide(int size_class) const {
    const Class& c = classes_.at(static_cast<size_t>(size_class));
    return Summary(c.timed[1]) < Summary(c.timed[0]);
  }

  // One call of `bytes` the way Next() plans it, on every rank of the group:
  //   - share(size_class, mine) runs on the first call after exploring. It
  //     gets this rank's decision (Decide() on the deciding rank, false on
  //     the others) and returns the deciding rank's, which every rank then
  //     follows until the next period decides again;
  //   - sync() starts each timed call on every rank together, so that the
  //     deciding rank is not charged for the tail of the previous call on
  //     its peers (with more ranks than cores that tail is long after a
  //     call with large windows, and would be charged to the way timed next);
  //   - run(second) is the call itself, the second way or the first.
  template <class Share, class Sync, class Run>
  void Call(size_t bytes, bool decider, const Share& share, const Sync& sync, const Run& run) {
    const int size_class = SizeClass(bytes);
    const Plan plan = Next(size_class);
    Class& c = classes_.at(static_cast<size_t>(size_class));
    if (plan.decide) c.chosen = share(size_class, decider && Decide(size_class));
    const bool second = plan.explore ? plan.second : c.chosen;
    if (plan.time) sync();
    const auto start = std::chrono::steady_clock::now();
    run(second);
    if (plan.time && decider) {
      Record(size_class, second,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  struct Timed {
    std::array<double, kExplore / 4> seconds{};  // the timed calls of one way
    size_t n = 0;
  };
  struct Class {
    uint64_t calls = 0;
    std::array<Timed, 2> timed{};
    bool chosen = false;  // the group's decision, as Call() last shared it
  };

  double Summary(const Timed& way) const {
    if (way.n == 0) return kNever;
    if (statistic_ == Statistic::kBest) return way.seconds[0];
    const size_t mid = way.n / 2;
    return way.n % 2 == 1 ? way.seconds[mid] : (way.seconds[mid - 1] + way.seconds[mid]) / 2;
  }

  Statistic statistic_;
  std::array<Class, kClasses> classes_{};
};

}  // namespace fmstack::comm
