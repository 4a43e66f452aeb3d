// The baseline build (this file's flags) and the choice among the builds.
#include "util/xxh3.h"

#include "util/xxh3_build.h"

namespace fmstack {

#if defined(__x86_64__)
const Xxh3Impl& Xxh3Avx2();
const Xxh3Impl& Xxh3Avx512();
#endif

namespace {
const Xxh3Impl& Baseline() {
#if defined(__x86_64__)
  static const Xxh3Impl impl = MakeXxh3("sse2");
#else
  static const Xxh3Impl impl = MakeXxh3("scalar");
#endif
  return impl;
}
}  // namespace

std::vector<const Xxh3Impl*> Xxh3Impls() {
  std::vector<const Xxh3Impl*> out;
#if defined(__x86_64__)
  // __builtin_cpu_supports also asks the kernel (XGETBV) whether it saves
  // the wide registers: a CPU feature the OS does not enable is not there.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) out.push_back(&Xxh3Avx512());
  if (__builtin_cpu_supports("avx2")) out.push_back(&Xxh3Avx2());
#endif
  out.push_back(&Baseline());
  return out;
}

const Xxh3Impl& Xxh3Best() {
  static const Xxh3Impl& best = *Xxh3Impls().front();
  return best;
}

}  // namespace fmstack
