// ckpt: sequential reads of one file through a ring of small buffers that a
// reader thread fills while the caller checks and scatters the previous
// ones. Small, reused buffers matter: the kernel copies into a hot 1 MiB
// buffer at ~6 GB/s here but into cold destination pages at ~2 GB/s, and
// fresh pages cost a fault each (12 us in this VM).
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

}  // namespace fmstack::ckpt
