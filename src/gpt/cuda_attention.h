// gpt: causal attention's matmuls on cuBLAS, computing only the part of
// each T x T product that the mask keeps. The sequence is cut into `blocks`
// row blocks; the block of queries [r0, r1) needs keys [0, r1) only, and the
// block of keys [r0, r1) gets gradient from queries [r0, T) only. With 4
// blocks the six products do 10/16 of the full work (8 blocks: 36/64).
// Each block is one batched gemm over every (batch row, head) of the
// micro-batch, so a product costs `blocks` cuBLAS calls, not one per row.
//
// What is not computed is never read: the softmaxes read a row's scores only
// up to the diagonal and write zeros past it up to the end of the row's
// block, and the products that read probabilities or score gradients past
// the diagonal inside a block read those zeros; nothing reads past a row's
// block (in the score buffers that is stale memory, maybe not even finite).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpt/cuda_kernels.h"
#include "gpt/cuda_runtime.h"

namespace fmstack::gpt::cuda {

class CausalAttention {
 public:
  // Pointer arrays for up to max_batch sequences of NH heads, cut into
  // `blocks` blocks (1 = the full products; at most T are used).
  CausalAttention(int64_t max_batch, int64_t NH, int64_t blocks);

  // One call's shapes: B sequences of T tokens, C channels in NH heads.
  // qkv rows are 3C wide (Q, K, V, head after head), the scores T x T per
  // (b, h), (b, h) after (b, h).
  struct Call {
    const Blas* blas;
    cudaStream_t stream;
    int64_t B, T, C, NH;
  };
  // out (B, T, C) = softmax(mask(Q K^T) / sqrt(hs)) V per head; att keeps
  // the probabilities for Backward.
  void Forward(const Call& c, float* out, float* att, const float* qkv) const;
  // dqkv (overwritten) from dout; dscores is scratch of att's size.
  void Backward(const Call& c, float* dqkv, float* dscores, const float* dout, const float* qkv,
                const float* att) const;
  int64_t blocks() const { return blocks_; }

 private:
  enum class Dims { kScores, kRows, kKeys };  // which (m, n, k) a block has: see .cc
  struct Gemm {
    cublasOperation_t ta, tb;
    int64_t lda, ldb, ldc;
    float alpha;
    Dims dims;
  };
  void Batched(const Call& c, const HeadsOperands& ops, const Gemm& g, const char* what) const;

  int64_t max_batch_, NH_, blocks_;
  DeviceBuffer<float*> ptrs_;  // 3 operands x blocks x (max_batch x NH)
};

}  // namespace fmstack::gpt::cuda
