#include "serve/api.h"

#include <fmt/format.h>

#include <cmath>

namespace fmstack::serve {
namespace {

using nlohmann::json;

double Number(const json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number())
    throw InvalidRequest(key, fmt::format("{} must be a number, got {}", key, j[key].type_name()));
  return j[key].get<double>();
}

int64_t Integer(const json& j, const char* key, int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer())
    throw InvalidRequest(key, fmt::format("{} must be an integer, got {}", key, j[key].dump()));
  return j[key].get<int64_t>();
}

bool Flag(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean())
    throw InvalidRequest(key, fmt::format("{} must be true or false, got {}", key, j[key].dump()));
  return j[key].get<bool>();
}

std::vector<int32_t> TokenIds(const json& a, const char* key) {
  std::vector<int32_t> out;
  for (const json& t : a) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      throw InvalidRequest(
          key, fmt::format("{} must hold token ids (integers >= 0), found {}", key, t.dump()));
    out.push_back(t.get<int32_t>());
  }
  return out;
}

}  // namespace

SamplingParams ParseSampling(const json& j) {
  SamplingParams p;
  p.max_tokens = Integer(j, "max_tokens", 16);
  p.temperature = Number(j, "temperature", 1.0);
  p.top_p = Number(j, "top_p", 1.0);
  p.top_k = Integer(j, "top_k", 0);
  if (p.top_k == -1) p.top_k = 0;  // vLLM's spelling of "no limit"
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer())
      throw InvalidRequest("seed",
                           fmt::format("seed must be an integer, got {}", j["seed"].dump()));
    p.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>()
                                            : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  p.logprobs = Integer(j, "logprobs", -1);
  if (p.logprobs < -1) throw InvalidRequest("logprobs", "logprobs must be 0 to 20");
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      p.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& x : s) {
        if (!x.is_string())
          throw InvalidRequest("stop", "stop must be a string or an array of strings");
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      throw InvalidRequest("stop", "stop must be a string or an array of strings");
    }
  }
  if (j.contains("stop_token_ids") && !j["stop_token_ids"].is_null()) {
    if (!j["stop_token_ids"].is_array())
      throw InvalidRequest("stop_token_ids", "stop_token_ids must be an array of token ids");
    p.stop_token_ids = TokenIds(j["stop_token_ids"], "stop_token_ids");
  }
  return p;
}

CompletionRequest ParseCompletion(std::string_view body, const Encoder& encode) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw InvalidRequest("body", fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw InvalidRequest("body", "the body must be a JSON object");
  CompletionRequest r;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw InvalidRequest("model", "model must be a string");
    r.model = j["model"].get<std::string>();
  }
  if (!j.contains("prompt")) throw InvalidRequest("prompt", "prompt is required");
  const json& p = j["prompt"];
  if (p.is_string()) {
    r.prompt = encode(p.get_ref<const std::string&>());
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt = encode(p[0].get_ref<const std::string&>());
  } else if (p.is_array() && (p.empty() || p[0].is_number())) {
    r.prompt = TokenIds(p, "prompt");
  } else {
    throw InvalidRequest("prompt",
                         "prompt must be a string, one string in an array, or token ids "
                         "(one prompt per request)");
  }
  if (Integer(j, "n", 1) != 1 || Integer(j, "best_of", 1) != 1)
    throw InvalidRequest(Integer(j, "n", 1) != 1 ? "n" : "best_of",
                         "n and best_of must be 1: send one request per completion");
  if (Flag(j, "echo")) throw InvalidRequest("echo", "echo is not supported");
  r.sampling = ParseSampling(j);
  r.stream = Flag(j, "stream");
  if (j.contains("stream_options") && j["stream_options"].is_object())
    r.include_usage = Flag(j["stream_options"], "include_usage");
  return r;
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param,
                      std::string_view code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return Dump(json{{"error", e}});
}

namespace {

json Logprobs(const std::vector<Sampled>& samples, const std::function<std::string(int32_t)>& piece,
              size_t offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const Sampled& s : samples) {
    tokens.push_back(piece(s.token));
    lps.push_back(s.logprob);
    json top = json::object();
    for (const auto& [t, lp] : s.top) top[piece(t)] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += piece(s.token).size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json Base(const Completion& c) {
  return {{"id", c.id}, {"object", "text_completion"}, {"created", c.created}, {"model", c.model}};
}

}  // namespace

json UsageJson(const Completion& c) {
  return {{"prompt_tokens", c.prompt_tokens},
          {"completion_tokens", c.completion_tokens},
          {"total_tokens", c.prompt_tokens + c.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", c.cached_tokens}}}};
}

std::string CompletionBody(const Completion& c, const std::function<std::string(int32_t)>& piece) {
  json j = Base(c);
  j["choices"] =
      json::array({{{"index", 0},
                    {"text", c.text},
                    {"token_ids", c.tokens},
                    {"logprobs", c.with_logprobs ? Logprobs(c.samples, piece, 0) : json()},
                    {"finish_reason", c.finish_reason}}});
  j["usage"] = UsageJson(c);
  return Dump(j);
}

std::string ChunkBody(const Completion& c, const Delta& d,
                      const std::function<std::string(int32_t)>& piece) {
  json j = Base(c);
  j["choices"] = json::array(
      {{{"index", 0},
        {"text", d.text},
        {"token_ids",
         d.tokens},  // an extension (as vLLM's return_token_ids): ids for multi-turn clients
        {"logprobs", c.with_logprobs ? Logprobs(d.samples, piece, c.text.size()) : json()},
        {"finish_reason", d.finished ? json(d.finish_reason) : json()}}});
  return Dump(j);
}

std::string UsageChunkBody(const Completion& c) {
  json j = Base(c);
  j["choices"] = json::array();
  j["usage"] = UsageJson(c);
  return Dump(j);
}

}  // namespace fmstack::serve
