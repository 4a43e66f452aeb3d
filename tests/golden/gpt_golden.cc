// Writes what fmstack's GPT computes on a small model, for the PyTorch
// reference in gpt_reference.py to recompute: the initial weights under
// Hugging Face's GPT-2 names (through the same mapping and torch writer as
// `fmstack ckpt export --format torch`), then for each of a few batches the
// tokens, loss and gradients, and the weights after one AdamW step; and the
// logits of the first batch.
//
//   gpt_golden OUT.pt
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "ckpt/torch_file.h"
#include "gpt/hf_names.h"
#include "gpt/model.h"
#include "train/optimizer.h"
#include "util/error.h"

namespace {

using namespace fmstack;

constexpr int64_t kB = 3, kT = 16, kSteps = 3;

// Owns the bytes of every tensor written.
struct Out {
  std::vector<ckpt::NamedTensor> tensors;
  std::vector<std::vector<std::byte>> store;

  void Add(const std::string& name, ckpt::DType dtype, std::vector<int64_t> shape,
           std::span<const std::byte> data) {
    store.emplace_back(data.begin(), data.end());
    tensors.push_back({name, dtype, std::move(shape), store.back()});
  }
  void Floats(const std::string& name, std::vector<int64_t> shape, std::span<const float> v) {
    Add(name, ckpt::DType::kF32, std::move(shape), std::as_bytes(v));
  }
  // Every parameter (or gradient) tensor of `buffer` under its HF name.
  void Model(const std::string& prefix, const gpt::ParamLayout& layout,
             std::span<const float> buffer) {
    for (const gpt::TensorInfo& t : layout.Tensors()) {
      const auto bytes = std::as_bytes(
          buffer.subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.size())));
      for (const gpt::HfTensor& h : gpt::HfGpt2Tensors(t.name, t.dims)) {
        if (h.transpose) {
          store.push_back(gpt::Transpose(bytes, t.dims[0], t.dims[1], sizeof(float)));
          tensors.push_back({prefix + h.name, ckpt::DType::kF32, h.shape, store.back()});
        } else {
          Add(prefix + h.name, ckpt::DType::kF32, h.shape, bytes);
        }
      }
    }
  }
};

int Main(int argc, char** argv) {
  if (argc != 2) throw Error("usage: gpt_golden OUT.pt");
  workload::TransformerShape shape{.name = "golden",
                                   .layers = 2,
                                   .hidden = 64,
                                   .heads = 4,
                                   .kv_heads = 4,
                                   .ffn_hidden = 256,
                                   .vocab = 96,
                                   .seq_len = 32};
  auto model = gpt::CreateModel(shape, {.backend = "cpu", .max_batch = kB, .max_seq = kT});
  const gpt::ParamLayout& layout = model->params_layout();
  std::span<float> params = model->params();
  gpt::InitParams(layout, params, 7);
  // Biases and LayerNorm gains start at 0 and 1: nudge every weight so that
  // none of them is a trivial value the reference could get right by accident.
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / static_cast<double>(1ull << 53);
  };
  for (float& p : params) p += static_cast<float>(0.05 * (next() - 0.5));

  Out out;
  out.Model("init.", layout, params);
  train::OptimConfig oc;
  oc.lr = 1e-3;
  oc.weight_decay = 0.1;
  oc.beta1 = 0.9;
  oc.beta2 = 0.95;
  oc.eps = 1e-8;
  train::AdamW adamw(oc, layout);
  const std::vector<double> hyper{oc.lr, oc.weight_decay, oc.beta1, oc.beta2, oc.eps};
  std::vector<float> h(hyper.begin(), hyper.end());
  out.Floats("adamw_hyper", {5}, h);
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<int64_t> seq(static_cast<size_t>(kB * (kT + 1)));
    for (int64_t& t : seq) t = static_cast<int64_t>(next() * static_cast<double>(shape.vocab));
    std::vector<int32_t> tokens, targets;
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t = 0; t < kT; ++t) {
        tokens.push_back(static_cast<int32_t>(seq[static_cast<size_t>(b * (kT + 1) + t)]));
        targets.push_back(static_cast<int32_t>(seq[static_cast<size_t>(b * (kT + 1) + t + 1)]));
      }
    }
    const std::string p = fmt::format("step{}.", step);
    out.Add(p + "tokens", ckpt::DType::kI64, {kB, kT + 1}, std::as_bytes(std::span(seq)));
    if (step == 0) {
      model->Forward(tokens, {}, kB, kT);
      std::vector<float> logits;
      for (int64_t b = 0; b < kB; ++b) {
        for (int64_t t = 0; t < kT; ++t) {
          const std::span<const float> l = model->Logits(b, t);
          logits.insert(logits.end(), l.begin(), l.end());
        }
      }
      out.Floats("logits", {kB, kT, shape.vocab}, logits);
    }
    model->ZeroGrad();
    const float loss = model->Forward(tokens, targets, kB, kT);
    model->Backward(1.0f);
    out.Floats(p + "loss", {}, std::span(&loss, 1));
    out.Model(p + "grad.", layout, model->grads());
    adamw.Update(params, model->grads(), step + 1, oc.lr);
    out.Model(p + "after.", layout, params);
    std::cout << fmt::format("step {}: loss {:.6f}\n", step, loss);
  }
  ckpt::WriteTorchFile(argv[1], out.tensors);
  std::cout << fmt::format("wrote {}: {} tensors\n", argv[1], out.tensors.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "gpt_golden: " << e.what() << "\n";
    return 1;
  }
}
