#include "ckpt/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <map>

#include "ckpt/engine_job.h"
#include "ckpt/staging_pool.h"
#include "util/error.h"
#include "util/worker_pool.h"
#include "util/xxh3.h"

namespace fmstack::ckpt {

Engine::Engine(std::vector<std::unique_ptr<Tier>> tiers, EngineOptions options)
    : tiers_(std::move(tiers)), options_(std::move(options)) {
  if (tiers_.empty()) throw Error("checkpoint: no tier configured");
  if (options_.keep < 1) throw Error("checkpoint.keep must be at least 1");
  if (options_.chunk_bytes < 4096 || options_.chunk_bytes > kMaxChunkBytes ||
      options_.chunk_bytes % 4096 != 0) {
    throw Error(fmt::format("checkpoint: chunk of {} bytes: expected a multiple of 4096 up to {}",
                            options_.chunk_bytes, kMaxChunkBytes));
  }
  if (options_.owner) {
    for (const std::unique_ptr<Tier>& t : tiers_) t->Claim(*options_.owner, options_.rank == 0);
  }
  // The fast tier now; the slower ones from the drain thread, so that an
  // object store that hangs cannot hold up the start.
  if (options_.collect_garbage && options_.rank == 0) CollectGarbage(0, 1);
  writer_ = std::thread([this] { Writer(); });
  drainer_ = std::thread([this] { Drainer(); });
  janitor_ = std::thread([this] { Janitor(); });
}

Engine::~Engine() {
  try {
    Release();  // the caller's memory may go once the engine is gone
  } catch (const std::exception& e) {
    Note(fmt::format("checkpoint: {}", e.what()));
  }
  {
    // The first tier is finished, or abandoned after write_timeout_seconds:
    // the writer then stops at its next chunk. A write the kernel never
    // returns cannot be interrupted at all (not even by SIGKILL); Wait() has
    // reported it by then. A drain still running is told to give up at its
    // next chunk (Wait() already reported it left behind).
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, Deadline(options_.write_timeout_seconds),
                        [&] { return writing_ == 0; })) {
      MarkUnwrittenAbandoned();
      cv_.notify_all();
      Note(
          fmt::format("checkpoint: the {} tier did not finish writing within {:g} s; its "
                      "unfinished saves are abandoned",
                      tiers_[0]->name(), options_.write_timeout_seconds));
      cv_.wait(lock, [&] { return writing_ == 0; });
    }
    abandon_ = true;
    if (busy_ > 0) {
      for (size_t t = 1; t < tiers_.size(); ++t) tiers_[t]->Cancel();
    }
    for (const auto& job : drain_queue_) {
      pinned_.erase(job->step());
      --busy_;
    }
    drain_queue_.clear();
    cv_.wait(lock, [&] { return busy_ == 0; });
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
  drainer_.join();
  janitor_.join();  // after a last pass, when one is due
}

void Engine::Committed(size_t tier, const Job& job) const {
  if (options_.rank != 0 || !options_.on_committed) return;
  options_.on_committed(job.step(), tiers_[tier]->name(), job.timing.commit_seconds[tier]);
}

void Engine::Note(const std::string& line) const {
  if (options_.log) options_.log(line);
}

void Engine::Point(std::string_view point, size_t tier) const {
  if (options_.fault_point) options_.fault_point(point, tiers_[tier]->name());
}

void Engine::Fail(size_t tier, const std::string& what) {
  const std::string line = fmt::format("checkpoint: {} tier: {}", tiers_[tier]->name(), what);
  {
    const std::lock_guard lock(mu_);
    if (tier == 0 && !first_tier_error_) first_tier_error_ = std::make_exception_ptr(Error(line));
    // A slower tier that is down fails every save the same way: say it once
    // (the fast tier carries the run), and keep the list bounded.
    const bool repeat = tier > 0 && !failed_tiers_.insert(tier).second;
    if (errors_.size() < 16 && !repeat) errors_.push_back(line);
    if (repeat) return;
  }
  Note(tier == 0 ? line
                 : line +
                       " (training goes on with the faster tiers; later failures of "
                       "this tier are not repeated)");
}

void Engine::Reserve(int64_t state_bytes, const std::shared_ptr<DeviceSource>& device) {
  if (!pool_) {
    const int64_t want = options_.pool_bytes > 0 ? options_.pool_bytes : state_bytes;
    const int64_t slots =
        std::max<int64_t>(1, (want + options_.chunk_bytes - 1) / options_.chunk_bytes);
    pool_ = std::make_unique<Pool>(options_.chunk_bytes, slots);
    // With the pool, not at the first live save: a fresh mapping's page
    // faults cost that save 0.2-0.45 s on a 2-vCPU VM with four ranks.
    gather_ = std::make_unique<Pool>(options_.chunk_bytes, kGatherSlots);
  }
  pool_->PinFor(device);
}

int64_t Engine::pool_bytes() const {
  return pool_ ? pool_->bytes() : 0;
}

SaveTiming Engine::Save(const Snapshot& snap) {
  const Clock::time_point start = Clock::now();
  // The caller has moved on from an earlier live snapshot's memory (it
  // should have released it already): no save may read it from here on.
  Release();
  {
    std::lock_guard lock(mu_);
    if (first_tier_error_) {
      std::exception_ptr e = first_tier_error_;
      first_tier_error_ = nullptr;
      std::rethrow_exception(e);
    }
  }
  const std::shared_ptr<Job> job = MakeJob(snap);
  job->start = start;
  Reserve(job->timing.bytes, snap.device);
  const bool live = snap.live && job->slots_total > 0 &&
                    std::ranges::none_of(snap.slices, &TensorSlice::on_device);
  if (live) job->SetLiveRuns();
  {
    const std::lock_guard lock(mu_);
    write_queue_.push_back(job);
    ++busy_;
    ++writing_;
    if (live) {
      job->live = job->copied = true;
      live_ = job;
    }
  }
  cv_.notify_all();
  if (!live) {
    // The blocking part: copy into slots. When the pool holds the whole
    // snapshot, every slot is taken at once and filled by several threads.
    std::vector<Slot*> all = pool_->TryAcquireAll(job->slots_total);
    if (!all.empty() || job->slots_total == 0) {
      CopyAll(job->slices, snap.device.get(), *job, all);
    } else {
      CopyStreamingToWriter(job->slices, snap.device.get(), *job);
    }
    {
      const std::lock_guard lock(mu_);
      job->copied = true;
    }
    cv_.notify_all();
  }
  // The writer may be done with a live job already: it reads the timing
  // under mu_, and this returns what Save() knows, not what it wrote.
  SaveTiming out;
  out.step = job->step();
  out.bytes = job->timing.bytes;
  out.blocking_seconds = Since(start);
  out.commit_seconds.assign(tiers_.size(), -1);
  const std::lock_guard lock(mu_);
  job->timing.blocking_seconds = out.blocking_seconds;
  return out;
}

void Engine::Writer() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !write_queue_.empty(); });
      if (write_queue_.empty()) return;
      job = write_queue_.front();
      write_queue_.pop_front();
      in_write_ = job;
    }
    WriteFirstTier(*job);
    const bool drain = job->first_tier_ok && tiers_.size() > 1;
    {
      const std::lock_guard lock(mu_);
      in_write_ = nullptr;
      --writing_;
      if (job->first_tier_ok) retain_due_ = true;
      if (drain) {
        pinned_.insert(job->step());
        drain_queue_.push_back(job);
      } else {
        timings_.push_back(job->timing);
        --busy_;
      }
    }
    cv_.notify_all();
  }
}

void Engine::WriteFirstTier(Job& job) {
  Tier& tier = *tiers_[0];
  if (Abandoned(job)) {  // Wait() gave up before it started: nothing to create
    ReleaseFilled(job);
    return;
  }
  std::unique_ptr<Sink> sink;
  std::string error;
  try {
    sink = tier.Create(job.step(), job.file);
    sink->Write(job.header);
  } catch (const std::exception& e) {
    error = e.what();
  }
  {
    // Writing while Save() copies would halve the copy's memory bandwidth,
    // and the copy is what training waits for: start when it is done, or
    // when it needs slots back.
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return job.copied || job.streaming || job.abandoned; });
  }
  // Every slot is consumed even after an error, so that Save() never waits
  // for one; an abandoned save hands over no more, and what it handed over
  // goes back to the pool unwritten. The sink writes a chunk while this
  // takes the next (Sink::Queue): `queued` holds what it has not yet
  // reported written, oldest first: a staging slot, one of the writer's
  // gather slots, or (no slot) a live snapshot's memory, which Release()
  // waits for. After a failed write none is in flight.
  struct Held {
    Slot* slot = nullptr;
    Pool* owner = nullptr;
    bool live = false;  // reads the caller's memory until written
  };
  std::deque<Held> queued;
  const auto release = [&](size_t n) {
    int live_done = 0;
    for (; n > 0 && !queued.empty(); --n) {
      const Held h = queued.front();
      queued.pop_front();
      if (h.slot != nullptr) h.owner->Release(h.slot);
      if (h.live) ++live_done;
    }
    if (live_done > 0) LiveReadsDone(job, live_done);
  };
  const auto drain = [&] {
    if (error.empty() && sink) {
      try {
        release(sink->Drain());
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    release(queued.size());
  };
  const auto gather_slot = [&] {
    Slot* g = gather_->TryAcquire();
    if (g == nullptr) {
      drain();  // frees every slot queued, the gather slots with them
      g = gather_->TryAcquire();
    }
    return g;
  };
  WorkerPool hasher(1);
  std::vector<std::span<const char>> parts;
  for (int64_t i = 0; i < job.slots_total; ++i) {
    Held held;
    {
      std::unique_lock lock(mu_);
      const auto ready = [&] {
        return !job.filled.empty() || job.abandoned || (job.live && !job.released);
      };
      if (!ready() && !queued.empty()) {
        // A copy through a pool smaller than the snapshot may be waiting
        // for the very slots this writer holds.
        lock.unlock();
        drain();
        lock.lock();
      }
      cv_.wait(lock, ready);
      if (job.abandoned) break;  // Save(), Release() or Wait() has reported it
      if (job.live && !job.released) {
        job.taken = i + 1;
        ++job.live_reads;
        held.live = true;
      } else {
        held = {job.filled.front(), pool_.get()};
        job.filled.pop_front();
      }
    }
    if (held.live) {  // from the caller's memory, but for the blocks copied
      const LiveChunk chunk = TakeLiveChunk(job, i, gather_slot, parts);
      held = {chunk.slot, gather_.get(), chunk.reads_memory};
    } else {
      parts.assign(1, {held.slot->data.get(), static_cast<size_t>(held.slot->used)});
    }
    // The chunk is hashed while it is written (both only read it). Hashed
    // first, in turn, an 8 MiB slot's XXH3 (2 ms at Debian libxxhash's
    // 4.3 GB/s) held the disk idle for a third of its write (6.4 ms at
    // 1.31 GB/s), on the Intel VM. (util/xxh3.h: 1.5-1.7x faster on slots from memory.)
    auto checksum = hasher.Submit([&parts] {
      Xxh3Stream hash;
      for (const std::span<const char> part : parts) hash.Update(part.data(), part.size());
      return hash.Digest();
    });
    queued.push_back(held);
    size_t written = queued.size();  // after a failed write none is in flight
    if (error.empty()) {
      try {
        written = sink->QueueV(parts);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    job.entry.checksums.push_back(checksum.get());
    release(written);
  }
  if (Abandoned(job)) {
    ReleaseFilled(job);
    sink.reset();  // waits for its writes, then discards the partial file
    release(queued.size());
    Note(fmt::format("checkpoint: {} tier: {} discarded (its save was abandoned)", tier.name(),
                     StepDirName(job.step())));
    return;
  }
  drain();
  try {
    if (!error.empty()) throw Error(error);
    sink->Finish();
    Point("shard-written", 0);
    tier.PutSmall(job.step(), RankIndexName(options_.rank),
                  RankIndexJson(job.file, job.entry, job.pieces).dump());
    Point("index-written", 0);
    CommitStep(0, job);
    job.timing.commit_seconds[0] = Since(job.start);
    Committed(0, job);
    job.first_tier_ok = true;
  } catch (const std::exception& e) {
    sink.reset();  // discards the partial file
    Fail(0, fmt::format("{} not saved: {}", StepDirName(job.step()), e.what()));
  }
}

void Engine::Drainer() {
  if (options_.collect_garbage && options_.rank == 0) CollectGarbage(1, tiers_.size());
  for (;;) {
    std::vector<std::shared_ptr<Job>> skipped;
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !drain_queue_.empty(); });
      if (drain_queue_.empty()) return;
      // Only the newest committed step is worth draining: older queued ones
      // would be superseded on the slow tiers before they finished.
      job = drain_queue_.back();
      skipped.assign(drain_queue_.begin(), drain_queue_.end() - 1);
      drain_queue_.clear();
      for (const auto& s : skipped) {
        pinned_.erase(s->step());
        timings_.push_back(s->timing);
        --busy_;
      }
    }
    for (const auto& s : skipped) {
      Note(fmt::format("checkpoint: {} not drained to slower tiers: {} superseded it",
                       StepDirName(s->step()), StepDirName(job->step())));
    }
    for (size_t t = 1; t < tiers_.size(); ++t) {
      bool saved = false;
      try {
        DrainTo(t, *job);
        job->timing.commit_seconds[t] = Since(job->start);
        Committed(t, *job);
        saved = true;
      } catch (const std::exception& e) {
        Fail(t, fmt::format("{} not saved: {}", StepDirName(job->step()), e.what()));
      }
      if (saved) RetainOrWarn(t);
    }
    {
      const std::lock_guard lock(mu_);
      pinned_.erase(job->step());
      timings_.push_back(job->timing);
      --busy_;
    }
    cv_.notify_all();
  }
}

void Engine::DrainTo(size_t t, Job& job) {
  Tier& from = *tiers_[0];
  Tier& to = *tiers_[t];
  std::unique_ptr<Sink> sink = to.Create(job.step(), job.file);
  sink->Write(job.header);
  const int64_t data = job.entry.size - job.entry.data_offset;
  std::vector<char> buf(static_cast<size_t>(std::min(data, job.entry.chunk_bytes)));
  // One reader for the whole shard, closed when the drain ends: a shard
  // left open would hold its disk space after rank 0 removes its step.
  const std::unique_ptr<FileReader> reader = from.OpenReader(job.step(), job.file);
  for (int64_t c = 0; c * job.entry.chunk_bytes < data; ++c) {
    {
      const std::lock_guard lock(mu_);
      if (abandon_) throw Error("abandoned at exit (the run did not wait any longer)");
    }
    const int64_t lo = c * job.entry.chunk_bytes;
    const std::span<char> chunk(buf.data(),
                                static_cast<size_t>(std::min(job.entry.chunk_bytes, data - lo)));
    reader->Read(job.entry.data_offset + lo, chunk);
    if (Xxh3(chunk) != job.entry.checksums[static_cast<size_t>(c)]) {
      throw Error(
          fmt::format("{}: chunk {} changed since it was written (bad disk or memory?); "
                      "not copying a corrupt checkpoint",
                      from.Where(job.step(), job.file), c));
    }
    sink->Write(chunk);
    Point("drained-chunk", t);
  }
  sink->Finish();
  Point("shard-written", t);
  to.PutSmall(job.step(), RankIndexName(options_.rank),
              RankIndexJson(job.file, job.entry, job.pieces).dump());
  Point("index-written", t);
  CommitStep(t, job);
}

void Engine::CommitStep(size_t t, const Job& job) {
  if (options_.rank != 0) return;
  Tier& tier = *tiers_[t];
  Manifest m;
  m.counters = job.counters;
  m.layout = job.layout;
  m.model = job.model;
  m.fmstack_version = options_.fmstack_version;
  m.files[job.file] = job.entry;
  m.tensors = job.pieces;
  const Clock::time_point start = Clock::now();
  for (int r = 1; r < options_.world; ++r) {
    const std::string name = RankIndexName(r);
    std::optional<std::string> text;
    for (int wait_ms = 1; !(text = tier.ReadSmall(job.step(), name));
         wait_ms = std::min(wait_ms * 2, 100)) {
      if (give_up_commit_) {
        throw Error(
            fmt::format("{}: abandoned: the job's ranks changed before rank {} wrote its part",
                        tier.Where(job.step(), name), r));
      }
      if (Since(start) > options_.commit_timeout_seconds) {
        throw Error(fmt::format("{}: rank {} did not write its part within {:.0f} s",
                                tier.Where(job.step(), name), r, options_.commit_timeout_seconds));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    }
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(*text);
    } catch (const std::exception& e) {
      throw Error(fmt::format("{}: not valid JSON: {}", tier.Where(job.step(), name), e.what()));
    }
    MergeRankIndex(index, tier.Where(job.step(), name), m);
  }
  m.Validate(tier.Where(job.step(), kManifestName));
  tier.PutSmall(job.step(), kManifestName, m.ToJson().dump(1));
  Point("manifest-written", t);
  tier.Commit(job.step());
  Point("committed", t);
  Note(fmt::format("checkpoint: {} committed on {} ({:.2f} s after save)", StepDirName(job.step()),
                   tier.name(), Since(job.start)));
}

void Engine::ReleaseFilled(Job& job) {
  const std::lock_guard lock(mu_);
  for (Slot* slot : job.filled) pool_->Release(slot);
  job.filled.clear();
}

void Engine::MarkUnwrittenAbandoned() {
  if (in_write_) in_write_->abandoned = true;
  for (const auto& job : write_queue_) job->abandoned = true;
}

void Engine::AbandonUnwritten(std::unique_lock<std::mutex>& lock) {
  const std::shared_ptr<Job> late = in_write_ ? in_write_ : write_queue_.front();
  const size_t count = write_queue_.size() + (in_write_ ? 1 : 0);
  MarkUnwrittenAbandoned();
  lock.unlock();
  cv_.notify_all();
  throw Error(fmt::format(
      "checkpoint: {} not committed: the {} tier did not finish writing {} within {:g} s (a hung "
      "disk or file system?); {} unfinished save(s) abandoned, earlier checkpoints are untouched",
      StepDirName(late->step()), tiers_[0]->name(), tiers_[0]->Where(late->step(), late->file),
      options_.write_timeout_seconds, count));
}

std::vector<std::string> Engine::Wait(double drain_seconds) {
  std::vector<std::string> errors;
  std::exception_ptr first;
  bool behind = false;
  {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, Deadline(options_.write_timeout_seconds),
                        [&] { return writing_ == 0; })) {
      AbandonUnwritten(lock);
    }
    behind = !cv_.wait_until(lock, Deadline(drain_seconds), [&] { return busy_ == 0; });
    if (!cv_.wait_until(lock, Deadline(options_.write_timeout_seconds),
                        [&] { return !retain_due_ && !retaining_; })) {
      errors_.push_back(fmt::format(
          "checkpoint: {} tier: removing older steps still runs after {:g} s (the newest step "
          "is committed)",
          tiers_[0]->name(), options_.write_timeout_seconds));
    }
    errors.swap(errors_);
    first = std::exchange(first_tier_error_, nullptr);
  }
  if (first) {
    std::string all;
    for (const std::string& e : errors) all += (all.empty() ? "" : "\n") + e;
    throw Error(all);
  }
  if (behind) {
    errors.push_back(fmt::format(
        "checkpoint: the slower tiers did not finish draining within {:g} s; the newest "
        "step is committed on {} and left behind on the others",
        drain_seconds, tiers_[0]->name()));
  }
  return errors;
}

std::vector<SaveTiming> Engine::TakeTimings() {
  const std::lock_guard lock(mu_);
  std::vector<SaveTiming> out;
  out.swap(timings_);
  return out;
}

}  // namespace fmstack::ckpt
