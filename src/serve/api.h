// serve: the OpenAI-compatible wire format, apart from any transport:
// parsing a /v1/completions body into an engine request (every field
// checked, errors naming it) and rendering responses, stream chunks and
// errors as the OpenAI API does.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "serve/engine.h"

namespace fmstack::serve {

using Encoder = std::function<std::vector<int32_t>(std::string_view)>;

struct CompletionRequest {
  std::string model;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Throws InvalidRequest naming the field (a body that is not a JSON object,
// text that is not UTF-8, a wrong type, a value out of range, n != 1).
CompletionRequest ParseCompletion(std::string_view body, const Encoder& encode);
// The sampling fields of a JSON object (shared by the streaming protocols).
SamplingParams ParseSampling(const nlohmann::json& j);

// {"error": {"message", "type", "param", "code"}}.
std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param = {},
                      std::string_view code = {});

// What a completion accumulates from its deltas.
struct Completion {
  std::string id, model;
  int64_t created = 0;
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<Sampled> samples;
  std::string finish_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  bool with_logprobs = false;
};

// The whole response of a non-streamed completion.
std::string CompletionBody(const Completion& c, const std::function<std::string(int32_t)>& piece);
// One server-sent event's JSON for a delta ("data: " and the blank line not included).
std::string ChunkBody(const Completion& c, const Delta& d,
                      const std::function<std::string(int32_t)>& piece);
// The final usage chunk (stream_options.include_usage).
std::string UsageChunkBody(const Completion& c);
nlohmann::json UsageJson(const Completion& c);

// JSON text with invalid UTF-8 replaced by U+FFFD (a token may end mid-character).
std::string Dump(const nlohmann::json& j);

}  // namespace fmstack::serve
