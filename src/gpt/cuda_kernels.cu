// The CUDA twins of cpu_kernels.cc, one kernel per CPU loop, written as
// plainly: a thread per element, a warp per row, or, where rows are summed,
// a thread per channel and row group, then per channel over the groups.
// Every reduction runs in a fixed order, so results are deterministic; they
// differ from the CPU's in the last bits only because the summation order
// differs.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gpt/cuda_kernels.h"

namespace fmstack::gpt::cuda {
namespace {

constexpr int kWarp = 32;

int Blocks(int64_t n, int threads) {
  return static_cast<int>((n + threads - 1) / threads);
}

__device__ float WarpSum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ float WarpMax(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

// Block-wide sum or max for blockDim.x a multiple of 32 (at most 1024); every
// thread gets the result. `shared` holds 32 floats.
template <bool kMax>
__device__ float BlockReduce(float x, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  x = kMax ? WarpMax(x) : WarpSum(x);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float y = lane < warps ? shared[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? WarpMax(y) : WarpSum(y);
}

// ---- embeddings ----

__global__ void EncoderForwardKernel(float* out, const int32_t* tokens, const float* wte,
                                     const float* wpe, int64_t N, int64_t T, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C, c = i % C;
  out[i] = wte[tokens[n] * C + c] + wpe[(n % T) * C + c];
}

// dwpe[t, c] += sum over b of dout[b, t, c], in order of b.
__global__ void PositionBackwardKernel(float* dwpe, const float* dout, int64_t B, int64_t T,
                                       int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= T * C) return;
  float sum = 0;
  for (int64_t b = 0; b < B; ++b) sum += dout[b * T * C + i];
  dwpe[i] += sum;
}

// dwte[token, c] += sum of dout[n, c] over the rows n that hold token, in
// order of n. The host sorts rows by token: `rows` lists them, token u's rows
// being rows[starts[u] .. starts[u + 1]), and uniques[u] is the token.
__global__ void TokenBackwardKernel(float* dwte, const float* dout, const int32_t* uniques,
                                    const int32_t* starts, const int32_t* rows, int64_t C) {
  const int64_t u = blockIdx.y;
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float sum = 0;
  for (int32_t k = starts[u]; k < starts[u + 1]; ++k) sum += dout[rows[k] * C + c];
  dwte[uniques[u] * C + c] += sum;
}

// ---- LayerNorm: a warp per row ----

__global__ void LayerNormForwardKernel(float* out, __nv_bfloat16* out16, float* mean, float* rstd,
                                       const float* inp, const float* weight, const float* bias,
                                       int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  float sum = 0;
  for (int64_t c = lane; c < C; c += kWarp) sum += x[c];
  const float m = WarpSum(sum) / static_cast<float>(C);
  float var = 0;
  for (int64_t c = lane; c < C; c += kWarp) var += (x[c] - m) * (x[c] - m);
  const float s = rsqrtf(WarpSum(var) / static_cast<float>(C) + 1e-5f);
  float* o = out + n * C;
  for (int64_t c = lane; c < C; c += kWarp) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (out16 != nullptr) {
    for (int64_t c = lane; c < C; c += kWarp) out16[n * C + c] = __float2bfloat16_rn(o[c]);
  }
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

__global__ void LayerNormBackwardInputKernel(float* dinp, const float* dout, const float* inp,
                                             const float* weight, const float* mean,
                                             const float* rstd, int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  if (n >= N) return;
  const int lane = threadIdx.x;
  const float* x = inp + n * C;
  const float* d = dout + n * C;
  const float m = mean[n], s = rstd[n];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float dnorm = weight[c] * d[c];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * (x[c] - m) * s;
  }
  dnorm_mean = WarpSum(dnorm_mean) / static_cast<float>(C);
  dnorm_norm_mean = WarpSum(dnorm_norm_mean) / static_cast<float>(C);
  float* di = dinp + n * C;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float norm = (x[c] - m) * s;
    di[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// Column sums in two deterministic stages. Stage one: block (x, g) of
// (32, kRowLanes) threads covers 32 channels of row group g (kGroupRows
// rows); thread (x, y) sums rows y, y + kRowLanes, ... of the group in
// order, then thread y = 0 adds the kRowLanes sums in order of y. Stage
// two adds the groups' sums in order of g. One stage, a block per 32
// channels, left GPT-2's 768 channels 24 blocks for 132 SMs. With `inp`
// set it is LayerNorm's weight gradient (dout * normalized input) beside
// the plain sum (its bias gradient).
constexpr int kRowLanes = 16;
constexpr int64_t kGroupRows = 256;

int64_t RowGroups(int64_t N) {
  return (N + kGroupRows - 1) / kGroupRows;
}

__global__ void ColumnPartialsKernel(float* weight_sums, float* bias_sums, const float* dout,
                                     const float* inp, const float* mean, const float* rstd,
                                     int64_t N, int64_t C) {
  __shared__ float weight_part[kRowLanes][kWarp];
  __shared__ float bias_part[kRowLanes][kWarp];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kWarp) + threadIdx.x;
  const int64_t g = blockIdx.y;
  const int64_t end = (g + 1) * kGroupRows < N ? (g + 1) * kGroupRows : N;
  float w = 0, b = 0;
  if (c < C) {
    for (int64_t n = g * kGroupRows + threadIdx.y; n < end; n += kRowLanes) {
      const float d = dout[n * C + c];
      b += d;
      if (inp != nullptr) w += d * (inp[n * C + c] - mean[n]) * rstd[n];
    }
  }
  weight_part[threadIdx.y][threadIdx.x] = w;
  bias_part[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float wsum = 0, bsum = 0;
  for (int y = 0; y < kRowLanes; ++y) {
    wsum += weight_part[y][threadIdx.x];
    bsum += bias_part[y][threadIdx.x];
  }
  weight_sums[g * C + c] = wsum;
  bias_sums[g * C + c] = bsum;
}

__global__ void ColumnFinishKernel(float* dweight, float* dbias, const float* weight_sums,
                                   const float* bias_sums, int64_t groups, int64_t C) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float wsum = 0, bsum = 0;
  for (int64_t g = 0; g < groups; ++g) {
    wsum += weight_sums[g * C + c];
    bsum += bias_sums[g * C + c];
  }
  if (dweight != nullptr) dweight[c] += wsum;
  dbias[c] += bsum;
}

// ---- bias rows ----

__global__ void FillRowsKernel(float* out, const float* residual, const float* bias, int64_t N,
                               int64_t OC) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * OC) return;
  const float b = bias != nullptr ? bias[i % OC] : 0.0f;
  out[i] = residual != nullptr ? residual[i] + b : b;
}

// ---- causal softmax over attention scores: a warp per row ----

// The end of the causal block (of `blocks`, starting at k T / blocks) that
// holds row i: the softmaxes write their zeros up to there only, as no
// product reads past it (gpt/cuda_attention.h).
__device__ int64_t CausalBlockEnd(int64_t i, int64_t T, int64_t blocks) {
  int64_t k = 1;
  while (k * T / blocks <= i) ++k;
  return k * T / blocks;
}

__global__ void CausalSoftmaxForwardKernel(float* att, int64_t rows, int64_t T, float scale,
                                           int64_t blocks) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  if (r >= rows) return;
  const int64_t i = r % T, end = CausalBlockEnd(i, T, blocks);
  float* row = att + r * T;
  const int lane = threadIdx.x;
  float max = -INFINITY;
  for (int64_t j = lane; j <= i; j += kWarp) max = fmaxf(max, scale * row[j]);
  max = WarpMax(max);
  float sum = 0;
  for (int64_t j = lane; j <= i; j += kWarp) {
    const float e = expf(scale * row[j] - max);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / WarpSum(sum);
  for (int64_t j = lane; j < end; j += kWarp) row[j] = j <= i ? row[j] * inv : 0.0f;
}

__global__ void CausalSoftmaxBackwardKernel(float* dscores, const float* att, int64_t rows,
                                            int64_t T, int64_t blocks) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.y) + threadIdx.y;
  if (r >= rows) return;
  const int64_t i = r % T, end = CausalBlockEnd(i, T, blocks);
  const float* p = att + r * T;
  float* d = dscores + r * T;
  const int lane = threadIdx.x;
  float dot = 0;
  for (int64_t j = lane; j <= i; j += kWarp) dot += p[j] * d[j];
  dot = WarpSum(dot);
  for (int64_t j = lane; j < end; j += kWarp) d[j] = j <= i ? p[j] * (d[j] - dot) : 0.0f;
}

// ---- pointer arrays for attention's batched gemms ----

__global__ void FillHeadsPointersKernel(float** ptrs, HeadsOperands ops, int64_t B, int64_t NH,
                                        int64_t T, int64_t blocks) {
  const int64_t BH = B * NH;
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= 3 * blocks * BH) return;
  const int64_t i = idx % BH, k = (idx / BH) % blocks, o = idx / (BH * blocks);
  const int64_t b = i / NH, h = i % NH, start = k * T / blocks;
  const HeadsOperand& op = ops.op[o];
  ptrs[idx] = const_cast<float*>(op.base) + b * op.b_stride + h * op.h_stride +
              start * op.start_stride;
}

// ---- GELU, the tanh form of cpu::reference ----

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void GeluForwardKernel(float* out, __nv_bfloat16* out16, const float* inp, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float y = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
  out[i] = y;
  if (out16 != nullptr) out16[i] = __float2bfloat16_rn(y);
}

__global__ void GeluBackwardKernel(float* dinout, __nv_bfloat16* d16, const float* inp, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float t = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  const float sech2 = 1.0f - t * t;
  const float grad =
      0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  const float d = dinout[i] * grad;
  dinout[i] = d;
  if (d16 != nullptr) d16[i] = __float2bfloat16_rn(d);
}

// A grid-stride loop: the casts run over whole activations (up to N x Vp
// logits, 412 million values for GPT-2 at B = 8).
__global__ void CastToBf16Kernel(__nv_bfloat16* out, const float* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

// ---- softmax cross-entropy: a block per row ----

// Two passes over each row instead of three: each thread keeps a running
// max and a sum rescaled whenever the max grows (the online softmax), the
// block combines them, then the row is rewritten as probabilities.
__global__ void SoftmaxCrossEntropyForwardKernel(float* probs, float* losses,
                                                 const int32_t* targets, int64_t V,
                                                 int64_t stride) {
  __shared__ float shared[kWarp];
  float* row = probs + blockIdx.x * stride;
  // Read before any thread overwrites the row with probabilities (the
  // reductions between are barriers).
  const float target_logit = threadIdx.x == 0 ? row[targets[blockIdx.x]] : 0.0f;
  float max = -INFINITY, sum = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float x = row[v];
    if (x > max) {
      sum = sum * expf(max - x) + 1.0f;
      max = x;
    } else {
      sum += expf(x - max);
    }
  }
  const float row_max = BlockReduce<true>(max, shared);
  const float mine = max == -INFINITY ? 0.0f : sum * expf(max - row_max);
  const float inv = 1.0f / BlockReduce<false>(mine, shared);
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) row[v] = expf(row[v] - row_max) * inv;
  if (threadIdx.x == 0) {
    losses[blockIdx.x] = -logf(fmaxf(expf(target_logit - row_max) * inv, 1e-30f));
  }
}

// With out16, only the bf16 copy is written: in bf16 mode nothing else reads
// the fp32 logit gradient, and skipping it saves N x V x 4 bytes of writes.
__global__ void SoftmaxCrossEntropyBackwardKernel(float* probs, __nv_bfloat16* out16,
                                                  const int32_t* targets, int64_t N, int64_t V,
                                                  int64_t stride, float k) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * V) return;
  const int64_t n = i / V, v = i % V;
  float& p = probs[n * stride + v];
  const float d = p * k - (v == targets[n] ? k : 0.0f);
  if (out16 != nullptr) {
    out16[n * stride + v] = __float2bfloat16_rn(d);
  } else {
    p = d;
  }
}

// ---- optimizer ----

// One block per kNormBlock elements: each thread sums a strided share in
// double, then the block adds its threads' sums in a fixed tree.
__global__ void SquaredNormKernel(double* partial, const float* grads, int64_t n,
                                  int64_t block_elems) {
  __shared__ double sums[256];
  const int64_t begin = blockIdx.x * block_elems;
  const int64_t end = begin + block_elems < n ? begin + block_elems : n;
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    s += static_cast<double>(grads[i]) * grads[i];
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

__global__ void ScaleKernel(float* x, float scale, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= scale;
}

__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, const uint8_t* decay,
                            int64_t n, AdamWArgs a) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g[i];
  v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g[i] * g[i];
  const float m_hat = m[i] / a.correction1;
  const float v_hat = v[i] / a.correction2;
  p[i] -= a.lr * (m_hat / (sqrtf(v_hat) + a.eps) + (decay[i] ? a.weight_decay * p[i] : 0.0f));
}

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 8;  // warps per block for the warp-per-row kernels
const dim3 kRowBlock(kWarp, kRowsPerBlock);

int RowBlocks(int64_t rows) {
  return Blocks(rows, kRowsPerBlock);
}

void ColumnSums(float* dweight, float* dbias, const float* dout, const float* inp,
                const float* mean, const float* rstd, int64_t N, int64_t C, float* scratch,
                cudaStream_t stream) {
  const int64_t groups = RowGroups(N);
  float* weight_sums = scratch;
  float* bias_sums = scratch + groups * C;
  const dim3 grid(static_cast<unsigned>(Blocks(C, kWarp)), static_cast<unsigned>(groups));
  ColumnPartialsKernel<<<grid, dim3(kWarp, kRowLanes), 0, stream>>>(weight_sums, bias_sums, dout,
                                                                    inp, mean, rstd, N, C);
  ColumnFinishKernel<<<Blocks(C, kThreads), kThreads, 0, stream>>>(dweight, dbias, weight_sums,
                                                                   bias_sums, groups, C);
}

}  // namespace

void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                    int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  EncoderForwardKernel<<<Blocks(B * T * C, kThreads), kThreads, 0, stream>>>(out, tokens, wte, wpe,
                                                                             B * T, T, C);
}

void PositionBackward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C,
                      cudaStream_t stream) {
  PositionBackwardKernel<<<Blocks(T * C, kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T, C);
}

void TokenBackward(float* dwte, const float* dout, const int32_t* uniques, const int32_t* starts,
                   const int32_t* rows, int64_t unique_count, int64_t C, cudaStream_t stream) {
  // gridDim.y is at most 65535: larger vocabularies go in slices.
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t first = 0; first < unique_count; first += kMaxGridY) {
    const int64_t n = std::min(kMaxGridY, unique_count - first);
    const dim3 grid(static_cast<unsigned>(Blocks(C, kThreads)), static_cast<unsigned>(n));
    TokenBackwardKernel<<<grid, kThreads, 0, stream>>>(dwte, dout, uniques + first, starts + first,
                                                       rows, C);
  }
}

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int64_t N, int64_t C, cudaStream_t stream,
                      uint16_t* out16) {
  LayerNormForwardKernel<<<RowBlocks(N), kRowBlock, 0, stream>>>(
      out, reinterpret_cast<__nv_bfloat16*>(out16), mean, rstd, inp, weight, bias, N, C);
}

int64_t ColumnSumScratch(int64_t N, int64_t C) {
  return 2 * RowGroups(N) * C;
}

void LayerNormBackwardAccumulate(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int64_t N, int64_t C, float* scratch,
                                 cudaStream_t stream) {
  LayerNormBackwardInputKernel<<<RowBlocks(N), kRowBlock, 0, stream>>>(dinp, dout, inp, weight,
                                                                       mean, rstd, N, C);
  ColumnSums(dweight, dbias, dout, inp, mean, rstd, N, C, scratch, stream);
}

void FillRows(float* out, const float* bias, int64_t N, int64_t OC, cudaStream_t stream) {
  FillRowsKernel<<<Blocks(N * OC, kThreads), kThreads, 0, stream>>>(out, nullptr, bias, N, OC);
}

void FillRowsResidual(float* out, const float* residual, const float* bias, int64_t N, int64_t OC,
                      cudaStream_t stream) {
  FillRowsKernel<<<Blocks(N * OC, kThreads), kThreads, 0, stream>>>(out, residual, bias, N, OC);
}

void BiasBackwardAccumulate(float* dbias, const float* dout, int64_t N, int64_t OC, float* scratch,
                            cudaStream_t stream) {
  ColumnSums(nullptr, dbias, dout, nullptr, nullptr, nullptr, N, OC, scratch, stream);
}

void CausalSoftmaxForward(float* att, int64_t rows, int64_t T, float scale, int64_t blocks,
                          cudaStream_t stream) {
  CausalSoftmaxForwardKernel<<<RowBlocks(rows), kRowBlock, 0, stream>>>(att, rows, T, scale,
                                                                         blocks);
}

void CausalSoftmaxBackwardInPlace(float* dscores, const float* att, int64_t rows, int64_t T,
                                  int64_t blocks, cudaStream_t stream) {
  CausalSoftmaxBackwardKernel<<<RowBlocks(rows), kRowBlock, 0, stream>>>(dscores, att, rows, T,
                                                                          blocks);
}

void FillHeadsPointers(float** ptrs, const HeadsOperands& ops, int64_t B, int64_t NH, int64_t T,
                       int64_t blocks, cudaStream_t stream) {
  const int64_t n = 3 * blocks * B * NH;
  if (n == 0) return;
  FillHeadsPointersKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(ptrs, ops, B, NH, T,
                                                                        blocks);
}

void CastToBf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = std::min(Blocks(n, kThreads), 132 * 16);  // enough to fill an H100/H200
  CastToBf16Kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(out), in, n);
}

void GeluForward(float* out, const float* inp, int64_t n, cudaStream_t stream, uint16_t* out16) {
  GeluForwardKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(
      out, reinterpret_cast<__nv_bfloat16*>(out16), inp, n);
}

void GeluBackwardInPlace(float* dinout, const float* inp, int64_t n, cudaStream_t stream,
                         uint16_t* d16) {
  GeluBackwardKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(
      dinout, reinterpret_cast<__nv_bfloat16*>(d16), inp, n);
}

void SoftmaxCrossEntropyForward(float* probs_inout, float* losses, const int32_t* targets,
                                int64_t N, int64_t V, int64_t stride, cudaStream_t stream) {
  SoftmaxCrossEntropyForwardKernel<<<static_cast<unsigned>(N), 512, 0, stream>>>(
      probs_inout, losses, targets, V, stride);
}

void SoftmaxCrossEntropyBackwardInPlace(float* probs_inout, const int32_t* targets, int64_t N,
                                        int64_t V, int64_t stride, float scale,
                                        cudaStream_t stream, uint16_t* out16) {
  const float k = scale / static_cast<float>(N);
  SoftmaxCrossEntropyBackwardKernel<<<Blocks(N * V, kThreads), kThreads, 0, stream>>>(
      probs_inout, reinterpret_cast<__nv_bfloat16*>(out16), targets, N, V, stride, k);
}

void SquaredNormPartials(double* partial, const float* grads, int64_t n, cudaStream_t stream) {
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  if (blocks == 0) return;
  SquaredNormKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(partial, grads, n,
                                                                       kNormBlock);
}

void ScaleInPlace(float* grads, float scale, int64_t n, cudaStream_t stream) {
  ScaleKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(grads, scale, n);
}

void AdamW(float* params, const float* grads, float* m, float* v, const uint8_t* decay, int64_t n,
           const AdamWArgs& args, cudaStream_t stream) {
  AdamWKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(params, grads, m, v, decay, n, args);
}

}  // namespace fmstack::gpt::cuda
