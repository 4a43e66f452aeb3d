// comm: a Communicator over our own TCP mesh (tcp_mesh.h), the default
// between nodes. Each collective is a few steps of messages that progress
// together in the calling thread:
//   - allreduce: recursive doubling (log2 n exchanges of the whole buffer)
//     up to TcpOptions::doubling_max_bytes when n is a power of two, else a
//     reduce-scatter then an allgather, window by window; with a power of
//     two, larger ones time two window sizes on their own calls and keep the
//     faster (path_tuner.h), since which wins differs between machines,
//     and from 1 MiB the larger of the two is a pipeline of chunks, every
//     chunk's steps in one Run, each starting as its previous one arrives;
//   - reduce-scatter and allgather (uneven ranges too): recursive halving
//     and doubling when n is a power of two (log2 n steps), else rings
//     (n - 1 steps); reductions take each piece as it arrives;
//   - broadcast: a binomial tree; all-to-all and send/recv: every message
//     at once; barrier: dissemination.
// Every rank gets the same bits: recursive doubling adds a + b on one side
// and b + a on the other, and halving and the ring sum each piece along one
// path and then copy it. GlooCommunicator is the reference it is tested
// against.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/abort_latch.h"
#include "comm/communicator.h"
#include "comm/path_tuner.h"
#include "comm/tcp_mesh.h"
#include "comm/tcp_store.h"

namespace fmstack::comm {

// The mesh's options (group, address, timeout, how waits spin), and:
struct TcpOptions : TcpMeshOptions {
  std::shared_ptr<TcpStore> store;
  int64_t generation = 0;
  // Recursive doubling sends the whole buffer log2 n times; the ring sends
  // 2 (n - 1) / n of it in 2 (n - 1) steps. Below this size latency wins.
  size_t doubling_max_bytes = 64 << 10;
  // With a power-of-two number of ranks, reduce-scatter and allgather (and
  // so a larger allreduce) up to this size halve and double: log2 n steps
  // instead of the ring's n - 1, the same bytes.
  size_t halving_max_bytes = SIZE_MAX;
  size_t reduce_chunk_bytes = 64 << 10;  // reductions take arrivals in pieces of this
  // A larger allreduce runs as a reduce-scatter and an allgather on each
  // window of about this size in turn, so that its data stays in cache.
  size_t window_bytes = 512 << 10;
  // With a power-of-two number of ranks, where the window does not change
  // the bits (halving sums each element along one path), an allreduce
  // larger than this also runs in windows of this size on some of its own
  // calls, timed against window_bytes, and keeps the faster per size class
  // (path_tuner.h); 0: never. On the 2-vCPU Zen 4 VM (2026-11-28, frames
  // still a bare 8-byte length), 2 ranks on loopback at 1-4 MiB ran 3.0-3.6
  // GB/s busbw with 128 KiB windows against 1.9-2.5 with 512 KiB, where 8
  // ranks ran faster with 512 KiB and an AMD Zen 1 VM had found 256 KiB
  // slower than 512 KiB (docs/comm.md).
  size_t alt_window_bytes = 128 << 10;
  // With a power-of-two number of ranks, an allreduce of at least
  // kPipelineMinChunks chunks of this size runs halving and doubling on
  // them all in one pipeline (PipelinedAllReduce) instead of windows,
  // timed against alt_window_bytes; 0 (the default): never. Off because
  // it stopped paying once frames kept the buffers' alignment (tcp_mesh.h):
  // on the 2-vCPU Zen 4 VM, 2 ranks with 256 KiB chunks ran 0.9-1.0x the
  // windows' busbw at 4 MiB and 0.6-1.0x at 16-64 MiB, where it had run
  // 1.2-1.8x with the bare 8-byte length. Never where the mesh's ranks
  // outnumber the cores (4 ranks 0.58-1.08x, 8 ranks 0.79-0.94x from 4 MiB).
  size_t pipeline_chunk_bytes = 0;
  // One mesh Run covers at most this much of a pipelined allreduce, so
  // that the Run's one deadline still scales with the buffer.
  size_t pipeline_run_bytes = 32 << 20;
  // Tune windows and pipeline even where the mesh's ranks outnumber the
  // cores (below, both are off there): for tests that must exercise them
  // on any machine.
  bool adapt_when_crowded = false;
};

// What a receive reduces into as it arrives: dst += src, element-wise.
struct ReduceInto {
  std::byte* dst;
  const std::byte* src;
  DType dtype;
};

class TcpCommunicator final : public RangeCommunicator {
 public:
  // Connects the mesh through the store; throws CommError on failure.
  explicit TcpCommunicator(TcpOptions options);
  ~TcpCommunicator() override;

  int rank() const override { return o_.rank; }
  int size() const override { return o_.size; }
  std::string name() const override { return "tcp"; }

  void AllReduce(View buf, ReduceOp op) override;
  void ReduceScatter(View in, View out, ReduceOp op) override;
  void AllGather(View in, View out) override;
  void Broadcast(View buf, int root) override;
  void AllToAll(View in, View out) override;
  void Barrier() override;
  void SendRecv(View send, int to, View recv, int from) override;
  void Abort(const std::string& reason) override;
  void AllGatherRanges(View in, View out, const std::vector<Range>& ranges) override;
  void ReduceScatterRanges(View buf, const std::vector<Range>& ranges, ReduceOp op) override;

 private:
  template <typename Fn>
  void Guarded(const char* op, Fn&& fn);
  [[noreturn]] void Fail(const char* op, const std::string& transport_error);
  int JobRank(int group_rank) const;
  void RecursiveDoubling(View buf);
  void WindowedAllReduce(View buf, size_t window_bytes);
  bool MayAdapt(size_t bytes) const;
  bool TunesWindow(size_t bytes) const;
  void TunedWindowAllReduce(View buf);
  bool UsesPipeline(size_t bytes) const;
  void MainWayAllReduce(View buf);
  void PipelinedAllReduce(View buf);
  void PipelinedSegment(View buf, size_t chunks);
  void BroadcastSteps(std::byte* data, size_t bytes, int root);
  void BarrierSteps();
  bool ByHalving(View buf, const std::vector<Range>& ranges) const;
  void ReduceScatterSteps(View buf, const std::vector<Range>& ranges);
  void AllGatherSteps(View buf, const std::vector<Range>& ranges);
  void HalvingReduceScatter(View buf, const std::vector<Range>& ranges);
  void DoublingAllGather(View buf, const std::vector<Range>& ranges);
  void RingReduceScatter(View buf, const std::vector<Range>& ranges);
  void RingAllGather(View buf, const std::vector<Range>& ranges);

  TcpOptions o_;
  std::unique_ptr<TcpMesh> mesh_;
  AbortLatch abort_;
  std::vector<std::byte> scratch_;
  // Fewer chunks than this leave the pipeline mostly filling and draining:
  // in bench comm, 1 and 2 chunks of 128-256 KiB ran 0.5-0.7x one window
  // of the same bytes (docs/comm.md).
  static constexpr size_t kPipelineMinChunks = 4;
  static constexpr size_t kMinPipelineChunkBytes = 4 << 10;
  static constexpr size_t kMaxPipelineChunkBytes = 64 << 20;
  std::vector<Transfer> pipe_;       // PipelinedSegment's transfers
  std::vector<ReduceInto> targets_;  // and its reductions' targets
  // Per size class: the second way is the alt window.
  PathTuner window_tuner_{PathTuner::Statistic::kMedian};
};

}  // namespace fmstack::comm
