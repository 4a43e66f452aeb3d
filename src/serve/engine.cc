#include "serve/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

namespace fmstack::serve {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The longest prefix of `s` that ends on a whole UTF-8 character.
size_t WholeUtf8(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

Delta Ended(std::string reason) {
  Delta d;
  d.finish_reason = std::move(reason);
  return d;
}

}  // namespace

struct Engine::Active {
  Active(Sink s, const SamplingParams& p, uint64_t seed)
      : sink(std::move(s)), params(p), sampler(p, seed) {
    for (const std::string& stop : p.stop) hold = std::max(hold, stop.size() - 1);
  }
  Sink sink;
  SamplingParams params;
  Sampler sampler;
  std::string text;
  size_t emitted = 0, hold = 0;  // hold: bytes kept back while a stop string may be forming
  Clock::time_point arrival = Clock::now(), last;
  int64_t generated = 0;
  bool hit_counted = false;
};

Engine::Engine(std::unique_ptr<gpt::Decoder> decoder, EngineOptions options)
    : decoder_(std::move(decoder)),
      options_(std::move(options)),
      pool_(options_.kv_blocks),
      cache_(pool_, options_.model_id, decoder_->kv_geometry().block_size, options_.prefix_caching),
      scheduler_(options_.scheduler, pool_, cache_) {
  const gpt::DecoderOptions& d = decoder_->options();
  if (options_.scheduler.max_batch_tokens > d.max_tokens ||
      options_.scheduler.max_seqs > d.max_logits)
    throw Error(
        fmt::format("engine: the scheduler's max_batch_tokens {} and max_seqs {} exceed "
                    "the decoder's caps {} and {}",
                    options_.scheduler.max_batch_tokens, options_.scheduler.max_seqs, d.max_tokens,
                    d.max_logits));
  kv_.resize(static_cast<size_t>(options_.kv_blocks * decoder_->kv_geometry().block_floats()));
  logits_.resize(static_cast<size_t>(d.max_logits * decoder_->layout().V));
  const std::vector<double> latency = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                       0.5,   1,      2.5,   5,    10,    30,   60};
  registry_.Histogram("fmstack_serve_time_to_first_token_seconds",
                      "Seconds from a request's arrival to its first token", latency);
  registry_.Histogram("fmstack_serve_inter_token_latency_seconds",
                      "Seconds between two tokens of one request", latency);
  registry_.Gauge("fmstack_serve_requests_running", "Requests with KV blocks in this step");
  registry_.Gauge("fmstack_serve_requests_waiting", "Requests queued or preempted");
  registry_.Gauge("fmstack_serve_kv_blocks_used", "KV blocks referenced by a request");
  registry_.Gauge("fmstack_serve_kv_blocks_free", "KV blocks free (empty or cached)");
  registry_.Counter("fmstack_serve_prompt_tokens_total", "Prompt tokens of admitted requests");
  registry_.Counter("fmstack_serve_prefix_cache_hit_tokens_total",
                    "Prompt tokens whose KV came from the prefix cache");
  registry_.Counter("fmstack_serve_generation_tokens_total", "Tokens generated");
  registry_.Counter("fmstack_serve_preemptions_total", "Sequences preempted to free KV blocks");
  registry_.Counter("fmstack_serve_requests_finished_total", "Requests ended, by reason");
  for (const char* counter :  // present from the start, so that rate() has a zero to begin at
       {"fmstack_serve_prompt_tokens_total", "fmstack_serve_prefix_cache_hit_tokens_total",
        "fmstack_serve_generation_tokens_total", "fmstack_serve_preemptions_total"})
    registry_.Add(counter, {}, 0);
  Publish();
}

Engine::~Engine() {
  Stop();
}

int64_t Engine::Submit(GenerateRequest request, Sink sink) {
  const gpt::ParamLayout& p = decoder_->layout();
  const auto n = std::ssize(request.prompt);
  if (n == 0) throw InvalidRequest("prompt", "prompt is empty");
  for (int64_t i = 0; i < n; ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= p.V)
      throw InvalidRequest("prompt",
                           fmt::format("prompt token {} at {} is outside the vocabulary [0, {})",
                                       request.prompt[i], i, p.V));
  CheckSamplingParams(request.sampling, p.V);
  if (n >= p.maxT)
    throw InvalidRequest("prompt", fmt::format("prompt of {} tokens leaves no room in the model's "
                                               "context of {} tokens",
                                               n, p.maxT));
  if (n + request.sampling.max_tokens > p.maxT)
    throw InvalidRequest("max_tokens",
                         fmt::format("max_tokens {} with a prompt of {} tokens exceeds the context "
                                     "of {} tokens (at most {})",
                                     request.sampling.max_tokens, n, p.maxT, p.maxT - n));
  const int64_t bs = decoder_->kv_geometry().block_size;
  if ((n + request.sampling.max_tokens + bs - 1) / bs > options_.kv_blocks)
    throw InvalidRequest("max_tokens",
                         fmt::format("prompt {} plus max_tokens {} need more KV blocks "
                                     "than serve.kv_cache holds ({} of {} tokens)",
                                     n, request.sampling.max_tokens, options_.kv_blocks, bs));
  auto seq = std::make_unique<Sequence>();
  seq->prompt_len = n;
  seq->tokens = std::move(request.prompt);
  std::lock_guard lock(mu_);
  if (queued_ >= options_.max_waiting)
    throw Overloaded(fmt::format("{} requests are waiting (serve.max_waiting)", queued_));
  const int64_t id = next_id_++;
  seq->id = id;
  auto active = std::make_unique<Active>(std::move(sink), request.sampling,
                                         HashWords({options_.seed, static_cast<uint64_t>(id)}));
  inbox_.emplace_back(std::move(seq), std::move(active));
  ++queued_;
  cv_.notify_all();
  return id;
}

void Engine::Cancel(int64_t id) {
  std::lock_guard lock(mu_);
  cancels_.push_back(id);
  cv_.notify_all();
}

void Engine::Drain() {
  std::vector<std::pair<std::unique_ptr<Sequence>, std::unique_ptr<Active>>> inbox;
  std::vector<int64_t> cancels;
  {
    std::lock_guard lock(mu_);
    inbox.swap(inbox_), cancels.swap(cancels_);
  }
  for (auto& [seq, active] : inbox) {
    const int64_t id = seq->id;
    registry_.Add("fmstack_serve_prompt_tokens_total", {}, static_cast<double>(seq->prompt_len));
    {
      std::lock_guard lock(mu_);
      stats_.prompt_tokens += seq->prompt_len;
    }
    scheduler_.Add(std::move(seq));
    active_.emplace(id, std::move(active));
  }
  for (int64_t id : cancels)
    if (active_.contains(id)) Finish(id, Ended("abort"));
}

void Engine::Finish(int64_t id, Delta&& last) {
  const auto it = active_.find(id);
  std::unique_ptr<Sequence> s = scheduler_.Remove(id);
  last.finished = true;
  if (s) {
    last.prompt_tokens = s->prompt_len;
    last.cached_tokens = std::max<int64_t>(0, s->cached);
    last.completion_tokens = std::ssize(s->tokens) - s->prompt_len;
  }
  const std::string reason =
      last.finish_reason.rfind("error", 0) == 0 ? "error" : last.finish_reason;
  registry_.Add("fmstack_serve_requests_finished_total", {{"reason", reason}});
  std::unique_ptr<Active> a = std::move(it->second);
  active_.erase(it);
  a->sink(std::move(last));
  std::lock_guard lock(mu_);
  ++stats_.finished;
}

void Engine::Emit(Active& a, Sequence& s, const Sampled& x) {
  const Clock::time_point now = Clock::now();
  registry_.Observe(a.generated == 0 ? "fmstack_serve_time_to_first_token_seconds"
                                     : "fmstack_serve_inter_token_latency_seconds",
                    {}, Seconds(now - (a.generated == 0 ? a.arrival : a.last)));
  a.last = now;
  ++a.generated;
  Delta d;
  d.tokens.push_back(x.token);
  if (a.params.logprobs >= 0) d.samples.push_back(x);
  std::string reason;
  const auto& ids = a.params.stop_token_ids;
  if (std::find(ids.begin(), ids.end(), x.token) != ids.end()) reason = "stop";
  if (options_.piece) {
    const size_t before = a.text.size();
    a.text += options_.piece(x.token);
    for (const std::string& stop : a.params.stop) {
      const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
      const size_t at = a.text.find(stop, from);
      if (at != std::string::npos && reason.empty()) {
        a.text.resize(at);
        reason = "stop";
      }
    }
  }
  if (reason.empty() && (a.generated >= a.params.max_tokens || std::ssize(s.tokens) >= context()))
    reason = "length";
  size_t end = a.text.size();
  if (reason.empty()) {
    end = end > a.emitted + a.hold ? end - a.hold : a.emitted;
    end = a.emitted + WholeUtf8(std::string_view(a.text).substr(a.emitted, end - a.emitted));
  }
  d.text = a.text.substr(a.emitted, end - a.emitted);
  a.emitted = end;
  registry_.Add("fmstack_serve_generation_tokens_total", {});
  {
    std::lock_guard lock(mu_);
    ++stats_.generated_tokens;
  }
  if (!reason.empty()) {
    d.finish_reason = reason;
    Finish(s.id, std::move(d));
  } else {
    a.sink(std::move(d));
  }
}

bool Engine::Step() {
  Drain();
  const StepPlan plan = scheduler_.Schedule();
  if (!plan.preempted.empty())
    registry_.Add("fmstack_serve_preemptions_total", {},
                  static_cast<double>(plan.preempted.size()));
  if (plan.seqs.empty()) {
    Publish();
    return false;
  }
  std::vector<gpt::DecodeSeq> seqs;
  seqs.reserve(plan.seqs.size());
  for (const ScheduledSeq& q : plan.seqs) {
    seqs.push_back({std::span<const int32_t>(q.seq->tokens).subspan(q.start, q.tokens), q.start,
                    q.seq->table.blocks, q.sample ? 1 : 0});
    Active& a = *active_.at(q.seq->id);
    if (!a.hit_counted && q.seq->cached >= 0) {  // once, at first admission
      a.hit_counted = true;
      registry_.Add("fmstack_serve_prefix_cache_hit_tokens_total", {},
                    static_cast<double>(q.seq->cached));
      std::lock_guard lock(mu_);
      stats_.prefix_hit_tokens += q.seq->cached;
    }
  }
  try {
    decoder_->Forward(seqs, kv_, logits_);
  } catch (const std::exception& e) {
    for (const ScheduledSeq& q : plan.seqs)
      Finish(q.seq->id, Ended(std::string("error: ") + e.what()));
    Publish();
    return true;
  }
  scheduler_.Commit(plan);
  const int64_t V = decoder_->layout().V;
  std::vector<std::pair<const ScheduledSeq*, Active*>> sampled;
  for (const ScheduledSeq& q : plan.seqs)
    if (q.sample) sampled.emplace_back(&q, active_.at(q.seq->id).get());
  // Each request's sampler is its own: rows are drawn side by side, the
  // same tokens whatever the thread that draws them.
  std::vector<Sampled> draws(sampled.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t m = 0; m < sampled.size(); ++m) {
    draws[m] = sampled[m].second->sampler.Sample(
        std::span<const float>(logits_).subspan(static_cast<int64_t>(m) * V, V));
  }
  for (size_t m = 0; m < sampled.size(); ++m) {
    const ScheduledSeq& q = *sampled[m].first;
    q.seq->tokens.push_back(draws[m].token);
    Emit(*sampled[m].second, *q.seq, draws[m]);
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.steps;
    stats_.preemptions += std::ssize(plan.preempted);
  }
  Publish();
  return true;
}

void Engine::Publish() {
  registry_.Set("fmstack_serve_requests_running", {}, static_cast<double>(scheduler_.running()));
  registry_.Set("fmstack_serve_requests_waiting", {}, static_cast<double>(scheduler_.waiting()));
  registry_.Set("fmstack_serve_kv_blocks_used", {}, static_cast<double>(pool_.num_used()));
  registry_.Set("fmstack_serve_kv_blocks_free", {}, static_cast<double>(pool_.num_free()));
  std::lock_guard lock(mu_);
  stats_.running = scheduler_.running();
  stats_.waiting = scheduler_.waiting();
  stats_.kv_blocks_used = pool_.num_used();
  stats_.kv_blocks_free = pool_.num_free();
  queued_ = stats_.waiting + std::ssize(inbox_);
}

void Engine::Start() {
  if (loop_.joinable()) return;
  loop_ = std::thread([this] {
    bool busy = false;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (!busy) cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || !cancels_.empty(); });
        if (stop_) return;
      }
      try {
        busy = Step();
      } catch (const std::exception& e) {  // a bug: fail what is in flight, keep serving
        std::cerr << "serve: engine step failed: " << e.what() << "\n";
        std::vector<int64_t> ids;
        for (const auto& [id, a] : active_) ids.push_back(id);
        for (int64_t id : ids) Finish(id, Ended(std::string("error: ") + e.what()));
        busy = false;
      }
    }
  });
}

void Engine::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (loop_.joinable()) loop_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::string Engine::MetricsText() const {
  return registry_.Exposition();
}

}  // namespace fmstack::serve
