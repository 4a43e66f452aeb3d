// ckpt: where a snapshot's slices go in its shard (Engine::MakeJob): their
// order, the padding that puts each run of memory at its address modulo a
// block, the safetensors header and the manifest's pieces.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "ckpt/engine.h"
#include "ckpt/engine_job.h"
#include "util/error.h"

namespace fmstack::ckpt {

namespace {

// The bytes of every padding entry (never written to: const).
constexpr std::array<std::byte, kShardAlign> kZeroBlock{};

bool Continues(const TensorSlice& prev, const TensorSlice& s) {
  return prev.on_device == s.on_device && prev.data.data() + prev.data.size() == s.data.data();
}

// The bytes of the run of memory that slices[0] starts, counted up to `enough`.
int64_t RunBytes(std::span<const TensorSlice> slices, int64_t enough) {
  int64_t run = 0;
  const TensorSlice* last = nullptr;
  for (const TensorSlice& s : slices) {
    if (run >= enough) break;
    if (s.data.empty()) continue;
    if (last != nullptr && !Continues(*last, s)) break;
    run += static_cast<int64_t>(s.data.size());
    last = &s;
  }
  return run;
}

// The slices in shard order with a padding entry before each run of memory
// (slices that continue one another) of `min_run` bytes or more, so
// that the run's offset in the file agrees with its address modulo
// kShardAlign. Then every whole block of the run goes between the file and
// that memory with O_DIRECT and no copy: the writer's chunks of a live save,
// and the restore's reads into memory laid out alike (the trainer's flat
// arrays, buffers from an aligned allocator). Device memory is padded by
// the same rule, so that a device snapshot writes the host one's file.
std::vector<TensorSlice> WithPadding(std::span<const TensorSlice> slices, int64_t min_run) {
  std::vector<TensorSlice> out;
  out.reserve(slices.size());
  int64_t offset = 0, pads = 0;
  const TensorSlice* prev = nullptr;
  for (size_t i = 0; i < slices.size(); ++i) {
    const TensorSlice& s = slices[i];
    if (s.data.empty()) {
      out.push_back(s);
      continue;
    }
    if (prev == nullptr || !Continues(*prev, s)) {
      const int64_t run = RunBytes(slices.subspan(i), min_run);
      const auto want = static_cast<int64_t>(reinterpret_cast<uintptr_t>(s.data.data()) %
                                             static_cast<uintptr_t>(kShardAlign));
      const int64_t pad = ((want - offset % kShardAlign) + kShardAlign) % kShardAlign;
      if (run >= min_run && pad > 0) {
        TensorSlice p;
        p.name = PadTensorName(pads++);
        p.dtype = DType::kU8;
        p.shape = {pad};
        p.data = std::span(kZeroBlock).first(static_cast<size_t>(pad));
        out.push_back(std::move(p));
        offset += pad;
      }
    }
    out.push_back(s);
    offset += static_cast<int64_t>(s.data.size());
    prev = &s;
  }
  return out;
}

}  // namespace

std::shared_ptr<Engine::Job> Engine::MakeJob(const Snapshot& snap) const {
  auto job = std::make_shared<Job>();
  job->counters = snap.counters;
  job->layout = snap.layout;
  job->model = snap.model;
  job->file = RankFileName(options_.rank);
  for (const TensorSlice& s : snap.slices) {
    if (IsPadTensorName(s.name)) {
      throw Error(fmt::format(
          "checkpoint: tensor \"{}\": names starting with \"{}\" are the shard format's padding",
          s.name, kPadTensorPrefix));
    }
  }
  // Runs of a chunk or more: what pads one costs, at most 4095 bytes, is
  // then a small part of it (under 0.05% with 8 MiB chunks).
  job->slices = WithPadding(snap.slices, options_.chunk_bytes);
  std::vector<ShardPiece> shard;
  int64_t offset = 0;
  for (const TensorSlice& s : job->slices) {
    if (s.on_device && !snap.device) {
      throw Error(fmt::format(
          "checkpoint: tensor \"{}\" is in device memory but the snapshot names no device "
          "source to copy it",
          s.name));
    }
    const int64_t es = DTypeSize(s.dtype);
    if (static_cast<int64_t>(s.data.size()) % es != 0) {
      throw Error(fmt::format("checkpoint: tensor \"{}\": {} bytes is not a whole number of {}",
                              s.name, s.data.size(), DTypeName(s.dtype)));
    }
    const int64_t count = static_cast<int64_t>(s.data.size()) / es;
    shard.push_back({s.name, s.dtype, s.shape, s.begin, count});
    if (!IsPadTensorName(s.name)) {  // the manifest lists the snapshot's slices only
      TensorEntry& e = job->pieces[s.name];
      e.dtype = s.dtype;
      e.shape = s.shape;
      e.pieces.push_back({job->file, s.begin, count, offset});
    }
    offset += static_cast<int64_t>(s.data.size());
  }
  job->header = SafetensorsHeader(shard);
  job->entry.rank = options_.rank;
  job->entry.data_offset = static_cast<int64_t>(job->header.size());
  job->entry.size = job->entry.data_offset + offset;
  job->entry.chunk_bytes = options_.chunk_bytes;
  job->slots_total = (offset + options_.chunk_bytes - 1) / options_.chunk_bytes;
  job->timing.step = job->step();
  job->timing.bytes = offset;
  job->timing.commit_seconds.assign(tiers_.size(), -1);
  return job;
}

}  // namespace fmstack::ckpt
