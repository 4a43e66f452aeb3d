// serve: the paged KV cache's bookkeeping. The pool hands out block ids
// (the storage is a flat buffer that gpt::Decoder indexes by them); a block
// table lists the blocks of one sequence in position order. A block whose
// last reference is dropped joins the free list but keeps its content hash,
// so the prefix cache (prefix_cache.h) can take it back until a new
// allocation evicts it, least recently freed first.
//
// Thread-safety: none; the engine's thread owns the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace fmstack::serve {

// One sequence's blocks, in position order: block i holds positions
// [i * block_size, (i + 1) * block_size). The first `hashed` are full
// blocks registered in the prefix cache; `last_hash` is the hash of block
// hashed - 1 (the parent of the next).
struct BlockTable {
  std::vector<int32_t> blocks;
  int64_t hashed = 0;
  uint64_t last_hash = 0;
};

class BlockPool {
 public:
  // Throws Error unless 1 <= num_blocks < 2^31.
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_.size()); }
  // Blocks nobody references (empty or holding a cached prefix).
  int64_t num_free() const { return free_count_; }
  int64_t num_used() const { return num_blocks() - free_count_; }
  // Free blocks that still hold a cached prefix.
  int64_t num_cached_free() const;
  uint64_t evictions() const { return evictions_; }

  // n blocks with one reference each, taken least recently freed first
  // (their cached hashes are forgotten); nothing is taken when fewer than n
  // are free.
  std::optional<std::vector<int32_t>> Allocate(int64_t n);
  // Drops one reference of each block, in order; a block that reaches zero
  // joins the free list's most recently freed end.
  void Release(std::span<const int32_t> blocks);
  // One more reference to a block (taking it off the free list if it was there).
  void Acquire(int32_t block);

  // Registers a full block as the cached copy of `hash`; a hash that
  // already has a block keeps that one.
  void SetHash(int32_t block, uint64_t hash);
  // The block caching `hash`, if any (referenced or free).
  std::optional<int32_t> Lookup(uint64_t hash) const;
  int32_t refs(int32_t block) const { return ref_.at(static_cast<size_t>(block)); }

 private:
  void Unlink(int32_t b);
  void PushBack(int32_t b);

  std::vector<int32_t> ref_;
  std::vector<int32_t> prev_, next_;  // the free list, doubly linked; -1 ends
  int32_t head_ = -1, tail_ = -1;     // head: least recently freed
  int64_t free_count_ = 0;
  std::vector<std::optional<uint64_t>> hash_;  // per block
  std::unordered_map<uint64_t, int32_t> by_hash_;
  uint64_t evictions_ = 0;
};

}  // namespace fmstack::serve
