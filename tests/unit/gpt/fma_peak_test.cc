#include <gtest/gtest.h>

#include <cmath>

#include "gpt/sgemm_peak.h"

namespace fmstack::gpt {
namespace {

// The measured loop must be fused multiply-adds, not a multiply and an add:
// unfused, the chains round twice a step and part ways with std::fma.
TEST(FmaPeak, TheChainsAreFusedMultiplyAdds) {
  constexpr int64_t kSteps = 5000;
  const FmaPeak peak = MeasureFmaPeak(1, 0.001);
  float want = 0;
  for (int i = 0; i < kFmaChains; ++i) {
    float v = static_cast<float>(i + 1);
    for (int64_t s = 0; s < kSteps; ++s) v = std::fma(v, kFmaChainX, kFmaChainY);
    for (int lane = 0; lane < peak.lanes; ++lane) want += v;
  }
  EXPECT_EQ(FmaChains(kSteps), want);
}

TEST(FmaPeak, ReportsTheVectorWidthAndThreadsItRan) {
  const FmaPeak peak = MeasureFmaPeak(2, 0.01);
  EXPECT_TRUE(peak.lanes == 4 || peak.lanes == 8 || peak.lanes == 16) << peak.lanes;
  EXPECT_EQ(peak.threads, 2);
  EXPECT_TRUE(std::isfinite(peak.gflops) && peak.gflops > 0) << peak.gflops;
  EXPECT_TRUE(std::isfinite(peak.checksum)) << peak.checksum;
}

}  // namespace
}  // namespace fmstack::gpt
