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

TEST(SizeSpans, CutsTheSweepIntoRunsOfAtMostSoManySizesInOrder) {
  // 1 KiB to 256 MiB: ten sizes; three at a time.
  const auto spans = SizeSpans(1024, size_t{256} << 20, 3);
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0].min, 1024u);
  EXPECT_EQ(spans[0].max, 16384u);
  EXPECT_EQ(spans[1].min, 65536u);
  EXPECT_EQ(spans[1].max, size_t{1} << 20);
  EXPECT_EQ(spans[2].min, size_t{4} << 20);
  EXPECT_EQ(spans[2].max, size_t{64} << 20);
  EXPECT_EQ(spans[3].min, size_t{256} << 20);
  EXPECT_EQ(spans[3].max, size_t{256} << 20);
}

TEST(SizeSpans, ZeroIsOneSpanAndAMaxBetweenSizesEndsAtTheLastBelowIt) {
  const auto all = SizeSpans(1024, 1000000, 0);  // 1K, 4K, 16K, 64K, 256K
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].min, 1024u);
  EXPECT_EQ(all[0].max, 262144u);
  const auto ones = SizeSpans(1024, 1000000, 1);
  ASSERT_EQ(ones.size(), 5u);
  for (const SizeSpan& s : ones) EXPECT_EQ(s.min, s.max);
}

TEST(SizeSpans, NoSpansForAnEmptySweepAndNoOverflowAtTheTop) {
  EXPECT_TRUE(SizeSpans(0, 1024, 3).empty());
  EXPECT_TRUE(SizeSpans(4096, 1024, 3).empty());
  const size_t top = ~size_t{0};
  const auto spans = SizeSpans(size_t{1} << 60, top, 3);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].max, size_t{1} << 62);
}

}  // namespace
}  // namespace fmstack
