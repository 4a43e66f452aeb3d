// The CPU backend: the forward and backward passes of the whole model as the
// sequence of kernel calls in cpu_kernels.h, written side by side.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "gpt/bf16_gemm.h"
#include "gpt/blas_core.h"
#include "gpt/cpu_kernels.h"
#include "gpt/flush_denormals.h"
#include "gpt/model.h"
#include "gpt/product_order.h"
#include "gpt/sgemm_peak.h"
#include "util/error.h"
#include "util/huge_pages.h"

namespace fmstack::gpt {
namespace {

class CpuModel final : public Model {
 public:
  CpuModel(const workload::TransformerShape& shape, const ModelOptions& options)
      : p_(ParamLayout::For(shape)),
        a_(ActivationLayout::For(p_, options.max_batch,
                                 options.max_seq > 0 ? options.max_seq : shape.seq_len)),
        params_(NamedFloats("the model's parameters", p_.total)),
        grads_(NamedFloats("the model's gradients", p_.total)),
        acts_(NamedFloats("the model's activations", a_.total)),
        targets_(a_.B * a_.T),
        math_(options.matmul) {
    if (a_.T > p_.maxT) {
      throw Error(fmt::format("max_seq {} exceeds the model's seq_len {}", a_.T, p_.maxT));
    }
  }

  const ParamLayout& params_layout() const override { return p_; }
  const ActivationLayout& activations_layout() const override { return a_; }
  std::span<float> params() override { return params_; }
  std::span<const float> params() const override { return params_; }
  std::span<float> grads() override { return grads_; }
  std::span<const float> grads() const override { return grads_; }
  void ZeroGrad() override { cpu::Zero(grads_); }
  double MatmulGflops(const std::vector<GemmShape>& shapes) const override {
    return math_ == Matmul::kBf16 ? MeasureBf16GemmGflops(shapes) : MeasureSgemmGflops(shapes);
  }
  std::string Hardware() const override {
    if (math_ == Matmul::kBf16)
      return fmt::format("{} threads, bf16 matmuls (AVX-512 BF16, gpt/bf16_gemm.h)", CpuThreads());
    const std::string note = BlasCoreNote();
    return fmt::format("{} threads, OpenBLAS {} kernels{}", CpuThreads(), BlasCoreName(),
                       note.empty() ? "" : " (" + note + ")");
  }

  std::string Tuning() const override {
    const std::string orders = orders_.Summary();
    return orders.empty() ? orders : "gradient products " + orders;
  }

  float Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t B,
                int64_t T) override;
  using Model::Backward;
  void Backward(float scale, const std::function<void(int)>& ready) override;
  std::span<const float> Logits(int64_t b, int64_t t) const override {
    return std::span<const float>(acts_).subspan((a_.logits + (b * T_ + t) * p_.V), p_.V);
  }

 private:
  // Parameter tensor `base` of layer l with `size` floats per layer.
  std::span<float> P(int64_t base, int64_t size, int64_t l = 0) {
    return std::span<float>(params_).subspan(base + l * size, size);
  }
  std::span<float> G(int64_t base, int64_t size, int64_t l = 0) {
    return std::span<float>(grads_).subspan(base + l * size, size);
  }
  // Activation `base` of layer l, `per_row` floats per token row; sized for
  // the current B x T inside the buffer sized for the maximum.
  std::span<float> A(int64_t base, int64_t per_row, int64_t l = 0) {
    const int64_t stride = a_.B * a_.T * per_row;
    return std::span<float>(acts_).subspan(base + l * stride, B_ * T_ * per_row);
  }
  std::span<float> Scores(int64_t base, int64_t l = 0) {
    const int64_t stride = a_.B * p_.NH * a_.T * a_.T;
    return std::span<float>(acts_).subspan(base + l * stride, B_ * p_.NH * T_ * T_);
  }
  std::span<float> LayerInput(int64_t l) {
    return l == 0 ? A(a_.encoded, p_.C) : A(a_.residual3, p_.C, l - 1);
  }
  // cpu::MatmulBackward in the order that its shape has run fastest in.
  void LinearBackward(std::span<float> dinp, std::span<float> dweight, std::span<float> dbias,
                      std::span<const float> dout, std::span<const float> inp,
                      std::span<const float> weight, int64_t N, int64_t C, int64_t OC) {
    if (!cpu::ProductOrderHasAChoice()) {  // nothing to time
      cpu::MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, ProductOrder::kInTurn,
                          math_);
      return;
    }
    const ProductOrder order = orders_.Next(N, C, OC);
    const auto start = std::chrono::steady_clock::now();
    cpu::MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, order, math_);
    orders_.Record(N, C, OC, order,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  ParamLayout p_;
  ActivationLayout a_;
  HugeFloats params_, grads_, acts_;  // util/huge_pages.h: sgemm packs faster
  std::vector<int32_t> tokens_, targets_;
  ProductOrderTuner orders_;
  int64_t B_ = 0, T_ = 0;
  bool has_targets_ = false;
  Matmul math_ = Matmul::kFp32;
};

float CpuModel::Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int64_t B, int64_t T) {
  CheckForwardArgs(p_, a_, tokens, targets, B, T);
  B_ = B, T_ = T;
  tokens_.assign(tokens.begin(), tokens.end());
  has_targets_ = !targets.empty();
  if (has_targets_) std::copy(targets.begin(), targets.end(), targets_.begin());

  const FlushDenormalsScope flush;  // flush_denormals.h: GELU's blend path is denormal
  const int64_t L = p_.L, C = p_.C, F = p_.F, V = p_.V, NH = p_.NH, N = B * T;
  cpu::EncoderForward(A(a_.encoded, C), tokens_, P(p_.wte, V * C), P(p_.wpe, p_.maxT * C), B, T, C);
  for (int64_t l = 0; l < L; ++l) {
    cpu::LayerNormForward(A(a_.ln1, C, l), A(a_.ln1_mean, 1, l), A(a_.ln1_rstd, 1, l),
                          LayerInput(l), P(p_.ln1w, C, l), P(p_.ln1b, C, l), N, C);
    cpu::MatmulForward(A(a_.qkv, 3 * C, l), A(a_.ln1, C, l), P(p_.qkvw, 3 * C * C, l),
                       P(p_.qkvb, 3 * C, l), N, C, 3 * C, math_);
    cpu::AttentionForward(A(a_.atty, C, l), Scores(a_.att, l), A(a_.qkv, 3 * C, l), B, T, C, NH);
    cpu::MatmulResidualForward(A(a_.residual2, C, l), LayerInput(l), A(a_.atty, C, l),
                               P(p_.attprojw, C * C, l), P(p_.attprojb, C, l), N, C, C, math_);
    cpu::LayerNormForward(A(a_.ln2, C, l), A(a_.ln2_mean, 1, l), A(a_.ln2_rstd, 1, l),
                          A(a_.residual2, C, l), P(p_.ln2w, C, l), P(p_.ln2b, C, l), N, C);
    cpu::MatmulForward(A(a_.fch, F, l), A(a_.ln2, C, l), P(p_.fcw, F * C, l), P(p_.fcb, F, l), N, C,
                       F, math_);
    cpu::GeluForward(A(a_.fch_gelu, F, l), A(a_.fch, F, l));
    cpu::MatmulResidualForward(A(a_.residual3, C, l), A(a_.residual2, C, l), A(a_.fch_gelu, F, l),
                               P(p_.fcprojw, C * F, l), P(p_.fcprojb, C, l), N, F, C, math_);
  }
  cpu::LayerNormForward(A(a_.lnf, C), A(a_.lnf_mean, 1), A(a_.lnf_rstd, 1), LayerInput(L),
                        P(p_.lnfw, C), P(p_.lnfb, C), N, C);
  // LM head tied to the token embedding: logits = lnf @ wte^T (no bias).
  std::span<float> logits = A(a_.logits, V);
  cpu::MatmulForward(logits, A(a_.lnf, C), P(p_.wte, V * C), {}, N, C, V, math_);
  if (!has_targets_) return 0.0f;

  std::span<float> losses = A(a_.losses, 1);
  cpu::SoftmaxCrossEntropyForward(logits, losses, targets_, N, V);
  double sum = 0;  // in order: the loss must not depend on the thread count
  for (float x : losses) sum += x;
  return static_cast<float>(sum / static_cast<double>(N));
}

void CpuModel::Backward(float scale, const std::function<void(int)>& ready) {
  if (!has_targets_) throw Error("Backward needs a Forward with targets first");
  const FlushDenormalsScope flush;
  const int64_t L = p_.L, C = p_.C, F = p_.F, V = p_.V, NH = p_.NH, N = B_ * T_;
  std::span<float> dlogits = A(a_.logits, V);
  cpu::SoftmaxCrossEntropyBackwardInPlace(dlogits, targets_, N, V, scale);
  std::span<float> dres = A(a_.dresidual, C);
  std::span<float> dln = A(a_.dln, C);
  LinearBackward(dln, G(p_.wte, V * C), {}, dlogits, A(a_.lnf, C), P(p_.wte, V * C), N, C, V);
  std::fill(dres.begin(), dres.end(), 0.0f);
  cpu::LayerNormBackwardAccumulate(dres, G(p_.lnfw, C), G(p_.lnfb, C), dln, LayerInput(L),
                                   P(p_.lnfw, C), A(a_.lnf_mean, 1), A(a_.lnf_rstd, 1), N, C);
  if (ready) ready(0);
  std::span<float> dfch = A(a_.dfch, F);
  std::span<float> dqkv = A(a_.dqkv, 3 * C);
  std::span<float> datty = A(a_.datty, C);
  for (int64_t l = L - 1; l >= 0; --l) {
    // residual3 = residual2 + gelu(ln2 @ fc^T) @ fcproj^T
    LinearBackward(dfch, G(p_.fcprojw, C * F, l), G(p_.fcprojb, C, l), dres, A(a_.fch_gelu, F, l),
                   P(p_.fcprojw, C * F, l), N, F, C);
    cpu::GeluBackwardWithBiasGradient(dfch, G(p_.fcb, F, l), A(a_.fch, F, l), N, F);
    LinearBackward(dln, G(p_.fcw, F * C, l), {}, dfch, A(a_.ln2, C, l), P(p_.fcw, F * C, l), N, C,
                   F);
    cpu::LayerNormBackwardAccumulate(dres, G(p_.ln2w, C, l), G(p_.ln2b, C, l), dln,
                                     A(a_.residual2, C, l), P(p_.ln2w, C, l), A(a_.ln2_mean, 1, l),
                                     A(a_.ln2_rstd, 1, l), N, C);
    // residual2 = residual + attention(ln1 @ qkv^T) @ attproj^T
    LinearBackward(datty, G(p_.attprojw, C * C, l), G(p_.attprojb, C, l), dres, A(a_.atty, C, l),
                   P(p_.attprojw, C * C, l), N, C, C);
    cpu::AttentionBackward(dqkv, Scores(a_.datt), datty, A(a_.qkv, 3 * C, l), Scores(a_.att, l), B_,
                           T_, C, NH);
    LinearBackward(dln, G(p_.qkvw, 3 * C * C, l), G(p_.qkvb, 3 * C, l), dqkv, A(a_.ln1, C, l),
                   P(p_.qkvw, 3 * C * C, l), N, C, 3 * C);
    cpu::LayerNormBackwardAccumulate(dres, G(p_.ln1w, C, l), G(p_.ln1b, C, l), dln, LayerInput(l),
                                     P(p_.ln1w, C, l), A(a_.ln1_mean, 1, l), A(a_.ln1_rstd, 1, l),
                                     N, C);
    if (ready) ready(static_cast<int>(L - l));
  }
  cpu::EncoderBackward(G(p_.wte, V * C), G(p_.wpe, p_.maxT * C), dres, tokens_, B_, T_, C);
  if (ready) ready(static_cast<int>(L + 1));
  has_targets_ = false;  // the logits now hold gradients
}

}  // namespace

std::unique_ptr<Model> CreateModel(const workload::TransformerShape& shape,
                                   const ModelOptions& options) {
  if (options.backend == "cpu") {
    if (options.matmul == Matmul::kTf32) {
      throw Error("matmul \"tf32\" is for device \"cuda\"; the CPU computes in fp32 or bf16");
    }
    // Without the instruction, bf16 would run in plain loops, many times
    // slower than fp32 on sgemm: refused rather than run slowly.
    if (options.matmul == Matmul::kBf16 && !Bf16GemmIsFast()) {
      throw Error(
          "matmul \"bf16\" on the CPU needs AVX-512 BF16 (Zen 4, Cooper Lake, Sapphire Rapids "
          "or newer) and a build for it (-march=native on such a CPU), which this program does "
          "not have: use matmul = \"fp32\"");
    }
    return std::make_unique<CpuModel>(shape, options);
  }
#if FMSTACK_HAVE_CUDA
  if (options.backend == "cuda") return CreateCudaModel(shape, options);
  throw Error(
      fmt::format("unknown model backend \"{}\" (this build has: cpu, cuda)", options.backend));
#else
  if (options.backend == "cuda") throw Error("device \"cuda\": " + CudaUnavailableReason());
  throw Error(fmt::format("unknown model backend \"{}\" (this build has: cpu)", options.backend));
#endif
}

#if !FMSTACK_HAVE_CUDA
std::string CudaUnavailableReason() {
  return "this build has no CUDA backend (nvcc was not found when it was configured; install "
         "the CUDA toolkit and rebuild, or configure with -DFMSTACK_CUDA=ON to require it)";
}

void PinHostMemory(std::span<char> host) {
  throw Error(
      fmt::format("cannot pin {} bytes of host memory: {}", host.size(), CudaUnavailableReason()));
}

void UnpinHostMemory(std::span<char> /*host*/) noexcept {}
#endif

void CheckForwardArgs(const ParamLayout& p, const ActivationLayout& a,
                      std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t B,
                      int64_t T) {
  if (B < 1 || T < 1 || B > a.B || T > a.T) {
    throw Error(fmt::format("forward of {} x {} tokens exceeds the model's allocation {} x {}", B,
                            T, a.B, a.T));
  }
  if (static_cast<int64_t>(tokens.size()) != B * T ||
      (!targets.empty() && static_cast<int64_t>(targets.size()) != B * T)) {
    throw Error(fmt::format("forward of {} x {} needs {} tokens and targets, got {} and {}", B, T,
                            B * T, tokens.size(), targets.size()));
  }
  for (const auto& [ids, what] : {std::pair{tokens, "token"}, std::pair{targets, "target"}}) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= p.V) {
        throw Error(fmt::format("{} {} at position {} is outside the vocabulary [0, {})", what,
                                ids[i], i, p.V));
      }
    }
  }
}

}  // namespace fmstack::gpt
