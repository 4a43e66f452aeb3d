#include "gpt/reference_kernels.h"

#include <algorithm>
#include <cmath>

namespace fmstack::gpt::cpu::reference {
namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
}

void GeluForward(Floats out, ConstFloats inp) {
  for (size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    const double u = kGeluScale * (x + 0.044715 * x * x * x);
    out[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
  }
}

void GeluBackwardInPlace(Floats dinout, ConstFloats inp) {
  for (size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    const double u = kGeluScale * (x + 0.044715 * x * x * x);
    const double th = std::tanh(u);
    const double grad =
        0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluScale * (1.0 + 3.0 * 0.044715 * x * x);
    dinout[i] = static_cast<float>(dinout[i] * grad);
  }
}

void SoftmaxInPlace(Floats row) {
  const float max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (const float v : row) sum += std::exp(static_cast<double>(v) - max);
  for (float& v : row) v = static_cast<float>(std::exp(static_cast<double>(v) - max) / sum);
}

}  // namespace fmstack::gpt::cpu::reference
