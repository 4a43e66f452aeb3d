#include "comm/gloo_comm.h"

#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <set>

#include "comm/open_sockets.h"
#include "comm/reduce.h"

namespace fmstack::comm {
namespace {

void SumBf16(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<Bf16*>(c);
  const auto* x = static_cast<const Bf16*>(a);
  const auto* y = static_cast<const Bf16*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = ToBf16(FromBf16(x[i]) + FromBf16(y[i]));
}

void SumF32(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<float*>(c);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

}  // namespace

GlooCommunicator::GlooCommunicator(GlooOptions options) : options_(std::move(options)) {
  if (options_.size <= 1) return;
  // Gloo writes to its sockets without MSG_NOSIGNAL, so a dead peer would
  // kill this process with SIGPIPE instead of failing the collective.
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options_.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(options_.rank, options_.size);
    context_->setTimeout(options_.timeout);
    gloo::rendezvous::PrefixStore store(options_.prefix, *options_.store);
    // Gloo has no abort. Shutting down its sockets makes Gloo's own event loop
    // see every connection end, which fails the operations pending on them,
    // here and on the peers. The sockets are the ones the mesh opened.
    const std::set<int> before = OpenSockets();
    context_->connectFullMesh(store, device);
    std::ranges::set_difference(OpenSockets(), before, std::back_inserter(sockets_));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("gloo: rank {} of {} could not connect group '{}' on {}: {}",
                                JobRank(options_.rank), options_.size, options_.prefix,
                                options_.hostname, e.what()),
                    -1);
  }
}

GlooCommunicator::~GlooCommunicator() = default;

int GlooCommunicator::JobRank(int group_rank) const {
  return options_.job_ranks.empty() ? group_rank : options_.job_ranks[group_rank];
}

// Registers a buffer's transfers in flight for Abort to wake.
class GlooCommunicator::Pending {
 public:
  Pending(GlooCommunicator& c, gloo::transport::UnboundBuffer* b) : c_(c), b_(b) {
    const std::lock_guard lock(c_.pending_mu_);
    c_.pending_.insert(b_);
    // An abort between the caller's check and this registration missed it.
    if (c_.abort_.tripped()) {
      b_->abortWaitRecv();
      b_->abortWaitSend();
    }
  }
  ~Pending() {
    const std::lock_guard lock(c_.pending_mu_);
    c_.pending_.erase(b_);
  }
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

 private:
  GlooCommunicator& c_;
  gloo::transport::UnboundBuffer* b_;
};

void GlooCommunicator::Abort(const std::string& reason) {
  if (!abort_.Trip(reason)) return;
  // Closing our side of every pair makes the peers' pending operations fail
  // within milliseconds, so one abort spreads through the group.
  for (const int fd : sockets_) ::shutdown(fd, SHUT_RDWR);
  const std::lock_guard lock(pending_mu_);
  for (gloo::transport::UnboundBuffer* b : pending_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

void GlooCommunicator::Fail(const char* op, const std::string& transport_error) {
  Abort(fmt::format("{} failed", op));
  throw CollectiveFailure(*options_.store, options_.generation, op, JobRank(options_.rank),
                          options_.prefix, "gloo", transport_error);
}

template <typename Fn>
void GlooCommunicator::Guarded(const char* op, Fn&& fn) {
  abort_.ThrowIfTripped(op, JobRank(options_.rank));
  if (options_.size <= 1) return;
  try {
    fn();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    Fail(op, e.what());
  }
}

void GlooCommunicator::AllReduce(View buf, ReduceOp op) {
  if (size() > 1 && buf.bytes() >= options_.split_allreduce_bytes) {
    // Large messages: our reduce-scatter ring, then Gloo's allgatherv ring.
    std::vector<Range> ranges(size());
    for (int i = 0; i < size(); ++i) ranges[i] = ShardOf(buf.count, size(), i);
    ReduceScatterRanges(buf, ranges, op);
    const Range mine = ranges[rank()];
    AllGatherRanges(buf.Sub(mine.begin, mine.count), buf, ranges);  // already in place
    return;
  }
  Guarded("allreduce", [&] {
    if (buf.count == 0) return;
    gloo::AllreduceOptions opts(context_);
    if (buf.dtype == DType::kF32) {
      opts.setOutput(reinterpret_cast<float*>(buf.data), buf.count);
      opts.setReduceFunction(&SumF32);
    } else {
      opts.setOutput(reinterpret_cast<uint16_t*>(buf.data), buf.count);
      opts.setReduceFunction(&SumBf16);
    }
    opts.setAlgorithm(buf.bytes() < options_.small_message_bytes
                          ? gloo::AllreduceOptions::Algorithm::BCUBE
                          : gloo::AllreduceOptions::Algorithm::RING);
    opts.setMaxSegmentSize(options_.segment_bytes);
    opts.setTimeout(options_.timeout);
    gloo::allreduce(opts);
  });
  if (op == ReduceOp::kAvg) ScaleInPlace(buf.data, buf.count, buf.dtype, 1.0 / size());
}

void GlooCommunicator::ReduceScatterRanges(View buf, const std::vector<Range>& ranges,
                                           ReduceOp op) {
  const int n = size(), r = rank();
  Guarded("reduce_scatter", [&] {
    size_t max_count = 0;
    for (const Range& g : ranges) max_count = std::max(max_count, g.count);
    const size_t es = DTypeSize(buf.dtype);
    scratch_.resize(std::max<size_t>(1, max_count * es));
    auto in = context_->createUnboundBuffer(buf.data, std::max<size_t>(1, buf.bytes()));
    auto tmp = context_->createUnboundBuffer(scratch_.data(), scratch_.size());
    const Pending pending_in(*this, in.get()), pending_tmp(*this, tmp.get());
    const uint64_t slot = context_->nextSlot(n);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    // After step s, this rank holds the partial sum of chunk (r - s - 2) over
    // s + 2 ranks; after n - 1 steps, chunk r summed over all of them.
    for (int s = 0; s < n - 1; ++s) {
      const Range& send = ranges[(r - s - 1 + 2 * n) % n];
      const Range& recv = ranges[(r - s - 2 + 2 * n) % n];
      if (send.count > 0) in->send(next, slot + s, send.begin * es, send.count * es);
      if (recv.count > 0) tmp->recv(prev, slot + s, 0, recv.count * es);
      if (recv.count > 0 && !tmp->waitRecv(options_.timeout)) throw Error("receive aborted");
      if (send.count > 0 && !in->waitSend(options_.timeout)) throw Error("send aborted");
      AddInto(buf.data + recv.begin * es, scratch_.data(), recv.count, buf.dtype);
    }
  });
  if (op == ReduceOp::kAvg) {
    const Range& mine = ranges[r];
    ScaleInPlace(buf.data + mine.begin * DTypeSize(buf.dtype), mine.count, buf.dtype, 1.0 / n);
  }
}

void GlooCommunicator::ReduceScatter(View in, View out, ReduceOp op) {
  const Range mine = ReduceScatterShard(in, out, size(), rank(), JobRank(rank()));
  std::vector<Range> ranges(size());
  for (int i = 0; i < size(); ++i) ranges[i] = ShardOf(in.count, size(), i);
  ReduceScatterRanges(in, ranges, op);
  std::memmove(out.data, in.data + mine.begin * DTypeSize(in.dtype), out.bytes());
}

void GlooCommunicator::AllGatherRanges(View in, View out, const std::vector<Range>& ranges) {
  const int n = size(), r = rank();
  const size_t es = DTypeSize(out.dtype);
  std::byte* place = out.data + ranges[r].begin * es;
  if (in.data != place) std::memmove(place, in.data, in.bytes());
  Guarded("allgather", [&] {
    // A ring straight into place: at step s this rank forwards block
    // (r - s) and receives block (r - s - 1) from its predecessor.
    auto buf = context_->createUnboundBuffer(out.data, std::max<size_t>(1, out.bytes()));
    const Pending pending(*this, buf.get());
    const uint64_t slot = context_->nextSlot(n);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int s = 0; s < n - 1; ++s) {
      const Range& send = ranges[(r - s + n) % n];
      const Range& recv = ranges[(r - s - 1 + 2 * n) % n];
      if (send.count > 0) buf->send(next, slot + s, send.begin * es, send.count * es);
      if (recv.count > 0) buf->recv(prev, slot + s, recv.begin * es, recv.count * es);
      if (recv.count > 0 && !buf->waitRecv(options_.timeout)) throw Error("receive aborted");
      if (send.count > 0 && !buf->waitSend(options_.timeout)) throw Error("send aborted");
    }
  });
}

void GlooCommunicator::AllGather(View in, View out) {
  std::vector<Range> ranges(size());
  for (int i = 0; i < size(); ++i) ranges[i] = ShardOf(out.count, size(), i);
  AllGatherShard(in, out, size(), rank(), JobRank(rank()));
  AllGatherRanges(in, out, ranges);
}

void GlooCommunicator::Broadcast(View buf, int root) {
  Guarded("broadcast", [&] {
    if (buf.count == 0) return;
    gloo::BroadcastOptions opts(context_);
    if (buf.dtype == DType::kF32) {
      opts.setOutput(reinterpret_cast<float*>(buf.data), buf.count);
    } else {
      opts.setOutput(reinterpret_cast<uint16_t*>(buf.data), buf.count);
    }
    opts.setRoot(root);
    opts.setTimeout(options_.timeout);
    gloo::broadcast(opts);
  });
}

void GlooCommunicator::AllToAll(View in, View out) {
  CheckSameType(in, out, "alltoall");
  if (in.count != out.count || in.count % size() != 0) {
    throw CommError(fmt::format("alltoall on rank {}: {} in, {} out; both must be the same "
                                "multiple of the group size {}",
                                rank(), in.count, out.count, size()),
                    -1);
  }
  if (size() > 1) in = AllToAllSource(in, out, scratch_);
  Guarded("alltoall", [&] {
    gloo::AlltoallOptions opts(context_);
    if (in.dtype == DType::kF32) {
      opts.setInput(reinterpret_cast<float*>(in.data), in.count);
      opts.setOutput(reinterpret_cast<float*>(out.data), out.count);
    } else {
      opts.setInput(reinterpret_cast<uint16_t*>(in.data), in.count);
      opts.setOutput(reinterpret_cast<uint16_t*>(out.data), out.count);
    }
    opts.setTimeout(options_.timeout);
    gloo::alltoall(opts);
  });
  if (size() <= 1 && out.data != in.data) std::memmove(out.data, in.data, in.bytes());
}

void GlooCommunicator::SendRecv(View send, int to, View recv, int from) {
  const int n = size();
  if (to >= n || from >= n || to == rank() || from == rank()) {
    throw CommError(fmt::format("sendrecv on rank {}: to {} / from {} outside the group of {} "
                                "(or this rank itself)",
                                JobRank(rank()), to, from, n),
                    -1);
  }
  Guarded("sendrecv", [&] {
    const uint64_t slot = context_->nextSlot();
    std::unique_ptr<gloo::transport::UnboundBuffer> out, in;
    std::optional<Pending> pending_out, pending_in;
    if (to >= 0 && send.bytes() > 0) {
      out = context_->createUnboundBuffer(send.data, send.bytes());
      pending_out.emplace(*this, out.get());
      out->send(to, slot);
    }
    if (from >= 0 && recv.bytes() > 0) {
      in = context_->createUnboundBuffer(recv.data, recv.bytes());
      pending_in.emplace(*this, in.get());
      in->recv(from, slot);
    }
    if (in && !in->waitRecv(options_.timeout)) throw Error("receive aborted");
    if (out && !out->waitSend(options_.timeout)) throw Error("send aborted");
  });
}

void GlooCommunicator::Barrier() {
  Guarded("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

}  // namespace fmstack::comm
