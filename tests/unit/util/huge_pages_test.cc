#include "util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

namespace fmstack {
namespace {

uintptr_t Address(const float* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// A large buffer starts on a 2 MiB boundary (else no 2 MiB page could back
// its first bytes), holds what is written across its whole length, and
// survives growing and copying like any vector.
TEST(HugePages, ALargeBufferIsAlignedToAHugePageAndBehavesAsAVector) {
  const size_t n = (size_t{5} << 20) / sizeof(float) + 3;  // 5 MiB and a bit: a partial last page
  HugeFloats v(n, 1.5f);
  EXPECT_EQ(Address(v.data()) % kHugePageBytes, 0u);
  std::iota(v.begin(), v.end(), 0.0f);
  EXPECT_EQ(v.front(), 0.0f);
  EXPECT_EQ(v.back(), static_cast<float>(n - 1));
  v.resize(2 * n, -1.0f);
  EXPECT_EQ(Address(v.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(v[n - 1], static_cast<float>(n - 1));
  EXPECT_EQ(v[2 * n - 1], -1.0f);
  const HugeFloats copy = v;
  EXPECT_EQ(copy, v);
}

TEST(HugePages, ASmallBufferComesFromTheHeapCacheLineAligned) {
  HugeFloats v(1000, 2.0f);
  EXPECT_EQ(Address(v.data()) % 64, 0u);
  EXPECT_EQ(v[999], 2.0f);
}

// Where the kernel allows THP, a touched region gets huge pages; where it
// says "never", none.
TEST(HugePages, ATouchedRegionIsOnHugePagesWhereTheKernelAllowsThem) {
  const std::string mode = HugePagesMode();
  const int64_t before = ProcessHugePageBytes();
  ASSERT_GE(before, 0) << "/proc/self/smaps_rollup has no AnonHugePages line";
  HugeFloats v((size_t{16} << 20) / sizeof(float), 1.0f);
  const int64_t gained = ProcessHugePageBytes() - before;
  if (mode == "always" || mode == "madvise") {
    EXPECT_GE(gained, static_cast<int64_t>(kHugePageBytes)) << "THP mode " << mode;
  } else {
    EXPECT_EQ(gained, 0) << "THP mode " << mode;
  }
}

TEST(HugePages, TheModeIsTheKernelsBracketedWord) {
  const std::string mode = HugePagesMode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unavailable")
      << mode;
}

}  // namespace
}  // namespace fmstack

namespace fmstack {
namespace {

TEST(HugePages, AFailedAllocationSaysWhatAndHowMuch) {
  // 4 PB: more than any machine maps, under the vector's own size limit.
  try {
    const HugeFloats floats = NamedFloats("the test's buffer", size_t{1} << 50);
    FAIL() << "allocated " << floats.size() << " floats";
  } catch (const AllocationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the test's buffer: 4.50 PB (1125899906842624 floats)"), std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace fmstack
