// The engine end to end on a small model: concurrent greedy requests equal
// the training model's full recompute token for token, seeded requests are
// the same bits alone or among others, prefix reuse, preemption under a
// small KV pool, cancellation, and requests refused with the field named.
#include "serve/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "gpt/decoder.h"
#include "gpt/model.h"
#include "util/random.h"

namespace fmstack::serve {
namespace {

workload::TransformerShape Shape() {
  workload::TransformerShape s;
  s.name = "engine-test";
  s.layers = 2, s.hidden = 64, s.heads = 4, s.kv_heads = 4, s.ffn_hidden = 256;
  s.vocab = 97, s.seq_len = 128;
  return s;
}

std::vector<float> Params() {
  const auto p = gpt::ParamLayout::For(Shape());
  std::vector<float> params(p.total);
  gpt::InitParams(p, params, 42);
  Rng rng(43);
  for (int64_t i = 0; i < p.V * p.C; ++i) params[p.wte + i] = rng.Normal() * 0.5f;
  return params;
}

std::unique_ptr<Engine> MakeEngine(int64_t kv_blocks, bool prefix = true, int64_t budget = 256,
                                   int64_t max_seqs = 64) {
  static const std::vector<float> params = Params();
  auto d = gpt::CreateDecoder(Shape(), params, {.max_tokens = budget, .max_logits = max_seqs});
  EngineOptions o;
  o.kv_blocks = kv_blocks;
  o.scheduler = {.max_batch_tokens = budget, .max_seqs = max_seqs};
  o.prefix_caching = prefix;
  o.model_id = 1;
  o.piece = [](int32_t t) { return std::string(1, static_cast<char>('a' + t % 26)); };
  return std::make_unique<Engine>(std::move(d), std::move(o));
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text, reason;
  int64_t cached = 0;
  bool done = false;
};

int64_t Submit(Engine& e, std::vector<int32_t> prompt, SamplingParams sp, Result& r) {
  return e.Submit({std::move(prompt), sp}, [&r](Delta&& d) {
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      r.tokens.push_back(d.tokens[i]);
      if (i < d.samples.size()) r.logprobs.push_back(d.samples[i].logprob);
    }
    r.text += d.text;
    if (d.finished) r.done = true, r.reason = d.finish_reason, r.cached = d.cached_tokens;
  });
}

void RunAll(Engine& e) {
  for (int i = 0; i < 100000 && e.Step(); ++i) {
  }
}

std::vector<int32_t> Prompt(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng.Below(97));
  return p;
}

TEST(Engine, SixtyFourConcurrentGreedyRequestsEqualTheFullRecompute) {
  auto e = MakeEngine(512);
  std::vector<Result> results(64);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 64; ++i) {
    prompts.push_back(Prompt(1 + (i * 37) % 90, 100 + i));
    Submit(*e, prompts.back(), {.temperature = 0, .max_tokens = 12}, results[i]);
  }
  RunAll(*e);
  auto model = gpt::CreateModel(Shape(), {.max_batch = 1});
  const std::vector<float> params = Params();
  std::copy(params.begin(), params.end(), model->params().begin());
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(results[i].done);
    EXPECT_EQ(results[i].reason, "length");
    std::vector<int32_t> ctx = prompts[i];
    for (int32_t got : results[i].tokens) {
      const auto n = std::ssize(ctx);
      model->Forward(ctx, {}, 1, n);
      const auto l = model->Logits(0, n - 1);
      const auto want = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      ASSERT_EQ(got, want) << "request " << i << " at position " << n;
      ctx.push_back(got);
    }
  }
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST(Engine, ASeededRequestIsTheSameBitsAloneAndAmongThirtyOneOthers) {
  const SamplingParams sp{
      .temperature = 0.9, .top_p = 0.95, .seed = 1234, .max_tokens = 24, .logprobs = 2};
  Result alone;
  {
    auto e = MakeEngine(512);
    Submit(*e, Prompt(30, 7), sp, alone);
    RunAll(*e);
  }
  auto e = MakeEngine(512, true, 64, 32);  // a smaller budget: the prompt goes in chunks
  std::vector<Result> others(31);
  Result among;
  for (int i = 0; i < 16; ++i)
    Submit(*e, Prompt(5 + i * 3, 500 + i), {.temperature = 1.0, .max_tokens = 20}, others[i]);
  Submit(*e, Prompt(30, 7), sp, among);
  for (int i = 16; i < 31; ++i)
    Submit(*e, Prompt(5 + i * 2, 500 + i), {.temperature = 0.5, .top_k = 5, .max_tokens = 30},
           others[i]);
  RunAll(*e);
  ASSERT_TRUE(alone.done && among.done);
  EXPECT_EQ(alone.tokens, among.tokens);
  ASSERT_EQ(alone.logprobs.size(), among.logprobs.size());
  EXPECT_EQ(std::memcmp(alone.logprobs.data(), among.logprobs.data(),
                        alone.logprobs.size() * sizeof(float)),
            0);
}

TEST(Engine, ASharedPrefixIsComputedOnce) {
  auto e = MakeEngine(512);
  std::vector<int32_t> prefix = Prompt(64, 3);
  std::vector<int32_t> a = prefix, b = prefix;
  a.push_back(1), b.push_back(2), b.push_back(3);
  Result ra, rb, rb_off;
  Submit(*e, a, {.temperature = 0, .max_tokens = 4}, ra);
  RunAll(*e);
  Submit(*e, b, {.temperature = 0, .max_tokens = 4}, rb);
  RunAll(*e);
  EXPECT_EQ(rb.cached, 64);
  EXPECT_EQ(e->stats().prefix_hit_tokens, 64);
  auto off = MakeEngine(512, false);
  Submit(*off, b, {.temperature = 0, .max_tokens = 4}, rb_off);
  RunAll(*off);
  EXPECT_EQ(rb_off.cached, 0);
  EXPECT_EQ(rb.tokens, rb_off.tokens) << "reused blocks must give the same tokens";
  EXPECT_NE(e->MetricsText().find("fmstack_serve_prefix_cache_hit_tokens_total 64"),
            std::string::npos);
}

TEST(Engine, ASmallPoolPreemptsAndEveryRequestCompletesUnchanged) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) prompts.push_back(Prompt(10 + i, 900 + i));
  auto run = [&](int64_t blocks, EngineStats& stats) {
    auto e = MakeEngine(blocks, false);
    std::vector<Result> r(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
      Submit(*e, prompts[i], {.temperature = 0, .max_tokens = 40}, r[i]);
    RunAll(*e);
    stats = e->stats();
    return r;
  };
  EngineStats big, small;
  const auto want = run(1024, big);
  const auto got = run(12, small);  // 192 tokens for 24 sequences of up to 73
  EXPECT_EQ(big.preemptions, 0);
  EXPECT_GT(small.preemptions, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(got[i].done) << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  }
  EXPECT_EQ(small.kv_blocks_used, 0);
  EXPECT_EQ(small.kv_blocks_free, 12);
}

TEST(Engine, CancelEndsARequestAndFreesItsBlocksAtTheNextStep) {
  auto e = MakeEngine(64);
  Result r;
  const int64_t id = Submit(*e, Prompt(20, 1), {.temperature = 0, .max_tokens = 50}, r);
  e->Step();
  e->Step();
  EXPECT_GT(e->stats().kv_blocks_used, 0);
  e->Cancel(id);
  e->Step();
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.reason, "abort");
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

TEST(Engine, StopStringsAndTokensEndARequest) {
  auto e = MakeEngine(64);
  Result free_run;
  Submit(*e, Prompt(10, 4), {.temperature = 0, .max_tokens = 20}, free_run);
  RunAll(*e);
  ASSERT_EQ(free_run.text.size(), 20u);
  const std::string stop = free_run.text.substr(5, 2);
  const size_t at = free_run.text.find(stop);
  Result stopped, by_token;
  Submit(*e, Prompt(10, 4), {.temperature = 0, .max_tokens = 20, .stop = {stop}}, stopped);
  Submit(*e, Prompt(10, 4),
         {.temperature = 0, .max_tokens = 20, .stop_token_ids = {free_run.tokens[3]}}, by_token);
  RunAll(*e);
  EXPECT_EQ(stopped.reason, "stop");
  EXPECT_EQ(stopped.text, free_run.text.substr(0, at));
  EXPECT_EQ(by_token.reason, "stop");
  EXPECT_LE(by_token.tokens.size(), 4u);
  EXPECT_EQ(by_token.tokens.back(), free_run.tokens[3]);
}

TEST(Engine, RefusesRequestsNamingTheField) {
  auto e = MakeEngine(16);  // 256 tokens of KV
  Result r;
  auto field = [&](std::vector<int32_t> prompt, SamplingParams sp) -> std::string {
    try {
      Submit(*e, std::move(prompt), sp, r);
    } catch (const InvalidRequest& x) {
      return x.field();
    }
    return "accepted";
  };
  EXPECT_EQ(field({}, {}), "prompt");
  EXPECT_EQ(field({97}, {}), "prompt");
  EXPECT_EQ(field(Prompt(128, 1), {}), "prompt");
  EXPECT_EQ(field(Prompt(100, 1), {.max_tokens = 29}), "max_tokens");
  EXPECT_EQ(field(Prompt(10, 1), {.max_tokens = 0}), "max_tokens");
  EXPECT_EQ(field(Prompt(10, 1), {.temperature = -1}), "temperature");
  EXPECT_EQ(field(Prompt(10, 1), {.temperature = std::nan("")}), "temperature");
  EXPECT_EQ(field(Prompt(10, 1), {.top_p = 0}), "top_p");
  EXPECT_EQ(field(Prompt(10, 1), {.top_p = 1.5}), "top_p");
  EXPECT_EQ(field(Prompt(10, 1), {.max_tokens = 100}), "accepted");
}

TEST(Engine, TenThousandRequestsLeaveThePoolAsItWas) {
  auto e = MakeEngine(64, true, 256, 64);
  std::vector<Result> results(10000);
  for (int i = 0; i < 10000; ++i) {
    Submit(*e, Prompt(1 + i % 40, i % 97), {.temperature = 1, .max_tokens = 1 + i % 3}, results[i]);
    if (i % 50 == 49) RunAll(*e);
  }
  RunAll(*e);
  const EngineStats s = e->stats();
  EXPECT_EQ(s.finished, 10000);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_TRUE(std::all_of(results.begin(), results.end(), [](const Result& r) { return r.done; }));
}

}  // namespace
}  // namespace fmstack::serve
