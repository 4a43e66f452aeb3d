#include <algorithm>
#include <cmath>

#include "gpt/model.h"
#include "util/random.h"

namespace fmstack::gpt {

void InitParams(const ParamLayout& layout, std::span<float> params, uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(layout.L));
  // Each tensor draws from its own stream, so its values do not depend on
  // the order in which tensors are visited.
  uint64_t index = 0;
  for (const TensorInfo& t : layout.Tensors()) {
    std::span<float> w = params.subspan(t.offset, t.size());
    Rng rng(HashWords({seed, index++}));
    const bool is_norm = t.name.find("ln_") != std::string::npos;
    if (t.name.ends_with(".bias")) {
      std::fill(w.begin(), w.end(), 0.0f);
    } else if (is_norm) {
      std::fill(w.begin(), w.end(), 1.0f);
    } else {
      const float std = layout.IsResidualProjection(t) ? residual_std : 0.02f;
      for (float& x : w) x = std * rng.Normal();
    }
  }
}

}  // namespace fmstack::gpt
