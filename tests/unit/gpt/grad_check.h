// Central finite differences against analytic gradients, compared as
// ||numeric - analytic|| / max(||numeric||, ||analytic||) over the checked
// coordinates: robust where single tiny components are all fp32 noise.
#pragma once

#include <cmath>
#include <functional>
#include <span>
#include <vector>

#include "util/random.h"

namespace fmstack::gpt::testing {

inline void FillNormal(std::span<float> x, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  for (float& v : x) v = scale * rng.Normal();
}

// loss() must read x; analytic[i] is d loss / d x[i]. Checks up to
// max_coords coordinates spread over x.
inline double GradientError(const std::function<double()>& loss, std::span<float> x,
                            std::span<const float> analytic, float eps = 1e-2f,
                            size_t max_coords = 400) {
  const size_t stride = std::max<size_t>(1, x.size() / max_coords);
  double diff = 0, norm_num = 0, norm_ana = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const float saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2.0 * eps);
    diff += (numeric - analytic[i]) * (numeric - analytic[i]);
    norm_num += numeric * numeric;
    norm_ana += static_cast<double>(analytic[i]) * analytic[i];
  }
  return std::sqrt(diff) / std::max({std::sqrt(norm_num), std::sqrt(norm_ana), 1e-12});
}

// sum(out * r) in double: a scalar whose gradient wrt out is r.
inline double Dot(std::span<const float> out, std::span<const float> r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
  return s;
}

}  // namespace fmstack::gpt::testing
