// The naive twins of decode_kernels.h: one row at a time, no packing, no
// paging, no threads. Same arithmetic in the same order, so the fast kernels
// must equal these bit for bit (tests/unit/gpt/decode_kernels_test.cc).
#include <algorithm>
#include <cmath>
#include <vector>

#include "gpt/decode_kernels.h"
#include "gpt/fast_math.h"

namespace fmstack::gpt::decode::naive {

void Linear(Floats y, ConstFloats x, ConstFloats weight, ConstFloats bias, int64_t N, int64_t in,
            int64_t out, ConstFloats residual) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < out; ++o) {
      float acc = 0;
      for (int64_t k = 0; k < in; ++k) acc = std::fma(x[n * in + k], weight[o * in + k], acc);
      const float v = bias.empty() ? acc : acc + bias[o];
      y[n * out + o] = residual.empty() ? v : residual[n * out + o] + v;
    }
  }
}

void Attention(Floats out, ConstFloats q, ConstFloats k, ConstFloats v, int64_t T, int64_t C,
               int64_t NH) {
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> e(static_cast<size_t>(T));
  for (int64_t h = 0; h < NH; ++h) {
    float maxv = -INFINITY;
    for (int64_t j = 0; j < T; ++j) {
      e[j] = Dot8(q.data() + h * hd, k.data() + j * C + h * hd, hd) * scale;
      maxv = std::max(maxv, e[j]);
    }
    for (int64_t j = 0; j < T; ++j) e[j] = ExpFast(e[j] - maxv);
    const float inv = 1.0f / Sum8(e.data(), T);
    for (int64_t d = 0; d < hd; ++d) {
      float acc = 0;
      for (int64_t j = 0; j < T; ++j) acc = std::fma(e[j] * inv, v[j * C + h * hd + d], acc);
      out[h * hd + d] = acc;
    }
  }
}

}  // namespace fmstack::gpt::decode::naive
