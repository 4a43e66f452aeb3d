#include "serve/block_pool.h"

#include <fmt/format.h>

#include <limits>

#include "util/error.h"

namespace fmstack::serve {

BlockPool::BlockPool(int64_t num_blocks) {
  if (num_blocks < 1 || num_blocks > std::numeric_limits<int32_t>::max())
    throw Error(fmt::format("KV block pool of {} blocks: expected 1 to 2^31 - 1", num_blocks));
  const auto n = static_cast<size_t>(num_blocks);
  ref_.assign(n, 0), prev_.assign(n, -1), next_.assign(n, -1), hash_.assign(n, std::nullopt);
  for (int32_t b = 0; b < static_cast<int32_t>(n); ++b) PushBack(b);
}

int64_t BlockPool::num_cached_free() const {
  int64_t n = 0;
  for (int32_t b = head_; b >= 0; b = next_[b]) n += hash_[b].has_value();
  return n;
}

void BlockPool::Unlink(int32_t b) {
  (prev_[b] >= 0 ? next_[prev_[b]] : head_) = next_[b];
  (next_[b] >= 0 ? prev_[next_[b]] : tail_) = prev_[b];
  prev_[b] = next_[b] = -1;
  --free_count_;
}

void BlockPool::PushBack(int32_t b) {
  prev_[b] = tail_, next_[b] = -1;
  (tail_ >= 0 ? next_[tail_] : head_) = b;
  tail_ = b;
  ++free_count_;
}

std::optional<std::vector<int32_t>> BlockPool::Allocate(int64_t n) {
  if (n < 0 || n > free_count_) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    Unlink(b);
    if (hash_[b]) {
      by_hash_.erase(*hash_[b]);
      hash_[b].reset();
      ++evictions_;
    }
    ref_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::Release(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks() || ref_[b] <= 0)
      throw Error(fmt::format("KV block pool: release of block {} that is not held", b));
    if (--ref_[b] == 0) PushBack(b);
  }
}

void BlockPool::Acquire(int32_t b) {
  if (b < 0 || b >= num_blocks())
    throw Error(fmt::format("KV block pool: block {} is outside the pool of {}", b, num_blocks()));
  if (ref_[b]++ == 0) Unlink(b);
}

void BlockPool::SetHash(int32_t b, uint64_t hash) {
  if (hash_[b] || by_hash_.contains(hash)) return;
  hash_[b] = hash;
  by_hash_.emplace(hash, b);
}

std::optional<int32_t> BlockPool::Lookup(uint64_t hash) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

}  // namespace fmstack::serve
