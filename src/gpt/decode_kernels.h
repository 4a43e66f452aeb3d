// gpt: the CPU kernels of the serving forward (gpt/decoder.h), built so that
// every output row is a function of its own input row alone: the same bits
// whatever the batch around it, its place in the batch, the chunk a prompt
// was split into, or the thread count. That is what lets the engine promise
// batch invariance (docs/serve.md) and makes a decode step equal to a full
// recompute bit for bit.
//
// How: each product is a chain of fused multiply-adds over k in order
// (std::fma rounds once, like the vector instruction, so the AVX2 path and
// the scalar tail agree); every reduction has a fixed shape that depends only
// on its length; the file is compiled without FMA contraction or fast math
// so the compiler cannot reorder what the code says. Each fast kernel has a
// naive twin in plain loops (decode_reference.cc) that must match it
// exactly; tests/unit/gpt/decode_kernels_test.cc holds them to it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fmstack::gpt::decode {

using Floats = std::span<float>;
using ConstFloats = std::span<const float>;

// Output columns per packed panel: two 8-float AVX2 registers.
inline constexpr int64_t kPanel = 16;

// A linear layer's weight (out, in), row-major as in gpt/layout.h, repacked
// as ceil(out / kPanel) panels of in x kPanel floats (k-major, columns past
// `out` zero), so that a micro-kernel streams one panel contiguously.
struct PackedLinear {
  int64_t in = 0, out = 0;
  std::vector<float> panels;
  std::vector<float> bias;  // out floats, or empty for none
  int64_t bytes() const {
    return static_cast<int64_t>((panels.size() + bias.size()) * sizeof(float));
  }
};

// Throws Error when the spans do not hold in x out (and out or 0) floats.
PackedLinear PackLinear(ConstFloats weight, ConstFloats bias, int64_t in, int64_t out);

// y (N, out) = x (N, in) @ W^T + bias, and, with a residual (N, out),
// y = residual + (that). y[n][o] = fma chain over k = 0..in-1 from 0, then
// + bias[o], then residual + it. Parallel over panels (OpenMP).
// REQUIRES: y does not alias x; residual may alias y.
void Linear(Floats y, ConstFloats x, const PackedLinear& w, int64_t N, ConstFloats residual = {});

// LayerNorm of each row, eps 1e-5: mean and variance by 8 fixed partial sums.
void LayerNorm(Floats out, ConstFloats x, ConstFloats weight, ConstFloats bias, int64_t N,
               int64_t C);

// GELU, tanh form written as x * sigmoid(2u) (gpt/cpu_kernels.cc's formula).
void Gelu(Floats inout);

// Where a sequence's keys and values live: a pool of blocks, each
// L x 2 x block_size x C floats (layer-major, then K and V, then slot), so
// that a block is one contiguous range that tiers can move as a unit.
struct KvGeometry {
  int64_t L = 0, C = 0, block_size = 16;
  int64_t block_floats() const { return L * 2 * block_size * C; }
  // Offset of K (which 0) or V (1) of layer l, slot s of block b.
  int64_t At(int64_t b, int64_t l, int which, int64_t s) const {
    return b * block_floats() + ((l * 2 + which) * block_size + s) * C;
  }
};

// One query row of attention: a token at position `pos` of the sequence
// whose block table is `blocks`; it attends to positions 0..pos.
struct AttentionRow {
  std::span<const int32_t> blocks;
  int64_t pos = 0;
};

// Writes row r's K and V (columns C..3C of qkv) into its cache slot.
void StoreKv(Floats kv, const KvGeometry& g, int64_t layer, ConstFloats qkv,
             std::span<const AttentionRow> rows);

// out (N, C): causal attention of each row's query (qkv's first C columns,
// NH heads) over the keys and values in the cache, scaled by 1/sqrt(C/NH).
// Scores by 8 fixed partial sums; softmax by ExpFast; values summed by an
// fma chain over positions in order. Parallel over rows x heads.
void PagedAttention(Floats out, ConstFloats qkv, ConstFloats kv, const KvGeometry& g, int64_t layer,
                    std::span<const AttentionRow> rows, int64_t NH);

// The naive twins (decode_reference.cc): plain loops, one row at a time,
// contiguous keys and values, no packing. The fast kernels equal them bit
// for bit.
namespace naive {
void Linear(Floats y, ConstFloats x, ConstFloats weight, ConstFloats bias, int64_t N, int64_t in,
            int64_t out, ConstFloats residual = {});
// q (C), k and v (T, C): the attention of one query at position T - 1.
void Attention(Floats out, ConstFloats q, ConstFloats k, ConstFloats v, int64_t T, int64_t C,
               int64_t NH);
}  // namespace naive

// The fixed-shape sum both sides use: 8 lanes over i % 8, then
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
float Sum8(const float* x, int64_t n);
float Dot8(const float* x, const float* y, int64_t n);

}  // namespace fmstack::gpt::decode
