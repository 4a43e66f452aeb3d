// OpenBLAS's fallback kernels on CPUs newer than the build: when fmstack
// steps in, and what it asks for instead.
#include "gpt/blas_core.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpt/sgemm_peak.h"
#include "util/blas_env.h"

namespace fmstack::gpt {
namespace {

TEST(BlasCore, AFallbackOrNarrowerKernelsOnACpuThatCanDoBetterIsReplaced) {
  EXPECT_TRUE(IsBlasFallback("Prescott", "SkylakeX"));  // the Intel VM of 2026-11-28
  EXPECT_TRUE(IsBlasFallback("CORE2", "Haswell"));
  EXPECT_TRUE(IsBlasFallback("Nehalem", "Haswell"));
  EXPECT_FALSE(IsBlasFallback("Prescott", ""));  // nothing better to run
  EXPECT_FALSE(IsBlasFallback("SkylakeX", "SkylakeX"));
  EXPECT_FALSE(IsBlasFallback("Cooperlake", "SkylakeX"));  // AVX-512 kernels already
  // The Zen 5 VM of 2026-11-29, pinned to Haswell: AVX2 kernels on full-width AVX-512.
  EXPECT_TRUE(IsBlasFallback("Haswell", "SkylakeX"));
  EXPECT_TRUE(IsBlasFallback("Zen", "SkylakeX"));
  EXPECT_TRUE(IsBlasFallback("Sandybridge", "SkylakeX"));
  EXPECT_FALSE(IsBlasFallback("Zen", "Haswell"));  // nothing better to run
  EXPECT_FALSE(IsBlasFallback("Sandybridge", "Haswell"));
  EXPECT_FALSE(IsBlasFallback("Haswell", ""));
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

// A bench that replaced the environment's pin hands the user's pin, not its
// own, to what `fmstack run` launches.
TEST(BlasCore, APinTheBenchReplacedIsRestoredForALaunchedProgram) {
  std::map<std::string, std::string> env = {{"OPENBLAS_CORETYPE", "SkylakeX"},
                                            {"FMSTACK_OPENBLAS_PICKED", "Haswell"},
                                            {"FMSTACK_OPENBLAS_REPLACED", "Haswell"}};
  DropBlasCoreSetByFmstack(env);
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"OPENBLAS_CORETYPE", "Haswell"}}));
}

// The note names who chose the kernels: the user's narrower pin, fmstack
// after a fallback, or a bench that replaced the user's pin.
TEST(BlasCore, TheNoteSaysWhoPinnedTheKernels) {
  const auto saved = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  };
  const std::vector<std::pair<const char*, std::optional<std::string>>> before = {
      {"OPENBLAS_CORETYPE", saved("OPENBLAS_CORETYPE")},
      {"FMSTACK_OPENBLAS_PICKED", saved("FMSTACK_OPENBLAS_PICKED")},
      {"FMSTACK_OPENBLAS_REPLACED", saved("FMSTACK_OPENBLAS_REPLACED")}};
  ::unsetenv("FMSTACK_OPENBLAS_PICKED");
  ::unsetenv("FMSTACK_OPENBLAS_REPLACED");
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  const std::string user = BlasCoreNote();
  ::setenv("FMSTACK_OPENBLAS_PICKED", "Haswell", 1);
  ::setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  const std::string after_fallback = BlasCoreNote();
  ::setenv("FMSTACK_OPENBLAS_REPLACED", "Haswell", 1);
  const std::string replaced = BlasCoreNote();
  for (const auto& [name, value] : before) {
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  if (BestBlasCoreForCpu().empty()) {
    EXPECT_EQ(user, "");
  } else {
    EXPECT_NE(user.find("OPENBLAS_CORETYPE=Prescott from the environment: narrower kernels"),
              std::string::npos)
        << user;
  }
  EXPECT_EQ(after_fallback, "OPENBLAS_CORETYPE=SkylakeX set by fmstack; OpenBLAS picked Haswell");
  EXPECT_EQ(replaced,
            "OPENBLAS_CORETYPE=SkylakeX set by the bench for every side, replacing Haswell from "
            "the environment");
}

// The test binary does not re-execute itself: without the variables that
// ReexecWithBestBlasCore sets, there is nothing to note.
TEST(BlasCore, NoNoteWithoutAPin) {
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    EXPECT_EQ(BlasCoreNote(), "");
  }
  EXPECT_FALSE(BlasCoreName().empty());
}

}  // namespace
}  // namespace fmstack::gpt
