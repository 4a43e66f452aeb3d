// gpt: the GPT-2-style decoder the trainer drives. One contiguous buffer of
// parameters, one of their gradients and one of activations, laid out by
// layout.h. train/ sees only this interface: the CPU backend (OpenBLAS +
// OpenMP) implements it today; a CUDA backend slots in behind CreateModel.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "gpt/layout.h"
#include "gpt/sgemm_peak.h"
#include "util/error.h"
#include "workload/shape.h"

namespace fmstack::gpt {

// How matmuls multiply the model's fp32 values. kTf32 and kBf16 round each
// operand (to 10 and 7 stored mantissa bits: inside the tensor cores on
// cuda, as gpt/bf16_gemm.h packs them on the CPU) and accumulate in fp32;
// parameters, activations, gradients and AdamW's moments stay fp32 in
// memory either way, so the master weights are fp32.
enum class Matmul { kFp32, kTf32, kBf16 };

// The names a job file and bench_gpu use: "fp32", "tf32", "bf16".
inline constexpr std::string_view kMatmulNames[] = {"fp32", "tf32", "bf16"};
inline std::string_view MatmulName(Matmul m) {
  return kMatmulNames[static_cast<int>(m)];
}
inline std::optional<Matmul> ParseMatmul(std::string_view name) {
  for (int i = 0; i < 3; ++i) {
    if (kMatmulNames[i] == name) return static_cast<Matmul>(i);
  }
  return std::nullopt;
}

struct ModelOptions {
  std::string backend = "cpu";    // "cpu" or "cuda"
  int device = 0;                 // cuda: the device index
  // The CPU backend takes kFp32 (OpenBLAS sgemm) or, on a CPU with AVX-512
  // BF16, kBf16 (gpt/bf16_gemm.h).
  Matmul matmul = Matmul::kFp32;
  int64_t max_batch = 1;          // sequences per forward, at most
  int64_t max_seq = 0;            // tokens per sequence, at most; 0 = the shape's seq_len
  // cuda: causal blocks per sequence in attention's matmuls (1 = the full
  // T x T products; see gpt/cuda_attention.h).
  int64_t attention_blocks = 4;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ParamLayout& params_layout() const = 0;
  virtual const ActivationLayout& activations_layout() const = 0;
  virtual std::span<float> params() = 0;
  virtual std::span<const float> params() const = 0;
  virtual std::span<float> grads() = 0;
  virtual std::span<const float> grads() const = 0;

  // Runs B sequences of T tokens (row-major B x T). With targets, returns the
  // mean cross-entropy of predicting them and keeps what Backward needs;
  // with none, returns 0 and leaves logits for Logits().
  virtual float Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int64_t B, int64_t T) = 0;
  // Adds the gradient of scale * (the last Forward's mean loss) to grads().
  // `ready(g)`, if set, is called as soon as the gradients of group g of
  // ParamLayout::GradReadyGroups() are final for this call.
  virtual void Backward(float scale, const std::function<void(int group)>& ready) = 0;
  void Backward(float scale) { Backward(scale, {}); }
  // Clears the gradients Backward accumulates into. With the device
  // optimizer on, only the device's: the host copy is never read then.
  virtual void ZeroGrad() = 0;
  // Next-token logits at (b, t) after a Forward without targets.
  virtual std::span<const float> Logits(int64_t b, int64_t t) const = 0;

  // An optimizer on the model's own device (the CUDA backend), so that
  // parameters, gradients and AdamW's moments stay there between steps.
  // Once enabled, params() and grads() are copies that SyncToHost refreshes
  // (with the moments, into the caller's spans) and SyncToDevice pushes
  // back; Backward then copies gradient groups to the host only for a
  // `ready` hook. Returns false where the backend has none (the CPU's
  // buffers already are the host's).
  struct DeviceOptimizer {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
    double grad_clip = 1.0;               // max global L2 norm; 0 = no clipping
    std::span<const uint8_t> decay_mask;  // per parameter: 1 = apply weight decay
  };
  virtual bool EnableDeviceOptimizer(const DeviceOptimizer& /*config*/) { return false; }
  // Global norm, clipping and one AdamW update at `lr` for optimizer step
  // `step` (1-based). Returns the norm before clipping; a non-finite norm
  // leaves the parameters as they were.
  virtual double DeviceOptimizerStep(int64_t /*step*/, double /*lr*/) {
    throw Error("this model backend has no device optimizer");
  }
  virtual void SyncToHost(std::span<float> /*m*/, std::span<float> /*v*/) {}
  virtual void SyncToDevice(std::span<const float> /*m*/, std::span<const float> /*v*/) {}
  // Checkpoints straight from device memory, with the device optimizer on:
  // the device's parameters and AdamW moments, as device addresses that the
  // host must not read; empty spans where the host's copies are the truth.
  struct DeviceState {
    std::span<const float> params, m, v;
  };
  virtual DeviceState device_state() const { return {}; }
  // Copies bytes of device_state() to host memory, after the model's queued
  // work, and returns once all have landed; at full speed into memory that
  // PinHostMemory pinned.
  struct DeviceCopy {
    void* to;
    const void* from;
    size_t bytes;
  };
  virtual void CopyFromDevice(std::span<const DeviceCopy> /*copies*/) {
    throw Error("this model backend keeps its training state in host memory");
  }
  // The backend's matmul GFLOP/s on exactly these shapes, the denominator of
  // the trainer's MFU: OpenBLAS sgemm on the current threads for the CPU,
  // cuBLAS on the model's device in its math mode for CUDA. 0 when it could
  // not be measured (the device has no room left for the operands).
  virtual double MatmulGflops(const std::vector<GemmShape>& shapes) const = 0;
  // Where the model runs, for a run's banner: "2 threads, OpenBLAS Haswell
  // kernels" or "cuda:0 NVIDIA H200, TF32 matmuls".
  virtual std::string Hardware() const = 0;
  // What the backend chose by timing its own calls so far, for benches and
  // logs ("gradient products in turn for 4 of 5 shapes"); "" when nothing.
  virtual std::string Tuning() const { return {}; }
  // Fault rehearsal: the next step's first gradient becomes NaN.
  virtual void PoisonGradient() { grads()[0] = std::numeric_limits<float>::quiet_NaN(); }
};

// Throws Error for an unknown backend or a shape gpt/ cannot build.
std::unique_ptr<Model> CreateModel(const workload::TransformerShape& shape,
                                   const ModelOptions& options);

// Why backend "cuda" cannot run in this process (no CUDA backend in this
// build, no driver, no device), or empty when it can. Never throws.
std::string CudaUnavailableReason();

#if FMSTACK_HAVE_CUDA
// The CUDA backend (gpt/cuda_model.cc). Throws Error naming `device` when
// no device answers, or the bytes needed and free when the model does not fit.
std::unique_ptr<Model> CreateCudaModel(const workload::TransformerShape& shape,
                                       const ModelOptions& options);
#endif

// Page-locks host memory for device copies (and undoes it), with no device
// or model needed. Throws Error naming the bytes and CUDA's reason, or, in a
// build without CUDA, that there is none.
void PinHostMemory(std::span<char> host);
void UnpinHostMemory(std::span<char> host) noexcept;

// Throws Error unless B x T fits the allocation `a`, the spans hold B * T ids
// (targets may be empty) and every id is inside the vocabulary.
void CheckForwardArgs(const ParamLayout& p, const ActivationLayout& a,
                      std::span<const int32_t> tokens, std::span<const int32_t> targets, int64_t B,
                      int64_t T);

// GPT-2 initialisation, a pure function of seed: weights N(0, 0.02), residual
// projections N(0, 0.02 / sqrt(2 L)), LayerNorm gains 1, biases 0.
void InitParams(const ParamLayout& layout, std::span<float> params, uint64_t seed);

}  // namespace fmstack::gpt
