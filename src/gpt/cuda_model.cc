// The CUDA backend: the same forward and backward passes as cpu_model.cc,
// call for call, on device buffers laid out by the same ParamLayout and
// ActivationLayout, with cuBLAS for the matmuls and cuda_kernels.h between.
//
// The host copies of parameters and gradients (pinned) stay the truth that
// train/ reads and writes through params() and grads(): Forward uploads the
// parameters, Backward uploads the gradients it accumulates into and brings
// each group back as soon as it is final, before calling `ready`. That keeps
// every trainer path (DDP, ZeRO, checkpoints, fault rehearsal) unchanged, at
// the price of two PCIe copies of the gradients and one of the parameters
// per micro-batch; an optimizer on the device removes them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "gpt/cuda_attention.h"
#include "gpt/cuda_kernels.h"
#include "gpt/cuda_linear.h"
#include "gpt/cuda_runtime.h"
#include "gpt/model.h"
#include "util/error.h"

namespace fmstack::gpt {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// Logits rows start on 512-byte boundaries (ActivationLayout::logits_stride).
constexpr int64_t kLogitsAlign = 128;

int64_t RoundUp(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

std::string Gib(int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
}

// The widest gradient whose rows are summed (bias and LayerNorm gradients).
int64_t WidestColumnSum(const ParamLayout& p) {
  return std::max(3 * p.C, p.F);
}

// bf16 mode's 16-bit copies: every parameter; the input of every linear
// layer (ln1, atty, ln2 and fch_gelu per layer, then lnf), which Forward
// writes and Backward reads again; and one output gradient at a time, the
// widest being the logits'.
struct Bf16Sizes {
  int64_t params = 0, inputs = 0, dout = 0;
  int64_t bytes() const { return 2 * (params + inputs + dout); }
};
Bf16Sizes Bf16SizesFor(const ParamLayout& p, const ActivationLayout& a) {
  const int64_t N = a.B * a.T;
  return {p.total, (p.L * (3 * p.C + p.F) + p.C) * N,
          N * std::max({a.logits_stride, p.F, 3 * p.C})};
}

// The device bytes a model of layout p with activations a takes: the
// parameters, their gradients, the activations, the column-sum scratch,
// the token ids, and in bf16 mode the 16-bit copies.
int64_t DeviceBytes(const ParamLayout& p, const ActivationLayout& a, bool bf16) {
  const int64_t ids = 5 * a.B * a.T + p.V + 1;  // tokens, targets, token rows
  const int64_t scratch = cuda::ColumnSumScratch(a.B * a.T, WidestColumnSum(p));
  return (2 * p.total + a.total + scratch) * int64_t{sizeof(float)} +
         ids * int64_t{sizeof(int32_t)} + (bf16 ? Bf16SizesFor(p, a).bytes() : 0);
}

class CudaModel final : public Model {
 public:
  CudaModel(const workload::TransformerShape& shape, const ModelOptions& options,
            const cuda::DeviceInfo& device)
      : p_(ParamLayout::For(shape)),
        a_(ActivationLayout::For(p_, options.max_batch,
                                 options.max_seq > 0 ? options.max_seq : shape.seq_len,
                                 RoundUp(p_.V, kLogitsAlign))),
        device_(device),
        stream_("creating the model's stream"),
        blas_(stream_.get(), options.matmul),
        bf16_(options.matmul == Matmul::kBf16),
        attention_(a_.B, p_.NH, options.attention_blocks) {
    if (a_.T > p_.maxT) {
      throw Error(fmt::format("max_seq {} exceeds the model's seq_len {}", a_.T, p_.maxT));
    }
    const int64_t need = DeviceBytes(p_, a_, bf16_);
    if (need > device_.free_bytes) {
      throw Error(fmt::format(
          "device \"cuda\": model \"{}\" needs {} of device memory ({} parameters, {} gradients, "
          "{} activations for {} x {} tokens{}) but device {} ({}) has {} free of {}; lower "
          "train.micro_batch or the model",
          shape.name, Gib(need), Gib(p_.total * 4), Gib(p_.total * 4), Gib(a_.total * 4), a_.B,
          a_.T, bf16_ ? ", " + Gib(Bf16SizesFor(p_, a_).bytes()) + " of bf16 copies" : "",
          device_.index, device_.name, Gib(device_.free_bytes), Gib(device_.total_bytes)));
    }
    const auto P = static_cast<size_t>(p_.total);
    const auto N = static_cast<size_t>(a_.B * a_.T);
    params_ = cuda::PinnedBuffer<float>(P, "pinning the host parameters");
    grads_ = cuda::PinnedBuffer<float>(P, "pinning the host gradients");
    losses_ = cuda::PinnedBuffer<float>(N, "pinning the losses");
    d_params_ = cuda::DeviceBuffer<float>(P, "allocating the parameters");
    d_grads_ = cuda::DeviceBuffer<float>(P, "allocating the gradients");
    d_acts_ = cuda::DeviceBuffer<float>(static_cast<size_t>(a_.total), "allocating activations");
    if (bf16_) {
      const Bf16Sizes sizes = Bf16SizesFor(p_, a_);
      d_params16_ = cuda::DeviceBuffer<uint16_t>(static_cast<size_t>(sizes.params),
                                                 "allocating the bf16 parameters");
      d_inputs16_ = cuda::DeviceBuffer<uint16_t>(static_cast<size_t>(sizes.inputs),
                                                 "allocating the bf16 layer inputs");
      d_dout16_ = cuda::DeviceBuffer<uint16_t>(static_cast<size_t>(sizes.dout),
                                               "allocating the bf16 output gradient");
    }
    d_tokens_ = cuda::DeviceBuffer<int32_t>(N, "allocating token ids");
    d_targets_ = cuda::DeviceBuffer<int32_t>(N, "allocating target ids");
    d_token_rows_ = cuda::DeviceBuffer<int32_t>(3 * N + 1, "allocating token rows");
    d_column_scratch_ = cuda::DeviceBuffer<float>(
        static_cast<size_t>(cuda::ColumnSumScratch(a_.B * a_.T, WidestColumnSum(p_))),
        "allocating the column-sum scratch");
    linear_.emplace(
        blas_, s(), cs(),
        cuda::LinearLayers::Bf16{d_params_.data(), d_params16_.data(), d_dout16_.data()});
    std::fill(params_.data(), params_.data() + P, 0.0f);
    std::fill(grads_.data(), grads_.data() + P, 0.0f);
    for (const std::vector<TensorInfo>& group : p_.GradReadyGroups()) {
      std::vector<std::pair<int64_t, int64_t>> runs;
      for (const TensorInfo& t : group) runs.emplace_back(t.offset, t.size());
      groups_.push_back(std::move(runs));
    }
  }

  const ParamLayout& params_layout() const override { return p_; }
  const ActivationLayout& activations_layout() const override { return a_; }
  std::span<float> params() override { return params_.span(); }
  std::span<const float> params() const override { return params_.span(); }
  std::span<float> grads() override { return grads_.span(); }
  std::span<const float> grads() const override { return grads_.span(); }
  // With the device optimizer the host gradients are never read, and
  // clearing them (500 MB for GPT-2 124M) held the GPU idle for 39 ms of a
  // 109 ms TF32 step on an H200.
  void ZeroGrad() override {
    if (device_optimizer_) {
      cuda::Check(cudaMemsetAsync(d_grads_.data(), 0, d_grads_.bytes(), s()), "clearing gradients");
    } else {
      std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f);
    }
  }
  // The linear layers' matmuls, as the model runs them.
  double MatmulGflops(const std::vector<GemmShape>& shapes) const override {
    return bf16_ ? cuda::Bf16GemmGflops(blas_, stream_, shapes)
                 : cuda::SgemmGflops(blas_, stream_, shapes);
  }
  std::string Hardware() const override {
    return fmt::format("cuda:{} {}, {}", device_.index, device_.name,
                       blas_.matmul() == Matmul::kFp32   ? "fp32 matmuls"
                       : blas_.matmul() == Matmul::kTf32 ? "TF32 matmuls"
                                                         : "bf16 linear layers, TF32 attention");
  }

  float Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t B,
                int64_t T) override;
  using Model::Backward;
  void Backward(float scale, const std::function<void(int)>& ready) override;
  std::span<const float> Logits(int64_t b, int64_t t) const override;

  bool EnableDeviceOptimizer(const DeviceOptimizer& config) override;
  double DeviceOptimizerStep(int64_t step, double lr) override;
  void SyncToHost(std::span<float> m, std::span<float> v) override;
  void SyncToDevice(std::span<const float> m, std::span<const float> v) override;
  DeviceState device_state() const override;
  void CopyFromDevice(std::span<const DeviceCopy> copies) override;
  void PoisonGradient() override;

 private:
  float* P(int64_t base, int64_t size, int64_t l = 0) const {
    return d_params_.data() + base + l * size;
  }
  float* G(int64_t base, int64_t size, int64_t l = 0) const {
    return d_grads_.data() + base + l * size;
  }
  float* A(int64_t base, int64_t per_row, int64_t l = 0) const {
    return d_acts_.data() + base + l * a_.B * a_.T * per_row;
  }
  float* Scores(int64_t base, int64_t l = 0) const {
    return d_acts_.data() + base + l * a_.B * p_.NH * a_.T * a_.T;
  }
  float* LayerInput(int64_t l) const {
    return l == 0 ? A(a_.encoded, p_.C) : A(a_.residual3, p_.C, l - 1);
  }
  cudaStream_t s() const { return stream_.get(); }
  float* cs() const { return d_column_scratch_.data(); }

  void Copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind, const char* what) const {
    cuda::Check(cudaMemcpyAsync(to, from, bytes, kind, s()), what);
  }
  void UploadTokens(std::span<const int32_t> tokens, std::span<const int32_t> targets);
  // Brings gradient group g (ParamLayout::GradReadyGroups) to the host and
  // waits for it.
  void DownloadGroup(int g);

  // bf16 mode: the copy of layer l's input that starts `offset` values into
  // its row (ln1 0, atty C, ln2 2C, fch_gelu 3C; lnf is layer L's 0).
  uint16_t* In16(int64_t l, int64_t offset) const {
    if (!bf16_) return nullptr;
    return d_inputs16_.data() + (l * (3 * p_.C + p_.F) + offset) * a_.B * a_.T;
  }
  uint16_t* Dout16() const { return linear_->dout16(); }

  cuda::CausalAttention::Call AttentionCall() const { return {&blas_, s(), B_, T_, p_.C, p_.NH}; }

  ParamLayout p_;
  ActivationLayout a_;
  cuda::DeviceInfo device_;
  cuda::Stream stream_;
  cuda::Blas blas_;
  bool bf16_;
  cuda::CausalAttention attention_;
  cuda::PinnedBuffer<float> params_, grads_, losses_;
  cuda::DeviceBuffer<float> d_params_, d_grads_, d_acts_;
  cuda::DeviceBuffer<uint16_t> d_params16_, d_inputs16_, d_dout16_;  // bf16 mode only
  cuda::DeviceBuffer<int32_t> d_tokens_, d_targets_, d_token_rows_;
  cuda::DeviceBuffer<float> d_column_scratch_;
  std::optional<cuda::LinearLayers> linear_;  // set once the buffers above exist
  std::vector<std::vector<std::pair<int64_t, int64_t>>> groups_;  // (offset, floats) per tensor
  std::vector<int32_t> token_rows_;  // uniques | starts | rows, as uploaded
  int64_t unique_tokens_ = 0;
  mutable std::vector<float> logits_row_;
  // The device optimizer, once enabled: the device holds the truth.
  std::optional<DeviceOptimizer> device_optimizer_;
  cuda::DeviceBuffer<float> d_m_, d_v_;
  cuda::DeviceBuffer<uint8_t> d_decay_;
  cuda::DeviceBuffer<double> d_norm_partials_;
  int64_t B_ = 0, T_ = 0;
  bool has_targets_ = false;
};

void CudaModel::UploadTokens(std::span<const int32_t> tokens, std::span<const int32_t> targets) {
  const auto N = static_cast<int64_t>(tokens.size());
  Copy(d_tokens_.data(), tokens.data(), tokens.size_bytes(), cudaMemcpyHostToDevice, "tokens");
  if (!targets.empty()) {
    Copy(d_targets_.data(), targets.data(), targets.size_bytes(), cudaMemcpyHostToDevice,
         "targets");
  }
  // Rows grouped by token for the deterministic embedding gradient.
  std::vector<int32_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return tokens[x] < tokens[y]; });
  std::vector<int32_t> uniques, starts;
  for (int64_t k = 0; k < N; ++k) {
    if (k == 0 || tokens[order[k]] != tokens[order[k - 1]]) {
      uniques.push_back(tokens[order[k]]);
      starts.push_back(static_cast<int32_t>(k));
    }
  }
  starts.push_back(static_cast<int32_t>(N));
  unique_tokens_ = static_cast<int64_t>(uniques.size());
  token_rows_.clear();
  token_rows_.insert(token_rows_.end(), uniques.begin(), uniques.end());
  token_rows_.insert(token_rows_.end(), starts.begin(), starts.end());
  token_rows_.insert(token_rows_.end(), order.begin(), order.end());
  Copy(d_token_rows_.data(), token_rows_.data(), token_rows_.size() * sizeof(int32_t),
       cudaMemcpyHostToDevice, "token rows");
  // token_rows_ is pageable: the copy must finish before it is rebuilt.
  stream_.Synchronize("uploading token ids");
}

float CudaModel::Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                         int64_t B, int64_t T) {
  CheckForwardArgs(p_, a_, tokens, targets, B, T);
  B_ = B, T_ = T;
  has_targets_ = !targets.empty();
  const int64_t L = p_.L, C = p_.C, F = p_.F, V = p_.V, N = B * T;
  if (!device_optimizer_) {
    Copy(d_params_.data(), params_.data(), d_params_.bytes(), cudaMemcpyHostToDevice, "parameters");
  }
  if (bf16_) cuda::CastToBf16(d_params16_.data(), d_params_.data(), p_.total, s());
  UploadTokens(tokens, targets);

  cuda::EncoderForward(A(a_.encoded, C), d_tokens_.data(), P(p_.wte, V * C), P(p_.wpe, p_.maxT * C),
                       B, T, C, s());
  for (int64_t l = 0; l < L; ++l) {
    cuda::LayerNormForward(A(a_.ln1, C, l), A(a_.ln1_mean, 1, l), A(a_.ln1_rstd, 1, l),
                           LayerInput(l), P(p_.ln1w, C, l), P(p_.ln1b, C, l), N, C, s(),
                           In16(l, 0));
    linear_->Forward(A(a_.qkv, 3 * C, l), {A(a_.ln1, C, l), In16(l, 0), true},
                     P(p_.qkvw, 3 * C * C, l), P(p_.qkvb, 3 * C, l), N, C, 3 * C);
    attention_.Forward(AttentionCall(), A(a_.atty, C, l), Scores(a_.att, l), A(a_.qkv, 3 * C, l));
    linear_->ResidualForward(A(a_.residual2, C, l), LayerInput(l), {A(a_.atty, C, l), In16(l, C)},
                             P(p_.attprojw, C * C, l), P(p_.attprojb, C, l), N, C, C);
    cuda::LayerNormForward(A(a_.ln2, C, l), A(a_.ln2_mean, 1, l), A(a_.ln2_rstd, 1, l),
                           A(a_.residual2, C, l), P(p_.ln2w, C, l), P(p_.ln2b, C, l), N, C, s(),
                           In16(l, 2 * C));
    linear_->Forward(A(a_.fch, F, l), {A(a_.ln2, C, l), In16(l, 2 * C), true}, P(p_.fcw, F * C, l),
                     P(p_.fcb, F, l), N, C, F);
    cuda::GeluForward(A(a_.fch_gelu, F, l), A(a_.fch, F, l), N * F, s(), In16(l, 3 * C));
    linear_->ResidualForward(A(a_.residual3, C, l), A(a_.residual2, C, l),
                             {A(a_.fch_gelu, F, l), In16(l, 3 * C), true}, P(p_.fcprojw, C * F, l),
                             P(p_.fcprojb, C, l), N, F, C);
  }
  cuda::LayerNormForward(A(a_.lnf, C), A(a_.lnf_mean, 1), A(a_.lnf_rstd, 1), LayerInput(L),
                         P(p_.lnfw, C), P(p_.lnfb, C), N, C, s(), In16(L, 0));
  const int64_t Vp = a_.logits_stride;
  linear_->Gemm(A(a_.logits, Vp), {A(a_.lnf, C), In16(L, 0), true}, P(p_.wte, V * C), N, C, V, 0.0f,
                Vp);
  cuda::CheckLaunch("the forward pass");
  if (!has_targets_) {
    stream_.Synchronize("the forward pass");
    return 0.0f;
  }
  cuda::SoftmaxCrossEntropyForward(A(a_.logits, Vp), A(a_.losses, 1), d_targets_.data(), N, V, Vp,
                                   s());
  cuda::CheckLaunch("the cross-entropy");
  Copy(losses_.data(), A(a_.losses, 1), static_cast<size_t>(N) * sizeof(float),
       cudaMemcpyDeviceToHost, "losses");
  stream_.Synchronize("the forward pass");
  double sum = 0;  // in order, as on the CPU
  for (int64_t n = 0; n < N; ++n) sum += losses_.data()[n];
  return static_cast<float>(sum / static_cast<double>(N));
}

void CudaModel::Backward(float scale, const std::function<void(int)>& ready) {
  if (!has_targets_) throw Error("Backward needs a Forward with targets first");
  const int64_t L = p_.L, C = p_.C, F = p_.F, V = p_.V, N = B_ * T_;
  if (!device_optimizer_) {
    Copy(d_grads_.data(), grads_.data(), d_grads_.bytes(), cudaMemcpyHostToDevice, "gradients");
  }
  const int64_t Vp = a_.logits_stride;
  float* dlogits = A(a_.logits, Vp);
  // In bf16 mode the logit gradient is written in bf16 only (nothing else reads it).
  cuda::SoftmaxCrossEntropyBackwardInPlace(dlogits, d_targets_.data(), N, V, Vp, scale, s(),
                                           Dout16());
  float* dres = A(a_.dresidual, C);
  float* dln = A(a_.dln, C);
  linear_->Backward(dln, G(p_.wte, V * C), nullptr, dlogits, Dout16(), {A(a_.lnf, C), In16(L, 0)},
                    P(p_.wte, V * C), N, C, V, Vp);
  cuda::Check(cudaMemsetAsync(dres, 0, static_cast<size_t>(N * C) * sizeof(float), s()),
              "clearing the residual gradient");
  cuda::LayerNormBackwardAccumulate(dres, G(p_.lnfw, C), G(p_.lnfb, C), dln, LayerInput(L),
                                    P(p_.lnfw, C), A(a_.lnf_mean, 1), A(a_.lnf_rstd, 1), N, C, cs(),
                                    s());
  if (ready) {
    DownloadGroup(0);
    ready(0);
  }
  float* dfch = A(a_.dfch, F);
  float* dqkv = A(a_.dqkv, 3 * C);
  float* datty = A(a_.datty, C);
  for (int64_t l = L - 1; l >= 0; --l) {
    linear_->Backward(dfch, G(p_.fcprojw, C * F, l), G(p_.fcprojb, C, l), dres, nullptr,
                      {A(a_.fch_gelu, F, l), In16(l, 3 * C)}, P(p_.fcprojw, C * F, l), N, F, C);
    cuda::GeluBackwardInPlace(dfch, A(a_.fch, F, l), N * F, s(), Dout16());
    linear_->Backward(dln, G(p_.fcw, F * C, l), G(p_.fcb, F, l), dfch, Dout16(),
                      {A(a_.ln2, C, l), In16(l, 2 * C)}, P(p_.fcw, F * C, l), N, C, F);
    cuda::LayerNormBackwardAccumulate(dres, G(p_.ln2w, C, l), G(p_.ln2b, C, l), dln,
                                      A(a_.residual2, C, l), P(p_.ln2w, C, l), A(a_.ln2_mean, 1, l),
                                      A(a_.ln2_rstd, 1, l), N, C, cs(), s());
    linear_->Backward(datty, G(p_.attprojw, C * C, l), G(p_.attprojb, C, l), dres, nullptr,
                      {A(a_.atty, C, l), In16(l, C)}, P(p_.attprojw, C * C, l), N, C, C);
    attention_.Backward(AttentionCall(), dqkv, Scores(a_.datt), datty, A(a_.qkv, 3 * C, l),
                        Scores(a_.att, l));
    linear_->Backward(dln, G(p_.qkvw, 3 * C * C, l), G(p_.qkvb, 3 * C, l), dqkv, nullptr,
                      {A(a_.ln1, C, l), In16(l, 0)}, P(p_.qkvw, 3 * C * C, l), N, C, 3 * C);
    cuda::LayerNormBackwardAccumulate(dres, G(p_.ln1w, C, l), G(p_.ln1b, C, l), dln, LayerInput(l),
                                      P(p_.ln1w, C, l), A(a_.ln1_mean, 1, l), A(a_.ln1_rstd, 1, l),
                                      N, C, cs(), s());
    cuda::CheckLaunch("the backward pass");
    if (ready) {
      DownloadGroup(static_cast<int>(L - l));
      ready(static_cast<int>(L - l));
    }
  }
  const int32_t* rows = d_token_rows_.data();
  cuda::PositionBackward(G(p_.wpe, p_.maxT * C), dres, B_, T_, C, s());
  cuda::TokenBackward(G(p_.wte, V * C), dres, rows, rows + unique_tokens_,
                      rows + 2 * unique_tokens_ + 1, unique_tokens_, C, s());
  cuda::CheckLaunch("the embedding gradients");
  if (ready) {
    DownloadGroup(static_cast<int>(L + 1));
    ready(static_cast<int>(L + 1));
  } else if (!device_optimizer_) {
    Copy(grads_.data(), d_grads_.data(), d_grads_.bytes(), cudaMemcpyDeviceToHost, "gradients");
    stream_.Synchronize("the backward pass");
  } else {
    stream_.Synchronize("the backward pass");
  }
  has_targets_ = false;  // the logits now hold gradients
}

void CudaModel::DownloadGroup(int g) {
  for (const auto& [offset, floats] : groups_[static_cast<size_t>(g)]) {
    Copy(grads_.data() + offset, d_grads_.data() + offset, static_cast<size_t>(floats) * 4,
         cudaMemcpyDeviceToHost, "a gradient group");
  }
  stream_.Synchronize("the backward pass");
}

bool CudaModel::EnableDeviceOptimizer(const DeviceOptimizer& config) {
  if (static_cast<int64_t>(config.decay_mask.size()) != p_.total) {
    throw Error(fmt::format("device optimizer: a decay mask of {} for {} parameters",
                            config.decay_mask.size(), p_.total));
  }
  // Two moments and the mask, on top of what the constructor checked.
  const int64_t need = p_.total * int64_t{2 * sizeof(float) + 1};
  size_t free_bytes = 0, total_bytes = 0;
  cuda::Check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free device memory");
  if (need > static_cast<int64_t>(free_bytes)) {
    throw Error(fmt::format(
        "device \"cuda\": AdamW on the device needs {} for its moments and decay mask but device "
        "{} ({}) has {} free of {}; lower train.micro_batch or the model",
        Gib(need), device_.index, device_.name, Gib(static_cast<int64_t>(free_bytes)),
        Gib(static_cast<int64_t>(total_bytes))));
  }
  const auto P = static_cast<size_t>(p_.total);
  d_m_ = cuda::DeviceBuffer<float>(P, "allocating AdamW's first moments");
  d_v_ = cuda::DeviceBuffer<float>(P, "allocating AdamW's second moments");
  d_decay_ = cuda::DeviceBuffer<uint8_t>(P, "allocating the weight-decay mask");
  d_norm_partials_ = cuda::DeviceBuffer<double>(
      static_cast<size_t>((p_.total + cuda::kNormBlock - 1) / cuda::kNormBlock), "norm partials");
  cuda::Check(cudaMemsetAsync(d_m_.data(), 0, d_m_.bytes(), s()), "clearing moments");
  cuda::Check(cudaMemsetAsync(d_v_.data(), 0, d_v_.bytes(), s()), "clearing moments");
  Copy(d_decay_.data(), config.decay_mask.data(), P, cudaMemcpyHostToDevice, "decay mask");
  Copy(d_params_.data(), params_.data(), d_params_.bytes(), cudaMemcpyHostToDevice, "parameters");
  Copy(d_grads_.data(), grads_.data(), d_grads_.bytes(), cudaMemcpyHostToDevice, "gradients");
  stream_.Synchronize("enabling the device optimizer");
  device_optimizer_ = config;
  return true;
}

// train::GlobalNorm, ClipByGlobalNorm and AdamW, on the device.
double CudaModel::DeviceOptimizerStep(int64_t step, double lr) {
  if (!device_optimizer_) throw Error("DeviceOptimizerStep before EnableDeviceOptimizer");
  const DeviceOptimizer& c = *device_optimizer_;
  cuda::SquaredNormPartials(d_norm_partials_.data(), d_grads_.data(), p_.total, s());
  std::vector<double> partials(d_norm_partials_.size());
  Copy(partials.data(), d_norm_partials_.data(), d_norm_partials_.bytes(), cudaMemcpyDeviceToHost,
       "norm partials");
  stream_.Synchronize("the gradient norm");
  double sum = 0;  // in order, as train::GlobalNorm adds its blocks
  for (double x : partials) sum += x;
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) return norm;
  if (c.grad_clip > 0 && norm > c.grad_clip) {
    cuda::ScaleInPlace(d_grads_.data(), static_cast<float>(c.grad_clip / (norm + 1e-6)), p_.total,
                       s());
  }
  const double t = static_cast<double>(step);
  const cuda::AdamWArgs args{.lr = static_cast<float>(lr),
                             .beta1 = static_cast<float>(c.beta1),
                             .beta2 = static_cast<float>(c.beta2),
                             .eps = static_cast<float>(c.eps),
                             .weight_decay = static_cast<float>(c.weight_decay),
                             .correction1 = static_cast<float>(1.0 - std::pow(c.beta1, t)),
                             .correction2 = static_cast<float>(1.0 - std::pow(c.beta2, t))};
  cuda::AdamW(d_params_.data(), d_grads_.data(), d_m_.data(), d_v_.data(), d_decay_.data(),
              p_.total, args, s());
  cuda::CheckLaunch("the optimizer step");
  stream_.Synchronize("the optimizer step");
  return norm;
}

void CudaModel::SyncToHost(std::span<float> m, std::span<float> v) {
  if (!device_optimizer_) return;
  Copy(params_.data(), d_params_.data(), d_params_.bytes(), cudaMemcpyDeviceToHost, "parameters");
  if (m.size() == d_m_.size() && v.size() == d_v_.size()) {
    Copy(m.data(), d_m_.data(), d_m_.bytes(), cudaMemcpyDeviceToHost, "first moments");
    Copy(v.data(), d_v_.data(), d_v_.bytes(), cudaMemcpyDeviceToHost, "second moments");
  }
  stream_.Synchronize("copying the training state to the host");
}

void CudaModel::SyncToDevice(std::span<const float> m, std::span<const float> v) {
  if (!device_optimizer_) return;
  Copy(d_params_.data(), params_.data(), d_params_.bytes(), cudaMemcpyHostToDevice, "parameters");
  if (m.size() == d_m_.size() && v.size() == d_v_.size()) {
    Copy(d_m_.data(), m.data(), d_m_.bytes(), cudaMemcpyHostToDevice, "first moments");
    Copy(d_v_.data(), v.data(), d_v_.bytes(), cudaMemcpyHostToDevice, "second moments");
  }
  stream_.Synchronize("copying the training state to the device");
}

Model::DeviceState CudaModel::device_state() const {
  if (!device_optimizer_) return {};
  return {
      {d_params_.data(), d_params_.size()}, {d_m_.data(), d_m_.size()}, {d_v_.data(), d_v_.size()}};
}

void CudaModel::CopyFromDevice(std::span<const DeviceCopy> copies) {
  for (const DeviceCopy& c : copies) {
    Copy(c.to, c.from, c.bytes, cudaMemcpyDeviceToHost, "copying the training state to the host");
  }
  stream_.Synchronize("copying the training state to the host");
}

void CudaModel::PoisonGradient() {
  grads_.data()[0] = std::numeric_limits<float>::quiet_NaN();
  if (device_optimizer_) {
    Copy(d_grads_.data(), grads_.data(), sizeof(float), cudaMemcpyHostToDevice,
         "a poisoned gradient");
    stream_.Synchronize("poisoning a gradient");
  }
}

std::span<const float> CudaModel::Logits(int64_t b, int64_t t) const {
  logits_row_.resize(static_cast<size_t>(p_.V));
  const float* row = d_acts_.data() + a_.logits + (b * T_ + t) * a_.logits_stride;
  cuda::Check(cudaMemcpy(logits_row_.data(), row, logits_row_.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              "reading logits");
  return logits_row_;
}

}  // namespace

void PinHostMemory(std::span<char> host) {
  // Portable: pinned for every device's context, whichever thread asks.
  cuda::Check(cudaHostRegister(host.data(), host.size(), cudaHostRegisterPortable),
              fmt::format("pinning {} bytes of host memory at {}", host.size(),
                          static_cast<const void*>(host.data())));
}

void UnpinHostMemory(std::span<char> host) noexcept {
  cudaHostUnregister(host.data());
}

std::string CudaUnavailableReason() {
  return cuda::ProbeDevices().why_none;
}

std::unique_ptr<Model> CreateCudaModel(const workload::TransformerShape& shape,
                                       const ModelOptions& options) {
  const cuda::DeviceInfo device = cuda::UseDevice(options.device, "device \"cuda\"");
  return std::make_unique<CudaModel>(shape, options, device);
}

}  // namespace fmstack::gpt
