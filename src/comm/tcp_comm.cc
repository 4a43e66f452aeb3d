#include "comm/tcp_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "comm/reduce.h"

namespace fmstack::comm {
namespace {

void AddArrived(void* ctx, size_t begin, size_t end) {
  const auto& a = *static_cast<const ReduceInto*>(ctx);
  const size_t es = DTypeSize(a.dtype);
  AddInto(a.dst + begin, a.src + begin, (end - begin) / es, a.dtype);
}

Transfer Send(int peer, std::byte* data, size_t bytes) {
  Transfer t;
  t.kind = Transfer::kSend;
  t.peer = peer;
  t.data = data;
  t.bytes = bytes;
  return t;
}

Transfer Recv(int peer, std::byte* data, size_t bytes) {
  Transfer t = Send(peer, data, bytes);
  t.kind = Transfer::kRecv;
  return t;
}

std::vector<Range> Shards(size_t n, int parts) {
  std::vector<Range> ranges(static_cast<size_t>(parts));
  for (int i = 0; i < parts; ++i) ranges[i] = ShardOf(n, parts, i);
  return ranges;
}

// Ranges first .. first + count - 1 as one, for ranges in rank order
// without gaps.
Range SpanOf(const std::vector<Range>& ranges, int first, int count) {
  const Range& a = ranges[static_cast<size_t>(first)];
  const Range& b = ranges[static_cast<size_t>(first + count - 1)];
  return Range{a.begin, b.end() - a.begin};
}

// Elements [first, first + count) of a chunk of n elements cut in `parts`
// shards, as one range.
Range ShardSpan(size_t n, int parts, int first, int count) {
  const Range a = ShardOf(n, parts, first);
  const Range b = ShardOf(n, parts, first + count - 1);
  return Range{a.begin, b.end() - a.begin};
}

}  // namespace

TcpCommunicator::TcpCommunicator(TcpOptions options) : o_(std::move(options)) {
  if (o_.pipeline_chunk_bytes != 0 && (o_.pipeline_chunk_bytes < kMinPipelineChunkBytes ||
                                       o_.pipeline_chunk_bytes > kMaxPipelineChunkBytes)) {
    throw CommError(
        fmt::format("tcp: a pipeline chunk of {} bytes (FMSTACK_TCP_PIPELINE_BYTES) "
                    "is outside [{}, {}]; 0 turns the pipeline off",
                    o_.pipeline_chunk_bytes, kMinPipelineChunkBytes, kMaxPipelineChunkBytes),
        -1);
  }
  if (o_.size <= 1) return;
  try {
    mesh_ = std::make_unique<TcpMesh>(*o_.store, static_cast<const TcpMeshOptions&>(o_));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("tcp: rank {} of {} could not connect group '{}' on {}: {}",
                                JobRank(o_.rank), o_.size, o_.prefix, o_.hostname, e.what()),
                    -1);
  }
}

TcpCommunicator::~TcpCommunicator() = default;

int TcpCommunicator::JobRank(int group_rank) const {
  return o_.job_ranks.empty() ? group_rank : o_.job_ranks[static_cast<size_t>(group_rank)];
}

void TcpCommunicator::Abort(const std::string& reason) {
  if (!abort_.Trip(reason)) return;
  // Shutting our side of every connection down fails this rank's pending
  // call and, within milliseconds, every peer's call that waits on it.
  if (mesh_) mesh_->Shutdown();
}

void TcpCommunicator::Fail(const char* op, const std::string& transport_error) {
  Abort(fmt::format("{} failed", op));
  throw CollectiveFailure(*o_.store, o_.generation, op, JobRank(o_.rank), o_.prefix, "tcp",
                          transport_error);
}

template <typename Fn>
void TcpCommunicator::Guarded(const char* op, Fn&& fn) {
  abort_.ThrowIfTripped(op, JobRank(o_.rank));
  if (o_.size <= 1) return;
  try {
    fn();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    Fail(op, e.what());
  }
}

void TcpCommunicator::AllReduce(View buf, ReduceOp op) {
  Guarded("allreduce", [&] {
    if (buf.count == 0) return;
    if (std::has_single_bit(static_cast<unsigned>(size())) &&
        buf.bytes() <= o_.doubling_max_bytes) {
      RecursiveDoubling(buf);
    } else if (TunesWindow(buf.bytes())) {
      TunedWindowAllReduce(buf);
    } else {
      MainWayAllReduce(buf);
    }
  });
  if (op == ReduceOp::kAvg) ScaleInPlace(buf.data, buf.count, buf.dtype, 1.0 / size());
}

// Window by window: a whole 4 MiB buffer's reduce-scatter and its scratch
// no longer fit in cache next to the sockets' buffers, and ran at 0.6x the
// speed of 512 KiB windows (docs/comm.md).
void TcpCommunicator::WindowedAllReduce(View buf, size_t window_bytes) {
  const size_t w_bytes = std::max<size_t>(window_bytes, 1);
  const size_t windows = buf.bytes() / w_bytes + (buf.bytes() % w_bytes != 0 ? 1 : 0);
  for (size_t w = 0; w < windows; ++w) {
    const Range part = ShardOf(buf.count, static_cast<int>(windows), static_cast<int>(w));
    const View window = buf.Sub(part.begin, part.count);
    const std::vector<Range> ranges = Shards(window.count, size());
    ReduceScatterSteps(window, ranges);
    AllGatherSteps(window, ranges);
  }
}

// Where halving runs every piece (a power of two, within
// halving_max_bytes), how the buffer is cut never changes the bits, so
// neither does a choice made from timings; on the ring it would, and a
// job's result would then depend on timing. And where every rank has a
// core: with more ranks than cores a call's time is mostly how the
// scheduler deals the cores out (at 8 ranks on 2 cores the tuner kept 128
// KiB windows at 1 MiB, 0.58-0.59 GB/s busbw, where 512 KiB ran 0.71-0.73),
// and the pipeline has no idle time to fill.
bool TcpCommunicator::MayAdapt(size_t bytes) const {
  return std::has_single_bit(static_cast<unsigned>(size())) && bytes <= o_.halving_max_bytes &&
         (!mesh_->crowded() || o_.adapt_when_crowded);
}

bool TcpCommunicator::TunesWindow(size_t bytes) const {
  return o_.alt_window_bytes > 0 && o_.alt_window_bytes != o_.window_bytes && MayAdapt(bytes) &&
         bytes > std::min(o_.alt_window_bytes, o_.window_bytes);
}

// Rank 0 times the exploring calls and decides; its choice reaches the
// others in a one-byte broadcast before the first call that uses it.
void TcpCommunicator::TunedWindowAllReduce(View buf) {
  const auto share = [&](int, bool mine) {
    std::byte decided{static_cast<uint8_t>(mine)};
    BroadcastSteps(&decided, 1, 0);
    return decided == std::byte{1};
  };
  window_tuner_.Call(
      buf.bytes(), rank() == 0, share, [&] { BarrierSteps(); },
      [&](bool alt) {
        if (alt) return WindowedAllReduce(buf, o_.alt_window_bytes);
        MainWayAllReduce(buf);
      });
}

// Where the chunks fill a pipeline, the halving that windows would run,
// with no window waiting for the one before.
bool TcpCommunicator::UsesPipeline(size_t bytes) const {
  return o_.pipeline_chunk_bytes > 0 && MayAdapt(bytes) &&
         bytes / o_.pipeline_chunk_bytes >= kPipelineMinChunks;
}

void TcpCommunicator::MainWayAllReduce(View buf) {
  if (UsesPipeline(buf.bytes())) return PipelinedAllReduce(buf);
  WindowedAllReduce(buf, o_.window_bytes);
}

// Halving and doubling on chunks of about pipeline_chunk_bytes, every
// chunk's steps in one mesh Run: chunk k's step s starts as soon as its
// step s - 1 has arrived, while later chunks still travel, so no step
// waits for the whole buffer's previous step. Each send and receive waits
// (`after`) for the chunk's previous receive, and so for all before it:
// a send carries what those brought, and a reduction must follow the
// previous step's to sum in HalvingReduceScatter's order, for its bits.
// Step s of chunk k is listed at time k + s, so that to each peer a
// chunk's later step queues behind the next chunk's earlier one.
void TcpCommunicator::PipelinedAllReduce(View buf) {
  const size_t segment_chunks =
      std::max<size_t>(o_.pipeline_run_bytes / o_.pipeline_chunk_bytes, 1);
  const size_t chunks = std::max<size_t>(buf.bytes() / o_.pipeline_chunk_bytes, 1);
  for (size_t first = 0; first < chunks; first += segment_chunks) {
    const size_t count = std::min(segment_chunks, chunks - first);
    const Range a = ShardOf(buf.count, static_cast<int>(chunks), static_cast<int>(first));
    const Range b =
        ShardOf(buf.count, static_cast<int>(chunks), static_cast<int>(first + count - 1));
    PipelinedSegment(buf.Sub(a.begin, b.end() - a.begin), count);
  }
}

void TcpCommunicator::PipelinedSegment(View buf, size_t chunks) {
  const int n = size(), r = rank(), steps = std::countr_zero(static_cast<unsigned>(n));
  const size_t es = DTypeSize(buf.dtype);
  const size_t largest = ShardOf(buf.count, static_cast<int>(chunks), 0).count;
  scratch_.resize(static_cast<size_t>(steps) * largest * es);
  pipe_.clear();
  pipe_.reserve(chunks * static_cast<size_t>(steps) * 4);
  targets_.clear();
  targets_.reserve(chunks * static_cast<size_t>(steps));
  std::vector<int64_t> arrived(chunks, -1);  // per chunk, its last step's receive
  const int stages = 2 * steps;
  for (size_t t = 0; t + 1 < chunks + static_cast<size_t>(stages); ++t) {
    for (int s = 0; s < stages; ++s) {
      if (t < static_cast<size_t>(s) || t - static_cast<size_t>(s) >= chunks) continue;
      const size_t k = t - static_cast<size_t>(s);
      const Range chunk = ShardOf(buf.count, static_cast<int>(chunks), static_cast<int>(k));
      std::byte* const base = buf.data + chunk.begin * es;
      Transfer send, recv;
      if (s < steps) {
        const int half = n >> (s + 1), lo = r & ~(2 * half - 1);
        const bool upper = (r & half) != 0;
        const Range keep = ShardSpan(chunk.count, n, upper ? lo + half : lo, half);
        const Range give = ShardSpan(chunk.count, n, upper ? lo : lo + half, half);
        std::byte* const into = scratch_.data() + static_cast<size_t>(s) * largest * es;
        send = Send(r ^ half, base + give.begin * es, give.count * es);
        recv = Recv(r ^ half, into, keep.count * es);
        recv.align = es;
        recv.notify_bytes = o_.reduce_chunk_bytes;
        recv.on_data = &AddArrived;
        recv.ctx = &targets_.emplace_back(ReduceInto{base + keep.begin * es, into, buf.dtype});
      } else {
        const int mask = 1 << (s - steps), peer = r ^ mask;
        const Range mine = ShardSpan(chunk.count, n, r & ~(mask - 1), mask);
        const Range theirs = ShardSpan(chunk.count, n, peer & ~(mask - 1), mask);
        send = Send(peer, base + mine.begin * es, mine.count * es);
        recv = Recv(peer, base + theirs.begin * es, theirs.count * es);
      }
      send.after = recv.after = arrived[k];
      pipe_.push_back(send);
      arrived[k] = static_cast<int64_t>(pipe_.size());
      pipe_.push_back(recv);
    }
  }
  mesh_->Run(pipe_, "allreduce");
}

// Step k exchanges the whole buffer with rank ^ 2^k. The sum is added
// after the exchange, because the buffer is still being sent while the
// peer's arrives.
void TcpCommunicator::RecursiveDoubling(View buf) {
  scratch_.resize(buf.bytes());
  for (int mask = 1; mask < size(); mask <<= 1) {
    const int peer = rank() ^ mask;
    Transfer step[2] = {Send(peer, buf.data, buf.bytes()),
                        Recv(peer, scratch_.data(), buf.bytes())};
    mesh_->Run(step, "allreduce");
    AddInto(buf.data, scratch_.data(), buf.count, buf.dtype);
  }
}

// After step s this rank holds the partial sum of range (r - s - 2) over
// s + 2 ranks; after n - 1 steps, range r summed over all of them. The
// range sent and the range received always differ, so the receive can be
// reduced into place while the send is still going.
void TcpCommunicator::RingReduceScatter(View buf, const std::vector<Range>& ranges) {
  const int n = size(), r = rank();
  const size_t es = DTypeSize(buf.dtype);
  size_t largest = 0;
  for (const Range& g : ranges) largest = std::max(largest, g.count);
  scratch_.resize(largest * es);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    const Range& out = ranges[(r - s - 1 + 2 * n) % n];
    const Range& in = ranges[(r - s - 2 + 2 * n) % n];
    ReduceInto target{buf.data + in.begin * es, scratch_.data(), buf.dtype};
    Transfer step[2];
    int k = 0;
    if (out.count > 0) step[k++] = Send(next, buf.data + out.begin * es, out.count * es);
    if (in.count > 0) {
      Transfer& t = step[k++] = Recv(prev, scratch_.data(), in.count * es);
      t.align = es;
      t.notify_bytes = o_.reduce_chunk_bytes;
      t.on_data = &AddArrived;
      t.ctx = &target;
    }
    mesh_->Run(std::span(step, static_cast<size_t>(k)), "reduce_scatter");
  }
}

bool TcpCommunicator::ByHalving(View buf, const std::vector<Range>& ranges) const {
  if (!std::has_single_bit(static_cast<unsigned>(size())) || buf.bytes() > o_.halving_max_bytes)
    return false;
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin != ranges[i - 1].end()) return false;
  }
  return true;
}

void TcpCommunicator::ReduceScatterSteps(View buf, const std::vector<Range>& ranges) {
  if (ByHalving(buf, ranges)) return HalvingReduceScatter(buf, ranges);
  RingReduceScatter(buf, ranges);
}

void TcpCommunicator::AllGatherSteps(View buf, const std::vector<Range>& ranges) {
  if (ByHalving(buf, ranges)) return DoublingAllGather(buf, ranges);
  RingAllGather(buf, ranges);
}

// Step k splits this rank's group of 2h ranks (h = n/2, n/4, ...) in two:
// it sends the other half's ranges to rank ^ h and reduces that rank's
// copy of its own half as it arrives. After log2 n steps the group is
// this rank alone and its range holds the sum; every element was summed
// on exactly one path, so the bits do not depend on timing.
void TcpCommunicator::HalvingReduceScatter(View buf, const std::vector<Range>& ranges) {
  const int r = rank();
  const size_t es = DTypeSize(buf.dtype);
  int lo = 0;
  for (int half = size() / 2; half >= 1; half /= 2) {
    const bool upper = r >= lo + half;
    const Range keep = SpanOf(ranges, upper ? lo + half : lo, half);
    const Range give = SpanOf(ranges, upper ? lo : lo + half, half);
    scratch_.resize(keep.count * es);
    ReduceInto target{buf.data + keep.begin * es, scratch_.data(), buf.dtype};
    Transfer step[2];
    int k = 0;
    if (give.count > 0) step[k++] = Send(r ^ half, buf.data + give.begin * es, give.count * es);
    if (keep.count > 0) {
      Transfer& t = step[k++] = Recv(r ^ half, scratch_.data(), keep.count * es);
      t.align = es;
      t.notify_bytes = o_.reduce_chunk_bytes;
      t.on_data = &AddArrived;
      t.ctx = &target;
    }
    mesh_->Run(std::span(step, static_cast<size_t>(k)), "reduce_scatter");
    if (upper) lo += half;
  }
}

// Step k swaps with rank ^ 2^k everything this rank's group of 2^k ranks
// holds so far: log2 n steps, each rank still receiving (n - 1) / n of
// the buffer once.
void TcpCommunicator::DoublingAllGather(View buf, const std::vector<Range>& ranges) {
  const int r = rank();
  const size_t es = DTypeSize(buf.dtype);
  for (int mask = 1; mask < size(); mask <<= 1) {
    const int peer = r ^ mask;
    const Range mine = SpanOf(ranges, r & ~(mask - 1), mask);
    const Range theirs = SpanOf(ranges, peer & ~(mask - 1), mask);
    Transfer step[2];
    int k = 0;
    if (mine.count > 0) step[k++] = Send(peer, buf.data + mine.begin * es, mine.count * es);
    if (theirs.count > 0) step[k++] = Recv(peer, buf.data + theirs.begin * es, theirs.count * es);
    mesh_->Run(std::span(step, static_cast<size_t>(k)), "allgather");
  }
}

// At step s this rank forwards range (r - s) and receives range
// (r - s - 1) from its predecessor, straight into place.
void TcpCommunicator::RingAllGather(View buf, const std::vector<Range>& ranges) {
  const int n = size(), r = rank();
  const size_t es = DTypeSize(buf.dtype);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    const Range& out = ranges[(r - s + n) % n];
    const Range& in = ranges[(r - s - 1 + 2 * n) % n];
    Transfer step[2];
    int k = 0;
    if (out.count > 0) step[k++] = Send(next, buf.data + out.begin * es, out.count * es);
    if (in.count > 0) step[k++] = Recv(prev, buf.data + in.begin * es, in.count * es);
    mesh_->Run(std::span(step, static_cast<size_t>(k)), "allgather");
  }
}

void TcpCommunicator::ReduceScatterRanges(View buf, const std::vector<Range>& ranges, ReduceOp op) {
  Guarded("reduce_scatter", [&] { ReduceScatterSteps(buf, ranges); });
  if (op == ReduceOp::kAvg) {
    const Range& mine = ranges[rank()];
    ScaleInPlace(buf.data + mine.begin * DTypeSize(buf.dtype), mine.count, buf.dtype, 1.0 / size());
  }
}

void TcpCommunicator::ReduceScatter(View in, View out, ReduceOp op) {
  const Range mine = ReduceScatterShard(in, out, size(), rank(), JobRank(rank()));
  ReduceScatterRanges(in, Shards(in.count, size()), op);
  std::memmove(out.data, in.data + mine.begin * DTypeSize(in.dtype), out.bytes());
}

void TcpCommunicator::AllGatherRanges(View in, View out, const std::vector<Range>& ranges) {
  std::byte* place = out.data + ranges[rank()].begin * DTypeSize(out.dtype);
  if (in.data != place) std::memmove(place, in.data, in.bytes());
  Guarded("allgather", [&] { AllGatherSteps(out, ranges); });
}

void TcpCommunicator::AllGather(View in, View out) {
  AllGatherShard(in, out, size(), rank(), JobRank(rank()));
  AllGatherRanges(in, out, Shards(out.count, size()));
}

void TcpCommunicator::Broadcast(View buf, int root) {
  Guarded("broadcast", [&] {
    if (buf.count > 0) BroadcastSteps(buf.data, buf.bytes(), root);
  });
}

// A binomial tree rooted at `root`: a rank receives once from the rank
// that differs in its lowest set bit (relative to the root), then sends to
// the ranks below that bit.
void TcpCommunicator::BroadcastSteps(std::byte* data, size_t bytes, int root) {
  const int n = size(), rel = (rank() - root + n) % n;
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if ((rel & mask) != 0) {
      Transfer t = Recv((rel - mask + root) % n, data, bytes);
      mesh_->Run(std::span(&t, 1), "broadcast");
      break;
    }
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (rel + mask < n) {
      Transfer t = Send((rel + mask + root) % n, data, bytes);
      mesh_->Run(std::span(&t, 1), "broadcast");
    }
  }
}

void TcpCommunicator::AllToAll(View in, View out) {
  CheckSameType(in, out, "alltoall");
  if (in.count != out.count || in.count % size() != 0) {
    throw CommError(fmt::format("alltoall on rank {}: {} in, {} out; both must be the same "
                                "multiple of the group size {}",
                                JobRank(rank()), in.count, out.count, size()),
                    -1);
  }
  const size_t block = in.bytes() / size();
  std::byte* const src = size() > 1 ? AllToAllSource(in, out, scratch_).data : in.data;
  if (src != out.data) std::memmove(out.data + rank() * block, src + rank() * block, block);
  Guarded("alltoall", [&] {
    if (block == 0) return;
    std::vector<Transfer> all;
    for (int j = 0; j < size(); ++j) {
      if (j == rank()) continue;
      all.push_back(Send(j, src + j * block, block));
      all.push_back(Recv(j, out.data + j * block, block));
    }
    mesh_->Run(all, "alltoall");
  });
}

void TcpCommunicator::SendRecv(View send, int to, View recv, int from) {
  const int n = size();
  if (to >= n || from >= n || to == rank() || from == rank()) {
    throw CommError(fmt::format("sendrecv on rank {}: to {} / from {} outside the group of {} "
                                "(or this rank itself)",
                                JobRank(rank()), to, from, n),
                    -1);
  }
  Guarded("sendrecv", [&] {
    Transfer both[2];
    int k = 0;
    if (to >= 0 && send.bytes() > 0) both[k++] = Send(to, send.data, send.bytes());
    if (from >= 0 && recv.bytes() > 0) both[k++] = Recv(from, recv.data, recv.bytes());
    mesh_->Run(std::span(both, static_cast<size_t>(k)), "sendrecv");
  });
}

void TcpCommunicator::Barrier() {
  Guarded("barrier", [&] { BarrierSteps(); });
}

// Dissemination: in round k every rank signals rank + 2^k and waits for
// rank - 2^k; after ceil(log2 n) rounds each has heard from all.
void TcpCommunicator::BarrierSteps() {
  const int n = size();
  std::byte out{1}, in{0};
  for (int dist = 1; dist < n; dist <<= 1) {
    Transfer round[2] = {Send((rank() + dist) % n, &out, 1), Recv((rank() - dist + n) % n, &in, 1)};
    mesh_->Run(round, "barrier");
  }
}

}  // namespace fmstack::comm
