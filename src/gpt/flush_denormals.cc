#include "gpt/flush_denormals.h"

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FMSTACK_HAVE_MXCSR 1
#endif

namespace fmstack::gpt {
namespace {

#if FMSTACK_HAVE_MXCSR
constexpr uint32_t kFlushToZero = 0x8000;
constexpr uint32_t kDenormalsAreZero = 0x0040;

// One parallel region over the whole pool: each of its threads takes `word`.
void SetOnPool(uint32_t word) {
  _mm_setcsr(word);
#pragma omp parallel num_threads(omp_get_max_threads())
  _mm_setcsr(word);
}
#endif

}  // namespace

#if FMSTACK_HAVE_MXCSR
FlushDenormalsScope::FlushDenormalsScope() : saved_(_mm_getcsr()) {
  SetOnPool(saved_ | kFlushToZero | kDenormalsAreZero);
}

FlushDenormalsScope::~FlushDenormalsScope() {
  SetOnPool(saved_);
}

bool FlushesDenormals() {
  return (_mm_getcsr() & (kFlushToZero | kDenormalsAreZero)) == (kFlushToZero | kDenormalsAreZero);
}
#else
FlushDenormalsScope::FlushDenormalsScope() = default;
FlushDenormalsScope::~FlushDenormalsScope() = default;
bool FlushesDenormals() {
  return false;
}
#endif

}  // namespace fmstack::gpt
