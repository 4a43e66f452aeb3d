#include "gpt/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

void AttentionForward(Floats out, Floats att, ConstFloats qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH) {
  const int64_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> row(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* base = qkv.data() + b * T * 3 * C + h * hs;
      float* p = att.data() + (b * NH + h) * T * T;
      for (int64_t i = 0; i < T; ++i) {
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t k = 0; k < hs; ++k)
            s += double{base[i * 3 * C + k]} * base[j * 3 * C + C + k];
          row[j] = s * scale;
          max = std::max(max, row[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(row[j] - max);
        for (int64_t j = 0; j < T; ++j)
          p[i * T + j] = j <= i ? static_cast<float>(std::exp(row[j] - max) / sum) : 0.0f;
        for (int64_t k = 0; k < hs; ++k) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += double{p[i * T + j]} * base[j * 3 * C + 2 * C + k];
          out[(b * T + i) * C + h * hs + k] = static_cast<float>(o);
        }
      }
    }
  }
}

void AttentionBackward(Floats dqkv, ConstFloats dout, ConstFloats qkv, ConstFloats att, int64_t B,
                       int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::fill(dqkv.begin(), dqkv.end(), 0.0f);
  std::vector<double> dp(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t at = b * T * 3 * C + h * hs;
      const float* p = att.data() + (b * NH + h) * T * T;
      for (int64_t i = 0; i < T; ++i) {
        const float* d = dout.data() + (b * T + i) * C + h * hs;
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;  // dP[i, j] = dO[i] . V[j]; dV[j] += P[i, j] dO[i]
          for (int64_t k = 0; k < hs; ++k) {
            s += double{d[k]} * qkv[at + j * 3 * C + 2 * C + k];
            dqkv[at + j * 3 * C + 2 * C + k] += p[i * T + j] * d[k];
          }
          dp[j] = s;
          dot += p[i * T + j] * s;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[i * T + j] * (dp[j] - dot) * scale;
          for (int64_t k = 0; k < hs; ++k) {
            dqkv[at + i * 3 * C + k] += static_cast<float>(ds * qkv[at + j * 3 * C + C + k]);
            dqkv[at + j * 3 * C + C + k] += static_cast<float>(ds * qkv[at + i * 3 * C + k]);
          }
        }
      }
    }
  }
}

}  // namespace fmstack::gpt::cpu::reference
