#include "train/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>

#include "gpt/flush_denormals.h"
#include "util/error.h"

namespace fmstack::train {

double LearningRate(const OptimConfig& c, int64_t step, int64_t total_steps) {
  if (step < c.warmup_steps) {
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  }
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - c.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return c.min_lr + cosine * (c.lr - c.min_lr);
}

namespace {

// GlobalNorm's blocks, and the eight running sums a block keeps. This file
// is built without -ffast-math, so the compiler may not reorder a sum: one
// accumulator was a chain of dependent scalar adds, 4 cycles each (0.7% of
// a gpt-mini step's samples). The lanes fix an order of their own, the same
// on any thread count.
constexpr int64_t kNormBlock = int64_t{1} << 16;
constexpr int64_t kNormLanes = 8;

// Sum of squares of x[0, n), n <= kNormBlock: lane l takes elements l,
// l + 8, ... in order, then the lanes add up in order.
double BlockSquares(const float* x, int64_t n) {
  const int64_t whole = n / kNormLanes * kNormLanes;
  double lane[kNormLanes] = {};
  for (int64_t i = 0; i < whole; i += kNormLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kNormLanes; ++l) lane[l] += static_cast<double>(x[i + l]) * x[i + l];
  }
  for (int64_t i = whole; i < n; ++i) lane[i - whole] += static_cast<double>(x[i]) * x[i];
  double s = 0;
  for (const double v : lane) s += v;
  return s;
}

// BlockSquares of two full blocks at once, each with the same bits. One
// block's lanes are a chain of dependent multiply-adds that held the norm
// at 0.63-0.68 of a plain read of the gradients (bench_step); two blocks
// keep twice as many in flight: 22 ms instead of 28 for GPT-2 124M's on
// the 2-core Intel VM.
void TwoBlockSquares(const float* x0, const float* x1, double& s0, double& s1) {
  double lane0[kNormLanes] = {}, lane1[kNormLanes] = {};
  for (int64_t i = 0; i < kNormBlock; i += kNormLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kNormLanes; ++l) {
      lane0[l] += static_cast<double>(x0[i + l]) * x0[i + l];
      lane1[l] += static_cast<double>(x1[i + l]) * x1[i + l];
    }
  }
  s0 = s1 = 0;
  for (int64_t l = 0; l < kNormLanes; ++l) s0 += lane0[l], s1 += lane1[l];
}

}  // namespace

double GlobalNorm(std::span<const float> grads) {
  const auto n = static_cast<int64_t>(grads.size());
  const float* x = grads.data();
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  const auto block_size = [&](int64_t b) { return std::min(kNormBlock, n - b * kNormBlock); };
  std::vector<double> partial(blocks, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < blocks / 2; ++pair) {
    const int64_t b0 = 2 * pair, b1 = b0 + 1;
    if (block_size(b1) == kNormBlock) {
      TwoBlockSquares(x + b0 * kNormBlock, x + b1 * kNormBlock, partial[b0], partial[b1]);
    } else {
      partial[b0] = BlockSquares(x + b0 * kNormBlock, block_size(b0));
      partial[b1] = BlockSquares(x + b1 * kNormBlock, block_size(b1));
    }
  }
  if (blocks % 2 == 1) {
    const int64_t last = blocks - 1;
    partial[last] = BlockSquares(x + last * kNormBlock, block_size(last));
  }
  double total = 0;
  for (const double s : partial) total += s;
  return std::sqrt(total);
}

float ClipScale(double norm, double max_norm) {
  if (max_norm <= 0 || norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

float ClipByGlobalNorm(std::span<float> grads, double norm, double max_norm) {
  const float scale = ClipScale(norm, max_norm);
  if (scale == 1.0f) return scale;
  const auto n = static_cast<int64_t>(grads.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) grads[i] *= scale;
  return scale;
}

std::vector<uint8_t> DecayMask(const gpt::ParamLayout& layout) {
  std::vector<uint8_t> decay(layout.total, 0);
  for (const gpt::TensorInfo& t : layout.Tensors()) {
    if (t.dims.size() >= 2) std::fill_n(decay.begin() + t.offset, t.size(), uint8_t{1});
  }
  return decay;
}

namespace {

// One AdamW step's constants, shared by the masked and the ranged forms.
struct AdamWStep {
  float b1, b2, correction1, correction2, rate, eps, wd;
  AdamWStep(const OptimConfig& c, int64_t step, double lr)
      : b1(static_cast<float>(c.beta1)),
        b2(static_cast<float>(c.beta2)),
        correction1(static_cast<float>(1.0 - std::pow(c.beta1, static_cast<double>(step)))),
        correction2(static_cast<float>(1.0 - std::pow(c.beta2, static_cast<double>(step)))),
        rate(static_cast<float>(lr)),
        eps(static_cast<float>(c.eps)),
        wd(static_cast<float>(c.weight_decay)) {}

  // Element i; `keep` is all ones where weight decay applies, else zero.
  // decay ? wd * p : 0.0f, as a bit mask: GCC 12 does not vectorize the
  // loop with the choice written as one.
  void Update(float& p, float g, float& m, float& v, uint32_t keep) const {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    const float m_hat = m / correction1;
    const float v_hat = v / correction2;
    const float decay_term = std::bit_cast<float>(std::bit_cast<uint32_t>(wd * p) & keep);
    p -= rate * (m_hat / (std::sqrt(v_hat) + eps) + decay_term);
  }
};

}  // namespace

void AdamWKernel(const OptimConfig& c, float* p, const float* g, float* m, float* v,
                 const uint8_t* decay, int64_t n, int64_t step, double lr, float grad_scale) {
  const AdamWStep s(c, step, lr);
  // A moment whose gradient stays zero decays towards the denormal range,
  // where each vector touching it takes a microcode assist
  // (gpt/flush_denormals.h); flushed like the model's passes.
  const gpt::FlushDenormalsScope flush;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    // g * grad_scale: the value an in-place clip would have stored
    s.Update(p[i], g[i] * grad_scale, m[i], v[i], 0u - static_cast<uint32_t>(decay[i] != 0));
  }
}

void AdamWRanges(const OptimConfig& c, float* p, const float* g, float* m, float* v,
                 std::span<const DecayRange> ranges, int64_t step, double lr, float grad_scale) {
  const AdamWStep s(c, step, lr);
  const gpt::FlushDenormalsScope flush;
  // One parallel region for every range: each element's update depends on
  // nothing but itself, so how ranges are split across threads never
  // changes a bit.
#pragma omp parallel
  for (const DecayRange& r : ranges) {
    const uint32_t keep = r.decay ? ~0u : 0u;
    const int64_t end = r.begin + r.count;
#pragma omp for simd schedule(static) nowait
    for (int64_t i = r.begin; i < end; ++i) s.Update(p[i], g[i] * grad_scale, m[i], v[i], keep);
  }
}

std::vector<DecayRange> DecayRanges(const gpt::ParamLayout& layout) {
  // A parameter outside every range would never be updated, silently.
  std::vector<DecayRange> ranges;
  int64_t covered = 0;
  for (const gpt::TensorInfo& t : layout.Tensors()) {
    if (t.offset != covered)
      throw Error(fmt::format("AdamW: parameters [{}, {}) belong to no tensor of the layout",
                              covered, t.offset));
    const bool decay = t.dims.size() >= 2;
    if (!ranges.empty() && ranges.back().decay == decay) {
      ranges.back().count += t.size();
    } else {
      ranges.push_back({t.offset, t.size(), decay});
    }
    covered += t.size();
  }
  if (covered != layout.total)
    throw Error(fmt::format("AdamW: the layout's tensors cover {} of its {} parameters", covered,
                            layout.total));
  return ranges;
}

AdamW::AdamW(const OptimConfig& config, const gpt::ParamLayout& layout)
    : config_(config),
      m_(NamedFloats("AdamW's first moments", layout.total)),
      v_(NamedFloats("AdamW's second moments", layout.total)),
      decay_(DecayRanges(layout)) {}

void AdamW::Update(std::span<float> params, std::span<const float> grads, int64_t step, double lr,
                   float grad_scale) {
  AdamWRanges(config_, params.data(), grads.data(), m_.data(), v_.data(), decay_, step, lr,
              grad_scale);
}

}  // namespace fmstack::train
