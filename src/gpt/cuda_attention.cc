#include "gpt/cuda_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace fmstack::gpt::cuda {

// cuBLAS is column-major, so each row-major product X = Y Z is asked for as
// X^T = Z^T Y^T: a row-major matrix read column-major is its transpose.
// For (b, h), Q, K and V are T x hs row-major slices of qkv (leading
// dimension 3C, one head hs floats after the previous) and the scores are
// T x T (leading dimension T). A block's rows start at r0 = k T / blocks.

CausalAttention::CausalAttention(int64_t max_batch, int64_t NH, int64_t blocks)
    : max_batch_(max_batch),
      NH_(NH),
      blocks_(blocks),
      ptrs_(static_cast<size_t>(3 * std::max<int64_t>(blocks, 1) * max_batch * NH),
            "allocating attention's pointers") {
  if (blocks < 1) {
    throw Error(
        fmt::format("attention: {} causal blocks per sequence; expected at least 1", blocks));
  }
}

void CausalAttention::Batched(const Call& c, const HeadsOperands& ops, const Gemm& g,
                              const char* what) const {
  if (c.B > max_batch_ || c.NH != NH_) {
    throw Error(fmt::format("attention: {} sequences of {} heads; allocated for {} of {}", c.B,
                            c.NH, max_batch_, NH_));
  }
  const int64_t blocks = std::min(blocks_, c.T), BH = c.B * c.NH, hs = c.C / c.NH;
  FillHeadsPointers(ptrs_.data(), ops, c.B, c.NH, c.T, blocks, c.stream);
  CheckLaunch("attention's pointer arrays");
  float** const a = ptrs_.data();
  float** const b = a + blocks * BH;
  float** const out = b + blocks * BH;
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t r0 = k * c.T / blocks, r1 = (k + 1) * c.T / blocks;
    int64_t m = hs, n = r1 - r0, inner = hs;
    switch (g.dims) {
      case Dims::kScores:  // keys [0, r1) x queries [r0, r1), over the head
        m = r1;
        break;
      case Dims::kRows:  // the head x queries [r0, r1), over keys [0, r1)
        inner = r1;
        break;
      case Dims::kKeys:  // the head x keys [r0, r1), over queries [r0, T)
        inner = c.T - r0;
        break;
    }
    c.blas->GemmBatched(g.ta, g.tb, static_cast<int>(m), static_cast<int>(n),
                        static_cast<int>(inner), g.alpha, a + k * BH, static_cast<int>(g.lda),
                        b + k * BH, static_cast<int>(g.ldb), 0.0f, out + k * BH,
                        static_cast<int>(g.ldc), static_cast<int>(BH), what);
  }
}

void CausalAttention::Forward(const Call& c, float* out, float* att, const float* qkv) const {
  const int64_t C = c.C, T = c.T, hs = C / c.NH;
  const int64_t row = T * 3 * C, heads = c.NH * T * T;
  const HeadsOperand K{qkv + C, row, hs, 0}, V{qkv + 2 * C, row, hs, 0};
  const HeadsOperand rows_of_att{att, heads, T * T, T};
  // S = Q K^T (scaled inside the softmax)
  Batched(c, {{K, {qkv, row, hs, 3 * C}, rows_of_att}},
          {CUBLAS_OP_T, CUBLAS_OP_N, 3 * C, 3 * C, T, 1.0f, Dims::kScores}, "attention scores");
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  CausalSoftmaxForward(att, c.B * c.NH * T, T, scale, std::min(blocks_, T), c.stream);
  CheckLaunch("the attention softmax");
  // Y = P V
  Batched(c, {{V, rows_of_att, {out, T * C, hs, C}}},
          {CUBLAS_OP_N, CUBLAS_OP_N, 3 * C, T, C, 1.0f, Dims::kRows}, "attention output");
}

void CausalAttention::Backward(const Call& c, float* dqkv, float* dscores, const float* dout,
                               const float* qkv, const float* att) const {
  const int64_t C = c.C, T = c.T, hs = C / c.NH;
  const int64_t row = T * 3 * C, heads = c.NH * T * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const HeadsOperand Q{qkv, row, hs, 3 * C}, K{qkv + C, row, hs, 0}, V{qkv + 2 * C, row, hs, 0};
  const HeadsOperand dY{dout, T * C, hs, C};
  const HeadsOperand rows_of_ds{dscores, heads, T * T, T};
  // Key blocks read the block's columns from its diagonal down.
  const HeadsOperand diag_of_att{att, heads, T * T, T + 1},
      diag_of_ds{dscores, heads, T * T, T + 1};
  // dP = dY V^T and dV = P^T dY
  Batched(c, {{V, dY, rows_of_ds}}, {CUBLAS_OP_T, CUBLAS_OP_N, 3 * C, C, T, 1.0f, Dims::kScores},
          "attention dP");
  Batched(c, {{dY, diag_of_att, {dqkv + 2 * C, row, hs, 3 * C}}},
          {CUBLAS_OP_N, CUBLAS_OP_T, C, T, 3 * C, 1.0f, Dims::kKeys}, "attention dV");
  CausalSoftmaxBackwardInPlace(dscores, att, c.B * c.NH * T, T, std::min(blocks_, T), c.stream);
  CheckLaunch("the attention softmax's backward");
  // dQ = scale dS K and dK = scale dS^T Q
  Batched(c, {{K, rows_of_ds, {dqkv, row, hs, 3 * C}}},
          {CUBLAS_OP_N, CUBLAS_OP_N, 3 * C, T, 3 * C, scale, Dims::kRows}, "attention dQ");
  Batched(c, {{Q, diag_of_ds, {dqkv + C, row, hs, 3 * C}}},
          {CUBLAS_OP_N, CUBLAS_OP_T, 3 * C, T, 3 * C, scale, Dims::kKeys}, "attention dK");
}

}  // namespace fmstack::gpt::cuda
