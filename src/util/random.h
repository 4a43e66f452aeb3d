// util: a small, portable random generator. The standard library's
// distributions differ between implementations; training must not.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numbers>

namespace fmstack {

// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit word of state, so the
// whole generator is saved and restored as a number.
class Rng {
 public:
  explicit Rng(uint64_t state) : state_(state) {}

  uint64_t state() const { return state_; }

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 bits, exactly representable as float.
  float Uniform() { return static_cast<float>(Next() >> 40) * 0x1.0p-24f; }
  // Uniform integer in [0, n); the modulo bias is below 2^-40 for n < 2^24.
  uint64_t Below(uint64_t n) { return Next() % n; }
  // Standard normal (Box-Muller; one of the pair is discarded for simplicity).
  float Normal() {
    const double u1 = (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(Next() >> 11) * 0x1.0p-53;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(2.0 * std::numbers::pi * u2));
  }

 private:
  uint64_t state_;
};

// A stateless hash of several words: seekable randomness, e.g. "the sample
// for (seed, step, row)" without replaying the steps before it.
inline uint64_t HashWords(std::initializer_list<uint64_t> words) {
  Rng r(0x5851f42d4c957f2dULL);
  uint64_t h = 0;
  for (uint64_t w : words) {
    r = Rng(h ^ w ^ r.Next());
    h = r.Next();
  }
  return h;
}

}  // namespace fmstack
