// ckpt: the copy that training waits for — a snapshot's tensors into the
// staging pool's slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace fmstack::ckpt {

// memcpy with non-temporal stores: the staging pool is written once and read
// later by another thread, so caching it only evicts the training job's data
// and costs a read-for-ownership per line. glibc streams only copies larger
// than a share of the L3, and the pool's slots are smaller than that
// (measured: 1.45x the time of one big memcpy; streamed: about 1.0x).
void CopyStreaming(char* dst, const std::byte* src, size_t n);

// Copies the concatenation of `sources` into `slots` (slot i takes bytes
// [i * slot_bytes, (i + 1) * slot_bytes)), on `threads` threads — the
// caller and helpers — each taking a contiguous run of slots. Training waits
// for this copy with its cores otherwise idle, and one core does not
// saturate memory: two threads copied 12-13 GB/s where one copied 9-10 (AMD
// EPYC VM, 2 vCPUs, 512 MiB).
void CopyToSlots(std::span<const std::span<const std::byte>> sources, std::span<char* const> slots,
                 int64_t slot_bytes, int threads);

}  // namespace fmstack::ckpt
