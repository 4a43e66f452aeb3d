// PathTuner: the plan every rank follows, and the decision the deciding rank
// makes from its timings.
#include "comm/path_tuner.h"

#include <gtest/gtest.h>

#include <vector>

namespace fmstack::comm {
namespace {

TEST(PathTuner, SizeClassesArePowersOfTwo) {
  EXPECT_EQ(PathTuner::SizeClass(0), 0);
  EXPECT_EQ(PathTuner::SizeClass(1), 0);
  EXPECT_EQ(PathTuner::SizeClass(size_t{1} << 20), 20);
  EXPECT_EQ(PathTuner::SizeClass((size_t{2} << 20) - 1), 20);
  EXPECT_EQ(PathTuner::SizeClass(size_t{2} << 20), 21);
  EXPECT_EQ(PathTuner::SizeClass(~size_t{0}), 63);
}

// Two ranks with their own tuners make the same calls: the same plans, call
// by call, whatever one of them records.
TEST(PathTuner, EveryRankGetsTheSamePlanForTheSameCalls) {
  PathTuner deciding, other;
  const std::vector<int> classes = {20, 20, 22, 20, 21, 22, 20, 20, 20, 22};
  for (int round = 0; round < 100; ++round) {
    for (const int c : classes) {
      const PathTuner::Plan a = deciding.Next(c), b = other.Next(c);
      EXPECT_EQ(a.explore, b.explore);
      EXPECT_EQ(a.second, b.second);
      EXPECT_EQ(a.decide, b.decide);
      if (a.explore) deciding.Record(c, a.second, a.second ? 1.0 : 2.0);
    }
  }
}

// A period: first, first, second, second, ... with the second of each pair
// timed, then a decision, then the choice until the next period explores
// again from scratch.
TEST(PathTuner, EachPeriodExploresBothWaysThenKeepsTheFaster) {
  PathTuner t;
  const int c = 20;
  const auto run_period = [&](double first_seconds, double second_seconds) {
    for (int i = 0; i < PathTuner::kPeriod; ++i) {
      const PathTuner::Plan p = t.Next(c);
      EXPECT_EQ(p.explore, i < PathTuner::kExplore) << i;
      EXPECT_EQ(p.decide, i == PathTuner::kExplore) << i;
      if (p.explore) {
        EXPECT_EQ(p.second, i / 2 % 2 == 1) << i;
        EXPECT_EQ(p.time, i % 2 == 1) << i;
        if (!p.time) continue;
        // The first timed call of a way is slower (warm-up): each way keeps its best.
        const double warm_up = i < 4 ? 10.0 : 0.0;
        t.Record(c, p.second, (p.second ? second_seconds : first_seconds) + warm_up);
      }
      if (p.decide) return t.Decide(c);
    }
    return false;
  };
  const auto finish_period = [&] {
    for (int i = PathTuner::kExplore + 1; i < PathTuner::kPeriod; ++i) {
      const PathTuner::Plan p = t.Next(c);
      EXPECT_FALSE(p.explore || p.decide) << i;
    }
  };
  EXPECT_TRUE(run_period(2.0, 1.0));  // the second way faster
  finish_period();
  // The next period forgets the last one's timings.
  EXPECT_FALSE(run_period(1.0, 2.0));
  finish_period();
  EXPECT_FALSE(run_period(1.0, 1.0));  // a tie keeps the first way
}

// The second way's luckiest call beats the first way's, its usual calls do
// not: the best call says second, the median says first. One slow first
// call (warm-up) moves neither.
TEST(PathTuner, TheMedianIsNotSwayedByOneLuckyCall) {
  const std::vector<double> first = {9.0, 2.0, 2.1}, second = {1.0, 3.0, 2.9};
  for (const auto statistic : {PathTuner::Statistic::kBest, PathTuner::Statistic::kMedian}) {
    PathTuner t(statistic);
    for (int i = 0; i < PathTuner::kExplore; ++i) {
      const PathTuner::Plan p = t.Next(20);
      ASSERT_TRUE(p.explore);
      if (p.time) t.Record(20, p.second, (p.second ? second : first)[static_cast<size_t>(i / 4)]);
    }
    EXPECT_TRUE(t.Next(20).decide);
    EXPECT_EQ(t.Decide(20), statistic == PathTuner::Statistic::kBest);
  }
}

TEST(PathTuner, WithoutTimingsTheFirstWayIsKept) {
  PathTuner t;
  for (int i = 0; i <= PathTuner::kExplore; ++i) t.Next(21);
  EXPECT_FALSE(t.Decide(21));
}

}  // namespace
}  // namespace fmstack::comm
