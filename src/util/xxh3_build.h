// util: one build of XXH3, included by xxh3_<isa>.cc, each compiled for
// its instruction set (CMakeLists.txt): the header's code inlined under
// internal names, so the builds link side by side without clashing with
// libxxhash's own symbols.
#pragma once

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/xxh3.h"

// Internal linkage on purpose: each including file is compiled for its own
// instruction set, and a shared inline Make would let the linker keep one
// build's code for all three.
namespace fmstack {
namespace {  // NOLINT(google-build-namespaces,cert-dcl59-cpp)

static_assert(sizeof(XXH3_state_t) <= kXxh3StateBytes && alignof(XXH3_state_t) <= 64,
              "kXxh3StateBytes is too small for this xxhash's XXH3_state_t");

Xxh3Impl MakeXxh3(std::string_view name) {
  return {
      name,
      [](const void* data, size_t bytes) -> uint64_t { return XXH3_64bits(data, bytes); },
      [](void* state) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state)); },
      [](void* state, const void* data, size_t bytes) {
        XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, bytes);
      },
      [](const void* state) -> uint64_t {
        return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
      },
  };
}

}  // namespace
}  // namespace fmstack
