#include "util/core_round_trip.h"

#include <gtest/gtest.h>
#include <sched.h>

namespace fmstack {
namespace {

cpu_set_t Affinity() {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(::sched_getaffinity(0, sizeof s, &s), 0);
  return s;
}

TEST(CoreRoundTrip, MeasuresBetweenTwoCpusAndGivesTheCallersAffinityBack) {
  const cpu_set_t before = Affinity();
  // Few trips, so that a loaded machine that takes a CPU away for a few time
  // slices still finishes well inside the 2 s deadline.
  const double ns = CoreRoundTripNs(100);
  const cpu_set_t after = Affinity();
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
  if (CPU_COUNT(&before) < 2) {
    EXPECT_EQ(ns, 0.0);
  } else {
    // Measured, not refused: below the 20 ms a trip may take in the deadline.
    EXPECT_GT(ns, 0.0);
    EXPECT_LT(ns, 2e7);
  }
}

TEST(CoreRoundTrip, IsZeroOnOneCpu) {
  const cpu_set_t before = Affinity();
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &before)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(CoreRoundTripNs(100), 0.0);
  const cpu_set_t after = Affinity();
  EXPECT_TRUE(CPU_EQUAL(&one, &after));
  ASSERT_EQ(::sched_setaffinity(0, sizeof before, &before), 0);
}

TEST(CoreRoundTrip, RefusesATripCountOutsideItsBounds) {
  EXPECT_EQ(CoreRoundTripNs(0), 0.0);
  EXPECT_EQ(CoreRoundTripNs(-5), 0.0);
  EXPECT_EQ(CoreRoundTripNs(10'000'001), 0.0);  // 2 x trips must stay within int
}

}  // namespace
}  // namespace fmstack
