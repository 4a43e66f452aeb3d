// Built with -mavx512f on x86-64 (CMakeLists.txt); called only where the
// CPU has it (util/xxh3.cc). Include nothing else here (util/xxh3_build.h).
#include "util/xxh3_build.h"

FMSTACK_XXH3_BUILD(xxh3_avx512)
