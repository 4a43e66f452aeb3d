// gpt: where every parameter and activation of the GPT-2-style decoder lives
// inside the model's two contiguous buffers. The checkpoint engine names
// tensors with Tensors(); the trainer sizes its memory with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload/shape.h"

namespace fmstack::gpt {

// One named tensor inside a flat buffer.
struct TensorInfo {
  std::string name;  // GPT-2 / safetensors naming: "h.3.attn.c_attn.weight"
  int64_t offset = 0;
  std::vector<int64_t> dims;
  int layer = -1;  // transformer block, or -1 for embeddings and the final LayerNorm
  int64_t size() const;
};

// Parameters, grouped by kind across layers as in llm.c so that layer l's
// weight of a kind is at offset(kind) + l * size(kind): the loops stay plain.
struct ParamLayout {
  int64_t L = 0, C = 0, F = 0, V = 0, maxT = 0, NH = 0;
  int64_t wte = 0, wpe = 0;            // (V, C), (maxT, C)
  int64_t ln1w = 0, ln1b = 0;          // (L, C)
  int64_t qkvw = 0, qkvb = 0;          // (L, 3C, C), (L, 3C)
  int64_t attprojw = 0, attprojb = 0;  // (L, C, C), (L, C)
  int64_t ln2w = 0, ln2b = 0;          // (L, C)
  int64_t fcw = 0, fcb = 0;            // (L, F, C), (L, F)
  int64_t fcprojw = 0, fcprojb = 0;    // (L, C, F), (L, C)
  int64_t lnfw = 0, lnfb = 0;          // (C)
  int64_t total = 0;                   // floats

  // Throws Error naming the field when `shape` is not a GPT-2-style decoder
  // (GELU MLP, LayerNorm, learned positions, tied head, biases, dense, MHA).
  static ParamLayout For(const workload::TransformerShape& shape);

  // Every parameter tensor, one per layer, in buffer order of kinds.
  std::vector<TensorInfo> Tensors() const;
  // The projections that write into the residual stream: GPT-2 scales their
  // initial weights by 1/sqrt(2 L).
  bool IsResidualProjection(const TensorInfo& t) const;
  // Tensors grouped in the order the backward pass finishes their gradients:
  // the final LayerNorm, blocks L-1 .. 0, then the embeddings (the tied wte
  // collects its last contribution at the very end). Model::Backward reports
  // each group's index as it completes, so data parallelism can start
  // reducing early groups while later ones are still being computed.
  std::vector<std::vector<TensorInfo>> GradReadyGroups() const;
};

// Activations kept from the forward pass for the backward pass, for a
// micro-batch of B sequences of T tokens. The per-layer kinds are laid out
// [L][...]; the per-layer gradient scratch below is reused by every layer.
struct ActivationLayout {
  int64_t B = 0, T = 0;
  // kept, per layer
  int64_t ln1 = 0, ln1_mean = 0, ln1_rstd = 0;  // (L, N, C), (L, N)
  int64_t qkv = 0;                              // (L, N, 3C)
  int64_t att = 0;                              // (L, B, NH, T, T) softmax probabilities
  int64_t atty = 0;                             // (L, N, C) attention output per head
  int64_t residual2 = 0;                        // (L, N, C) after attention
  int64_t ln2 = 0, ln2_mean = 0, ln2_rstd = 0;
  int64_t fch = 0, fch_gelu = 0;  // (L, N, F)
  int64_t residual3 = 0;          // (L, N, C) block output
  // kept, once
  int64_t encoded = 0;                          // (N, C)
  int64_t lnf = 0, lnf_mean = 0, lnf_rstd = 0;  // (N, C), (N)
  int64_t logits = 0;                           // (N, V): probabilities, then their gradient
  int64_t logits_stride = 0;                    // floats from one row of logits to the next, >= V
  int64_t losses = 0;                           // (N)
  // gradient scratch, reused by every layer
  int64_t dresidual = 0, dln = 0, dqkv = 0, datty = 0, dfch = 0, datt = 0;
  int64_t kept = 0;   // floats kept for backward
  int64_t total = 0;  // floats including scratch

  // logits_stride 0 = V. The CUDA backend pads it to a multiple of 128:
  // with an odd V (GPT-2's 50257) cuBLAS runs the LM head's matmuls on
  // unaligned kernels 5x slower than the aligned ones.
  static ActivationLayout For(const ParamLayout& p, int64_t B, int64_t T,
                              int64_t logits_stride = 0);
};

}  // namespace fmstack::gpt
