// util: the environment variables with which fmstack pins OpenBLAS's kernels
// for itself (gpt/blas_core.h), and their removal from what it launches.
//
// fmstack's own processes re-execute themselves with OPENBLAS_CORETYPE set
// when OpenBLAS fell back to old kernels; a program that `fmstack run`
// launches gets the environment the user gave, as under torchrun, so the
// launcher drops what fmstack set (fmstack workers set it again themselves).
#pragma once

#include <map>
#include <string>

namespace fmstack {

inline constexpr const char* kOpenBlasCoreVar = "OPENBLAS_CORETYPE";
// Set beside it, to the core OpenBLAS had picked: fmstack set the first.
inline constexpr const char* kOpenBlasPickedVar = "FMSTACK_OPENBLAS_PICKED";
// Set beside both when a bench replaced the environment's own pin: its value.
inline constexpr const char* kOpenBlasReplacedVar = "FMSTACK_OPENBLAS_REPLACED";

inline void DropBlasCoreSetByFmstack(std::map<std::string, std::string>& env) {
  const auto replaced = env.find(kOpenBlasReplacedVar);
  if (replaced != env.end()) {
    env[kOpenBlasCoreVar] = replaced->second;
    env.erase(kOpenBlasPickedVar);
    env.erase(kOpenBlasReplacedVar);
    return;
  }
  if (env.erase(kOpenBlasPickedVar) > 0) env.erase(kOpenBlasCoreVar);
}

}  // namespace fmstack
