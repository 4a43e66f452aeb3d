// util: one build of XXH3, included by xxh3.cc, xxh3_avx2.cc and
// xxh3_avx512.cc, each compiled for its instruction set (CMakeLists.txt):
// libxxhash's header inlined with internal linkage, behind four plain
// functions in a namespace of the build's own.
//
// Nothing else may be compiled into the AVX2 and AVX-512 files: an inline
// function with external linkage (a C++ header's, or util/xxh3.h's) that
// they emitted could be the copy the linker keeps for the whole program,
// and run wide instructions on a CPU without them. xxhash.h defines only
// static functions, and the intrinsics are always inlined.
#pragma once

#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define FMSTACK_XXH3_BUILD(ns)                                          \
  namespace fmstack::ns {                                               \
  uint64_t Hash(const void* data, size_t bytes) {                       \
    return XXH3_64bits(data, bytes);                                    \
  }                                                                     \
  void Reset(void* state) {                                             \
    XXH3_64bits_reset(static_cast<XXH3_state_t*>(state));               \
  }                                                                     \
  void Update(void* state, const void* data, size_t bytes) {            \
    XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, bytes); \
  }                                                                     \
  uint64_t Digest(const void* state) {                                  \
    return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state)); \
  }                                                                     \
  }
