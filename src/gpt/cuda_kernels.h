// gpt: the CUDA layer kernels of the GPT-2 decoder, twins of cpu_kernels.h
// with the same shapes, conventions and names: parameter gradients
// accumulate, activation gradients overwrite unless the name says
// "Accumulate". Pointers are device memory; every launch is queued on
// `stream` and returns at once. Matmuls are cuBLAS calls made by the model
// (cuda_model.cc); these are the kernels between them.
//
// Reductions over rows (bias, LayerNorm and embedding gradients) sum each
// channel in a fixed order (rows in groups, then the groups): no atomics,
// so two runs give the same bits, as on the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

namespace fmstack::gpt::cuda {

void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                    int64_t B, int64_t T, int64_t C, cudaStream_t stream);
// dwpe[t, :] += sum over b of dout[b, t, :]
void PositionBackward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                      cudaStream_t stream);
// dwte[token, :] += the rows of dout that hold token. The caller groups the
// rows by token (TokenRows below): uniques[u]'s rows are
// rows[starts[u] .. starts[u + 1]), ascending.
void TokenBackward(float* dwte, const float* dout, const int32_t* uniques, const int32_t* starts,
                   const int32_t* rows, int64_t unique_count, int64_t C, cudaStream_t stream);

// A kernel given `out16` (or `d16`) also writes its result there rounded to
// bf16 (CastToBf16's rounding), for the bf16 matmul that reads it next,
// instead of a cast re-reading the fp32 values.
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int64_t N, int64_t C, cudaStream_t stream,
                      uint16_t* out16 = nullptr);
// Floats of device scratch the column sums of an (N, C) gradient take
// (LayerNormBackwardAccumulate, BiasBackwardAccumulate); one buffer of the
// largest size serves every call on the same stream.
int64_t ColumnSumScratch(int64_t N, int64_t C);

void LayerNormBackwardAccumulate(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int64_t N, int64_t C, float* scratch,
                                 cudaStream_t stream);

// out[n, :] = bias (or 0 when bias is null); out[n, :] = residual[n, :] + bias.
void FillRows(float* out, const float* bias, int64_t N, int64_t OC, cudaStream_t stream);
void FillRowsResidual(float* out, const float* residual, const float* bias, int64_t N, int64_t OC,
                      cudaStream_t stream);
// dbias[c] += sum over rows of dout[n, c]
void BiasBackwardAccumulate(float* dbias, const float* dout, int64_t N, int64_t OC, float* scratch,
                            cudaStream_t stream);

// Rows of scores (T x T per (batch, head), ld T): row i becomes
// softmax(scale * row[0..i]) with zeros after i (the causal mask), up to the
// end of i's causal block of `blocks` (block k starts at row k T / blocks;
// blocks = 1: the whole row). Past that end the row is left as it was.
void CausalSoftmaxForward(float* att, int64_t rows, int64_t T, float scale, int64_t blocks,
                          cudaStream_t stream);
// dscores[i, j] = att[i, j] (dscores[i, j] - sum_k att[i, k] dscores[i, k]) for j <= i, else 0,
// up to the end of i's causal block as above.
void CausalSoftmaxBackwardInPlace(float* dscores, const float* att, int64_t rows, int64_t T,
                                  int64_t blocks, cudaStream_t stream);

// The pointer arrays of a batched gemm over every (batch row b, head h) and
// causal block k of a sequence, for three operands: operand o of block k
// and batch index i = b * NH + h is at ptrs[(o * blocks + k) * B * NH + i]
// = base + b * b_stride + h * h_stride + start(k) * start_stride, where
// start(k) = k * T / blocks is the block's first row.
struct HeadsOperand {
  const float* base;
  int64_t b_stride, h_stride, start_stride;
};
struct HeadsOperands {
  HeadsOperand op[3];
};
void FillHeadsPointers(float** ptrs, const HeadsOperands& ops, int64_t B, int64_t NH, int64_t T,
                       int64_t blocks, cudaStream_t stream);

void GeluForward(float* out, const float* inp, int64_t n, cudaStream_t stream,
                 uint16_t* out16 = nullptr);
void GeluBackwardInPlace(float* dinout, const float* inp, int64_t n, cudaStream_t stream,
                         uint16_t* d16 = nullptr);

// Rows of logits (N, V), `stride` floats apart, become probabilities;
// losses[n] = -log p[target[n]]. Columns past V are not touched.
void SoftmaxCrossEntropyForward(float* probs_inout, float* losses, const int32_t* targets,
                                int64_t N, int64_t V, int64_t stride, cudaStream_t stream);
// probs become (p - onehot) * scale / N; with out16, that goes to out16
// alone (same rows and stride, in bf16) and probs are left as they were.
void SoftmaxCrossEntropyBackwardInPlace(float* probs_inout, const int32_t* targets, int64_t N,
                                        int64_t V, int64_t stride, float scale, cudaStream_t stream,
                                        uint16_t* out16 = nullptr);

// out[i] = in[i] rounded to the nearest bf16 (ties to even), stored as its
// 16 bits: the operands of bf16 matmuls (cuda_model.cc). The CPU twin is
// RoundToBf16 below.
void CastToBf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream);

// The bits of x rounded to the nearest bf16, ties to even (NaN stays NaN).
inline uint16_t RoundToBf16(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// ---- the optimizer, twins of train/optimizer.h (not yet driven by train/) ----

// partial[b] = sum of grads[i]^2 over block b of kNormBlock elements, in
// double; the caller adds the partials in order (train::GlobalNorm's blocks).
constexpr int64_t kNormBlock = int64_t{1} << 16;
void SquaredNormPartials(double* partial, const float* grads, int64_t n, cudaStream_t stream);
// grads *= scale
void ScaleInPlace(float* grads, float scale, int64_t n, cudaStream_t stream);
// train::AdamWKernel on the device: bias-corrected moments, decoupled weight
// decay where decay[i] = 1. correction1/2 = 1 - beta1/2^step.
struct AdamWArgs {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  float correction1 = 1, correction2 = 1;
};
void AdamW(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
           const AdamWArgs& args, cudaStream_t stream);

// Throws Error naming `what` when the last launch on this thread failed.
void CheckLaunch(const char* what);

}  // namespace fmstack::gpt::cuda
