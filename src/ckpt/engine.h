// ckpt: the checkpoint engine of one rank. Save() copies the rank's tensors
// into a bounded host staging pool and returns: that copy is the only time
// training waits. A writer thread streams the pool's slots into the first
// (fastest) tier, hashing each slot as it goes; a drain thread then copies
// the committed step tier by tier to the slower ones, re-verifying every
// chunk it reads so that a corrupted fast copy never spreads. Each tier
// commits on its own: rank 0 merges every rank's index into manifest.json
// and writes COMMITTED last, then applies retention.
//
// A pool smaller than the state makes Save() stream: it waits for the writer
// to free slots. The default pool holds one whole state.
//
// A live snapshot (Snapshot::live) is not copied by Save() at all: the
// writer reads its chunks straight from the caller's memory until the
// caller is about to change it and calls Release(), which copies only the
// chunks the writer has not reached. A trainer saves after an optimizer
// step and releases before the next one, so the write overlaps the forward
// and backward passes, and the copy training waits for shrinks by what the
// disk wrote meanwhile (to nothing when the step outlasts the write).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/restore.h"
#include "ckpt/tier.h"

namespace fmstack::ckpt {

// A rank's part of one tensor: elements [begin, begin + n) of its flat
// global shape, n = data.size() / DTypeSize(dtype).
struct TensorSlice {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  std::span<const std::byte> data;
  // data is in an accelerator's memory (an address the host must not read):
  // the snapshot's DeviceSource copies it.
  bool on_device = false;
};

// Copies a snapshot's on-device slices into the staging pool. The engine
// pins the pool's slots through it once, so that the device's copy engine
// writes into them directly at the link's speed with no bounce buffer, and
// unpins them before it frees them, possibly after the snapshot's owner is
// gone: Pin and Unpin must not depend on it.
class DeviceSource {
 public:
  struct Copy {
    char* to;  // pinned host memory
    const std::byte* from;
    size_t bytes;
  };
  virtual ~DeviceSource() = default;
  virtual void Pin(std::span<char> host) = 0;
  virtual void Unpin(std::span<char> host) noexcept = 0;
  // Returns once every copy has landed, after the device's queued work.
  virtual void CopyToHost(std::span<const Copy> copies) = 0;
};

struct Snapshot {
  Counters counters;  // counters.step names the checkpoint
  Layout layout;
  nlohmann::json model;
  std::vector<TensorSlice> slices;       // this rank's
  std::shared_ptr<DeviceSource> device;  // required when a slice is on_device
  // The slices' memory stays valid and unchanged until Engine::Release()
  // returns (Save, Restore and the destructor release too). Save() then
  // copies nothing: the writer writes 4 KiB-aligned chunks straight from
  // that memory (O_DIRECT, no copy at all) and gathers the others into
  // buffers of its own, chunk by chunk. Host memory only: a snapshot with a
  // slice on a device is copied by Save() whatever this says.
  bool live = false;
};

// Threads for the copy that Save() blocks on, for a process that may run on
// `cpus` CPUs: training waits for that copy with those CPUs idle. At least
// two (one core does not saturate memory: two copied 12-13 GB/s where one
// copied 9-10 on an AMD VM), at most kMaxCopyThreads. On a 16-CPU Xeon host
// (an H200 machine's) a 4 GB save blocked for 0.116-0.118 s with 8 threads
// and 0.294 s with 2, and its commit went from 80% to 96-100% of the disk.
inline constexpr int kMaxCopyThreads = 8;
int CopyThreadsFor(int cpus);
// CopyThreadsFor the CPUs this process's affinity mask allows.
int DefaultCopyThreads();

struct EngineOptions {
  int rank = 0;
  int world = 1;
  int keep = 3;                              // committed steps kept per tier (>= 1)
  int64_t pool_bytes = 0;                    // staging pool; 0 = one state
  int64_t chunk_bytes = kDefaultChunkBytes;  // slot size and checksum chunk
  int copy_threads = DefaultCopyThreads();   // threads copying a snapshot into the pool
  double commit_timeout_seconds = 600;       // rank 0 waiting for the other ranks' index files
  // Save() with a pool smaller than the state: how long it waits for the
  // writer to free a staging slot (one chunk written to the first tier)
  // before it abandons the save with an error naming the tier and file.
  double slot_timeout_seconds = 300;
  // Wait(): how long it waits for the first tier to finish the saves queued
  // when it was called. Past it, those saves are abandoned (their partial
  // files discarded when the tier answers again) and Wait() throws an error
  // naming the step, the tier and the file that did not finish.
  double write_timeout_seconds = 1800;
  bool collect_garbage = true;  // rank 0 removes uncommitted steps on start
  // Every tier is claimed for this job before anything is written (Tier::
  // Claim; rank 0 also locks it); nullopt: no claim.
  std::optional<TierOwner> owner;
  std::string fmstack_version = "0.1.0";
  Log log;  // one line per event; may be empty
  // Called at each step of the commit protocol ("shard-written",
  // "index-written", "manifest-written", "committed", "removing", "drained-chunk")
  // with the tier's name: crash tests kill the process there.
  std::function<void(std::string_view point, const std::string& tier)> fault_point;
  // Rank 0: a step is committed on a tier, `seconds` after its save began
  // (called from the engine's threads).
  std::function<void(int64_t step, const std::string& tier, double seconds)> on_committed;
};

// Per save, what each part cost.
struct SaveTiming {
  int64_t step = 0;
  int64_t bytes = 0;
  double blocking_seconds = 0;  // Save() itself
  // A live snapshot's Release(): the copy of the chunks the writer had not
  // reached when the caller needed its memory back (training waits for it).
  double release_seconds = 0;
  // A live snapshot's chunks: written straight from its memory (of them,
  // `split`: with a few blocks at runs' edges copied, one write in parts),
  // gathered whole by the writer into its own slots, and copied by Release().
  int64_t chunks_direct = 0, chunks_split = 0, chunks_gathered = 0, chunks_released = 0;
  std::vector<double>
      commit_seconds;  // per tier, from Save() to COMMITTED (rank 0) or index written
};

class Engine {
 public:
  // tiers[0] is written from memory; the others are drained from it, in order.
  Engine(std::vector<std::unique_ptr<Tier>> tiers, EngineOptions options);
  ~Engine();  // waits for the pipeline; errors are logged, not thrown
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Returns once the slices are copied into the staging pool. Throws the
  // error of an earlier save's first tier, if any (the fast copy failing
  // must stop the run; slower tiers only log).
  SaveTiming Save(const Snapshot& snapshot);
  // Returns once no save reads the memory of a live snapshot any more: the
  // chunks the writer has not taken yet are copied into the staging pool
  // (streamed when the pool is short, for at most slot_timeout_seconds),
  // and the chunks it is writing from that memory finish (for at most
  // write_timeout_seconds; past it the save is abandoned and the error names
  // the step, tier and file). Returns the seconds it blocked; 0 with no live
  // save pending. Call it before changing a live snapshot's memory.
  double Release();
  // Waits until every queued save is committed on the first tier (for at
  // most options.write_timeout_seconds), and on the slower tiers for at most
  // `drain_seconds` more, then for the removal of older steps (at most
  // write_timeout_seconds). Throws the first tier's error (naming the tier
  // and file); returns the other problems since the last Wait() — slower
  // tiers' failures, steps left behind at the deadline, steps that could not
  // be removed — as lines for the log: a slow or dead object store never
  // stops a run whose fast copy is safe.
  std::vector<std::string> Wait(double drain_seconds = 1e18);

  // The newest committed step on any tier.
  std::optional<int64_t> Latest();
  std::vector<Tier*> tiers() const;
  // Restores from the fastest valid copy (see restore.h). Rank 0 then moves
  // committed steps newer than the one restored into quarantine (they failed
  // verification, and the run is about to write those step numbers again).
  std::optional<RestoreResult> Restore(std::span<const TensorTarget> targets,
                                       std::optional<int64_t> max_step = std::nullopt);
  // The job's ranks changed (an elastic reshape): a save in flight will
  // never be joined by the ranks that left, so rank 0 stops waiting for
  // their parts now instead of at commit_timeout_seconds. The step stays
  // uncommitted; the engine must not be used for saves afterwards.
  void Abandon() { give_up_commit_ = true; }
  // Timings of saves whose pipeline finished, oldest first.
  std::vector<SaveTiming> TakeTimings();
  // Allocates and touches the staging pool now, and the writer's four gather
  // slots (otherwise the first Save does, and pays the page faults), and pins
  // the pool for `device` (otherwise done by the first Save from it).
  void Reserve(int64_t state_bytes, const std::shared_ptr<DeviceSource>& device = nullptr);
  int64_t pool_bytes() const;

 private:
  struct Slot;
  struct Job;
  class Pool;

  // The shard layout, header and index of a snapshot: everything but the bytes.
  std::shared_ptr<Job> MakeJob(const Snapshot& snap) const;
  // Save()'s copy: into slots taken all at once, or slot by slot.
  void CopyAll(std::span<const TensorSlice> slices, DeviceSource* device, Job& job,
               const std::vector<Slot*>& slots);
  void CopyStreamingToWriter(std::span<const TensorSlice> slices, DeviceSource* device, Job& job);
  // Release()'s copy: a live job's chunks from `first` on, into the pool.
  void CopyLiveRest(Job& job, int64_t first);
  // Release()'s wait for the writer's reads of a live job's memory.
  void AwaitLiveReads(Job& job);
  // The writer's live chunks: the caller's memory that holds chunk i; the
  // parts to write chunk i from (TakeLiveChunk: from that memory, but for
  // blocks copied into a slot from `gather_slot`, or gathered whole; it
  // counts the chunk in the job's timing); the parts as whole aligned
  // blocks of the memory where its address agrees with the file's offset
  // and the other blocks copied into `bounce` (returns the bytes copied; -1
  // when some would be and `bounce` is null); the pieces copied into `to`;
  // and the end of `n` reads of that memory.
  using Pieces = std::vector<std::span<const std::byte>>;
  Pieces LivePieces(const Job& job, int64_t i) const;
  struct LiveChunk {
    Slot* slot = nullptr;      // holds the copied blocks until written
    bool reads_memory = true;  // the write reads the caller's memory
  };
  LiveChunk TakeLiveChunk(Job& job, int64_t i, const std::function<Slot*()>& gather_slot,
                          std::vector<std::span<const char>>& parts);
  static int64_t SplitLiveChunk(const Pieces& pieces, char* bounce,
                                std::vector<std::span<const char>>& parts);
  void GatherLiveChunk(Job& job, const Pieces& pieces, Slot& to);
  void LiveReadsDone(Job& job, int n);
  // Tells the writer no more slots of `job` will come, then throws the
  // error that names the wait.
  [[noreturn]] void Abandon(Job& job);
  // Save()'s copy failed (a device error): `held` slots, not handed to the
  // writer, go back to the pool, the job is abandoned, and the error that
  // names the step and the cause is thrown.
  [[noreturn]] void AbandonCopy(Job& job, std::span<Slot* const> held, const std::exception& e);
  // Wait() ran out of time: abandons every save not yet through the first
  // tier and throws the error that names the one being written.
  [[noreturn]] void AbandonUnwritten(std::unique_lock<std::mutex>& lock);
  void MarkUnwrittenAbandoned();  // REQUIRES: mu_ held
  void ReleaseFilled(Job& job);   // an abandoned job's slots back to the pool
  bool Abandoned(const Job& job);
  void Writer();
  void Drainer();
  void WriteFirstTier(Job& job);
  void DrainTo(size_t tier, Job& job);
  // Rank 0: waits for every rank's index on `tier`, writes manifest, commits.
  void CommitStep(size_t tier, const Job& job);
  void Retain(size_t tier);
  // Retain(), with a failure reported (log, Wait()'s lines) rather than
  // thrown: the step just committed stands whatever became of older ones.
  void RetainOrWarn(size_t tier);
  // Tier::Remove, except that a step directory the engine did not write
  // (ForeignStep) is noted and left: false then.
  bool RemoveOrNote(Tier& tier, int64_t step);
  // Runs the first tier's retention whenever the writer asks for it, off
  // the writer's thread: removing a step can take long (on the Zen 5 VM's
  // ext4, mounted with online discard, `rm` of a 4 GB file took 1.4 s),
  // and the next save's writes need not wait for it.
  void Janitor();
  void CollectGarbage(size_t first, size_t last);
  bool TierDown(size_t tier);
  void Note(const std::string& line) const;
  void Committed(size_t tier, const Job& job) const;  // options_.on_committed, rank 0
  void Point(std::string_view point, size_t tier) const;
  void Fail(size_t tier, const std::string& what);

  std::vector<std::unique_ptr<Tier>> tiers_;
  EngineOptions options_;
  std::unique_ptr<Pool> pool_;
  // The writer's own slots (its thread alone uses them), for the chunks of a
  // live snapshot that are not one aligned run of memory; made with pool_.
  std::unique_ptr<Pool> gather_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> write_queue_, drain_queue_;
  std::set<int64_t> pinned_;                 // steps the drain still reads from tier 0
  int busy_ = 0;                             // jobs not yet through every tier
  int writing_ = 0;                          // jobs not yet through the first tier
  std::shared_ptr<Job> in_write_;            // the one the writer works on
  std::shared_ptr<Job> live_;                // the live save not yet released
  bool abandon_ = false;                     // the destructor gave up on a slow drain
  std::atomic<bool> give_up_commit_{false};  // Abandon()
  bool stop_ = false;
  std::exception_ptr first_tier_error_;
  std::vector<std::string> errors_;
  std::set<size_t> failed_tiers_;  // slower tiers that failed once: not logged or listed again
  std::vector<SaveTiming> timings_;
  // Guarded by mu_: the first tier's retention is due (requests coalesce:
  // one pass keeps the newest steps, whatever asked), or running.
  bool retain_due_ = false, retaining_ = false;
  std::thread writer_, drainer_, janitor_;
};

}  // namespace fmstack::ckpt
