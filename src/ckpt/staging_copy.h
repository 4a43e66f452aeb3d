// ckpt: the copy that training waits for — a snapshot's tensors into the
// staging pool's slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ckpt/engine.h"

namespace fmstack::ckpt {

// memcpy with non-temporal stores: the staging pool is written once and read
// later by another thread, so caching it only evicts the training job's data
// and costs a read-for-ownership per line. glibc streams only copies larger
// than a share of the L3, and the pool's slots are smaller than that
// (measured: 1.45x the time of one big memcpy; streamed: about 1.0x).
void CopyStreaming(char* dst, const std::byte* src, size_t n);

// Copies the concatenation of `sources` into `slots` (slot i takes bytes
// [i * slot_bytes, (i + 1) * slot_bytes)), on `threads` threads — the
// caller and helpers. Training waits for this copy with its cores otherwise
// idle, and one core does not saturate memory: two threads copied 12-13
// GB/s where one copied 9-10 (AMD EPYC VM, 2 vCPUs, 512 MiB).
// The threads take runs of slots from a shared counter rather than a fixed
// share each, so that a thread that starts late or loses its core (another
// process, a vCPU the host deschedules) leaves its work to the others. On
// the Zen 5 VM (4 GB in 8 MiB slots, two threads, 15 alternated rounds) a
// scratch copy took 0.152 s median against 0.159 with fixed halves, and
// 0.219 against 0.232 beside a spinning process; in the engine's blocking
// save the difference was within the VM's noise (0.14-0.81 s either way).
void CopyToSlots(std::span<const std::span<const std::byte>> sources, std::span<char* const> slots,
                 int64_t slot_bytes, int threads, std::span<const char> on_device = {});

// The device copies that put the flagged sources of the same concatenation
// into the slots. No copy crosses a slot's end, and a copy whose source and
// destination both continue where the previous one ended is merged into it:
// a device's training state is a few contiguous arrays, so a save is about
// one copy per slot (each a few hundred microseconds on PCIe or NVLink-C2C)
// instead of one per tensor (a few microseconds each, mostly launch cost).
std::vector<DeviceSource::Copy> PlanDeviceCopies(
    std::span<const std::span<const std::byte>> sources, std::span<const char> on_device,
    std::span<char* const> slots, int64_t slot_bytes);

}  // namespace fmstack::ckpt
