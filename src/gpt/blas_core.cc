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

namespace fmstack::gpt {
namespace {

// Set beside OPENBLAS_CORETYPE: the core OpenBLAS had picked by itself.
constexpr const char* kPickedVar = "FMSTACK_OPENBLAS_PICKED";

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
  if (argv.empty() || std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string chosen = BlasCoreName(), best = BestBlasCoreForCpu();
  if (!IsBlasFallback(chosen, best)) return;
  ::setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
  ::setenv(kPickedVar, chosen.c_str(), 1);
  std::vector<char*> args(argv.begin(), argv.end());
  args.push_back(nullptr);
  ::execv("/proc/self/exe", args.data());
  const int err = errno;
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(kPickedVar);
  std::cerr << "fmstack: OpenBLAS runs its " << chosen << " kernels on a CPU that has " << best
            << "'s; restarting with OPENBLAS_CORETYPE=" << best << " failed: " << std::strerror(err)
            << "\n";
}

std::string BlasCoreNote() {
  const char* picked = std::getenv(kPickedVar);
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  if (picked == nullptr || set == nullptr) return "";
  return std::string("OPENBLAS_CORETYPE=") + set + " set by fmstack; OpenBLAS picked " + picked;
}

}  // namespace fmstack::gpt
