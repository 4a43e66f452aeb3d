// serve: turning a row of logits into the next token. Greedy, temperature,
// top-k and top-p (nucleus), each request with its own random stream
// (seeded by the request, or by the engine's seed and the request's id),
// so a seeded request draws the same tokens whatever else is served.
//
// Thread-safety: a Sampler belongs to one request.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"
#include "util/random.h"

namespace fmstack::serve {

// A request refused as given: `field` names what was wrong, as the API
// names it ("temperature", "prompt"); the server answers 400 with it.
class InvalidRequest : public Error {
 public:
  InvalidRequest(std::string field, const std::string& message)
      : Error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

struct SamplingParams {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = the whole vocabulary
  double top_p = 1.0;        // (0, 1]
  std::optional<uint64_t> seed{};
  int64_t max_tokens = 16;                // >= 1
  std::vector<std::string> stop{};        // stop strings (not part of the output)
  std::vector<int32_t> stop_token_ids{};  // stop tokens (part of the output)
  int64_t logprobs = -1;  // -1: none; 0..20: the sampled token's and n alternatives'
};

// Throws InvalidRequest naming the field and its range when a value is out of it
// (temperature negative or not finite, top_p outside (0, 1], top_k < 0,
// max_tokens < 1, logprobs > 20, more than 4 stop strings or one empty).
void CheckSamplingParams(const SamplingParams& p, int64_t vocab);

struct Sampled {
  int32_t token = 0;
  float logprob =
      0;  // log softmax of the model's logits (before temperature); 0 unless logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // the `logprobs` likeliest, descending
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, uint64_t fallback_seed);
  Sampled Sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  Rng rng_;
  std::vector<int32_t> order_;
  std::vector<double> p_;
};

}  // namespace fmstack::serve
