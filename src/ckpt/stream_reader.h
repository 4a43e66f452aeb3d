// ckpt: sequential reads of one file, two ways. From a remote tier, through a
// ring of buffers that a reader thread fills while the caller checks and
// scatters the previous ones: each read is a request with latency. From a
// local file, on the caller's thread, in small pieces read straight into
// their destination: the kernel's readahead already overlaps the disk with
// the copy, and a piece hashed right after its read is still in cache (AMD
// EPYC VM, 0.5 GB cold: 2.7 GB/s against dd's 3.0; the threaded ring of
// 8 MiB pieces reached 0.9-1.8, its copies out of the ring being one more
// pass over memory).
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

// One read of ReadPieces: bytes [offset, offset + len) relative to `base`,
// read into `dest` when set, else into a buffer reused from piece to piece.
struct ReadPiece {
  int64_t offset = 0, len = 0;
  std::byte* dest = nullptr;
};

// Reads the pieces in order on the calling thread and calls fn(offset,
// bytes) after each, bytes being where the piece landed.
void ReadPieces(Tier& tier, int64_t step, const std::string& file, int64_t base,
                std::span<const ReadPiece> pieces,
                const std::function<void(int64_t offset, std::span<const char> bytes)>& fn);

}  // namespace fmstack::ckpt
