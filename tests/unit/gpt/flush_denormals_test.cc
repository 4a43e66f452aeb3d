// FlushDenormalsScope (gpt/flush_denormals.h): every OpenMP thread flushes
// while the scope lives, and none does after it.
#include "gpt/flush_denormals.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <limits>
#include <vector>

namespace fmstack::gpt {
namespace {

// Per OpenMP thread: whether it flushes, and what it makes of the smallest
// normal float halved (a denormal, or zero when flushed).
struct ThreadView {
  bool flushes = false;
  float halved_min = 0;
};

std::vector<ThreadView> LookAtEveryThread() {
  std::vector<ThreadView> views(omp_get_max_threads());
#pragma omp parallel num_threads(omp_get_max_threads())
  {
    volatile float min = std::numeric_limits<float>::min();
    views[omp_get_thread_num()] = {FlushesDenormals(), min * 0.5f};
  }
  return views;
}

TEST(FlushDenormals, EveryPoolThreadFlushesInsideTheScopeAndNoneAfter) {
#if !defined(__x86_64__)
  GTEST_FAIL() << "this test knows x86's MXCSR only; port FlushDenormalsScope first";
#endif
  const int threads = omp_get_max_threads();
  omp_set_num_threads(4);  // more threads than this machine has cores, so the pool is real
  const float denormal = std::numeric_limits<float>::min() * 0.5f;
  for (const ThreadView& v : LookAtEveryThread()) {
    ASSERT_FALSE(v.flushes);
    ASSERT_EQ(v.halved_min, denormal);
  }
  {
    const FlushDenormalsScope outer;
    {
      const FlushDenormalsScope inner;  // nested: puts back the outer's flags
    }
    for (const ThreadView& v : LookAtEveryThread()) {
      EXPECT_TRUE(v.flushes);
      EXPECT_EQ(v.halved_min, 0.0f);
    }
  }
  EXPECT_FALSE(FlushesDenormals());
  for (const ThreadView& v : LookAtEveryThread()) {
    EXPECT_FALSE(v.flushes);
    EXPECT_EQ(v.halved_min, denormal);
  }
  omp_set_num_threads(threads);
}

}  // namespace
}  // namespace fmstack::gpt
