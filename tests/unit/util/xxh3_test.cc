#include "util/xxh3.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace fmstack {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<unsigned char> out(n);
  for (auto& b : out) b = static_cast<unsigned char>(g());
  return out;
}

// XXH3 switches code paths at 16, 128 and 240 bytes, and runs its vector
// loop over 1 KiB stripes with a tail: the lengths cover each side of those.
const std::vector<size_t> kLengths = {0,   1,   3,   4,    8,    9,    16,   17,    128,
                                      129, 240, 241, 1023, 1024, 1025, 4096, 65543, (1 << 20) + 7};

std::string Names(const std::vector<const Xxh3Impl*>& impls) {
  std::string out;
  for (const Xxh3Impl* i : impls)
    out += std::string(out.empty() ? "" : ", ") + std::string(i->name);
  return out;
}

// Every build this CPU runs gives libxxhash's digest, at every length and
// at addresses that are not vector-aligned (Debian's library is the
// reference: the same algorithm built for the x86-64 baseline).
TEST(Xxh3, EveryBuildGivesTheLibrarysDigest) {
  const std::vector<const Xxh3Impl*> impls = Xxh3Impls();
  ASSERT_FALSE(impls.empty());
  RecordProperty("builds", Names(impls));
  std::cout << "XXH3 builds this CPU runs: " << Names(impls) << "\n";
  const std::vector<unsigned char> data = RandomBytes((1 << 20) + 64, 42);
  for (const Xxh3Impl* impl : impls) {
    for (const size_t n : kLengths) {
      for (const size_t shift : {0, 1, 7, 33}) {
        const unsigned char* p = data.data() + shift;
        EXPECT_EQ(impl->hash(p, n), XXH3_64bits(p, n))
            << impl->name << ", " << n << " bytes at +" << shift;
      }
    }
  }
}

// Fed in uneven pieces (crossing the 256-byte internal buffer and the 1 KiB
// stripes at odd places), the stream gives the one-shot digest, and Reset
// starts it over.
TEST(Xxh3, AStreamInPiecesGivesTheOneShotDigest) {
  const std::vector<unsigned char> data = RandomBytes(3 << 20, 7);
  for (const Xxh3Impl* impl : Xxh3Impls()) {
    Xxh3Stream s(*impl);
    s.Update(data.data(), 100);  // a start that is thrown away
    s.Reset();
    size_t at = 0, piece = 1;
    while (at < data.size()) {
      const size_t n = std::min(piece, data.size() - at);
      s.Update(data.data() + at, n);
      at += n;
      piece = piece * 3 + 1;
    }
    EXPECT_EQ(s.Digest(), XXH3_64bits(data.data(), data.size())) << impl->name;
  }
}

TEST(Xxh3, TheDefaultIsTheWidestBuildAndMatchesTheSpecsEmptyInput) {
  EXPECT_EQ(&Xxh3Best(), Xxh3Impls().front());
  // XXH3-64 of no bytes, seed 0, from the xxHash specification's test vectors.
  EXPECT_EQ(Xxh3(nullptr, 0), 0x2D06800538D394C2ULL);
  const std::vector<float> v(1000, 0.5f);
  EXPECT_EQ(Xxh3(std::span(v)), XXH3_64bits(v.data(), v.size() * sizeof(float)));
}

}  // namespace
}  // namespace fmstack
