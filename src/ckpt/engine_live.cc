// ckpt: live snapshots (Snapshot::live). The writer takes chunks straight
// from the caller's memory until Release(), which copies the chunks it has
// not taken into the staging pool and waits for those it is still reading.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "ckpt/engine.h"
#include "ckpt/engine_job.h"
#include "ckpt/staging_copy.h"
#include "ckpt/staging_pool.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

// O_DIRECT's unit on the file systems we write, the one the shard's padding
// aligns runs to: each part of a chunk's write must start on it in memory
// and be a whole number of it (the shard's last chunk excepted, whose tail
// the sink writes through its bounce buffer).
constexpr auto kDirectAlign = static_cast<size_t>(kShardAlign);

}  // namespace

void Engine::Job::SetLiveRuns() {
  int64_t offset = 0;
  for (const TensorSlice& s : slices) {
    if (s.data.empty()) continue;
    // A trainer's tensors are views of a few flat arrays: one run each, so
    // that a chunk across two tensors is still written with no copy.
    if (!runs.empty() && runs.back().data() + runs.back().size() == s.data.data()) {
      runs.back() = {runs.back().data(), runs.back().size() + s.data.size()};
    } else {
      runs.push_back(s.data);
      run_offsets.push_back(offset);
    }
    offset += static_cast<int64_t>(s.data.size());
  }
}

std::vector<std::span<const std::byte>> Engine::Job::LiveBytes(int64_t lo, int64_t hi) const {
  std::vector<std::span<const std::byte>> out;
  // The last run that starts at or before lo.
  auto r = static_cast<size_t>(std::upper_bound(run_offsets.begin(), run_offsets.end(), lo) -
                               run_offsets.begin());
  for (r = r == 0 ? 0 : r - 1; r < runs.size() && run_offsets[r] < hi; ++r) {
    const int64_t begin = std::max(lo, run_offsets[r]);
    const int64_t end = std::min(hi, run_offsets[r] + static_cast<int64_t>(runs[r].size()));
    if (begin < end) {
      out.push_back(runs[r].subspan(static_cast<size_t>(begin - run_offsets[r]),
                                    static_cast<size_t>(end - begin)));
    }
  }
  return out;
}

Engine::Pieces Engine::LivePieces(const Job& job, int64_t i) const {
  const int64_t lo = i * options_.chunk_bytes;
  return job.LiveBytes(lo, std::min(lo + options_.chunk_bytes, job.timing.bytes));
}

Engine::LiveChunk Engine::TakeLiveChunk(Job& job, int64_t i,
                                        const std::function<Slot*()>& gather_slot,
                                        std::vector<std::span<const char>>& parts) {
  const Pieces pieces = LivePieces(job, i);
  if (SplitLiveChunk(pieces, nullptr, parts) == 0 && parts.size() <= kMaxLiveParts) {
    ++job.timing.chunks_direct;
    return {};
  }
  Slot* const g = gather_slot();
  const int64_t bounced = SplitLiveChunk(pieces, g->data.get(), parts);
  int64_t chunk = 0;
  for (const std::span<const std::byte> piece : pieces) chunk += static_cast<int64_t>(piece.size());
  if (parts.size() <= kMaxLiveParts && bounced < chunk) {
    ++job.timing.chunks_direct;
    ++job.timing.chunks_split;
    return {g, true};
  }
  // Copied whole: the memory is free once it is.
  if (bounced == chunk) {
    g->used = chunk;
    LiveReadsDone(job, 1);
  } else {
    GatherLiveChunk(job, pieces, *g);
  }
  parts.assign(1, {g->data.get(), static_cast<size_t>(g->used)});
  ++job.timing.chunks_gathered;
  return {g, false};
}

int64_t Engine::SplitLiveChunk(const Pieces& pieces, char* bounce,
                               std::vector<std::span<const char>>& parts) {
  parts.clear();
  int64_t bounced = 0;
  const auto add = [&](const char* p, size_t n) {
    if (!parts.empty() && parts.back().data() + parts.back().size() == p) {
      parts.back() = {parts.back().data(), parts.back().size() + n};
    } else {
      parts.emplace_back(p, n);
    }
  };
  // Block by block of the file: each starts on kDirectAlign, since the
  // chunk does and every part is whole blocks but the chunk's last.
  size_t k = 0, at = 0;  // the piece and the offset in it where the block starts
  while (k < pieces.size()) {
    const auto* base = reinterpret_cast<const char*>(pieces[k].data());
    const size_t left = pieces[k].size() - at;
    if (reinterpret_cast<uintptr_t>(base + at) % kDirectAlign == 0 && left >= kDirectAlign) {
      const size_t whole = left / kDirectAlign * kDirectAlign;
      add(base + at, whole);
      at += whole;
    } else {
      // A block across pieces (a run's ragged end and the pad after it), or
      // in memory that does not agree with the file (a tensor too small to
      // pad), or the chunk's short tail: copied.
      if (bounce == nullptr) return -1;
      char* const block = bounce + bounced;
      size_t filled = 0;
      while (filled < kDirectAlign && k < pieces.size()) {
        const size_t take = std::min(kDirectAlign - filled, pieces[k].size() - at);
        std::memcpy(block + filled, reinterpret_cast<const char*>(pieces[k].data()) + at, take);
        filled += take;
        at += take;
        if (at == pieces[k].size()) {
          ++k;
          at = 0;
        }
      }
      add(block, filled);
      bounced += static_cast<int64_t>(filled);
      continue;
    }
    if (at == pieces[k].size()) {
      ++k;
      at = 0;
    }
  }
  return bounced;
}

void Engine::GatherLiveChunk(Job& job, const Pieces& pieces, Slot& to) {
  to.used = 0;
  for (const std::span<const std::byte> piece : pieces) {
    CopyStreaming(to.data.get() + to.used, piece.data(), piece.size());
    to.used += static_cast<int64_t>(piece.size());
  }
  LiveReadsDone(job, 1);
}

void Engine::LiveReadsDone(Job& job, int n) {
  {
    const std::lock_guard lock(mu_);
    job.live_reads -= n;
  }
  cv_.notify_all();
}

double Engine::Release() {
  const Clock::time_point start = Clock::now();
  std::shared_ptr<Job> job;
  int64_t first = 0;
  {
    const std::lock_guard lock(mu_);
    job = std::exchange(live_, nullptr);
    if (!job) return 0;
    job->released = true;
    first = job->abandoned ? job->slots_total : job->taken;
  }
  if (first < job->slots_total) CopyLiveRest(*job, first);
  AwaitLiveReads(*job);
  const double seconds = Since(start);
  const std::lock_guard lock(mu_);
  job->timing.release_seconds = seconds;
  job->timing.chunks_released = job->slots_total - first;
  return seconds;
}

void Engine::CopyLiveRest(Job& job, int64_t first) {
  std::vector<TensorSlice> rest;
  for (const std::span<const std::byte> piece :
       job.LiveBytes(first * options_.chunk_bytes, job.timing.bytes)) {
    TensorSlice s;
    s.data = piece;
    rest.push_back(std::move(s));
  }
  // Slots the writer frees as it goes when an earlier save still holds some.
  const std::vector<Slot*> all = pool_->TryAcquireAll(job.slots_total - first);
  if (!all.empty()) {
    CopyAll(rest, nullptr, job, all);
  } else {
    CopyStreamingToWriter(rest, nullptr, job);
  }
  cv_.notify_all();
}

void Engine::AwaitLiveReads(Job& job) {
  std::unique_lock lock(mu_);
  if (cv_.wait_until(lock, Deadline(options_.write_timeout_seconds),
                     [&] { return job.live_reads == 0; })) {
    return;
  }
  job.abandoned = true;
  lock.unlock();
  cv_.notify_all();
  // The writes the kernel still has may read memory the caller now changes:
  // the partial file is discarded with the save, never committed.
  throw Error(fmt::format(
      "checkpoint: {} abandoned: the {} tier did not finish writing {} from the training "
      "state's memory within {:g} s (a hung disk or file system?); earlier checkpoints are "
      "untouched",
      StepDirName(job.step()), tiers_[0]->name(), tiers_[0]->Where(job.step(), job.file),
      options_.write_timeout_seconds));
}

}  // namespace fmstack::ckpt
