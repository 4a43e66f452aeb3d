// The baseline build (this file's flags) and the choice among the builds.
#include "util/xxh3.h"

#include "util/xxh3_build.h"

FMSTACK_XXH3_BUILD(xxh3_baseline)

namespace fmstack {

// Every build's state is this header's XXH3_state_t.
static_assert(sizeof(XXH3_state_t) <= kXxh3StateBytes && alignof(XXH3_state_t) <= 64,
              "kXxh3StateBytes is too small for this xxhash's XXH3_state_t");

#if defined(__x86_64__)
#define FMSTACK_XXH3_DECLARE(ns)                            \
  namespace ns {                                            \
  uint64_t Hash(const void* data, size_t bytes);            \
  void Reset(void* state);                                  \
  void Update(void* state, const void* data, size_t bytes); \
  uint64_t Digest(const void* state);                       \
  }
FMSTACK_XXH3_DECLARE(xxh3_avx2)
FMSTACK_XXH3_DECLARE(xxh3_avx512)
#undef FMSTACK_XXH3_DECLARE
#endif

namespace {

#if defined(__x86_64__)
constexpr Xxh3Impl kAvx512{"avx512", xxh3_avx512::Hash, xxh3_avx512::Reset, xxh3_avx512::Update,
                           xxh3_avx512::Digest};
constexpr Xxh3Impl kAvx2{"avx2", xxh3_avx2::Hash, xxh3_avx2::Reset, xxh3_avx2::Update,
                         xxh3_avx2::Digest};
constexpr Xxh3Impl kBaseline{"sse2", xxh3_baseline::Hash, xxh3_baseline::Reset,
                             xxh3_baseline::Update, xxh3_baseline::Digest};
#else
constexpr Xxh3Impl kBaseline{"scalar", xxh3_baseline::Hash, xxh3_baseline::Reset,
                             xxh3_baseline::Update, xxh3_baseline::Digest};
#endif

}  // namespace

std::vector<const Xxh3Impl*> Xxh3Impls() {
  std::vector<const Xxh3Impl*> out;
#if defined(__x86_64__)
  // __builtin_cpu_supports also asks the kernel (XGETBV) whether it saves
  // the wide registers: a CPU feature the OS does not enable is not there.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) out.push_back(&kAvx512);
  if (__builtin_cpu_supports("avx2")) out.push_back(&kAvx2);
#endif
  out.push_back(&kBaseline);
  return out;
}

const Xxh3Impl& Xxh3Best() {
  static const Xxh3Impl& best = *Xxh3Impls().front();
  return best;
}

}  // namespace fmstack
