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
  if (best.empty()) return false;
  // The x86-64 cores of OpenBLAS's dynamic list older than Sandy Bridge.
  constexpr std::array<std::string_view, 8> kOld = {"prescott", "core2", "penryn", "dunnington",
                                                    "nehalem",  "atom",  "katmai", "northwood"};
  // Its cores with AVX or AVX2 kernels, none with AVX-512 ones: half the
  // arithmetic of a CPU with full-width AVX-512 (Zen 5, recent Xeons).
  constexpr std::array<std::string_view, 7> kNo512 = {
      "sandybridge", "haswell", "zen", "bulldozer", "piledriver", "steamroller", "excavator"};
  const std::string c = Lower(chosen);
  const auto in = [&](auto& list) { return std::find(list.begin(), list.end(), c) != list.end(); };
  return in(kOld) || (best == "SkylakeX" && in(kNo512));
}

namespace {

void Reexec(std::span<char* const> argv, const std::string& chosen, const std::string& best,
            const char* replaced) {
  ::setenv(kOpenBlasCoreVar, best.c_str(), 1);
  ::setenv(kOpenBlasPickedVar, chosen.c_str(), 1);
  if (replaced != nullptr) ::setenv(kOpenBlasReplacedVar, replaced, 1);
  std::vector<char*> args(argv.begin(), argv.end());
  args.push_back(nullptr);
  ::execv("/proc/self/exe", args.data());
  const int err = errno;
  if (replaced != nullptr) {
    ::setenv(kOpenBlasCoreVar, replaced, 1);
  } else {
    ::unsetenv(kOpenBlasCoreVar);
  }
  ::unsetenv(kOpenBlasPickedVar);
  ::unsetenv(kOpenBlasReplacedVar);
  std::cerr << "fmstack: OpenBLAS runs its " << chosen << " kernels on a CPU that has " << best
            << "'s; restarting with OPENBLAS_CORETYPE=" << best << " failed: " << std::strerror(err)
            << "\n";
}

}  // namespace

void ReexecWithBestBlasCore(std::span<char* const> argv, BlasPin pin) {
  if (argv.empty() || std::getenv(kOpenBlasPickedVar) != nullptr) return;
  const char* set = std::getenv(kOpenBlasCoreVar);
  if (set != nullptr && pin == BlasPin::kRespect) return;
  const std::string chosen = BlasCoreName(), best = BestBlasCoreForCpu();
  if (!IsBlasFallback(set != nullptr ? set : chosen, best)) return;
  Reexec(argv, chosen, best, set);
}

std::string BlasCoreNote() {
  const char* picked = std::getenv(kOpenBlasPickedVar);
  const char* set = std::getenv(kOpenBlasCoreVar);
  const char* replaced = std::getenv(kOpenBlasReplacedVar);
  if (set == nullptr) return "";
  if (picked != nullptr && replaced != nullptr)
    return std::string("OPENBLAS_CORETYPE=") + set +
           " set by the bench for every side, replacing " + replaced + " from the environment";
  if (picked != nullptr)
    return std::string("OPENBLAS_CORETYPE=") + set + " set by fmstack; OpenBLAS picked " + picked;
  if (const std::string best = BestBlasCoreForCpu(); IsBlasFallback(set, best))
    return std::string("OPENBLAS_CORETYPE=") + set +
           " from the environment: narrower kernels than this CPU's " + best +
           " (unset it for faster fp32 matmuls)";
  return "";
}

}  // namespace fmstack::gpt
