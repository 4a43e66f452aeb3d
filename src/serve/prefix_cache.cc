#include "serve/prefix_cache.h"

#include <fmt/format.h>

#include "util/error.h"
#include "util/xxh3.h"

namespace fmstack::serve {

uint64_t BlockHash(uint64_t model, uint64_t parent, std::span<const int32_t> tokens) {
  std::vector<uint64_t> words;
  words.reserve(tokens.size() + 2);
  words.push_back(model);
  words.push_back(parent);
  for (int32_t t : tokens) words.push_back(static_cast<uint32_t>(t));
  return Xxh3(words.data(), words.size() * sizeof(uint64_t));
}

PrefixCache::PrefixCache(BlockPool& pool, uint64_t model, int64_t block_size, bool enabled)
    : pool_(pool), model_(model), block_size_(block_size), enabled_(enabled) {
  if (block_size < 1) throw Error(fmt::format("prefix cache: block size {} < 1", block_size));
}

int64_t PrefixCache::Match(std::span<const int32_t> tokens, int64_t limit, BlockTable& table) {
  if (!table.blocks.empty()) throw Error("prefix cache: Match needs an empty block table");
  table.hashed = 0, table.last_hash = 0;
  if (!enabled_) return 0;
  const int64_t whole = std::min<int64_t>(limit, std::ssize(tokens)) / block_size_;
  for (int64_t i = 0; i < whole; ++i) {
    const uint64_t h =
        BlockHash(model_, table.last_hash, tokens.subspan(i * block_size_, block_size_));
    const std::optional<int32_t> b = pool_.Lookup(h);
    if (!b) break;
    pool_.Acquire(*b);
    table.blocks.push_back(*b);
    table.hashed = i + 1, table.last_hash = h;
  }
  return table.hashed * block_size_;
}

void PrefixCache::Commit(std::span<const int32_t> tokens, int64_t computed, BlockTable& table) {
  if (!enabled_) return;
  const int64_t full = std::min<int64_t>(computed / block_size_, std::ssize(table.blocks));
  for (int64_t i = table.hashed; i < full; ++i) {
    const uint64_t h =
        BlockHash(model_, table.last_hash, tokens.subspan(i * block_size_, block_size_));
    pool_.SetHash(table.blocks[static_cast<size_t>(i)], h);
    table.hashed = i + 1, table.last_hash = h;
  }
}

}  // namespace fmstack::serve
