#include "data/minhash.h"

#include <gtest/gtest.h>

#include <string>

#include "util/error.h"
#include "util/random.h"

namespace fmstack::data {
namespace {

TEST(MinHash, FastSignatureIsTheNaiveOneBitForBit) {
  const MinHasher h(MinHashPreset("swallow"));
  Rng rng(7);
  for (const size_t n : {0, 1, 7, 64, 1000}) {
    std::vector<uint32_t> shingles(n);
    for (uint32_t& x : shingles) x = static_cast<uint32_t>(rng.Next());
    EXPECT_EQ(h.Sign(shingles), h.SignNaive(shingles)) << n << " shingles";
  }
  const MinHasher odd({.ngram = 3, .bands = 3, .rows = 7});  // 21: not a multiple of the block
  std::vector<uint32_t> s = {1, 2, 3, 99, 12345};
  EXPECT_EQ(odd.Sign(s), odd.SignNaive(s));
}

TEST(MinHash, ShinglesAreCodePointNGrams) {
  EXPECT_EQ(Shingles("abcdef", 5).size(), 2u);
  EXPECT_EQ(Shingles("abc", 5).size(), 1u);  // shorter than n: the whole text
  EXPECT_TRUE(Shingles("", 5).empty());
  EXPECT_EQ(Shingles("日本語のテキスト", 5).size(), 4u);  // 8 code points, 24 bytes
  EXPECT_EQ(Shingles("aaaaaaaa", 5).size(), 1u);          // distinct
  EXPECT_EQ(Shingles("\xff\xfe"
                     "abcd",
                     5)
                .size(),
            2u);  // invalid bytes count one each
}

TEST(MinHash, AgreementEstimatesJaccard) {
  // Texts with known overlap: the fraction of equal signature values is an
  // unbiased estimate of J; with 800 values its standard deviation is at most
  // 0.018, and 4 of them is the tolerance.
  const MinHasher h(MinHashPreset("swallow"));
  std::string base;
  Rng rng(3);
  for (int i = 0; i < 3000; ++i) base.push_back(static_cast<char>('a' + rng.Below(26)));
  for (const size_t cut : {300, 1000, 2000}) {
    const std::string other = base.substr(0, base.size() - cut) + std::string(cut, 'z');
    const auto a = Shingles(base, 5), b = Shingles(other, 5);
    const double j = Jaccard(a, b);
    const auto sa = h.Sign(a), sb = h.Sign(b);
    int same = 0;
    for (size_t i = 0; i < sa.size(); ++i) same += sa[i] == sb[i];
    EXPECT_NEAR(static_cast<double>(same) / static_cast<double>(sa.size()), j, 4 * 0.018)
        << "cut " << cut;
  }
}

TEST(MinHash, BandKeysMatchExactlyWhenTheBandDoes) {
  const MinHasher h({.ngram = 5, .bands = 4, .rows = 2});
  std::vector<uint32_t> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = a;
  b[7] = 9;  // the last band differs
  const auto ka = h.BandKeys(a), kb = h.BandKeys(b);
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_EQ(ka[2], kb[2]);
  EXPECT_NE(ka[3], kb[3]);
  // Equal rows in different bands do not collide.
  std::vector<uint32_t> same(8, 42);
  const auto ks = h.BandKeys(same);
  EXPECT_NE(ks[0], ks[1]);
  EXPECT_THROW(h.BandKeys(std::vector<uint32_t>(7)), Error);
}

TEST(MinHash, SCurve) {
  EXPECT_NEAR(CandidateProbability(1.0, 20, 40), 1.0, 1e-12);
  EXPECT_NEAR(CandidateProbability(0.0, 20, 40), 0.0, 1e-12);
  // 1 - (1 - 0.95^40)^20 and FineWeb's 14 x 8 at 0.75, by hand.
  EXPECT_NEAR(CandidateProbability(0.95, 20, 40), 0.9361, 1e-3);
  EXPECT_NEAR(CandidateProbability(0.75, 14, 8), 0.7716, 1e-3);
  EXPECT_THROW(MinHashPreset("nope"), Error);
  EXPECT_THROW(MinHasher({.ngram = 5, .bands = 100, .rows = 100}), Error);
}

}  // namespace
}  // namespace fmstack::data
