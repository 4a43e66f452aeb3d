// comm: how the shared-memory communicator sizes its reduction window and
// how its all-reduce picks, by timing its own calls, between cross-memory
// attach and the slots, between two windows, and between two lengths of
// the single-copy path's reads (shm_comm.h, path_tuner.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include "comm/shm_comm.h"
#include "comm/shm_segment.h"

namespace fmstack::comm {
namespace {

// The L3 that cpu0 shares with its neighbours, as the kernel reports it; 0
// when unknown. Not sysconf(_SC_LEVEL3_CACHE_SIZE): on an AMD EPYC VM glibc
// answered 256 MiB, the whole package, where one core complex shares 32.
size_t L3Bytes() {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
    std::ifstream level(dir + "level");
    int n = 0;
    if (!(level >> n)) break;
    if (n != 3) continue;
    std::ifstream size(dir + "size");
    size_t bytes = 0;
    char unit = 0;
    if (!(size >> bytes) || bytes > (size_t{1} << 32)) return 0;
    size >> unit;
    return unit == 'K' ? bytes << 10 : unit == 'M' ? bytes << 20 : bytes;
  }
  return 0;
}

// The second length a tuner times against `first` (a window, a read):
// `asked`, checked to lie in [least, first); when nothing was asked,
// `fallback` where the first was sized here and is longer than it, else
// none (0). `what` and `least_means` name them in the error.
size_t SecondLength(size_t asked, size_t first, bool first_sized_here, size_t fallback,
                    size_t least, std::string_view what, std::string_view least_means) {
  if (asked == 0) return first_sized_here && first > fallback ? fallback : 0;
  if (asked < least || asked >= first) {
    throw CommError(fmt::format("shm: a second {} of {} bytes is outside [{}, {}), the least {} "
                                "and the first {}",
                                what, asked, least, first, least_means, what),
                    -1);
  }
  return asked / 64 * 64;
}

}  // namespace

size_t ShmCommunicator::WindowFor(int running, size_t slot_bytes, size_t l3_bytes) {
  if (l3_bytes == 0 || running < 1) return std::min(slot_bytes, kWindowBytes);
  const size_t fit = l3_bytes / (4 * static_cast<size_t>(running)) / 4096 * 4096;
  return std::min(slot_bytes, std::max(kMinAutoWindowBytes, fit));
}

size_t ShmCommunicator::ResolveWindow() const {
  const size_t asked = options_.window_bytes;
  if (asked == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return WindowFor(std::min(options_.size, cores), options_.slot_bytes, L3Bytes());
  }
  if (asked < kMinWindowBytes || asked > options_.slot_bytes) {
    throw CommError(fmt::format("shm: a window of {} bytes (FMSTACK_SHM_WINDOW_BYTES) is outside "
                                "[{}, {}], the least a pass stages and the slot's size",
                                asked, kMinWindowBytes, options_.slot_bytes),
                    -1);
  }
  return asked / 64 * 64;
}

size_t ShmCommunicator::CmaChunkFor(int ranks) {
  const size_t peers = static_cast<size_t>(std::max(1, ranks - 1));
  return std::clamp(kCmaScratchBytes / peers / 4096 * 4096, kCmaMinChunkBytes, kCmaMaxChunkBytes);
}

size_t ShmCommunicator::ResolveCmaChunk() const {
  const size_t asked = options_.cma_chunk_bytes;
  if (asked == 0) return CmaChunkFor(options_.size);
  if (asked < kCmaMinAskBytes || asked > kCmaScratchBytes) {
    throw CommError(fmt::format("shm: a read of {} bytes (FMSTACK_SHM_CMA_CHUNK_BYTES) is outside "
                                "[{}, {}]",
                                asked, kCmaMinAskBytes, kCmaScratchBytes),
                    -1);
  }
  return asked / 64 * 64;
}

size_t ShmCommunicator::ResolveAltCmaChunk() const {
  return SecondLength(options_.alt_cma_chunk_bytes, cma_chunk_bytes_, options_.cma_chunk_bytes == 0,
                      kCmaAltChunkBytes, kCmaMinAskBytes, "read", "a read takes");
}

size_t ShmCommunicator::ResolveAltWindow() const {
  return SecondLength(options_.alt_window_bytes, window_bytes_, options_.window_bytes == 0,
                      kWindowBytes, kMinWindowBytes, "window", "a pass stages");
}

template <class Run>
void ShmCommunicator::RunTuned(PathTuner& tuner, std::atomic<int32_t>* choices, size_t bytes,
                               const Run& run) {
  const auto share = [&](int size_class, bool mine) {
    // Rank 0 publishes before the barrier; the others read after it.
    if (options_.rank == 0) choices[size_class].store(mine ? 1 : 0);
    Wait("allreduce");
    return choices[size_class].load() == 1;
  };
  tuner.Call(
      bytes, options_.rank == 0, share, [&] { Wait("allreduce"); }, run);
}

void ShmCommunicator::TunedAllReduce(View buf, ReduceOp op) {
  RunTuned(reduce_tuner_, header_->reduce_choice, buf.bytes(), [&](bool cma) {
    if (cma) {
      TunedCmaAllReduce(buf, op);
    } else {
      ReduceWindow(buf, op, 0, true, StagedBytes());
    }
  });
}

// Both windows sum every element in rank order, so the bits do not depend
// on the choice; a message one small window holds is the same single pass
// either way and is not timed.
void ShmCommunicator::TunedWindowAllReduce(View buf, ReduceOp op) {
  if (alt_window_bytes_ == 0 || buf.bytes() <= alt_window_bytes_)
    return ReduceWindow(buf, op, 0, true, StagedBytes());
  RunTuned(window_tuner_, header_->window_choice, buf.bytes(), [&](bool alt) {
    ReduceWindow(buf, op, 0, true, alt ? alt_window_bytes_ : StagedBytes());
  });
}

// Both reads sum every element in rank order, so the bits do not depend on
// the choice; a share that one short read holds is read the same either way
// and is not timed. Every rank decides alike from the published lengths.
void ShmCommunicator::TunedCmaAllReduce(View buf, ReduceOp op) {
  const size_t share = buf.bytes() / static_cast<size_t>(options_.size);
  if (alt_cma_chunk_bytes_ == 0 || share <= alt_cma_chunk_bytes_)
    return CmaReduce(buf, op, 0, true, cma_chunk_bytes_);
  RunTuned(chunk_tuner_, header_->chunk_choice, buf.bytes(), [&](bool alt) {
    CmaReduce(buf, op, 0, true, alt ? alt_cma_chunk_bytes_ : cma_chunk_bytes_);
  });
}

}  // namespace fmstack::comm
