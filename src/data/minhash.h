// data: MinHash signatures and LSH band keys, for near-duplicate removal.
//
// A document is the set of its character n-grams (Unicode code points of
// its normalized text). Each n-gram is hashed once (XXH3, folded to 32
// bits); signature value i is the minimum over the n-grams of
// h_i(x) = ((a_i * x + b_i) mod 2^64) >> 32, with a_i, b_i drawn from a
// fixed seed, so signatures made by different processes compare. Two
// documents agree on one value with probability equal to their Jaccard
// similarity J; LSH cuts the signature into `bands` bands of `rows` values
// and calls two documents candidates when any band matches, which happens
// with probability 1 - (1 - J^rows)^bands (CandidateProbability).
//
// The Swallow corpus's setting is the default (5-grams, 20 bands x 40
// rows); FineWeb's (5-grams, 14 x 8) is a preset.
//
// Thread-safety: a MinHasher is immutable after construction; Sign may be
// called from several threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fmstack::data {

struct MinHashOptions {
  int ngram = 5;
  int bands = 20;
  int rows = 40;
  uint64_t seed = 0x5eed'f0f0'1234'abcdULL;
  int hashes() const { return bands * rows; }
};

// The named settings: "swallow" (5, 20 x 40), "fineweb" (5, 14 x 8).
// Throws Error naming the preset when unknown.
MinHashOptions MinHashPreset(std::string_view name);

// 1 - (1 - j^rows)^bands: the chance two documents of Jaccard j become candidates.
double CandidateProbability(double jaccard, int bands, int rows);

// The distinct 32-bit n-gram hashes of `text` (code points; invalid UTF-8
// bytes count as one code point each). A text shorter than n code points
// is one n-gram of all of it; an empty text has none.
std::vector<uint32_t> Shingles(std::string_view text, int ngram);

// Jaccard similarity of two shingle sets (each sorted, distinct).
double Jaccard(std::span<const uint32_t> a, std::span<const uint32_t> b);

class MinHasher {
 public:
  explicit MinHasher(const MinHashOptions& options);

  // The signature (options.hashes() values) of a shingle set; all
  // 0xffffffff when it is empty.
  std::vector<uint32_t> Sign(std::span<const uint32_t> shingles) const;
  // The same by the definition, one hash at a time: the reference Sign is
  // tested against.
  std::vector<uint32_t> SignNaive(std::span<const uint32_t> shingles) const;
  // One key per band: XXH3 of its rows, seeded by the band's index.
  std::vector<uint64_t> BandKeys(std::span<const uint32_t> signature) const;

  const MinHashOptions& options() const { return o_; }

 private:
  MinHashOptions o_;
  std::vector<uint64_t> a_, b_;
};

}  // namespace fmstack::data
