// Built with -mavx512f on x86-64 (CMakeLists.txt); run only where the CPU has it.
#include "util/xxh3_build.h"

namespace fmstack {
const Xxh3Impl& Xxh3Avx512() {
  static const Xxh3Impl impl = MakeXxh3("avx512");
  return impl;
}
}  // namespace fmstack
