// ckpt: one save in flight (Engine::Job), shared by the engine's files
// (included by them alone): engine.cc runs the pipeline, engine_copy.cc
// Save()'s copy into the staging pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/engine.h"
#include "ckpt/format.h"

namespace fmstack::ckpt {

using Clock = std::chrono::steady_clock;

struct Engine::Job {
  Counters counters;  // counters.step names the checkpoint
  Layout layout;
  nlohmann::json model;
  std::string file;    // this rank's shard file name
  std::string header;  // its safetensors header
  std::map<std::string, TensorEntry> pieces;
  FileEntry entry;
  int64_t slots_total = 0;
  std::deque<Slot*> filled;  // guarded by Engine::mu_
  // Guarded by Engine::mu_: the snapshot is complete, or it waits for the
  // writer to free slots (a pool smaller than the state), or Save() gave up
  // waiting and no more slots will come.
  bool copied = false, streaming = false, abandoned = false;
  Clock::time_point start;
  SaveTiming timing;
  bool first_tier_ok = false;

  int64_t step() const { return counters.step; }
};

}  // namespace fmstack::ckpt
