// serve: the engine loop. It owns the model's Decoder, the KV block pool
// and its storage, the prefix cache and the scheduler, and runs steps:
// schedule, one Decoder::Forward over every scheduled sequence, sample, and
// hand each request what it gained (tokens, text, logprobs) to its sink.
// Requests arrive and leave between steps (continuous batching).
//
// Thread-safety: Submit, Cancel, stats and MetricsText may be called from
// any thread. Step runs on one thread at a time: the loop's (Start) or, in
// tests, the caller's. Sinks run on the stepping thread and must not block
// or call back into the engine other than Cancel.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpt/decoder.h"
#include "metrics/registry.h"
#include "serve/block_pool.h"
#include "serve/prefix_cache.h"
#include "serve/sampler.h"
#include "serve/scheduler.h"
#include "util/error.h"
#include "util/huge_pages.h"

namespace fmstack::serve {

// The waiting queue is full (the server answers 429 with Retry-After).
class Overloaded : public Error {
 public:
  using Error::Error;
};

struct EngineOptions {
  int64_t kv_blocks = 0;  // blocks of the decoder's kv_geometry()
  SchedulerConfig scheduler;
  bool prefix_caching = true;
  uint64_t model_id = 0;       // identity of the weights, for block hashes
  int64_t max_waiting = 1024;  // queued requests beyond which Submit throws Overloaded
  uint64_t seed = 0;           // for requests without a seed
  // The text of a token, for stop strings and text deltas; empty: no text.
  std::function<std::string(int32_t)> piece;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
};

// What one step gave one request.
struct Delta {
  std::vector<int32_t> tokens;
  std::vector<Sampled> samples;  // with logprobs, one per token
  std::string text;              // complete UTF-8 characters only; stop strings cut
  bool finished = false;
  std::string finish_reason;  // "stop", "length", "abort" or "error: ..."
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
};
using Sink = std::function<void(Delta&&)>;

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_used = 0, kv_blocks_free = 0;
  int64_t steps = 0, prompt_tokens = 0, prefix_hit_tokens = 0, generated_tokens = 0;
  int64_t preemptions = 0, finished = 0;
};

class Engine {
 public:
  // Allocates the KV storage. Throws Error when kv_blocks < 1 or a cap is bad.
  Engine(std::unique_ptr<gpt::Decoder> decoder, EngineOptions options);
  ~Engine();  // stops the loop

  // Validates and queues. Throws InvalidRequest (prompt empty or outside the
  // vocabulary, prompt plus max_tokens past the context or the KV pool, a
  // sampling field out of range) or Overloaded. Returns the request's id.
  int64_t Submit(GenerateRequest request, Sink sink);
  // Ends a request at the next step (its sink gets finish_reason "abort");
  // unknown or finished ids are ignored.
  void Cancel(int64_t id);

  // One step on the calling thread; false when there was nothing to run.
  bool Step();
  void Start();  // the loop thread: steps while there is work, else sleeps
  void Stop();   // ends the loop after its current step; queued requests stay

  EngineStats stats() const;
  std::string MetricsText() const;
  const gpt::Decoder& decoder() const { return *decoder_; }
  int64_t context() const { return decoder_->layout().maxT; }

 private:
  struct Active;
  void Drain();
  void Emit(Active& a, Sequence& s, const Sampled& x);
  void Finish(int64_t id, Delta&& last);
  void Publish();

  std::unique_ptr<gpt::Decoder> decoder_;
  EngineOptions options_;
  HugeFloats kv_;
  std::vector<float> logits_;
  BlockPool pool_;
  PrefixCache cache_;
  Scheduler scheduler_;
  std::map<int64_t, std::unique_ptr<Active>> active_;  // by id; the stepping thread's
  metrics::Registry registry_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::vector<std::pair<std::unique_ptr<Sequence>, std::unique_ptr<Active>>> inbox_;
  std::vector<int64_t> cancels_;
  int64_t next_id_ = 1;
  int64_t queued_ = 0;  // inbox + waiting, for the Overloaded check
  EngineStats stats_;
  bool stop_ = false;
  std::thread loop_;
};

}  // namespace fmstack::serve
