// comm: a Communicator for the ranks of one node, through one shared-memory
// segment — fmstack's stand-in for NVLink inside a node, since Debian's Gloo
// has only TCP. Each rank owns a slot; a collective moves a window of data
// through the slots between barriers. The barrier spins briefly, then sleeps
// on a futex in the segment, checking on the way whether any peer process
// has died (so a dead peer is named within milliseconds) or the group was
// aborted. Where the kernel allows it and the ranks do not outnumber the
// cores, larger all-gathers, reduce-scatters, broadcasts and all-to-alls
// skip the slots: each rank reads its peers' buffers directly
// (process_vm_readv). Reduce stays on the slots, and so does all-reduce
// below 256 KiB; from there all-reduce times both ways on its own calls and
// keeps the faster (path_tuner.h), since which one wins changed with the
// state of the machine (docs/comm.md); where the ranks outnumber the cores
// or the kernel refuses cross-memory attach, it times two sizes of window
// through the slots instead (StagedBytes; both in shm_tuning.cc).
// FMSTACK_SHM_CMA_REDUCE=1 sends everything through cross-memory attach.
// Small messages (up to 64 KiB where every rank has a core; ranks x bytes
// up to 16 KiB where they outnumber the cores) skip the barriers instead:
// one post and one wait (shm_small.cc; FMSTACK_SHM_POST_WAIT=0 turns that
// off, =1 on everywhere).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/path_tuner.h"
#include "comm/tcp_store.h"

namespace fmstack::comm {

struct ShmOptions {
  std::shared_ptr<TcpStore> store;  // to publish the segment's name
  std::string prefix;               // store namespace, e.g. "gen0/node1"
  std::string segment;              // shm name without '/', unique per job+node+generation
  int rank = 0, size = 1;           // local rank and ranks on this node
  std::vector<int> job_ranks;       // local rank -> job rank, for messages
  int64_t generation = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  size_t slot_bytes = 4 << 20;
  // What a rank stages per pass of a reduction or all-to-all; 0: local rank
  // 0 sizes it from the L3 cache (WindowFor) and publishes it in the segment.
  size_t window_bytes = 0;
  // A second, smaller window that all-reduce times against the first on its
  // own calls, keeping the faster per size class (path_tuner.h). 0: the old
  // fixed 512 KiB when the window was sized from the L3 and is larger than
  // that; none when the window was asked for. Local rank 0's is published.
  size_t alt_window_bytes = 0;
  // What the single-copy path reads from a peer per system call before it
  // sums; 0: CmaChunkFor(size). Local rank 0's is published.
  size_t cma_chunk_bytes = 0;
  // A second, shorter read that all-reduce times against the first on its
  // own calls, keeping the faster per size class (path_tuner.h). 0: 256 KiB
  // when the read was not asked for and is longer; none when it was asked
  // for. Local rank 0's is published.
  size_t alt_cma_chunk_bytes = 0;
};

class ShmCommunicator final : public Communicator {
 public:
  explicit ShmCommunicator(ShmOptions options);
  ~ShmCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::string name() const override { return "shm"; }

  void AllReduce(View buf, ReduceOp op) override;
  void ReduceScatter(View in, View out, ReduceOp op) override;
  void AllGather(View in, View out) override;
  void Broadcast(View buf, int root) override;
  void AllToAll(View in, View out) override;
  void Barrier() override;
  // Not carried by the segment: throws CommError. The hierarchical
  // communicator, which owns the node segments, sends point to point over Gloo.
  void SendRecv(View send, int to, View recv, int from) override;
  void Abort(const std::string& reason) override;
  // Aborts with a message for the peers as is, blaming failed_rank.
  void Abort(const std::string& message, int failed_rank);

  // Sum (or mean) of every rank's buf lands in root's buf; others unchanged.
  void Reduce(View buf, ReduceOp op, int root);
  // Rank r's data already sits at ranges[r] of out; afterwards all of it does.
  void AllGatherRanges(View out, const std::vector<Range>& ranges);

  // The bytes a reduction or all-to-all stages per pass when none is asked
  // for (see StagedBytes), `running` being min(local ranks, cores).
  static size_t WindowFor(int running, size_t slot_bytes, size_t l3_bytes);
  size_t window_bytes() const { return window_bytes_; }
  size_t alt_window_bytes() const { return alt_window_bytes_; }  // 0: not tuned
  // What the single-copy path reads from a peer at a time when none is
  // asked for (kCmaScratchBytes below).
  static size_t CmaChunkFor(int ranks);
  size_t cma_chunk_bytes() const { return cma_chunk_bytes_; }
  size_t alt_cma_chunk_bytes() const { return alt_cma_chunk_bytes_; }  // 0: not tuned

 private:
  struct Header;
  static size_t HeaderBytes();
  std::byte* Slot(int r) const;
  std::byte* Common() const { return Slot(0); }
  void Wait(const char* op);
  void CheckAborted(const char* op) const;
  int JobRank(int local) const;
  // Reductions go window by window: each rank copies into its slot the
  // shards of the window that its peers reduce (its own shard it reads from
  // its buffer), sums its shard of every rank's window into its slot, and
  // then every rank that wants the result copies all the shards out.
  void ReduceWindow(View buf, ReduceOp op, int root, bool all, size_t window_bytes);
  // What one rank stages in its slot per pass of a reduction or all-to-all:
  // little enough that what one step writes is still in cache when the next
  // reads it. Only min(ranks, cores) ranks run at once, each with its window
  // staged and its input's window in flight, so the window is a quarter of
  // the L3 per running rank: half the cache for those two, half left to the
  // peers' shards, the program and, on a VM, the neighbours. That is 1 MiB
  // on a 2-core VM with an 8 MiB L3, where the whole 4 MiB slot as the window
  // dropped 2-rank allreduce from 6 GB/s busbw at 1 MiB to 1.7 GB/s from
  // 4 MiB on (4 and 8 ranks lost too; 256 KiB to 1 MiB ran alike), and the
  // whole slot on one with a 32 MiB L3, where 4 ranks ran 2.5-3.2x faster
  // than with 512 KiB from 4 MiB on (docs/comm.md). The L3 the kernel
  // reports is not always what a VM gets: the 2-core Intel VM reports 260
  // MiB, and there 8 ranks ran 1.2-1.3 GB/s busbw with the whole slot
  // against 1.45-1.55 with 512 KiB from 16 MiB on, where 4 ranks on the same
  // VM ran faster with the whole slot. So all-reduce times the L3's window
  // against the old 512 KiB on its own calls and keeps the faster
  // (TunedWindowAllReduce). Reduce-scatter,
  // all-gather and broadcast keep the whole slot: there the extra barriers
  // cost more than the cache saves (8 ranks on 2 cores, reduce-scatter at
  // 4 MiB: 0.43 against 0.57 GB/s).
  size_t StagedBytes() const { return window_bytes_; }
  static constexpr size_t kWindowBytes = 512 << 10;  // when the L3's size is unknown
  static constexpr size_t kMinAutoWindowBytes = 256 << 10;
  static constexpr size_t kMinWindowBytes = 4 << 10;  // the least FMSTACK_SHM_WINDOW_BYTES
  size_t ResolveWindow() const;  // local rank 0: options_.window_bytes, checked, or WindowFor
  // Small reductions (every rank reads at most kDirectReadBytes, all the
  // slots together): every rank that wants the result sums all the slots
  // itself, in rank order as ReduceWindow's shards do (the same bits), so a
  // reduction waits twice instead of three times. The barrier is most of the
  // cost there, above all with more ranks than cores (4 ranks on 2 cores,
  // 1 KiB: 0.34 against 0.21 GB/s busbw). With a core per rank the bound is
  // higher: 2 ranks on 2 cores, 16-256 KiB, ran at 1.8-6.9 GB/s busbw this
  // way in five of six alternated runs (the sixth 0.2-2.1) against 0.9-1.4
  // through the window (Zen 3 VM; against OpenMPI in the same runs, 64 KiB
  // at 1.18-1.21x against 0.39-0.55x). With more ranks than cores the
  // larger bound was not measured clearly better, so it keeps the small one.
  void DirectReduce(View buf, ReduceOp op, int root, bool all, const char* name);
  static constexpr size_t kDirectReadBytes = 16 << 10;
  static constexpr size_t kDirectReadBytesCorePerRank = 512 << 10;
  // Whether every rank may read all ranks' copies of `bytes` (the bound above).
  bool ReadsEveryCopy(size_t bytes) const {
    const size_t bound = oversubscribed_ ? kDirectReadBytes : kDirectReadBytesCorePerRank;
    return bytes * static_cast<size_t>(options_.size) <= bound;
  }
  bool UseDirect(size_t bytes) const {
    return ReadsEveryCopy(bytes) && bytes <= options_.slot_bytes;
  }

  // Messages up to kSmallBytes skip the barriers (shm_small.cc): each rank
  // copies its whole input into its own region and raises its sequence
  // number; every rank then combines what all ranks posted. When ranks
  // outnumber cores, reductions up to kMidBytes take this path too, with a
  // second round: each rank sums its shard into the result half of its
  // region and posts again. It moves about 3x the bytes of the single-copy
  // path but waits twice instead of three times, and with more ranks than
  // cores every wait is a trip through the scheduler (4 ranks on 2 cores,
  // 1 MiB: 1.5x OpenMPI against 0.56x; 2 ranks on 2 cores: 0.59x against
  // 0.89x, so not there). Two regions per rank alternate: by
  // the time a rank starts operation k, every peer has started k - 1, so none
  // still reads its region of k - 2.
  // By default, where every rank has a core: 2 ranks on the Zen 4 VM, 8
  // alternated runs, 4 KiB allreduce 0.88-1.30x OpenMPI against 0.73-1.06x
  // on the two barriers. With more ranks than cores, only up to the direct
  // path's bound (ranks x bytes <= 16 KiB): 4 ranks on 2 cores, 1 KiB,
  // 0.30-0.49 GB/s busbw against 0.19-0.26 (8 ranks 0.12-0.18 against
  // 0.09-0.12), where from 64 KiB the regions lost (0.81-2.04x OpenMPI
  // against 1.95-3.66x); the two-round reductions only with "1".
  static constexpr size_t kSmallBytes = 64 << 10;
  static constexpr size_t kMidBytes = 1 << 20;
  enum class PostWait { kOff, kDefault, kEverywhere };  // "0", unset, "1"
  static PostWait PostWaitSetting();
  bool UseSmall(size_t bytes) const {
    if (post_wait_ == PostWait::kOff || bytes > kSmallBytes) return false;
    return !oversubscribed_ || post_wait_ == PostWait::kEverywhere || ReadsEveryCopy(bytes);
  }
  bool UseMid(size_t bytes) const {
    return post_wait_ == PostWait::kEverywhere && oversubscribed_ && bytes <= kMidBytes;
  }
  std::byte* Region(int r, uint32_t op) const;
  // Starts the next operation: posts this rank's bytes and waits for every
  // peer's; afterwards small_srcs_[r] is rank r's posted input.
  void PostAndGather(const std::byte* in, size_t bytes, const char* op);
  // Raises this rank's sequence number / waits until every peer's reaches ours.
  void Post();
  void WaitAll(const char* op);
  void WaitPosted(int r, uint32_t seq, const char* op,
                  std::chrono::steady_clock::time_point deadline);
  void SmallReduce(View buf, ReduceOp op, int root, bool all);
  void MidReduce(View buf, ReduceOp op, int root, bool all);
  void SmallReduceScatter(View in, View out, Range mine, ReduceOp op);
  void SmallAllGatherRanges(View out, const std::vector<Range>& ranges);
  void SmallBroadcast(View buf, int root);
  void SmallAllToAll(View in, View out);
  uint32_t small_seq_ = 0;  // posts made
  uint32_t small_ops_ = 0;  // operations started (their parity picks the region)
  std::vector<const std::byte*> small_srcs_;

  // The single-copy path (process_vm_readv from the peers' own buffers).
  static constexpr size_t kCmaMinBytes = 64 << 10;
  // Peers' data is read this much at a time, then summed. Which length
  // wins depends on the machine and its state. In the Zen 4 VM's slow state
  // (a core-to-core round trip of 340-570 ns against 70-120), 2-rank
  // allreduce through cross-memory attach ran 16 MiB at 2.4-2.6 GB/s busbw
  // in 256 KiB and 1 MiB reads, 2.7 in 2 MiB, 3.1 in 4 MiB and 4.1-4.3 in
  // one read of the whole 8 MiB share, where OpenMPI, which reads a share at
  // once, ran 3.8-4.3. In its fast state 256 KiB ran 5.5-5.9, 1 MiB 6.1-6.4
  // and 8 MiB 5.0-5.2; on an Intel VM (2 MiB of L2 a core) 256 KiB and 1 MiB
  // 5.9-6.6 and 8 MiB 5.3-5.5, and at 4 MiB 256 KiB was ahead (docs/comm.md,
  // "Reads of the single-copy path"). So the first read is as long as
  // kCmaScratchBytes for all the peers allows, from 256 KiB to 8 MiB (8 MiB
  // for 2 and 3 ranks, 2.3 MiB for 8, 256 KiB from 65 on), and all-reduce
  // times it against the 256 KiB reads of before on its own calls.
  static constexpr size_t kCmaScratchBytes = 16 << 20;
  static constexpr size_t kCmaMinChunkBytes = 256 << 10;
  static constexpr size_t kCmaMaxChunkBytes = 8 << 20;
  static constexpr size_t kCmaAltChunkBytes = 256 << 10;
  static constexpr size_t kCmaMinAskBytes = 4 << 10;  // the least FMSTACK_SHM_CMA_CHUNK_BYTES
  size_t ResolveCmaChunk() const;     // options_.cma_chunk_bytes, checked, or CmaChunkFor
  size_t ResolveAltCmaChunk() const;  // options_.alt_cma_chunk_bytes, checked, or the default
  // Not when ranks outnumber cores: there every barrier sleeps, and the
  // slots beat cross-memory attach at most sizes (4 and 8 ranks on 2 cores:
  // all-gather and all-to-all 1.5-7x from 64 KiB to 1 MiB, docs/comm.md).
  bool UseCma(size_t bytes) const {
    return cma_ && (!oversubscribed_ || cma_everywhere_) && bytes >= kCmaMinBytes;
  }
  bool UseCmaReduce(size_t bytes) const { return cma_everywhere_ && UseCma(bytes); }
  // From 256 KiB, with cross-memory attach available and the ranks not
  // outnumbering the cores, allreduce takes whichever of the slots and
  // CmaReduce its tuner timed faster this period (path_tuner.h). Both sum
  // every element in rank order, so the bits do not depend on the choice.
  // FMSTACK_SHM_CMA_REDUCE=1 or FMSTACK_SHM_NO_CMA=1 fixes the way instead.
  static constexpr size_t kTunedReduceMinBytes = 256 << 10;
  bool TunedReduce(size_t bytes) const {
    return cma_ && !oversubscribed_ && !cma_everywhere_ && bytes >= kTunedReduceMinBytes;
  }
  void TunedAllReduce(View buf, ReduceOp op);
  void TunedWindowAllReduce(View buf, ReduceOp op);
  void TunedCmaAllReduce(View buf, ReduceOp op);
  // One call of a size class the way `tuner` plans it: exploring calls
  // alternate run(false) and run(true) and local rank 0 times them; the call
  // after exploring first publishes rank 0's decision in choices[class].
  template <class Run>
  void RunTuned(PathTuner& tuner, std::atomic<int32_t>* choices, size_t bytes, const Run& run);
  void ProbeCrossMemoryAttach();
  const std::byte* PeerBuffer(int r) const;
  void ReadPeer(int r, const std::byte* remote, std::byte* local, size_t bytes, const char* op);
  void SumPeersInto(View buf, Range part, std::byte* dst, ReduceOp op, size_t chunk_bytes,
                    const char* op_name);
  void CmaReduce(View buf, ReduceOp op, int root, bool all, size_t chunk_bytes);

  ShmOptions options_;
  Header* header_ = nullptr;
  size_t mapped_bytes_ = 0;
  size_t window_bytes_ = kWindowBytes;  // as published in the segment by local rank 0
  size_t alt_window_bytes_ = 0;         // likewise; 0: all-reduce does not tune the window
  size_t ResolveAltWindow() const;      // local rank 0: alt_window_bytes, checked, or the default
  bool cma_ = false;
  // FMSTACK_SHM_CMA_REDUCE=1: cross-memory attach for every collective over
  // 64 KiB, reductions too, whatever the rank count (comm_test runs it).
  bool cma_everywhere_ = false;
  bool oversubscribed_ = false;              // more ranks than cores
  PostWait post_wait_ = PostWait::kDefault;  // the paths of shm_small.cc
  size_t region_bytes_ = 0;                  // per rank and parity: input, then (mid path) result
  int spin_limit_ = 2000;                    // pause-loop iterations before yielding in a barrier
  // sched_yield()s after that before sleeping on the futex. With more ranks
  // than cores the rank a waiter waits for is often queued behind it on
  // its own core, and a yield hands that core over at once where a sleep
  // needs a wake-up: 4 ranks on 2 cores, 1-4 KiB allreduce, 0.31-0.32 and
  // 0.75-0.77 GB/s busbw with 1000 yields in two runs, against 0.11-0.31
  // and 0.28-0.76 with 10, which fell to 0.52x OpenMPI at 1 KiB in one of
  // the two (Intel VM; against OpenMPI, at least as fast at 26 of 28 sizes
  // from 1 KiB to 4 MiB, 4 and 8 ranks, and within 7% at the others;
  // docs/comm.md).
  int yield_limit_ = 10;
  size_t cma_chunk_bytes_ = kCmaMinChunkBytes;  // local rank 0's, like the windows
  size_t alt_cma_chunk_bytes_ = 0;              // 0: all-reduce does not tune the read
  std::vector<std::byte> scratch_;              // peers' chunks on the single-copy path
  PathTuner reduce_tuner_;
  PathTuner window_tuner_{PathTuner::Statistic::kMedian};
  PathTuner chunk_tuner_;
};

}  // namespace fmstack::comm
