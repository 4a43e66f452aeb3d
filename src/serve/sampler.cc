#include "serve/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace fmstack::serve {

void CheckSamplingParams(const SamplingParams& p, int64_t vocab) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    throw InvalidRequest(
        "temperature",
        fmt::format("temperature {} is outside [0, inf): 0 is greedy", p.temperature));
  if (!(p.top_p > 0 && p.top_p <= 1))
    throw InvalidRequest("top_p", fmt::format("top_p {} is outside (0, 1]", p.top_p));
  if (p.top_k < 0)
    throw InvalidRequest(
        "top_k", fmt::format("top_k {} is negative: 0 means the whole vocabulary", p.top_k));
  if (p.max_tokens < 1)
    throw InvalidRequest("max_tokens",
                         fmt::format("max_tokens {} must be at least 1", p.max_tokens));
  if (p.logprobs > 20)
    throw InvalidRequest("logprobs", fmt::format("logprobs {} exceeds 20", p.logprobs));
  if (p.stop.size() > 4)
    throw InvalidRequest("stop", fmt::format("stop has {} strings, at most 4", p.stop.size()));
  for (const std::string& s : p.stop)
    if (s.empty() || s.size() > 256)
      throw InvalidRequest("stop", "stop strings must hold 1 to 256 bytes");
  for (int32_t t : p.stop_token_ids)
    if (t < 0 || t >= vocab)
      throw InvalidRequest(
          "stop_token_ids",
          fmt::format("stop_token_ids: {} is outside the vocabulary [0, {})", t, vocab));
}

Sampler::Sampler(const SamplingParams& params, uint64_t fallback_seed)
    : params_(params), rng_(params.seed ? HashWords({*params.seed, 0x5e7ed}) : fallback_seed) {}

Sampled Sampler::Sample(std::span<const float> logits) {
  const auto V = static_cast<int32_t>(logits.size());
  // log softmax of the raw logits, in index order (double, fixed order).
  float maxv = -INFINITY;
  int32_t argmax = 0;
  for (int32_t i = 0; i < V; ++i)
    if (logits[i] > maxv) maxv = logits[i], argmax = i;
  // The normalizer only when logprobs are asked for: greedy decoding needs
  // nothing but the argmax (a pass of exp over 50k logits cost a row 0.5 ms).
  double logz = 0;
  if (params_.logprobs >= 0) {
    double z = 0;
    for (int32_t i = 0; i < V; ++i) z += std::exp(static_cast<double>(logits[i] - maxv));
    logz = static_cast<double>(maxv) + std::log(z);
  }
  auto logprob = [&](int32_t t) {
    return params_.logprobs >= 0 ? static_cast<float>(logits[t] - logz) : 0.0f;
  };

  int32_t token = argmax;
  if (params_.temperature > 0) {
    const double T = params_.temperature;
    order_.resize(static_cast<size_t>(V));
    std::iota(order_.begin(), order_.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    };
    int64_t n = V;
    if (params_.top_k > 0 && params_.top_k < V) {
      n = params_.top_k;
      std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), by_logit);
    } else if (params_.top_p < 1) {
      std::sort(order_.begin(), order_.end(), by_logit);
    }
    p_.resize(static_cast<size_t>(n));
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += p_[i] = std::exp((logits[order_[i]] - maxv) / T);
    if (params_.top_p < 1) {  // the smallest head whose mass reaches top_p (order_ is sorted)
      double mass = 0;
      int64_t keep = 0;
      while (keep < n && mass < params_.top_p * sum) mass += p_[keep++];
      n = std::max<int64_t>(keep, 1);
      sum = mass;
    }
    double u = rng_.Uniform() * sum;
    token = order_[n - 1];
    for (int64_t i = 0; i < n; ++i) {
      if ((u -= p_[i]) < 0) {
        token = order_[i];
        break;
      }
    }
  }
  Sampled s{token, logprob(token), {}};
  if (params_.logprobs > 0) {
    std::vector<int32_t> top(static_cast<size_t>(V));
    std::iota(top.begin(), top.end(), 0);
    const auto k = static_cast<std::ptrdiff_t>(std::min<int64_t>(params_.logprobs, V));
    std::partial_sort(top.begin(), top.begin() + k, top.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (std::ptrdiff_t i = 0; i < k; ++i) s.top.emplace_back(top[i], logprob(top[i]));
  }
  return s;
}

}  // namespace fmstack::serve
