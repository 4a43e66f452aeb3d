#include "comm/shm_comm.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "comm/reduce.h"
#include "comm/shm_segment.h"

namespace fmstack::comm {
size_t ShmCommunicator::HeaderBytes() {
  return (sizeof(Header) + 4095) / 4096 * 4096;
}

// FMSTACK_SHM_POST_WAIT: unset, the post-and-wait paths where every rank has
// a core, and with more ranks than cores only where the direct path would
// serve (they measured slower above that, docs/comm.md); "1", everywhere,
// the two-round reductions included; "0", never.
ShmCommunicator::PostWait ShmCommunicator::PostWaitSetting() {
  const char* v = std::getenv("FMSTACK_SHM_POST_WAIT");
  if (v == nullptr || *v == '\0') return PostWait::kDefault;
  const std::string s(v);
  if (s != "0" && s != "1")
    throw CommError(fmt::format("FMSTACK_SHM_POST_WAIT={}: expected 0 or 1", s), -1);
  return s == "1" ? PostWait::kEverywhere : PostWait::kOff;
}

ShmCommunicator::ShmCommunicator(ShmOptions options) : options_(std::move(options)) {
  const int P = options_.size;
  if (P > kMaxLocal)
    throw CommError(fmt::format("shm: {} ranks on one node, at most {}", P, kMaxLocal), -1);
  options_.slot_bytes = options_.slot_bytes / 64 * 64;
  // Every rank checks what was asked; the window of local rank 0 is the one
  // all of them use (the L3 a process sees may differ across its cores).
  window_bytes_ = ResolveWindow();
  cma_chunk_bytes_ = ResolveCmaChunk();
  alt_cma_chunk_bytes_ = ResolveAltCmaChunk();
  alt_window_bytes_ = ResolveAltWindow();
  // Every rank of a node computes the same answer, so the segment's size agrees.
  oversubscribed_ = static_cast<unsigned>(P) > std::thread::hardware_concurrency();
  // A Docker container's /dev/shm is 64 MB by default: the regions are only
  // as large as the paths that use them.
  post_wait_ = PostWaitSetting();
  region_bytes_ = post_wait_ == PostWait::kOff                             ? 0
                  : oversubscribed_ && post_wait_ == PostWait::kEverywhere ? 2 * kMidBytes
                                                                           : kSmallBytes;
  mapped_bytes_ =
      HeaderBytes() + static_cast<size_t>(P) * (options_.slot_bytes + 2 * region_bytes_);
  const std::string name = "/" + options_.segment;
  const std::string ready_key = options_.prefix + "/shm_ready";
  int fd = -1;
  if (options_.rank == 0) {
    ::shm_unlink(name.c_str());  // a stale segment of a crashed run
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
      throw CommError(fmt::format("shm: cannot create /dev/shm{}: {}", name, std::strerror(errno)),
                      -1);
    // Reserve the pages now so that a full /dev/shm is an error here, not a
    // SIGBUS in the middle of a collective.
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(mapped_bytes_));
    if (err != 0) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw CommError(fmt::format("shm: cannot reserve {} bytes in /dev/shm{}: {}", mapped_bytes_,
                                  name, std::strerror(err)),
                      -1);
    }
  } else {
    options_.store->Get(ready_key, options_.timeout);
    fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
      throw CommError(fmt::format("shm: cannot open /dev/shm{}: {}", name, std::strerror(errno)),
                      -1);
    // Mapping more than local rank 0 reserved would be a SIGBUS later.
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != mapped_bytes_) {
      const auto made = static_cast<int64_t>(st.st_size);
      ::close(fd);
      throw CommError(fmt::format("shm: /dev/shm{} is {} bytes where local rank {} expects {}: "
                                  "the ranks of a node differ in slot size or in "
                                  "FMSTACK_SHM_POST_WAIT",
                                  name, made, options_.rank, mapped_bytes_),
                      -1);
    }
  }
  void* p = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED)
    throw CommError(fmt::format("shm: mmap of {} bytes: {}", mapped_bytes_, std::strerror(errno)),
                    -1);
  header_ = static_cast<Header*>(p);
  if (options_.rank == 0) {
    header_->magic = kMagic;
    header_->size = P;
    header_->slot_bytes = options_.slot_bytes;
    header_->window_bytes = window_bytes_;
    header_->alt_window_bytes = alt_window_bytes_;
    header_->cma_chunk_bytes = cma_chunk_bytes_;
    header_->alt_cma_chunk_bytes = alt_cma_chunk_bytes_;
    header_->arrived = 0;
    header_->epoch = 0;
    header_->aborted = 0;
    header_->abort_rank = -1;
    options_.store->Set(ready_key, name);
  } else if (header_->magic != kMagic || header_->size != P) {
    throw CommError(fmt::format("shm: segment {} was made for {} ranks, this node has {}", name,
                                header_->size, P),
                    -1);
  }
  window_bytes_ = header_->window_bytes;  // rank 0's, which every rank must stage alike
  alt_window_bytes_ = header_->alt_window_bytes;
  // Whether all-reduce tunes the read must agree (the tuner adds barriers).
  cma_chunk_bytes_ = header_->cma_chunk_bytes;
  alt_cma_chunk_bytes_ = header_->alt_cma_chunk_bytes;
  // More ranks than cores: a spinning waiter would take the core the rank it
  // waits for needs, so waiters do not spin: they yield, then sleep.
  spin_limit_ = oversubscribed_ ? 0 : 2000;
  yield_limit_ = oversubscribed_ ? 1000 : 10;
  header_->pids[options_.rank] = static_cast<int32_t>(::getpid());
  if (options_.rank == 0) header_->cma_failed = 0;
  ProbeCrossMemoryAttach();
  // The single-copy path's scratch, faulted in now: on a VM a first call
  // that faulted it in ran 2-3x slower (0.7-1.0 ms against 0.3 ms at
  // 1 MiB), which misled the path tuner's first timings.
  if (cma_ && !oversubscribed_) scratch_.resize(cma_chunk_bytes_ * static_cast<size_t>(P - 1));
  // Everyone is attached: the name can go, so nothing is left in /dev/shm
  // whatever happens to the processes later.
  if (options_.rank == 0) ::shm_unlink(name.c_str());
}

// Linux cross-memory attach (process_vm_readv) copies straight from a peer's
// buffer into ours: one copy instead of two through the slots, as OpenMPI's
// shared-memory transport does. Needs ptrace permission over the peers, which
// Yama or a container's seccomp profile may deny; every rank probes every
// other, and if any read fails all of them stay on the slot path.
void ShmCommunicator::ProbeCrossMemoryAttach() {
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  const uint64_t probe = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(options_.rank);
  header_->addr[options_.rank] = reinterpret_cast<uint64_t>(&probe);
  Wait("attach");
  for (int r = 0; r < options_.size; ++r) {
    uint64_t got = 0;
    iovec local{&got, sizeof got};
    iovec remote{reinterpret_cast<void*>(header_->addr[r].load()), sizeof got};
    if (r != options_.rank &&
        (::process_vm_readv(header_->pids[r], &local, 1, &remote, 1, 0) != sizeof got ||
         got != (0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(r)))) {
      header_->cma_failed = 1;
    }
  }
  Wait("attach");
  cma_ = header_->cma_failed.load() == 0 && std::getenv("FMSTACK_SHM_NO_CMA") == nullptr;
  const char* everywhere = std::getenv("FMSTACK_SHM_CMA_REDUCE");
  cma_everywhere_ = everywhere != nullptr && std::string(everywhere) == "1";
}

void ShmCommunicator::ReadPeer(int r, const std::byte* remote, std::byte* local, size_t bytes,
                               const char* op) {
  while (bytes > 0) {
    iovec l{local, bytes};
    iovec p{const_cast<std::byte*>(remote), bytes};
    const ssize_t n = ::process_vm_readv(header_->pids[r], &l, 1, &p, 1, 0);
    if (n <= 0) {
      const int e = errno;
      const std::string why =
          e == ESRCH ? fmt::format("rank {} (local rank {}) died", JobRank(r), r)
                     : fmt::format("reading rank {}'s buffer: {}", JobRank(r), std::strerror(e));
      Abort(why, e == ESRCH ? JobRank(r) : -1);
      throw CommError(fmt::format("{} on rank {}: {}", op, JobRank(options_.rank), why),
                      e == ESRCH ? JobRank(r) : -1);
    }
    local += n;
    remote += n;
    bytes -= static_cast<size_t>(n);
  }
}

const std::byte* ShmCommunicator::PeerBuffer(int r) const {
  return reinterpret_cast<const std::byte*>(header_->addr[r].load(std::memory_order_acquire));
}

// Reduce-scatter step of the single-copy path: this rank's portion of every
// peer's buffer, summed in rank order into its own buffer, chunk by chunk
// through a cache-sized scratch.
void ShmCommunicator::SumPeersInto(View buf, Range part, std::byte* dst, ReduceOp op,
                                   size_t chunk_bytes, const char* op_name) {
  const int P = options_.size;
  const size_t es = DTypeSize(buf.dtype);
  const size_t chunk = std::max<size_t>(1, chunk_bytes / es);
  scratch_.resize(std::max(scratch_.size(), std::min(chunk, part.count) * es * (P - 1)));
  std::vector<const std::byte*> srcs(P);
  for (size_t off = 0; off < part.count; off += chunk) {
    const size_t n = std::min(chunk, part.count - off);
    std::byte* into = scratch_.data();  // the peers' chunks, one after another
    for (int r = 0; r < P; ++r) {
      const size_t at = (part.begin + off) * es;
      if (r == options_.rank) {
        srcs[r] = buf.data + at;
      } else {
        ReadPeer(r, PeerBuffer(r) + at, into, n * es, op_name);
        srcs[r] = into;
        into += n * es;
      }
    }
    SumOf(dst + off * es, srcs, n, buf.dtype);
    if (op == ReduceOp::kAvg) ScaleInPlace(dst + off * es, n, buf.dtype, 1.0 / P);
  }
}

void ShmCommunicator::CmaReduce(View buf, ReduceOp op, int root, bool all, size_t chunk_bytes) {
  const int P = options_.size, me = options_.rank;
  const size_t es = DTypeSize(buf.dtype);
  header_->addr[me].store(reinterpret_cast<uint64_t>(buf.data), std::memory_order_release);
  Wait("allreduce");
  // Peers read only their own portions of our buffer meanwhile, so the sum
  // of ours can go straight into place.
  const Range part = ShardOf(buf.count, P, me);
  SumPeersInto(buf, part, buf.data + part.begin * es, op, chunk_bytes, "allreduce");
  Wait("allreduce");
  if (all || me == root) {
    for (int r = 0; r < P; ++r) {
      const Range g = ShardOf(buf.count, P, r);
      if (r != me)
        ReadPeer(r, PeerBuffer(r) + g.begin * es, buf.data + g.begin * es, g.count * es,
                 "allreduce");
    }
  }
  Wait("allreduce");
}

ShmCommunicator::~ShmCommunicator() {
  if (header_ != nullptr) ::munmap(header_, mapped_bytes_);
}

std::byte* ShmCommunicator::Slot(int r) const {
  return reinterpret_cast<std::byte*>(header_) + HeaderBytes() +
         static_cast<size_t>(r) * options_.slot_bytes;
}

int ShmCommunicator::JobRank(int local) const {
  return options_.job_ranks.empty() ? local : options_.job_ranks[local];
}

void ShmCommunicator::CheckAborted(const char* op) const {
  // 2 means an abort is being written; it is acted on once published as 1.
  if (header_->aborted.load(std::memory_order_acquire) != 1) return;
  const int who = header_->abort_rank.load();
  throw CommError(fmt::format("{} on rank {}: {}", op, JobRank(options_.rank),
                              std::string(header_->abort_reason)),
                  who);
}

void ShmCommunicator::Abort(const std::string& reason) {
  Abort(fmt::format("aborted by rank {}: {}", JobRank(options_.rank), reason), -1);
}

void ShmCommunicator::Abort(const std::string& reason, int failed_rank) {
  int32_t expected = 0;
  if (header_->aborted.compare_exchange_strong(expected, 2)) {
    std::snprintf(header_->abort_reason, sizeof header_->abort_reason, "%s", reason.c_str());
    header_->abort_rank = failed_rank;
    header_->aborted.store(1, std::memory_order_release);
  }
  // Wakes the sleepers without moving the epoch: only the last arrival opens
  // a barrier. A bump here once let a waiter pass while a racing abort was
  // still being written (aborted == 2), and read a segment its peers had not
  // filled.
  FutexWakeAll(&header_->epoch);
}

void ShmCommunicator::Wait(const char* op) {
  CheckAborted(op);
  const int P = options_.size;
  if (P == 1) return;
  const uint32_t epoch = header_->epoch.load(std::memory_order_acquire);
  if (header_->arrived.fetch_add(1, std::memory_order_acq_rel) == static_cast<uint32_t>(P - 1)) {
    header_->arrived.store(0, std::memory_order_relaxed);
    header_->epoch.fetch_add(1, std::memory_order_seq_cst);
    // A wake is a system call: only when someone sleeps. A sleeper counts
    // itself before it reads the epoch, and this reads the count after
    // moving the epoch (both seq_cst), so one of the two sees the other.
    if (header_->sleepers.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&header_->epoch);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  auto next_check = start;
  for (int spin = 0; header_->epoch.load(std::memory_order_acquire) == epoch; ++spin) {
    if (spin < spin_limit_) {
      __builtin_ia32_pause();
      continue;
    }
    if (spin < spin_limit_ + yield_limit_) {
      sched_yield();
      continue;
    }
    header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (header_->epoch.load(std::memory_order_seq_cst) == epoch)
      FutexWait(&header_->epoch, epoch, std::chrono::microseconds(2000));
    header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (header_->epoch.load(std::memory_order_acquire) != epoch) break;
    CheckAborted(op);
    const auto now = std::chrono::steady_clock::now();
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(20);
    for (int r = 0; r < P; ++r) {
      if (r != options_.rank && ProcessDead(header_->pids[r].load())) {
        // A peer that passed this barrier may exit before we see the epoch
        // move: only a peer gone while the barrier is still closed is dead.
        if (header_->epoch.load(std::memory_order_acquire) != epoch) break;
        const std::string why = fmt::format("rank {} (local rank {}, pid {}) died", JobRank(r), r,
                                            header_->pids[r].load());
        int32_t expected = 0;
        if (header_->aborted.compare_exchange_strong(expected, 2)) {
          std::snprintf(header_->abort_reason, sizeof header_->abort_reason, "%s", why.c_str());
          header_->abort_rank = JobRank(r);
          header_->aborted.store(1, std::memory_order_release);
          FutexWakeAll(&header_->epoch);
        }
        throw CommError(fmt::format("{} on rank {}: {}", op, JobRank(options_.rank), why),
                        JobRank(r));
      }
    }
    if (now - start > options_.timeout) {
      throw CommError(fmt::format("{} on rank {}: timed out after {} ms waiting for the ranks of "
                                  "this node (every process is alive: one may be hung)",
                                  op, JobRank(options_.rank), options_.timeout.count()),
                      -1);
    }
  }
  CheckAborted(op);
}

void ShmCommunicator::Barrier() {
  Wait("barrier");
}

void ShmCommunicator::ReduceWindow(View buf, ReduceOp op, int root, bool all, size_t window_bytes) {
  const int P = options_.size, me = options_.rank;
  const size_t es = DTypeSize(buf.dtype);
  const size_t window = window_bytes / es;
  std::vector<const std::byte*> srcs(P);
  for (size_t off = 0; off < buf.count; off += window) {
    const size_t n = std::min(window, buf.count - off);
    std::byte* const in = buf.data + off * es;
    for (int r = 0; r < P; ++r) {
      const Range g = ShardOf(n, P, r);
      if (r != me) std::memcpy(Slot(me) + g.begin * es, in + g.begin * es, g.count * es);
    }
    Wait("allreduce");
    const Range part = ShardOf(n, P, me);
    for (int r = 0; r < P; ++r) srcs[r] = (r == me ? in : Slot(r)) + part.begin * es;
    SumOf(Slot(me) + part.begin * es, srcs, part.count, buf.dtype);
    if (op == ReduceOp::kAvg)
      ScaleInPlace(Slot(me) + part.begin * es, part.count, buf.dtype, 1.0 / P);
    Wait("allreduce");
    if (all || me == root) {
      for (int r = 0; r < P; ++r) {
        const Range g = ShardOf(n, P, r);
        std::memcpy(in + g.begin * es, Slot(r) + g.begin * es, g.count * es);
      }
    }
    Wait("allreduce");
  }
}

void ShmCommunicator::DirectReduce(View buf, ReduceOp op, int root, bool all, const char* name) {
  const int P = options_.size, me = options_.rank;
  std::memcpy(Slot(me), buf.data, buf.bytes());
  Wait(name);
  if (all || me == root) {
    std::vector<const std::byte*> srcs(P);
    for (int r = 0; r < P; ++r) srcs[r] = Slot(r);
    SumOf(buf.data, srcs, buf.count, buf.dtype);
    if (op == ReduceOp::kAvg) ScaleInPlace(buf.data, buf.count, buf.dtype, 1.0 / P);
  }
  Wait(name);  // no rank overwrites its slot while another still reads it
}

void ShmCommunicator::AllReduce(View buf, ReduceOp op) {
  if (size() == 1) return CheckAborted("allreduce");
  if (UseSmall(buf.bytes())) return SmallReduce(buf, op, 0, true);
  if (UseDirect(buf.bytes())) return DirectReduce(buf, op, 0, true, "allreduce");
  if (UseMid(buf.bytes())) return MidReduce(buf, op, 0, true);
  if (UseCmaReduce(buf.bytes())) return TunedCmaAllReduce(buf, op);
  if (TunedReduce(buf.bytes())) return TunedAllReduce(buf, op);
  TunedWindowAllReduce(buf, op);
}

void ShmCommunicator::Reduce(View buf, ReduceOp op, int root) {
  if (size() == 1) return CheckAborted("reduce");
  if (UseSmall(buf.bytes())) return SmallReduce(buf, op, root, false);
  if (UseDirect(buf.bytes())) return DirectReduce(buf, op, root, false, "reduce");
  if (UseMid(buf.bytes())) return MidReduce(buf, op, root, false);
  if (UseCmaReduce(buf.bytes())) return CmaReduce(buf, op, root, false, cma_chunk_bytes_);
  ReduceWindow(buf, op, root, false, StagedBytes());
}

void ShmCommunicator::ReduceScatter(View in, View out, ReduceOp op) {
  const int P = options_.size, me = options_.rank;
  const size_t es = DTypeSize(in.dtype);
  const Range mine = ReduceScatterShard(in, out, P, me, JobRank(me));
  if (P == 1) {
    std::memmove(out.data, in.data, in.bytes());
    return CheckAborted("reduce_scatter");
  }
  if (UseSmall(in.bytes())) return SmallReduceScatter(in, out, mine, op);
  if (UseCma(in.bytes())) {
    header_->addr[me].store(reinterpret_cast<uint64_t>(in.data), std::memory_order_release);
    Wait("reduce_scatter");
    // out may be in's own shard: peers read only their shards of in.
    SumPeersInto(in, mine, out.data, op, cma_chunk_bytes_, "reduce_scatter");
    Wait("reduce_scatter");
    return;
  }
  const size_t window = options_.slot_bytes / es;
  std::vector<const std::byte*> srcs(P);
  for (size_t off = 0; off < in.count; off += window) {
    const size_t n = std::min(window, in.count - off);
    std::memcpy(Slot(me), in.data + off * es, n * es);
    Wait("reduce_scatter");
    const size_t lo = std::max(off, mine.begin), hi = std::min(off + n, mine.end());
    if (lo < hi) {
      for (int r = 0; r < P; ++r) srcs[r] = Slot(r) + (lo - off) * es;
      std::byte* dst = out.data + (lo - mine.begin) * es;
      SumOf(dst, srcs, hi - lo, in.dtype);
      if (op == ReduceOp::kAvg) ScaleInPlace(dst, hi - lo, in.dtype, 1.0 / P);
    }
    Wait("reduce_scatter");
  }
}

void ShmCommunicator::AllGatherRanges(View out, const std::vector<Range>& ranges) {
  const int P = options_.size, me = options_.rank;
  if (P == 1) return CheckAborted("allgather");
  if (UseSmall(out.bytes())) return SmallAllGatherRanges(out, ranges);
  const size_t es = DTypeSize(out.dtype);
  if (UseCma(out.bytes())) {
    header_->addr[me].store(reinterpret_cast<uint64_t>(out.data), std::memory_order_release);
    Wait("allgather");
    for (int r = 0; r < P; ++r) {
      const Range g = ranges[r];
      if (r != me)
        ReadPeer(r, PeerBuffer(r) + g.begin * es, out.data + g.begin * es, g.count * es,
                 "allgather");
    }
    Wait("allgather");
    return;
  }
  const size_t window = static_cast<size_t>(P) * options_.slot_bytes / es;
  const Range mine = ranges[me];
  for (size_t off = 0; off < out.count; off += window) {
    const size_t n = std::min(window, out.count - off);
    const size_t lo = std::max(off, mine.begin), hi = std::min(off + n, mine.end());
    if (lo < hi) std::memcpy(Common() + (lo - off) * es, out.data + lo * es, (hi - lo) * es);
    Wait("allgather");
    std::memcpy(out.data + off * es, Common(), n * es);
    Wait("allgather");
  }
}

void ShmCommunicator::AllGather(View in, View out) {
  std::vector<Range> ranges(size());
  for (int i = 0; i < size(); ++i) ranges[i] = ShardOf(out.count, size(), i);
  const Range mine = AllGatherShard(in, out, size(), rank(), JobRank(rank()));
  std::memmove(out.data + mine.begin * DTypeSize(in.dtype), in.data, in.bytes());
  AllGatherRanges(out, ranges);
}

void ShmCommunicator::Broadcast(View buf, int root) {
  const int P = options_.size;
  if (P == 1) return CheckAborted("broadcast");
  if (UseSmall(buf.bytes())) return SmallBroadcast(buf, root);
  const size_t es = DTypeSize(buf.dtype);
  if (UseCma(buf.bytes())) {
    header_->addr[rank()].store(reinterpret_cast<uint64_t>(buf.data), std::memory_order_release);
    Wait("broadcast");
    if (rank() != root) ReadPeer(root, PeerBuffer(root), buf.data, buf.bytes(), "broadcast");
    Wait("broadcast");
    return;
  }
  const size_t window = static_cast<size_t>(P) * options_.slot_bytes / es;
  for (size_t off = 0; off < buf.count; off += window) {
    const size_t n = std::min(window, buf.count - off);
    if (rank() == root) std::memcpy(Common(), buf.data + off * es, n * es);
    Wait("broadcast");
    if (rank() != root) std::memcpy(buf.data + off * es, Common(), n * es);
    Wait("broadcast");
  }
}

void ShmCommunicator::SendRecv(View, int, View, int) {
  throw CommError(fmt::format("sendrecv on rank {}: a node's shared-memory group has no "
                              "point-to-point; use the job's (hierarchical) communicator",
                              JobRank(options_.rank)),
                  -1);
}

void ShmCommunicator::AllToAll(View in, View out) {
  CheckSameType(in, out, "alltoall");
  const int P = options_.size, me = options_.rank;
  if (in.count != out.count || in.count % P != 0) {
    throw CommError(fmt::format("alltoall on rank {}: {} in, {} out; both must be the same "
                                "multiple of the group size {}",
                                JobRank(me), in.count, out.count, P),
                    -1);
  }
  const size_t es = DTypeSize(in.dtype), block = in.count / P;
  if (P == 1) {
    std::memmove(out.data, in.data, in.bytes());
    return CheckAborted("alltoall");
  }
  in = AllToAllSource(in, out, scratch_);
  if (UseSmall(in.bytes())) return SmallAllToAll(in, out);
  if (UseCma(in.bytes())) {
    header_->addr[me].store(reinterpret_cast<uint64_t>(in.data), std::memory_order_release);
    Wait("alltoall");
    for (int j = 0; j < P; ++j) {
      std::byte* dst = out.data + j * block * es;
      if (j == me) {
        std::memcpy(dst, in.data + me * block * es, block * es);
      } else {
        ReadPeer(j, PeerBuffer(j) + me * block * es, dst, block * es, "alltoall");
      }
    }
    Wait("alltoall");
    return;
  }
  const size_t window = StagedBytes() / es / P;  // elements of one block per pass
  for (size_t off = 0; off < block; off += window) {
    const size_t n = std::min(window, block - off);
    // This rank's own block goes straight across: a quarter less copying at
    // 4 ranks.
    for (int j = 0; j < P; ++j) {
      if (j != me)
        std::memcpy(Slot(me) + j * window * es, in.data + (j * block + off) * es, n * es);
    }
    std::memcpy(out.data + (me * block + off) * es, in.data + (me * block + off) * es, n * es);
    Wait("alltoall");
    for (int j = 0; j < P; ++j) {
      if (j != me)
        std::memcpy(out.data + (j * block + off) * es, Slot(j) + me * window * es, n * es);
    }
    Wait("alltoall");
  }
}

}  // namespace fmstack::comm
