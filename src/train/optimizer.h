// train: AdamW with decoupled weight decay (Loshchilov & Hutter 2019), the
// learning-rate schedule (linear warm-up, cosine decay to a floor) and
// global gradient-norm clipping.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "gpt/layout.h"
#include "util/huge_pages.h"

namespace fmstack::train {

struct OptimConfig {
  double lr = 6e-4;      // peak learning rate
  double min_lr = 6e-5;  // floor the cosine decays to
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;  // on weight matrices only, as GPT-2
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;  // max global L2 norm; 0 = no clipping
};

// Learning rate at optimizer step `step` (0-based) of `total_steps`.
double LearningRate(const OptimConfig& c, int64_t step, int64_t total_steps);

// L2 norm of all gradients, summed in fixed-size blocks in double so that it
// does not depend on the thread count.
double GlobalNorm(std::span<const float> grads);

// The factor that brings a global norm `norm` down to at most max_norm (1
// when it is under, or max_norm <= 0).
float ClipScale(double norm, double max_norm);

// Scales grads so their global norm is at most max_norm; returns the factor.
// The training step does not call it: it hands ClipScale to AdamW, which
// multiplies as it reads (one pass over the gradients fewer, same bits).
float ClipByGlobalNorm(std::span<float> grads, double norm, double max_norm);

// The AdamW update of n elements with bias-corrected moments, on the
// gradients times grad_scale (clipping); `decay[i]` = 1 applies weight decay
// to element i. ZeRO runs it on a rank's shard only.
void AdamWKernel(const OptimConfig& c, float* params, const float* grads, float* m, float* v,
                 const uint8_t* decay, int64_t n, int64_t step, double lr, float grad_scale = 1.0f);

// Per parameter of `layout`: 1 = apply weight decay (matrices and embeddings,
// never biases or LayerNorm gains).
std::vector<uint8_t> DecayMask(const gpt::ParamLayout& layout);

// The same choice as contiguous ranges of the flat parameter vector,
// adjacent tensors with the same choice merged: what AdamW keeps, where a
// byte per parameter was 124 MB for GPT-2 124M (4% of its training memory).
struct DecayRange {
  int64_t begin = 0, count = 0;
  bool decay = false;
};
// Throws Error naming the span when the tensors leave a parameter uncovered.
std::vector<DecayRange> DecayRanges(const gpt::ParamLayout& layout);

// AdamWKernel over the whole parameter vector, one range at a time, with
// the same bits as AdamWKernel given DecayMask.
void AdamWRanges(const OptimConfig& c, float* params, const float* grads, float* m, float* v,
                 std::span<const DecayRange> ranges, int64_t step, double lr,
                 float grad_scale = 1.0f);

class AdamW {
 public:
  // Decays every parameter tensor with two or more dimensions (matrices and
  // embeddings), never biases or LayerNorm gains.
  AdamW(const OptimConfig& config, const gpt::ParamLayout& layout);

  // One update with bias-corrected moments; `step` is 1 for the first update.
  void Update(std::span<float> params, std::span<const float> grads, int64_t step, double lr,
              float grad_scale = 1.0f);

  std::span<float> m() { return m_; }
  std::span<float> v() { return v_; }
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }

 private:
  OptimConfig config_;
  HugeFloats m_, v_;
  std::vector<DecayRange> decay_;
};

}  // namespace fmstack::train
