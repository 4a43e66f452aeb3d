// gpt: e^x as plain arithmetic, so that the loops that call it (GELU,
// softmax) vectorize. glibc's expf and tanhf are scalar calls: on the CPU
// trainer they took a fifth of a step (perf, gpt-mini), more than every
// kernel but sgemm.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace fmstack::gpt {

// e^x within 2e-7 relative of std::exp for x in [-87, 88]; x is clamped to
// that range (e^-87 ~ 1.6e-38, the smallest normal float's neighbourhood),
// so softmax of a masked -inf score is ~0 and nothing overflows; NaN stays NaN.
// x = n ln2 + r with |r| <= ln2 / 2; e^r by its Taylor polynomial to degree
// 7 (truncation < 1e-8 relative); 2^n written into the exponent bits.
inline float ExpFast(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  // Comparisons, not std::min/max: a NaN must stay NaN (a diverging run is
  // caught by its NaN loss), and both forms vectorize.
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = std::floor(x * kLog2e + 0.5f);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto exponent = static_cast<int32_t>(n) + 127;  // 2^n: n in [-126, 127]
  return p * std::bit_cast<float>(exponent << 23);
}

}  // namespace fmstack::gpt
