// The KV block pool, the prefix cache's hash chain and the scheduler.
#include <gtest/gtest.h>

#include <numeric>

#include "serve/block_pool.h"
#include "serve/prefix_cache.h"
#include "serve/scheduler.h"
#include "util/error.h"

namespace fmstack::serve {
namespace {

TEST(BlockPool, AllocatesAllOrNothingAndEvictsLeastRecentlyFreedFirst) {
  BlockPool pool(4);
  EXPECT_FALSE(pool.Allocate(5));
  auto a = *pool.Allocate(3);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_FALSE(pool.Allocate(2));
  pool.SetHash(a[0], 100);
  pool.SetHash(a[1], 101);
  pool.Release(std::vector<int32_t>{a[1], a[0]});  // a[1] freed first: evicted first
  EXPECT_EQ(pool.num_cached_free(), 2);
  auto b = *pool.Allocate(2);  // the never-used block, then a[1]
  EXPECT_EQ(b[1], a[1]);
  EXPECT_FALSE(pool.Lookup(101));
  EXPECT_EQ(pool.Lookup(100), a[0]);
  EXPECT_EQ(pool.evictions(), 1u);
  pool.Acquire(a[0]);  // taken back from the free list
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_THROW(pool.Release(std::vector<int32_t>{7}), Error);
  EXPECT_THROW(BlockPool(0), Error);
}

TEST(PrefixCache, SharesBlocksExactlyWhenEveryEarlierTokenMatches) {
  BlockPool pool(16);
  PrefixCache cache(pool, 7, 4, true);
  std::vector<int32_t> a(10);
  std::iota(a.begin(), a.end(), 0);
  BlockTable ta;
  EXPECT_EQ(cache.Match(a, 9, ta), 0);
  ta.blocks = *pool.Allocate(3);
  cache.Commit(a, 10, ta);  // two full blocks
  EXPECT_EQ(ta.hashed, 2);
  std::vector<int32_t> b = a;
  b[9] = 99;
  BlockTable tb;
  EXPECT_EQ(cache.Match(b, 9, tb), 8);
  EXPECT_EQ(tb.blocks, std::vector<int32_t>(ta.blocks.begin(), ta.blocks.begin() + 2));
  std::vector<int32_t> c = a;
  c[1] = 50;  // differs in the first block: nothing shared, not even the second
  BlockTable tc;
  EXPECT_EQ(cache.Match(c, 9, tc), 0);
  BlockTable td;
  EXPECT_EQ(cache.Match(a, 7, td), 4) << "the limit caps the match";
  PrefixCache other_model(pool, 8, 4, true);
  BlockTable te;
  EXPECT_EQ(other_model.Match(a, 9, te), 0);
  PrefixCache off(pool, 7, 4, false);
  BlockTable tf;
  EXPECT_EQ(off.Match(a, 9, tf), 0);
}

std::unique_ptr<Sequence> Seq(int64_t id, int64_t prompt) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens.resize(prompt);
  std::iota(s->tokens.begin(), s->tokens.end(), static_cast<int32_t>(id * 1000));
  s->prompt_len = prompt;
  return s;
}

TEST(Scheduler, ChunksPrefillsUnderTheTokenBudgetAndDecodesFirst) {
  BlockPool pool(64);
  PrefixCache cache(pool, 1, 4, true);
  Scheduler s({.max_batch_tokens = 10, .max_seqs = 8}, pool, cache);
  s.Add(Seq(1, 3));
  s.Add(Seq(2, 25));
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].tokens, 3);
  EXPECT_TRUE(p.seqs[0].sample);
  EXPECT_EQ(p.seqs[1].tokens, 7);
  EXPECT_FALSE(p.seqs[1].sample);
  s.Commit(p);
  s.Find(1)->tokens.push_back(5);  // the sampled token
  p = s.Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].tokens, 1);  // the decode
  EXPECT_EQ(p.seqs[1].start, 7);
  EXPECT_EQ(p.seqs[1].tokens, 9);
}

TEST(Scheduler, PreemptsTheYoungestWhenBlocksRunOutAndLosesNothing) {
  BlockPool pool(4);  // 16 tokens of 4
  PrefixCache cache(pool, 1, 4, false);
  Scheduler s({.max_batch_tokens = 64, .max_seqs = 8}, pool, cache);
  s.Add(Seq(1, 8));
  s.Add(Seq(2, 8));
  StepPlan p = s.Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  s.Commit(p);
  s.Find(1)->tokens.push_back(1);
  s.Find(2)->tokens.push_back(1);
  p = s.Schedule();  // sequence 1 needs a fifth block: sequence 2 gives its two back
  ASSERT_EQ(p.preempted, std::vector<int64_t>{2});
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].seq->id, 1);
  EXPECT_EQ(s.waiting(), 1);
  EXPECT_EQ(s.Find(2)->computed, 0);
  EXPECT_EQ(s.Find(2)->tokens.size(), 9u) << "its generated token is kept and recomputed";
  s.Commit(p);
  s.Remove(1);
  p = s.Schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].seq->id, 2);
  EXPECT_EQ(p.seqs[0].tokens, 9);
  s.Commit(p);
  s.Remove(2);
  EXPECT_EQ(pool.num_free(), 4);
}

}  // namespace
}  // namespace fmstack::serve
