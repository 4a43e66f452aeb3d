// serve: prefix caching over the block pool. A full block's identity is a
// hash chain, as in vLLM: hash(model identity, parent block's hash, the
// block's tokens), so two sequences share a block exactly when they share
// every token up to its end. Matching a prompt is a walk down its blocks,
// one dictionary lookup each; blocks stay cached after their sequences end
// until the pool needs them (least recently freed first).
//
// Thread-safety: none; used on the engine's thread with its pool.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "serve/block_pool.h"

namespace fmstack::serve {

// XXH3 of (model, parent, tokens): the identity of a full block.
uint64_t BlockHash(uint64_t model, uint64_t parent, std::span<const int32_t> tokens);

class PrefixCache {
 public:
  // `model` names the weights (a hash of the checkpoint), so that two models
  // sharing a pool never share blocks. Disabled, Match finds nothing and
  // Commit registers nothing.
  PrefixCache(BlockPool& pool, uint64_t model, int64_t block_size, bool enabled);

  // The longest run of cached whole blocks at the start of `tokens`, at most
  // `limit` tokens' worth, each acquired (one reference more) and appended
  // to `table`, whose blocks must be empty. Returns the tokens they cover.
  int64_t Match(std::span<const int32_t> tokens, int64_t limit, BlockTable& table);

  // Registers every full block of `table` among the first `computed`
  // tokens that is not registered yet.
  void Commit(std::span<const int32_t> tokens, int64_t computed, BlockTable& table);

  bool enabled() const { return enabled_; }
  int64_t block_size() const { return block_size_; }

 private:
  BlockPool& pool_;
  uint64_t model_;
  int64_t block_size_;
  bool enabled_;
};

}  // namespace fmstack::serve
