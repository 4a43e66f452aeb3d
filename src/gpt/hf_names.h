// gpt: our tensors under Hugging Face's GPT2LMHeadModel names, so that an
// exported checkpoint loads into transformers' GPT-2 (or any code written
// against its state dict). GPT-2's Conv1D layers keep weights as
// (in, out), the transpose of ours (out, in); the head is tied to wte and
// appears twice, as transformers' state_dict() lists it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fmstack::gpt {

struct HfTensor {
  std::string name;            // "transformer.h.0.attn.c_attn.weight"
  std::string source;          // ours: "h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // as written
  bool transpose = false;      // a 2-D source written as its transpose
};

// The Hugging Face tensors for our tensor `name` of `shape` (two for
// wte.weight: it is also lm_head.weight); empty for a name that is not
// one of the GPT's parameters.
std::vector<HfTensor> HfGpt2Tensors(const std::string& name, const std::vector<int64_t>& shape);

// Transposes a rows x cols row-major matrix of `elem`-byte elements.
std::vector<std::byte> Transpose(std::span<const std::byte> in, int64_t rows, int64_t cols,
                                 int64_t elem);

}  // namespace fmstack::gpt
