// The serving forward: each fast kernel against its naive twin (bit for bit,
// including 0, odd and block-boundary sizes), row invariance, and the whole
// Decoder against the training model's full recompute (an independent
// implementation on OpenBLAS), within the tolerance docs/serve.md states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "gpt/decode_kernels.h"
#include "gpt/decoder.h"
#include "gpt/model.h"
#include "util/random.h"

namespace fmstack::gpt {
namespace {

std::vector<float> Randn(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.Normal()) * scale;
  return v;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DecodeKernels, LinearEqualsItsNaiveTwinBitForBit) {
  for (int64_t N : {0, 1, 5, 6, 7, 13, 48, 50}) {
    for (int64_t in : {1, 7, 64, 100}) {
      for (int64_t out : {1, 15, 16, 17, 40}) {
        for (bool bias : {false, true}) {
          const auto x = Randn(N * in, 1), w = Randn(out * in, 2), b = Randn(bias ? out : 0, 3);
          const auto res = Randn(N * out, 4);
          const decode::PackedLinear p = decode::PackLinear(w, b, in, out);
          std::vector<float> fast(N * out), slow(N * out);
          decode::Linear(fast, x, p, N);
          decode::naive::Linear(slow, x, w, b, N, in, out);
          ASSERT_TRUE(SameBits(fast, slow)) << N << " x " << in << " -> " << out;
          std::vector<float> fast_res = res, slow_res(N * out);
          decode::Linear(fast_res, x, p, N, fast_res);  // the residual aliases the output
          decode::naive::Linear(slow_res, x, w, b, N, in, out, res);
          ASSERT_TRUE(SameBits(fast_res, slow_res)) << N << " x " << in << " -> " << out;
        }
      }
    }
  }
}

TEST(DecodeKernels, LinearRowsDoNotDependOnTheirNeighbours) {
  const int64_t N = 53, in = 96, out = 70;
  const auto x = Randn(N * in, 5), w = Randn(out * in, 6), b = Randn(out, 7);
  const decode::PackedLinear p = decode::PackLinear(w, b, in, out);
  std::vector<float> all(N * out);
  decode::Linear(all, x, p, N);
  for (int64_t n = 0; n < N; n += 7) {
    std::vector<float> one(out);
    decode::Linear(one, std::span<const float>(x).subspan(n * in, in), p, 1);
    ASSERT_TRUE(SameBits(one, std::span<const float>(all).subspan(n * out, out))) << "row " << n;
  }
}

TEST(DecodeKernels, PackLinearRefusesWrongSizes) {
  std::vector<float> w(12);
  EXPECT_THROW(decode::PackLinear(w, {}, 5, 3), Error);
  EXPECT_THROW(decode::PackLinear(w, std::vector<float>(2), 4, 3), Error);
}

// Paged attention at the block boundaries (a query at position 0, 1, 15, 16,
// 17 ...) with a shuffled block table, against contiguous keys and values.
TEST(DecodeKernels, PagedAttentionEqualsItsNaiveTwinAtBlockBoundaries) {
  const int64_t C = 64, NH = 4, bs = 16, L = 2, blocks = 8;
  const decode::KvGeometry g{.L = L, .C = C, .block_size = bs};
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::reverse(table.begin(), table.end());
  std::swap(table[1], table[4]);
  for (int64_t T : {1, 2, 15, 16, 17, 33, 128}) {
    const auto qkv = Randn(T * 3 * C, 10 + T);
    std::vector<float> kv(blocks * g.block_floats(), NAN);  // unwritten slots must not be read
    std::vector<decode::AttentionRow> rows;
    for (int64_t t = 0; t < T; ++t) rows.push_back({table, t});
    decode::StoreKv(kv, g, 1, qkv, rows);
    std::vector<float> fast(T * C);
    decode::PagedAttention(fast, qkv, kv, g, 1, rows, NH);
    std::vector<float> k(T * C), v(T * C);
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(qkv.data() + t * 3 * C + C, C, k.data() + t * C);
      std::copy_n(qkv.data() + t * 3 * C + 2 * C, C, v.data() + t * C);
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> slow(C);
      decode::naive::Attention(slow, std::span<const float>(qkv).subspan(t * 3 * C, C), k, v, t + 1,
                               C, NH);
      ASSERT_TRUE(SameBits(slow, std::span<const float>(fast).subspan(t * C, C)))
          << "query at position " << t << " of " << T;
    }
  }
}

workload::TransformerShape SmallShape() {
  workload::TransformerShape s;
  s.name = "decode-test";
  s.layers = 2, s.hidden = 64, s.heads = 4, s.kv_heads = 4, s.ffn_hidden = 256;
  s.vocab = 97, s.seq_len = 96;
  return s;
}

// GPT-2 initialisation with a wider embedding, so the logits have clear
// winners and greedy choices do not hinge on the last bit.
std::vector<float> SmallParams(const workload::TransformerShape& shape) {
  const ParamLayout p = ParamLayout::For(shape);
  std::vector<float> params(p.total);
  InitParams(p, params, 42);
  const auto wte = Randn(p.V * p.C, 43, 0.5f);
  std::copy(wte.begin(), wte.end(), params.begin() + p.wte);
  return params;
}

struct Cache {
  std::vector<float> kv;
  std::vector<int32_t> table;
};

Cache MakeCache(const Decoder& d, int64_t blocks, uint64_t seed) {
  Cache c{std::vector<float>(blocks * d.kv_geometry().block_floats()), {}};
  c.table.resize(blocks);
  std::iota(c.table.begin(), c.table.end(), 0);
  Rng rng(seed);
  for (int64_t i = blocks - 1; i > 0; --i) std::swap(c.table[i], c.table[rng.Below(i + 1)]);
  return c;
}

TEST(Decoder, MatchesTheFullRecomputeOfTheTrainingModel) {
  const auto shape = SmallShape();
  const auto params = SmallParams(shape);
  auto decoder = CreateDecoder(shape, params, {.max_tokens = 96, .max_logits = 96});
  auto model = CreateModel(shape, {.max_batch = 1});
  std::copy(params.begin(), params.end(), model->params().begin());
  Rng rng(9);
  std::vector<int32_t> tokens(20);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.Below(97));
  Cache c = MakeCache(*decoder, 6, 1);
  const int64_t V = shape.vocab;
  std::vector<float> logits(96 * V);
  // Prefill with every row's logits, then 40 greedy decode steps.
  decoder->Forward(std::vector<DecodeSeq>{{tokens, 0, c.table, std::ssize(tokens)}}, c.kv, logits);
  double worst = 0;
  auto compare = [&](int64_t n, std::span<const float> got) {
    model->Forward(std::span<const int32_t>(tokens).first(n), {}, 1, n);
    const auto want = model->Logits(0, n - 1);
    float scale = 0;
    for (float w : want) scale = std::max(scale, std::abs(w));
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::abs(got[v] - want[v]) / double(scale));
    return static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
  };
  for (int64_t n = 1; n <= std::ssize(tokens); ++n)
    compare(n, std::span<const float>(logits).subspan((n - 1) * V, V));
  for (int step = 0; step < 40; ++step) {  // the prefill's last row, then each decode's one
    const auto row = std::span<const float>(logits).subspan(step == 0 ? (20 - 1) * V : 0, V);
    const auto mine = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    const int32_t ref = compare(std::ssize(tokens), row);
    ASSERT_EQ(mine, ref) << "greedy token " << step;
    tokens.push_back(mine);
    decoder->Forward(std::vector<DecodeSeq>{{std::span<const int32_t>(tokens).last(1),
                                             std::ssize(tokens) - 1, c.table, 1}},
                     c.kv, logits);
  }
  EXPECT_LT(worst, 1e-5) << "largest logit difference relative to the row's largest logit";
}

TEST(Decoder, ChunksAndNeighboursDoNotChangeABit) {
  const auto shape = SmallShape();
  const auto params = SmallParams(shape);
  auto d = CreateDecoder(shape, params, {.max_tokens = 256, .max_logits = 8});
  const int64_t V = shape.vocab;
  std::vector<int32_t> prompt(37);
  Rng rng(3);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng.Below(97));
  // Alone, in one chunk.
  Cache a = MakeCache(*d, 6, 1);
  std::vector<float> alone(V);
  d->Forward(std::vector<DecodeSeq>{{prompt, 0, a.table, 1}}, a.kv, alone);
  // In chunks of 5, 16 and the rest, each step beside two other sequences.
  const int64_t per = 6;
  std::vector<float> kv(3 * per * d->kv_geometry().block_floats());
  std::vector<int32_t> t0(per), t1(per), t2(per);
  for (int32_t i = 0; i < per; ++i) t0[i] = 3 * i + 2, t1[i] = 3 * i, t2[i] = 3 * i + 1;
  std::vector<int32_t> other1(50, 7), other2(11, 5);
  std::vector<float> out(8 * V);
  int64_t at = 0;
  for (int64_t chunk : {5, 16, 16}) {
    std::vector<DecodeSeq> seqs = {{std::span<const int32_t>(other1).first(chunk + 3), 0, t1, 2},
                                   {std::span<const int32_t>(prompt).subspan(at, chunk), at, t0, 1},
                                   {std::span<const int32_t>(other2).first(4), 0, t2, 1}};
    d->Forward(seqs, kv, out);
    at += chunk;
  }
  EXPECT_TRUE(SameBits(alone, std::span<const float>(out).subspan(2 * V, V)));
}

TEST(Decoder, RefusesBadSteps) {
  const auto shape = SmallShape();
  const auto params = SmallParams(shape);
  auto d = CreateDecoder(shape, params, {.max_tokens = 16, .max_logits = 2});
  Cache c = MakeCache(*d, 2, 1);
  std::vector<float> logits(2 * shape.vocab);
  const std::vector<int32_t> bad = {1, 97};
  EXPECT_THROW(d->Forward(std::vector<DecodeSeq>{{bad, 0, c.table, 1}}, c.kv, logits), Error);
  const std::vector<int32_t> ok = {1, 2};
  EXPECT_THROW(d->Forward(std::vector<DecodeSeq>{{ok, 31, c.table, 1}}, c.kv, logits), Error);
  EXPECT_THROW(d->Forward(std::vector<DecodeSeq>{{ok, 95, c.table, 1}}, c.kv, logits), Error);
  const std::vector<int32_t> outside = {5};
  EXPECT_THROW(d->Forward(std::vector<DecodeSeq>{{ok, 0, outside, 1}}, c.kv, logits), Error);
  EXPECT_THROW(CreateDecoder(shape, std::vector<float>(10), {}), Error);
}

}  // namespace
}  // namespace fmstack::gpt
