// OpenBLAS's fallback kernels on CPUs newer than the build: when fmstack
// steps in, and what it asks for instead.
#include "gpt/blas_core.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "gpt/sgemm_peak.h"

namespace fmstack::gpt {
namespace {

TEST(BlasCore, OnlyAnOldFallbackOnACpuThatCanDoBetterIsReplaced) {
  EXPECT_TRUE(IsBlasFallback("Prescott", "SkylakeX"));  // the Intel VM of 2026-11-28
  EXPECT_TRUE(IsBlasFallback("CORE2", "Haswell"));
  EXPECT_TRUE(IsBlasFallback("Nehalem", "Haswell"));
  EXPECT_FALSE(IsBlasFallback("Prescott", ""));  // nothing better to run
  EXPECT_FALSE(IsBlasFallback("SkylakeX", "SkylakeX"));
  EXPECT_FALSE(IsBlasFallback("Haswell", "SkylakeX"));  // a choice, not a fallback
  EXPECT_FALSE(IsBlasFallback("Zen", "Haswell"));
  EXPECT_FALSE(IsBlasFallback("Sandybridge", "Haswell"));
}

TEST(BlasCore, TheBestCoreMatchesTheCpusInstructions) {
  const std::string best = BestBlasCoreForCpu();
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    EXPECT_EQ(best, "SkylakeX");
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_EQ(best, "Haswell");
  } else {
    EXPECT_EQ(best, "");
  }
}

// The test binary does not re-execute itself: without the variables that
// ReexecWithBestBlasCore sets, there is nothing to note.
TEST(BlasCore, NoNoteWithoutTheCoreFmstackSet) {
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    EXPECT_EQ(BlasCoreNote(), "");
  }
  EXPECT_FALSE(BlasCoreName().empty());
}

}  // namespace
}  // namespace fmstack::gpt
