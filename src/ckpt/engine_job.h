// ckpt: one save in flight (Engine::Job), shared by the engine's files
// (included by them alone): engine.cc runs the pipeline, engine_layout.cc
// lays out the shard, engine_copy.cc does Save()'s copy into the staging
// pool, engine_live.cc live snapshots.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "ckpt/engine.h"
#include "ckpt/format.h"

namespace fmstack::ckpt {

using Clock = std::chrono::steady_clock;

// The writer's own slots for live chunks it gathers: one per write the
// POSIX sink keeps in flight (two), one it hashes and fills, and a spare.
constexpr int64_t kGatherSlots = 4;
// A live chunk written in more parts than this (memory, then copied blocks,
// in turn) is gathered whole instead: the POSIX sink writes up to 64 parts
// as one pwritev.
constexpr size_t kMaxLiveParts = 64;

inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// `seconds` from now; anything over a year is "no deadline" without overflow.
inline Clock::time_point Deadline(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::clamp(seconds, 0.0, 3e7)));
}

struct Engine::Job {
  Counters counters;  // counters.step names the checkpoint
  Layout layout;
  nlohmann::json model;
  std::string file;    // this rank's shard file name
  std::string header;  // its safetensors header
  // The snapshot's slices in shard order, with the padding entries between
  // them (WithPadding in engine_layout.cc): what Save() copies and a live save's
  // writer reads.
  std::vector<TensorSlice> slices;
  std::map<std::string, TensorEntry> pieces;
  FileEntry entry;
  int64_t slots_total = 0;
  std::deque<Slot*> filled;  // guarded by Engine::mu_
  // Guarded by Engine::mu_: the snapshot is complete, or it waits for the
  // writer to free slots (a pool smaller than the state), or Save() gave up
  // waiting and no more slots will come.
  bool copied = false, streaming = false, abandoned = false;
  // A live snapshot (Snapshot::live): the slices the writer reads chunks
  // from, merged where one continues the other in memory, with each run's
  // offset in the shard's data. Guarded by Engine::mu_: Release() has been
  // called (chunks from `taken` on come from the pool), the chunks the
  // writer has taken, and how many of those it still reads from the memory.
  bool live = false;
  std::vector<std::span<const std::byte>> runs;
  std::vector<int64_t> run_offsets;
  bool released = false;
  int64_t taken = 0;
  int live_reads = 0;
  Clock::time_point start;
  SaveTiming timing;
  bool first_tier_ok = false;

  int64_t step() const { return counters.step; }
  // The runs of `slices` (host memory) that a live job reads.
  void SetLiveRuns();
  // The pieces of memory that hold bytes [lo, hi) of the shard's data.
  std::vector<std::span<const std::byte>> LiveBytes(int64_t lo, int64_t hi) const;
};

}  // namespace fmstack::ckpt
