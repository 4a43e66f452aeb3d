#include "gpt/blas_core.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>
#include <vector>

#include "gpt/sgemm_peak.h"
#include "util/blas_env.h"

namespace fmstack::gpt {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::string BestBlasCoreForCpu() {
  __builtin_cpu_init();
  // libgcc also checks that the kernel saves the vector registers (XGETBV).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

bool IsBlasFallback(const std::string& chosen, const std::string& best) {
  // The x86-64 cores of OpenBLAS's dynamic list older than Sandy Bridge.
  constexpr std::array<std::string_view, 8> kOld = {"prescott", "core2", "penryn", "dunnington",
                                                    "nehalem",  "atom",  "katmai", "northwood"};
  const std::string c = Lower(chosen);
  return !best.empty() && std::find(kOld.begin(), kOld.end(), c) != kOld.end();
}

void ReexecWithBestBlasCore(std::span<char* const> argv) {
  if (argv.empty() || std::getenv(kOpenBlasCoreVar) != nullptr) return;
  const std::string chosen = BlasCoreName(), best = BestBlasCoreForCpu();
  if (!IsBlasFallback(chosen, best)) return;
  ::setenv(kOpenBlasCoreVar, best.c_str(), 1);
  ::setenv(kOpenBlasPickedVar, chosen.c_str(), 1);
  std::vector<char*> args(argv.begin(), argv.end());
  args.push_back(nullptr);
  ::execv("/proc/self/exe", args.data());
  const int err = errno;
  ::unsetenv(kOpenBlasCoreVar);
  ::unsetenv(kOpenBlasPickedVar);
  std::cerr << "fmstack: OpenBLAS runs its " << chosen << " kernels on a CPU that has " << best
            << "'s; restarting with OPENBLAS_CORETYPE=" << best << " failed: " << std::strerror(err)
            << "\n";
}

std::string BlasCoreNote() {
  const char* picked = std::getenv(kOpenBlasPickedVar);
  const char* set = std::getenv(kOpenBlasCoreVar);
  if (picked == nullptr || set == nullptr) return "";
  return std::string("OPENBLAS_CORETYPE=") + set + " set by fmstack; OpenBLAS picked " + picked;
}

}  // namespace fmstack::gpt
