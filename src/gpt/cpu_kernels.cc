#include "gpt/cpu_kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpt/bf16_gemm.h"
#include "gpt/fast_math.h"
#include "gpt/tile_gemm.h"

namespace fmstack::gpt::cpu {
namespace {

// Column-wise reductions (bias, LayerNorm and embedding gradients) split
// the channels, not the rows, across threads: each sum runs over rows in
// order, so the result does not depend on the thread count at all. Each
// thread gets one wide range, so that a row's part is a run of cache lines
// the prefetcher follows: 32-channel strips (128 bytes of a row, the next
// row kilobytes on) defeated it, and MatmulBackward spent 1.9% of a
// gpt-mini step summing its bias gradient (perf).
// body(c0, c1) runs once per range [c0, c1) of [0, C), in parallel.
template <class Body>
void ForChannelRanges(int64_t C, const Body& body) {
  // Taken outside the parallel loop: inside, it reads as the nested count.
  const int64_t threads = omp_get_max_threads();
  const int64_t width = std::max<int64_t>(16, ((C + threads - 1) / threads + 15) / 16 * 16);
  const int64_t ranges = (C + width - 1) / width;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < ranges; ++r) body(r * width, std::min(C, (r + 1) * width));
}

void FillRowsWithBias(float* out, ConstFloats bias, int64_t N, int64_t OC) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) std::copy(bias.begin(), bias.end(), out + n * OC);
}

// out = inp @ weight^T, added to out when `accumulate`, else overwriting it.
void Gemm(float* out, const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
          bool accumulate, Matmul math) {
  if (math == Matmul::kBf16) {
    return Bf16Gemm(N, OC, C, {inp, C, 1}, {weight, 1, C}, accumulate, out, OC);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(N),
              static_cast<blasint>(OC), static_cast<blasint>(C), 1.0f, inp, static_cast<blasint>(C),
              weight, static_cast<blasint>(C), accumulate ? 1.0f : 0.0f, out,
              static_cast<blasint>(OC));
}

// The largest of row[0, n), n >= 1. GCC leaves `max = std::max(max, x)`
// scalar even under `omp simd reduction(max)` (one vmaxss per element, each
// waiting on the last: 56% of softmax's time in the trainer, perf); sixteen
// independent maxima fill vector registers and carry no such chain.
float RowMax(const float* row, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, row[0]);
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t j = 0; j < whole; j += kLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = row[j + l] > lane[l] ? row[j + l] : lane[l];
  }
#pragma omp simd
  for (int64_t l = 0; l < n - whole; ++l) {
    lane[l] = row[whole + l] > lane[l] ? row[whole + l] : lane[l];
  }
  for (int64_t half = kLanes / 2; half > 0; half /= 2) {  // a tree: 4 steps, not 15
    for (int64_t l = 0; l < half; ++l)
      lane[l] = lane[l + half] > lane[l] ? lane[l + half] : lane[l];
  }
  return lane[0];
}

// row[0, n) = softmax(row[0, n)). Three passes, each a loop the compiler
// vectorizes (max, exp with its sum, scale).
void SoftmaxInPlace(float* row, int64_t n) {
  const float max = RowMax(row, n);
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    row[j] = ExpFast(row[j] - max);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
}

}  // namespace

void Zero(Floats x) {
  // Pieces of at least 1 MiB: below that a thread's start costs more than it saves.
  constexpr int64_t kPiece = int64_t{1} << 18;
  const auto n = static_cast<int64_t>(x.size());
  const int64_t pieces = std::clamp<int64_t>(n / kPiece, 1, omp_get_max_threads());
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t begin = n * p / pieces, end = n * (p + 1) / pieces;
    std::fill(x.begin() + begin, x.begin() + end, 0.0f);
  }
}

void EncoderForward(Floats out, Tokens tokens, ConstFloats wte, ConstFloats wpe, int64_t B,
                    int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < B * T; ++n) {
    const float* te = wte.data() + tokens[n] * C;
    const float* pe = wpe.data() + (n % T) * C;
    float* o = out.data() + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = te[c] + pe[c];
  }
}

void EncoderBackward(Floats dwte, Floats dwpe, ConstFloats dout, Tokens tokens, int64_t B,
                     int64_t T, int64_t C) {
  ForChannelRanges(C, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < B * T; ++n) {
      const float* d = dout.data() + n * C;
      float* te = dwte.data() + tokens[n] * C;
      float* pe = dwpe.data() + (n % T) * C;
      for (int64_t c = c0; c < c1; ++c) {
        te[c] += d[c];
        pe[c] += d[c];
      }
    }
  });
}

void LayerNormForward(Floats out, Floats mean, Floats rstd, ConstFloats inp, ConstFloats weight,
                      ConstFloats bias, int64_t N, int64_t C) {
  const float* w = weight.data();
  const float* b = bias.data();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp.data() + n * C;
    float sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const float m = sum / static_cast<float>(C);
    float var = 0;
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(var / static_cast<float>(C) + 1e-5f);
    float* o = out.data() + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void LayerNormBackwardAccumulate(Floats dinp, Floats dweight, Floats dbias, ConstFloats dout,
                                 ConstFloats inp, ConstFloats weight, ConstFloats mean,
                                 ConstFloats rstd, int64_t N, int64_t C) {
  const float* w = weight.data();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp.data() + n * C;
    const float* d = dout.data() + n * C;
    const float m = mean[n], s = rstd[n];
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const float dnorm = w[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_norm_mean /= static_cast<float>(C);
    float* di = dinp.data() + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const float norm = (x[c] - m) * s;
      di[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  ForChannelRanges(C, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp.data() + n * C;
      const float* d = dout.data() + n * C;
      const float m = mean[n], s = rstd[n];
      for (int64_t c = c0; c < c1; ++c) {
        dweight[c] += d[c] * (x[c] - m) * s;
        dbias[c] += d[c];
      }
    }
  });
}

void MatmulForward(Floats out, ConstFloats inp, ConstFloats weight, ConstFloats bias, int64_t N,
                   int64_t C, int64_t OC, Matmul math) {
  // Without a bias the product overwrites out: filling it with zeros first
  // wrote, then read back, the LM head's whole logits (206 MB for
  // gpt2-124m at 1024 tokens) for nothing.
  if (bias.empty()) return Gemm(out.data(), inp.data(), weight.data(), N, C, OC, false, math);
  FillRowsWithBias(out.data(), bias, N, OC);
  Gemm(out.data(), inp.data(), weight.data(), N, C, OC, true, math);
}

void MatmulResidualForward(Floats out, ConstFloats residual, ConstFloats inp, ConstFloats weight,
                           ConstFloats bias, int64_t N, int64_t C, int64_t OC, Matmul math) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* r = residual.data() + n * OC;
    float* o = out.data() + n * OC;
    for (int64_t c = 0; c < OC; ++c) o[c] = r[c] + bias[c];
  }
  Gemm(out.data(), inp.data(), weight.data(), N, C, OC, true, math);
}

bool ProductOrderHasAChoice() {
  return omp_get_max_threads() == 2 && !omp_in_parallel();
}

// Rows of a weight gradient per sgemm call (see weight_gradient below).
constexpr int64_t kWeightGradientRows = 4096;

void MatmulBackward(Floats dinp, Floats dweight, Floats dbias, ConstFloats dout, ConstFloats inp,
                    ConstFloats weight, int64_t N, int64_t C, int64_t OC, ProductOrder order,
                    Matmul math) {
  const auto n = static_cast<blasint>(N), c = static_cast<blasint>(C);
  const auto oc = static_cast<blasint>(OC);
  const bool bf16 = math == Matmul::kBf16;
  const auto input_gradient = [&] {
    if (bf16)
      return Bf16Gemm(N, C, OC, {dout.data(), OC, 1}, {weight.data(), C, 1}, false, dinp.data(), C);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, oc, 1.0f, dout.data(), oc,
                weight.data(), c, 0.0f, dinp.data(), c);
  };
  // OpenBLAS packs dout's columns, one per weight row, into its per-thread
  // buffer (128 MB): for the LM head that is all 50,257 of them, 86 MB per
  // thread, resident for the rest of the run (gpt2-124m: 6% of its state
  // and activations). Blocks of kWeightGradientRows rows keep that to 7 MB
  // at the same speed: each block repacks inp (3 MB for that LM head),
  // which is cheap beside the block's product.
  const auto weight_gradient = [&] {
    // Bf16Gemm's packing buffers are bounded by its blocks, whatever OC is.
    if (bf16)
      return Bf16Gemm(OC, C, N, {dout.data(), 1, OC}, {inp.data(), C, 1}, true, dweight.data(), C);
    for (int64_t o0 = 0; o0 < OC; o0 += kWeightGradientRows) {
      const auto rows = static_cast<blasint>(std::min(kWeightGradientRows, OC - o0));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, c, n, 1.0f, dout.data() + o0, oc,
                  inp.data(), c, 1.0f, dweight.data() + o0 * C, c);
    }
  };
  // Side by side, each product runs single-threaded on its own core
  // (OpenBLAS's OpenMP build runs single-threaded inside a parallel region).
  // With more threads, splitting each product uses the cores better.
  if (order == ProductOrder::kSideBySide && ProductOrderHasAChoice()) {
#pragma omp parallel sections num_threads(2)
    {
#pragma omp section
      input_gradient();
#pragma omp section
      weight_gradient();
    }
  } else {
    input_gradient();
    weight_gradient();
  }
  if (dbias.empty()) return;
  ForChannelRanges(OC, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < N; ++r) {
      const float* d = dout.data() + r * OC;
      for (int64_t k = c0; k < c1; ++k) dbias[k] += d[k];
    }
  });
}

// Causal attention computes only what the mask keeps: row block [i0, i1) of
// the scores needs keys [0, i1), so blocks of kAttentionBlock rows skip the
// upper triangle's work (~3/8 of it at T = 256). One (batch, head) per
// thread; the products are TileGemm's (tile_gemm.h: sgemm is slow on them),
// with K or V transposed once per (batch, head) where a product needs it as
// B. reference::AttentionForward/Backward are the full-matrix forms.
constexpr int64_t kAttentionBlock = 64;

void AttentionForward(Floats out, Floats att, ConstFloats qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel
  {
    std::vector<float> kt(hs * T);  // K^T of the (batch, head) at hand
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, head = bh % NH;
      const float* q = qkv.data() + b * T * 3 * C + head * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* p = att.data() + bh * T * T;
      float* o = out.data() + b * T * C + head * hs;
      PackTransposed(k, T, hs, 3 * C, kt.data());
      for (int64_t i0 = 0; i0 < T; i0 += kAttentionBlock) {
        const int64_t i1 = std::min(T, i0 + kAttentionBlock);
        // S[i0:i1, 0:i1] = scale Q[i0:i1] K[0:i1]^T
        TileGemm(i1 - i0, i1, hs, scale, {q + i0 * 3 * C, 3 * C, 1}, kt.data(), T, false,
                 p + i0 * T, T);
        for (int64_t i = i0; i < i1; ++i) {
          float* row = p + i * T;
          SoftmaxInPlace(row, i + 1);
          std::fill(row + i + 1, row + T, 0.0f);
        }
        // out[i0:i1] = P[i0:i1, 0:i1] V[0:i1]
        TileGemm(i1 - i0, hs, i1, 1.0f, {p + i0 * T, T, 1}, v, 3 * C, false, o + i0 * C, C);
      }
    }
  }
}

// Row blocks from the last to the first: the last block's keys span all T,
// so its dK and dV products initialise them and the earlier, shorter blocks
// add into their prefixes.
void AttentionBackward(Floats dqkv, Floats dscores, ConstFloats dout, ConstFloats qkv,
                       ConstFloats att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel
  {
    std::vector<float> vt(hs * T);  // V^T of the (batch, head) at hand
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < B * NH; ++bh) {
      const int64_t b = bh / NH, head = bh % NH;
      const int64_t qkv_at = b * T * 3 * C + head * hs;
      const float* q = qkv.data() + qkv_at;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv.data() + qkv_at;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = att.data() + bh * T * T;
      float* dp = dscores.data() + bh * T * T;
      const float* d = dout.data() + b * T * C + head * hs;
      PackTransposed(v, T, hs, 3 * C, vt.data());
      const int64_t last = (T - 1) / kAttentionBlock * kAttentionBlock;
      for (int64_t i0 = last; i0 >= 0; i0 -= kAttentionBlock) {
        const int64_t i1 = std::min(T, i0 + kAttentionBlock);
        const int64_t rows = i1 - i0;
        const bool accumulate = i1 != T;
        // dP[i0:i1, 0:i1] = dO[i0:i1] V[0:i1]^T and dV[0:i1] (+)= P[i0:i1, 0:i1]^T dO[i0:i1]
        TileGemm(rows, i1, hs, 1.0f, {d + i0 * C, C, 1}, vt.data(), T, false, dp + i0 * T, T);
        TileGemm(i1, hs, rows, 1.0f, {p + i0 * T, 1, T}, d + i0 * C, C, accumulate, dv, 3 * C);
        // Softmax backward: dS = P * (dP - rowsum(P * dP)) on the kept keys.
        for (int64_t i = i0; i < i1; ++i) {
          const float* prow = p + i * T;
          float* drow = dp + i * T;
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t j = 0; j <= i; ++j) dot += prow[j] * drow[j];
#pragma omp simd
          for (int64_t j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - dot);
          std::fill(drow + i + 1, drow + i1, 0.0f);
        }
        // dQ[i0:i1] = scale dS K[0:i1] and dK[0:i1] (+)= scale dS^T Q[i0:i1]
        TileGemm(rows, hs, i1, scale, {dp + i0 * T, T, 1}, k, 3 * C, false, dq + i0 * 3 * C, 3 * C);
        TileGemm(i1, hs, rows, scale, {dp + i0 * T, 1, T}, q + i0 * 3 * C, 3 * C, accumulate, dk,
                 3 * C);
      }
    }
  }
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
}

// 0.5 x (1 + tanh(u)) = x sigmoid(2u): one vectorized exp instead of a
// scalar tanhf call per element. reference::GeluForward is the tanh form.
void GeluForward(Floats out, ConstFloats inp) {
  const auto n = static_cast<int64_t>(inp.size());
  const float* x = inp.data();
  float* o = out.data();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float u = kGeluScale * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
    o[i] = x[i] / (1.0f + ExpFast(-2.0f * u));
  }
}

namespace {
// With s = sigmoid(2u): 0.5 (1 + tanh u) = s and sech^2 u = 4 s (1 - s).
inline float GeluGradient(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float s = 1.0f / (1.0f + ExpFast(-2.0f * u));
  return s + 2.0f * x * s * (1.0f - s) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}
}  // namespace

void GeluBackwardInPlace(Floats dinout, ConstFloats inp) {
  const auto n = static_cast<int64_t>(inp.size());
  const float* x = inp.data();
  float* d = dinout.data();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] *= GeluGradient(x[i]);
}

// The bias gradient of the product that fed GELU is the column sums of
// GELU's input gradient: summed here while each row is in registers, instead
// of a second pass over N x F floats (6 MB a gpt-mini layer). Channels are
// split across threads, so each sum runs over rows in order.
void GeluBackwardWithBiasGradient(Floats dinout, Floats dbias, ConstFloats inp, int64_t N,
                                  int64_t F) {
  ForChannelRanges(F, [&](int64_t c0, int64_t c1) {
    float* db = dbias.data();
    for (int64_t r = 0; r < N; ++r) {
      float* d = dinout.data() + r * F;
      const float* x = inp.data() + r * F;
#pragma omp simd
      for (int64_t k = c0; k < c1; ++k) {
        d[k] *= GeluGradient(x[k]);
        db[k] += d[k];
      }
    }
  });
}

void SoftmaxCrossEntropyForward(Floats probs_inout, Floats losses, Tokens targets, int64_t N,
                                int64_t V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = probs_inout.data() + n * V;
    SoftmaxInPlace(row, V);
    losses[n] = -std::log(std::max(row[targets[n]], 1e-30f));
  }
}

void SoftmaxCrossEntropyBackwardInPlace(Floats probs_inout, Tokens targets, int64_t N, int64_t V,
                                        float scale) {
  const float k = scale / static_cast<float>(N);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = probs_inout.data() + n * V;
    for (int64_t v = 0; v < V; ++v) row[v] *= k;
    row[targets[n]] -= k;
  }
}

}  // namespace fmstack::gpt::cpu
