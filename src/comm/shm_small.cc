// The shared-memory communicator's path for small messages (up to
// ShmCommunicator::kSmallBytes). A barrier costs a round of cache-line
// traffic among all ranks, and the slot path takes three per collective; a
// gradient bucket's tail or a step's control words are a few KiB, where those
// rounds are most of the time. Here a collective is one post and one wait:
// every rank copies its whole input into its own region, raises its sequence
// number, waits for everyone else's, and computes its own result from all
// regions. Sums run in rank order, as on the other paths, so every rank gets
// the same bits.
#include <fmt/format.h>
#include <sched.h>

#include <cstring>

#include "comm/reduce.h"
#include "comm/shm_segment.h"

namespace fmstack::comm {

std::byte* ShmCommunicator::Region(int r, uint32_t op) const {
  const size_t slots = static_cast<size_t>(options_.size) * options_.slot_bytes;
  return reinterpret_cast<std::byte*>(header_) + HeaderBytes() + slots +
         (static_cast<size_t>(r) * 2 + (op & 1)) * region_bytes_;
}

// Spins while the peer is probably on its way, then sleeps on its sequence
// word; checks for an abort, a dead peer and the deadline as Wait does.
void ShmCommunicator::WaitPosted(int r, uint32_t seq, const char* op,
                                 std::chrono::steady_clock::time_point deadline) {
  std::atomic<uint32_t>& word = header_->posted[r].seq;
  // Sequence numbers wrap; a peer is at most one operation ahead or behind.
  const auto reached = [&] {
    return static_cast<int32_t>(word.load(std::memory_order_acquire) - seq) >= 0;
  };
  for (int spin = 0; spin < spin_limit_; ++spin) {
    if (reached()) return;
    __builtin_ia32_pause();
  }
  for (int i = 0; i < yield_limit_; ++i) {  // as the barrier waits (yield_limit_'s comment)
    if (reached()) return;
    sched_yield();
  }
  auto next_check = std::chrono::steady_clock::now();
  while (true) {
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    if (static_cast<int32_t>(seen - seq) < 0)
      FutexWait(&word, seen, std::chrono::microseconds(2000));
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached()) return;
    CheckAborted(op);
    const auto now = std::chrono::steady_clock::now();
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(20);
    if (ProcessDead(header_->pids[r].load())) {
      if (reached()) return;  // it posted, then exited
      const std::string why = fmt::format("rank {} (local rank {}, pid {}) died", JobRank(r), r,
                                          header_->pids[r].load());
      Abort(why, JobRank(r));
      throw CommError(fmt::format("{} on rank {}: {}", op, JobRank(options_.rank), why),
                      JobRank(r));
    }
    if (now > deadline) {
      throw CommError(fmt::format("{} on rank {}: timed out after {} ms waiting for rank {} of "
                                  "this node (every process is alive: one may be hung)",
                                  op, JobRank(options_.rank), options_.timeout.count(), JobRank(r)),
                      -1);
    }
  }
}

void ShmCommunicator::Post() {
  std::atomic<uint32_t>& word = header_->posted[options_.rank].seq;
  word.store(++small_seq_, std::memory_order_seq_cst);
  if (header_->sleepers.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&word);
}

// One deadline for all the peers: waiting for each in turn with a timeout
// of its own could take (ranks - 1) times the timeout.
void ShmCommunicator::WaitAll(const char* op) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (int r = 0; r < options_.size; ++r) {
    if (r != options_.rank) WaitPosted(r, small_seq_, op, deadline);
  }
}

void ShmCommunicator::PostAndGather(const std::byte* in, size_t bytes, const char* op) {
  CheckAborted(op);
  const int P = options_.size;
  const uint32_t k = ++small_ops_;
  if (bytes > 0) std::memcpy(Region(options_.rank, k), in, bytes);
  Post();
  WaitAll(op);
  small_srcs_.resize(P);
  for (int r = 0; r < P; ++r) small_srcs_[r] = Region(r, k);
}

void ShmCommunicator::SmallReduce(View buf, ReduceOp op, int root, bool all) {
  PostAndGather(buf.data, buf.bytes(), all ? "allreduce" : "reduce");
  if (!all && options_.rank != root) return;
  SumOf(buf.data, small_srcs_, buf.count, buf.dtype);
  if (op == ReduceOp::kAvg) ScaleInPlace(buf.data, buf.count, buf.dtype, 1.0 / options_.size);
}

// Reduce-scatter, then all-gather, through the regions: each rank sums its
// shard of every input into the result half of its own region, posts, and
// copies every shard from its owner. Two rounds; the CMA path takes three
// barriers, which cost most when ranks outnumber cores.
void ShmCommunicator::MidReduce(View buf, ReduceOp op, int root, bool all) {
  const char* name = all ? "allreduce" : "reduce";
  PostAndGather(buf.data, buf.bytes(), name);
  const int P = options_.size, me = options_.rank;
  const size_t es = DTypeSize(buf.dtype);
  const Range mine = ShardOf(buf.count, P, me);
  std::vector<const std::byte*> shard(P);
  for (int r = 0; r < P; ++r) shard[r] = small_srcs_[r] + mine.begin * es;
  std::byte* result = Region(me, small_ops_) + kMidBytes + mine.begin * es;
  SumOf(result, shard, mine.count, buf.dtype);
  if (op == ReduceOp::kAvg) ScaleInPlace(result, mine.count, buf.dtype, 1.0 / P);
  Post();
  if (!all && me != root) return;
  WaitAll(name);
  for (int r = 0; r < P; ++r) {
    const Range g = ShardOf(buf.count, P, r);
    std::memcpy(buf.data + g.begin * es, Region(r, small_ops_) + kMidBytes + g.begin * es,
                g.count * es);
  }
}

void ShmCommunicator::SmallReduceScatter(View in, View out, Range mine, ReduceOp op) {
  PostAndGather(in.data, in.bytes(), "reduce_scatter");
  const size_t es = DTypeSize(in.dtype);
  std::vector<const std::byte*> shard(small_srcs_.size());
  for (size_t r = 0; r < shard.size(); ++r) shard[r] = small_srcs_[r] + mine.begin * es;
  SumOf(out.data, shard, mine.count, in.dtype);
  if (op == ReduceOp::kAvg) ScaleInPlace(out.data, mine.count, in.dtype, 1.0 / options_.size);
}

// Rank r posts only its own range; each rank copies every range into place.
void ShmCommunicator::SmallAllGatherRanges(View out, const std::vector<Range>& ranges) {
  const size_t es = DTypeSize(out.dtype);
  const Range mine = ranges[options_.rank];
  PostAndGather(out.data + mine.begin * es, mine.count * es, "allgather");
  for (int r = 0; r < options_.size; ++r) {
    if (r != options_.rank && ranges[r].count > 0)
      std::memcpy(out.data + ranges[r].begin * es, small_srcs_[r], ranges[r].count * es);
  }
}

// Every rank posts (the others nothing), so that the regions' reuse stays safe.
void ShmCommunicator::SmallBroadcast(View buf, int root) {
  const bool me = options_.rank == root;
  PostAndGather(buf.data, me ? buf.bytes() : 0, "broadcast");
  if (!me) std::memcpy(buf.data, small_srcs_[root], buf.bytes());
}

void ShmCommunicator::SmallAllToAll(View in, View out) {
  PostAndGather(in.data, in.bytes(), "alltoall");
  const int P = options_.size, me = options_.rank;
  const size_t es = DTypeSize(in.dtype), block = in.count / P;
  for (int j = 0; j < P; ++j)
    std::memcpy(out.data + j * block * es, small_srcs_[j] + me * block * es, block * es);
}

}  // namespace fmstack::comm
