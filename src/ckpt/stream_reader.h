// ckpt: reading the chunks of one file, two ways. From a remote tier, in
// order through a ring of buffers that a reader thread fills while the
// caller checks and scatters the previous ones: each read is a request with
// latency. From a local file, several chunks at once, one per worker, each
// read in order through the worker's own reader (its own read-ahead) and
// its own small buffer, which stays in cache for the hash and the scatter:
// a drive wants several reads in flight, and the hashing and scattering of
// one chunk overlaps the reads of others.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/tier.h"

namespace fmstack::ckpt {

// Reads bytes [begin, end) of each span (offsets relative to `base`) in
// order, in pieces of at most `piece_bytes` that never cross a multiple of
// `boundary`, and calls fn(offset, bytes) for each piece in order. Errors
// from the reads or from fn propagate; the reader thread is always joined.
void StreamSpans(Tier& tier, int64_t step, const std::string& file, int64_t base,
                 std::span<const std::pair<int64_t, int64_t>> spans, int64_t boundary,
                 const std::function<void(int64_t offset, std::span<const char> bytes)>& fn,
                 int64_t piece_bytes = 1 << 20);

// Reads the chunks (byte ranges relative to `base`, each within one
// checksum chunk) on `workers` threads, the next chunk to the next free
// worker. A worker reads its chunk in pieces of at most `piece_bytes` (8
// MiB at a time, still handed on in pieces of `piece_bytes`, when its
// reader bypasses the page cache: FileReader::direct_alignment) and calls
// fn(worker, offset, bytes) for each piece in order; fn runs on the
// worker's thread. After an error (a read, or thrown by fn) no later chunk
// starts; the error of the earliest failed chunk is rethrown once every
// worker has stopped, so the message does not depend on timing.
// `place`, when given, says where the bytes from an offset should go
// instead of the worker's buffer (Placement). A direct reader takes the
// whole aligned blocks of each placement whose memory is aligned too, and
// reads the rest of the piece into its buffer in the same request; fn then
// gets pieces of that memory. It lets the bytes of a tensor go straight
// into it, saving a copy of every byte but a block or two at its edges.
struct Placement {
  char* to = nullptr;  // nullptr: no memory of the caller's; the buffer
  int64_t bytes = 0;   // how many bytes from the offset this holds for (>= 1)
};
using PlaceFn = std::function<Placement(int64_t offset, int64_t max_bytes)>;
void ReadChunksInParallel(
    Tier& tier, int64_t step, const std::string& file, int64_t base,
    std::span<const std::pair<int64_t, int64_t>> chunks, int workers, int64_t piece_bytes,
    const std::function<void(int worker, int64_t offset, std::span<const char> bytes)>& fn,
    const PlaceFn& place = {});

}  // namespace fmstack::ckpt
