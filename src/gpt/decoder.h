// gpt: the model's incremental forward for serving. Where Model (model.h)
// runs whole sequences for training, a Decoder runs one engine step: for
// each scheduled sequence, a few new tokens (a prefill chunk, one decoded
// token, or several proposed tokens to verify) at known positions, whose
// keys and values it writes into a paged cache that the caller owns, and
// whose earlier keys and values it reads from there.
//
// Batch invariance: every output row is a function of that sequence's own
// tokens alone (gpt/decode_kernels.h), so a sequence's logits are the same
// bits served alone or beside any others, prefilled in one chunk or many.
//
// Thread-safety: one Forward at a time. Lifetime: the Decoder copies (and
// packs) the weights it is given; the caller's buffer can go.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "gpt/decode_kernels.h"
#include "gpt/layout.h"
#include "workload/shape.h"

namespace fmstack::gpt {

// One sequence's share of a step.
struct DecodeSeq {
  std::span<const int32_t> tokens;  // the tokens computed this step
  int64_t start = 0;                // position of tokens[0]; 0..start-1 are in the cache
  std::span<const int32_t> blocks;  // block table covering positions 0 .. start + tokens - 1
  int64_t logits = 1;               // logits of the last `logits` tokens (0 .. tokens.size())
};

struct DecoderOptions {
  std::string backend = "cpu";
  int64_t max_tokens = 2048;  // tokens per step, at most (the scheduler's budget)
  int64_t max_logits = 256;   // logits rows per step, at most
  int64_t block_size = 16;    // tokens per KV block
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual const ParamLayout& layout() const = 0;
  virtual const decode::KvGeometry& kv_geometry() const = 0;
  virtual const DecoderOptions& options() const = 0;
  // Bytes of weights the forward reads per step (what a decode at batch 1
  // must stream from memory).
  virtual int64_t weight_bytes() const = 0;

  // Runs one step. kv is the block pool (n blocks of kv_geometry().block_floats()
  // floats); logits receives, in order of seqs, each seq's `logits` rows of V
  // floats. Throws Error naming the sequence and what was wrong (a token
  // outside the vocabulary, a position past the context, a block table too
  // short or naming a block outside the pool, a step over the options' caps).
  virtual void Forward(std::span<const DecodeSeq> seqs, std::span<float> kv,
                       std::span<float> logits) = 0;
  virtual std::string Hardware() const = 0;
};

// params: the model's flat parameter buffer (ParamLayout::For(shape)).
// Throws Error for an unknown backend or a shape it cannot serve.
std::unique_ptr<Decoder> CreateDecoder(const workload::TransformerShape& shape,
                                       std::span<const float> params,
                                       const DecoderOptions& options);

}  // namespace fmstack::gpt
