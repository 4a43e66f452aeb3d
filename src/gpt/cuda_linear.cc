#include "gpt/cuda_linear.h"

#include <utility>
#include <vector>

#include "gpt/cuda_kernels.h"

namespace fmstack::gpt::cuda {
namespace {

// Output-channel ranges for one matmul: with OC not a multiple of 4
// (GPT-2's vocabulary, 50257) cuBLAS picks its unaligned kernels (on an
// H200, GPT-2's LM head forward took 6.3 ms, aligned 2.0), so the rows up
// to the last multiple of 128 go in one aligned call and the rest (under
// 128) in a small second one.
std::vector<std::pair<int64_t, int64_t>> AlignedParts(int64_t OC) {
  const int64_t head = OC / 128 * 128;
  if (OC % 4 == 0 || head == 0) return {{0, OC}};
  return {{0, head}, {head, OC - head}};
}

}  // namespace

void LinearLayers::Gemm(float* out, Input inp, const float* weight, int64_t N, int64_t C,
                        int64_t OC, float beta, int64_t out_stride) const {
  const auto n = static_cast<int>(N), c = static_cast<int>(C);
  const auto ldo = static_cast<int>(out_stride != 0 ? out_stride : OC);
  if (bf16() && !inp.copied) CastToBf16(inp.bf16, inp.values, N * C, stream_);
  for (const auto& [first, count] : AlignedParts(OC)) {
    const auto oc = static_cast<int>(count);
    if (bf16()) {
      blas_.GemmBf16(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, 1.0f, W16(weight) + first * C, c, inp.bf16,
                     c, beta, out + first, ldo, "a forward matmul");
    } else {
      blas_.Gemm(CUBLAS_OP_T, CUBLAS_OP_N, oc, n, c, 1.0f, weight + first * C, c, inp.values, c,
                 beta, out + first, ldo, "a forward matmul");
    }
  }
}

void LinearLayers::Forward(float* out, Input inp, const float* weight, const float* bias, int64_t N,
                           int64_t C, int64_t OC) const {
  FillRows(out, bias, N, OC, stream_);
  Gemm(out, inp, weight, N, C, OC, 1.0f);
}

void LinearLayers::ResidualForward(float* out, const float* residual, Input inp,
                                   const float* weight, const float* bias, int64_t N, int64_t C,
                                   int64_t OC) const {
  FillRowsResidual(out, residual, bias, N, OC, stream_);
  Gemm(out, inp, weight, N, C, OC, 1.0f);
}

void LinearLayers::Backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const uint16_t* dout16, Input inp, const float* weight, int64_t N,
                            int64_t C, int64_t OC, int64_t dout_stride) const {
  const auto n = static_cast<int>(N), c = static_cast<int>(C);
  const int64_t ld = dout_stride != 0 ? dout_stride : OC;
  const auto ldd = static_cast<int>(ld);
  if (bf16() && dout16 == nullptr) {
    CastToBf16(bf16_.dout16, dout, N * ld, stream_);  // a padded row's tail too: never read
    dout16 = bf16_.dout16;
  }
  for (const auto& [first, count] : AlignedParts(OC)) {
    const auto oc = static_cast<int>(count);
    const float dinp_beta = first == 0 ? 0.0f : 1.0f;
    // dinp (N, C) (+)= dout[:, part] (N, oc) @ weight[part] (oc, C)
    // dweight[part] (oc, C) += dout[:, part]^T (oc, N) @ inp (N, C)
    if (bf16()) {
      blas_.GemmBf16(CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, 1.0f, W16(weight) + first * C, c,
                     dout16 + first, ldd, dinp_beta, dinp, c, "a backward matmul (input gradient)");
      blas_.GemmBf16(CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, 1.0f, inp.bf16, c, dout16 + first, ldd,
                     1.0f, dweight + first * C, c, "a backward matmul (weight gradient)");
    } else {
      blas_.Gemm(CUBLAS_OP_N, CUBLAS_OP_N, c, n, oc, 1.0f, weight + first * C, c, dout + first, ldd,
                 dinp_beta, dinp, c, "a backward matmul (input gradient)");
      blas_.Gemm(CUBLAS_OP_N, CUBLAS_OP_T, c, oc, n, 1.0f, inp.values, c, dout + first, ldd, 1.0f,
                 dweight + first * C, c, "a backward matmul (weight gradient)");
    }
  }
  if (dbias != nullptr) BiasBackwardAccumulate(dbias, dout, N, OC, scratch_, stream_);
}

}  // namespace fmstack::gpt::cuda
