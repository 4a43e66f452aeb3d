// serve: a load generator for an OpenAI-compatible completions server, in
// the style of `vllm bench serve`: requests from a dataset (random lengths,
// shared prefixes, or multi-turn conversations that resend their history),
// arriving as a Poisson process at a rate or kept at a fixed concurrency,
// each streamed (server-sent events over HTTP/1.1, Boost.Beast) and timed
// token by token.
//
// Thread-safety: RunLoad runs its own event loop on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fmstack::serve {

struct LoadSpec {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string api_key;
  std::string model;
  std::string dataset = "random";  // random | prefix | multiturn
  int64_t requests = 100;          // multiturn: conversations x turns
  double rate = 0;                 // requests per second (Poisson); 0 = as fast as allowed
  int64_t concurrency = 0;         // requests in flight at most; 0 = no limit
  int64_t input_min = 128, input_max = 128;    // prompt tokens (per turn for multiturn)
  int64_t output_min = 128, output_max = 128;  // max_tokens
  int64_t prefix_len = 1024;                   // prefix: tokens every prompt of a group shares
  int64_t prefixes = 1;                        // prefix: distinct shared prefixes
  int64_t turns = 4;                           // multiturn: turns per conversation
  int64_t vocab = 0;                           // token ids are drawn from [0, vocab)
  uint64_t seed = 1;
  double slo_ttft = 1.0, slo_tpot = 0.1;  // seconds, for goodput
  double timeout = 600;                   // seconds for the whole run
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct LoadReport {
  double seconds = 0;
  int64_t completed = 0, failed = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  double request_rate = 0, output_rate = 0, total_token_rate = 0;
  Percentiles ttft, tpot, itl, latency;  // seconds
  double goodput = 0;                    // requests/s within both SLOs
  std::string first_error;
  // Every request's prompt tokens and max_tokens, in the order they were
  // sent: the workload, for a peer to replay.
  std::vector<std::pair<int64_t, int64_t>> lengths;
};

// Throws Error naming the field when the spec is inconsistent, or the
// server when it cannot be reached at all.
LoadReport RunLoad(
    const LoadSpec& spec,
    const std::function<void(int64_t done, int64_t total, double seconds)>& progress);

Percentiles PercentilesOf(std::vector<double> v);

}  // namespace fmstack::serve
