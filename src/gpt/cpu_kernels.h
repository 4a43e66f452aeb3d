// gpt: the CPU layer kernels of the GPT-2 decoder, each forward next to its
// backward (llm.c's layout). N = B * T rows of C channels. Matmuls go to
// OpenBLAS sgemm, except attention's small products (gpt/tile_gemm.h);
// everything else is a plain loop parallel over rows (or over
// channel chunks where rows would race), so results depend only on the thread
// count, never on scheduling.
//
// Gradient conventions: parameter gradients always accumulate (+=), so
// micro-batches add up; activation gradients overwrite unless the name says
// "accumulate" (LayerNorm adds into the residual stream's gradient).
#pragma once

#include <cstdint>
#include <span>

#include "gpt/model.h"

namespace fmstack::gpt::cpu {

using Floats = std::span<float>;
using ConstFloats = std::span<const float>;
using Tokens = std::span<const int32_t>;

// x = 0, in pieces across the threads: one thread's memset left a GPT-2
// 124M step's gradients (0.5 GB) at 43 ms on a 2-core Intel VM, two at 23.
void Zero(Floats x);

// out[b,t,:] = wte[token] + wpe[t]
void EncoderForward(Floats out, Tokens tokens, ConstFloats wte, ConstFloats wpe, int64_t B,
                    int64_t T, int64_t C);
void EncoderBackward(Floats dwte, Floats dwpe, ConstFloats dout, Tokens tokens, int64_t B,
                     int64_t T, int64_t C);

// out = (inp - mean) / sqrt(var + 1e-5) * weight + bias, per row; keeps mean, rstd.
void LayerNormForward(Floats out, Floats mean, Floats rstd, ConstFloats inp, ConstFloats weight,
                      ConstFloats bias, int64_t N, int64_t C);
// dinp += ..., dweight += ..., dbias += ...
void LayerNormBackwardAccumulate(Floats dinp, Floats dweight, Floats dbias, ConstFloats dout,
                                 ConstFloats inp, ConstFloats weight, ConstFloats mean,
                                 ConstFloats rstd, int64_t N, int64_t C);

// The linear layers' products take `math`: kFp32 on OpenBLAS sgemm, kBf16
// with both operands rounded to bf16 and fp32 sums (gpt/bf16_gemm.h).
//
// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (an empty bias: none)
void MatmulForward(Floats out, ConstFloats inp, ConstFloats weight, ConstFloats bias, int64_t N,
                   int64_t C, int64_t OC, Matmul math = Matmul::kFp32);
// out = residual + inp @ weight^T + bias: a projection back into the residual stream.
void MatmulResidualForward(Floats out, ConstFloats residual, ConstFloats inp, ConstFloats weight,
                           ConstFloats bias, int64_t N, int64_t C, int64_t OC,
                           Matmul math = Matmul::kFp32);
// How MatmulBackward runs its two products on two threads: side by side,
// one single-threaded product per thread, or in turn, each split over both.
// The same bits either way; gpt/product_order.h says which is faster where.
// On any other thread count they run in turn.
enum class ProductOrder { kSideBySide, kInTurn };
// Whether the order can matter here: two threads, outside a parallel region.
bool ProductOrderHasAChoice();

// dinp = dout @ weight; dweight += dout^T @ inp; dbias += column sums of dout
// (skipped for an empty dbias).
void MatmulBackward(Floats dinp, Floats dweight, Floats dbias, ConstFloats dout, ConstFloats inp,
                    ConstFloats weight, int64_t N, int64_t C, int64_t OC,
                    ProductOrder order = ProductOrder::kSideBySide, Matmul math = Matmul::kFp32);

// Causal multi-head attention. qkv (N, 3C) holds Q | K | V; att keeps the
// softmax probabilities (B, NH, T, T) for backward; out (N, C).
void AttentionForward(Floats out, Floats att, ConstFloats qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH);
// dqkv = gradient of qkv; dscores is scratch of att's size.
void AttentionBackward(Floats dqkv, Floats dscores, ConstFloats dout, ConstFloats qkv,
                       ConstFloats att, int64_t B, int64_t T, int64_t C, int64_t NH);

// GELU, tanh approximation (GPT-2).
void GeluForward(Floats out, ConstFloats inp);
// dinout: gradient wrt GELU's output in, wrt its input out.
void GeluBackwardInPlace(Floats dinout, ConstFloats inp);
// The same over N rows of F channels, and dbias (F) += the column sums of
// the result: the bias gradient of the product that fed GELU, in one pass.
void GeluBackwardWithBiasGradient(Floats dinout, Floats dbias, ConstFloats inp, int64_t N,
                                  int64_t F);

// Rows of logits (N, V) become probabilities; losses[n] = -log p[target[n]].
void SoftmaxCrossEntropyForward(Floats probs_inout, Floats losses, Tokens targets, int64_t N,
                                int64_t V);
// probs become d(scale * mean loss)/d(logits) = (p - onehot) * scale / N.
void SoftmaxCrossEntropyBackwardInPlace(Floats probs_inout, Tokens targets, int64_t N, int64_t V,
                                        float scale);

}  // namespace fmstack::gpt::cpu
