// Token shards of uniform random ids for the trainer benches: what the
// tokens say does not change what a step costs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/token_file.h"
#include "util/random.h"

namespace fmstack::bench {

// Writes 2^20 random ids below `vocab` to `path` and loads them.
inline train::TokenFile RandomTokenFile(const std::string& path, int64_t vocab) {
  Rng rng(1);
  std::vector<int32_t> tokens(1 << 20);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  train::WriteTokenFile(path, tokens, vocab);
  return train::TokenFile::Load(path);
}

}  // namespace fmstack::bench
