// serve: continuous batching. Each step, one token budget is spent on the
// running sequences first (oldest first: a decode costs one token, an
// unfinished prefill its next chunk), then on waiting ones in arrival order
// while the sequence cap allows. A sequence that needs a KV block the pool
// cannot give preempts the youngest running sequence: its blocks go back
// (their cached prefixes stay findable) and it waits at the queue's head to
// be recomputed; no request is lost.
//
// Thread-safety: none; the engine's thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "serve/block_pool.h"
#include "serve/prefix_cache.h"

namespace fmstack::serve {

enum class SeqState { kWaiting, kRunning };

struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // the prompt, then every generated token
  int64_t prompt_len = 0;
  int64_t computed = 0;  // leading tokens whose keys and values are in the cache
  int64_t cached = -1;   // prompt tokens the prefix cache gave at first admission (-1: not yet)
  int64_t preemptions = 0;
  BlockTable table;
  SeqState state = SeqState::kWaiting;
};

struct SchedulerConfig {
  int64_t max_batch_tokens = 2048;  // tokens computed per step, at most
  int64_t max_seqs = 64;            // running sequences, at most
};

// One sequence's part of a step: compute tokens[start, start + tokens);
// `sample` when that reaches its last token (a new one is drawn after).
struct ScheduledSeq {
  Sequence* seq = nullptr;
  int64_t start = 0, tokens = 0;
  bool sample = false;
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  int64_t tokens = 0;
  std::vector<int64_t> preempted;  // ids preempted by this step
};

class Scheduler {
 public:
  // Throws Error when a cap is below 1.
  Scheduler(SchedulerConfig config, BlockPool& pool, PrefixCache& cache);

  // Queues a sequence at the tail of the waiting queue (its id unique).
  void Add(std::unique_ptr<Sequence> seq);
  // Decides the next step; empty when nothing can run.
  StepPlan Schedule();
  // Books a step's computed tokens and registers newly full blocks.
  void Commit(const StepPlan& plan);
  // Removes a sequence (running or waiting) and frees its blocks; null when unknown.
  std::unique_ptr<Sequence> Remove(int64_t id);
  Sequence* Find(int64_t id);

  int64_t running() const { return std::ssize(running_); }
  int64_t waiting() const { return std::ssize(waiting_); }
  const SchedulerConfig& config() const { return config_; }

 private:
  bool EnsureBlocks(Sequence& s, int64_t upto);
  void FreeBlocks(Sequence& s);
  void Preempt(Sequence& s);

  SchedulerConfig config_;
  BlockPool& pool_;
  PrefixCache& cache_;
  std::map<int64_t, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> running_;  // admission order: the back is the youngest
  std::deque<Sequence*> waiting_;
};

}  // namespace fmstack::serve
