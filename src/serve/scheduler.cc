#include "serve/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"

namespace fmstack::serve {

Scheduler::Scheduler(SchedulerConfig config, BlockPool& pool, PrefixCache& cache)
    : config_(config), pool_(pool), cache_(cache) {
  if (config.max_batch_tokens < 1 || config.max_seqs < 1)
    throw Error(fmt::format("scheduler: max_batch_tokens {} and max_seqs {} must be >= 1",
                            config.max_batch_tokens, config.max_seqs));
}

void Scheduler::Add(std::unique_ptr<Sequence> seq) {
  if (seq->tokens.empty()) throw Error(fmt::format("scheduler: sequence {} is empty", seq->id));
  Sequence* s = seq.get();
  if (!seqs_.emplace(s->id, std::move(seq)).second)
    throw Error(fmt::format("scheduler: sequence {} was added twice", s->id));
  s->state = SeqState::kWaiting;
  waiting_.push_back(s);
}

Sequence* Scheduler::Find(int64_t id) {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

bool Scheduler::EnsureBlocks(Sequence& s, int64_t upto) {
  const int64_t bs = cache_.block_size();
  const int64_t need = (upto + bs - 1) / bs - std::ssize(s.table.blocks);
  if (need <= 0) return true;
  auto got = pool_.Allocate(need);
  if (!got) return false;
  s.table.blocks.insert(s.table.blocks.end(), got->begin(), got->end());
  return true;
}

void Scheduler::FreeBlocks(Sequence& s) {
  // Last block first: a sequence's deepest blocks, the least shared, are evicted first.
  std::vector<int32_t> reversed(s.table.blocks.rbegin(), s.table.blocks.rend());
  pool_.Release(reversed);
  s.table = {};
  s.computed = 0;
}

void Scheduler::Preempt(Sequence& s) {
  FreeBlocks(s);
  ++s.preemptions;
  s.state = SeqState::kWaiting;
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  waiting_.push_front(&s);
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  int64_t budget = config_.max_batch_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = *running_[i];
    const int64_t n = std::min(std::ssize(s.tokens) - s.computed, budget);
    if (n <= 0) continue;
    bool self = false;
    while (!EnsureBlocks(s, s.computed + n)) {
      Sequence& victim = *running_.back();
      self = &victim == &s;
      plan.preempted.push_back(victim.id);
      Preempt(victim);
      if (self) break;
    }
    if (self) break;
    plan.seqs.push_back({&s, s.computed, n, s.computed + n == std::ssize(s.tokens)});
    budget -= n;
  }
  // New sequences only when nothing had to make room this step.
  while (plan.preempted.empty() && !waiting_.empty() && budget > 0 &&
         std::ssize(running_) < config_.max_seqs) {
    Sequence& s = *waiting_.front();
    int64_t matched = -1;
    if (s.table.blocks.empty()) {  // at least the last token is computed, for its logits
      s.computed = matched = cache_.Match(s.tokens, std::ssize(s.tokens) - 1, s.table);
    }
    const int64_t n = std::min(std::ssize(s.tokens) - s.computed, budget);
    if (!EnsureBlocks(s, s.computed + n)) {
      FreeBlocks(s);
      break;
    }
    if (s.cached < 0 && matched >= 0) s.cached = std::min(matched, s.prompt_len);
    waiting_.pop_front();
    s.state = SeqState::kRunning;
    running_.push_back(&s);
    plan.seqs.push_back({&s, s.computed, n, s.computed + n == std::ssize(s.tokens)});
    budget -= n;
  }
  plan.tokens = config_.max_batch_tokens - budget;
  return plan;
}

void Scheduler::Commit(const StepPlan& plan) {
  for (const ScheduledSeq& q : plan.seqs) {
    q.seq->computed = q.start + q.tokens;
    cache_.Commit(q.seq->tokens, q.seq->computed, q.seq->table);
  }
}

std::unique_ptr<Sequence> Scheduler::Remove(int64_t id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return nullptr;
  std::unique_ptr<Sequence> s = std::move(it->second);
  seqs_.erase(it);
  auto& queue = s->state == SeqState::kRunning ? running_ : waiting_;
  queue.erase(std::find(queue.begin(), queue.end(), s.get()));
  if (!s->table.blocks.empty()) FreeBlocks(*s);
  return s;
}

}  // namespace fmstack::serve
