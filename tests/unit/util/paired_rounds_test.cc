#include "util/paired_rounds.h"

#include <gtest/gtest.h>

#include <vector>

namespace fmstack {
namespace {

TEST(MedianRatioRound, ReportsTheRoundWhoseRatioIsTheMedianWithBothOfItsTimes) {
  // Round 1 fast, round 2 slow for ours alone (a slow moment), round 3
  // slow for both. The sides' own medians, ours 2.0 and theirs 1.3, come from
  // different rounds and would give 0.65, a ratio no round measured; the
  // rounds' ratios are 1.3, 0.5 and 1.5.
  const std::vector<TimedPair> rounds = {{1.0, 1.3}, {2.0, 1.0}, {3.0, 4.5}};
  const auto mid = MedianRatioRound(rounds);
  ASSERT_TRUE(mid.has_value());
  EXPECT_DOUBLE_EQ(mid->ours, 1.0);
  EXPECT_DOUBLE_EQ(mid->theirs, 1.3);
  EXPECT_DOUBLE_EQ(mid->Ratio(), 1.3);
}

TEST(MedianRatioRound, TakesTheLowerRatioOfTheMiddleTwo) {
  const std::vector<TimedPair> rounds = {{1.0, 3.0}, {1.0, 1.2}, {1.0, 0.5}, {1.0, 1.1}};
  const auto mid = MedianRatioRound(rounds);
  ASSERT_TRUE(mid.has_value());
  EXPECT_DOUBLE_EQ(mid->Ratio(), 1.1);
}

TEST(MedianRatioRound, NeedsEveryRoundToHaveBothTimes) {
  EXPECT_FALSE(MedianRatioRound({}).has_value());
  const std::vector<TimedPair> missing = {{1.0, 1.0}, {1.0, 0.0}, {1.0, 1.0}};
  EXPECT_FALSE(MedianRatioRound(missing).has_value());
  EXPECT_DOUBLE_EQ((TimedPair{0.0, 1.0}).Ratio(), 0.0);
}

}  // namespace
}  // namespace fmstack
