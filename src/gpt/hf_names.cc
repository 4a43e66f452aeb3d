#include "gpt/hf_names.h"

#include <cstring>
#include <span>

namespace fmstack::gpt {

std::vector<HfTensor> HfGpt2Tensors(const std::string& name, const std::vector<int64_t>& shape) {
  static constexpr const char* kConv1D[] = {".attn.c_attn.weight", ".attn.c_proj.weight",
                                            ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
  if (name == "wte.weight")
    return {{"transformer.wte.weight", name, shape, false}, {"lm_head.weight", name, shape, false}};
  if (name == "wpe.weight" || name.starts_with("ln_f."))
    return {{"transformer." + name, name, shape, false}};
  if (!name.starts_with("h.")) return {};
  for (const char* suffix : kConv1D) {
    if (name.ends_with(suffix) && shape.size() == 2)
      return {{"transformer." + name, name, {shape[1], shape[0]}, true}};
  }
  return {{"transformer." + name, name, shape, false}};
}

std::vector<std::byte> Transpose(std::span<const std::byte> in, int64_t rows, int64_t cols,
                                 int64_t elem) {
  std::vector<std::byte> out(in.size());
  const auto e = static_cast<size_t>(elem);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(&out[static_cast<size_t>(c * rows + r) * e],
                  &in[static_cast<size_t>(r * cols + c) * e], e);
    }
  }
  return out;
}

}  // namespace fmstack::gpt
