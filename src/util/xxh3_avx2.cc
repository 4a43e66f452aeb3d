// Built with -mavx2 on x86-64 (CMakeLists.txt); run only where the CPU has it.
#include "util/xxh3_build.h"

namespace fmstack {
const Xxh3Impl& Xxh3Avx2() {
  static const Xxh3Impl impl = MakeXxh3("avx2");
  return impl;
}
}  // namespace fmstack
