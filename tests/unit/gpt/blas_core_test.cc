// OpenBLAS's fallback kernels on CPUs newer than the build: when fmstack
// steps in, and what it asks for instead.
#include "gpt/blas_core.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "gpt/sgemm_peak.h"
#include "util/blas_env.h"

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

// What fmstack set is dropped from what `fmstack run` launches; what the
// user set is not.
TEST(BlasCore, ALaunchedProgramGetsTheUsersEnvironment) {
  std::map<std::string, std::string> set_here = {
      {"OPENBLAS_CORETYPE", "SkylakeX"}, {"FMSTACK_OPENBLAS_PICKED", "Prescott"}, {"HOME", "/h"}};
  DropBlasCoreSetByFmstack(set_here);
  EXPECT_EQ(set_here, (std::map<std::string, std::string>{{"HOME", "/h"}}));
  std::map<std::string, std::string> users = {{"OPENBLAS_CORETYPE", "Haswell"}};
  DropBlasCoreSetByFmstack(users);
  EXPECT_EQ(users.at("OPENBLAS_CORETYPE"), "Haswell");
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
