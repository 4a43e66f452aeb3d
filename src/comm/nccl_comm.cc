#include "comm/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace fmstack::comm {

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* barrier_word = nullptr;  // device scratch for Barrier
  bool comm_aborted = false;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (barrier_word != nullptr) cudaFree(barrier_word);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t NcclType(DType t) {
  return t == DType::kF32 ? ncclFloat32 : ncclBfloat16;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  return op == ReduceOp::kAvg ? ncclAvg : ncclSum;
}

// Waits between polls: short at first (a collective of a few KB takes
// microseconds), then up to a millisecond so a long wait does not spin.
void Backoff(int& polls) {
  if (++polls < 100) return;
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, polls)));
}

std::string IdKey(const NcclOptions& o) {
  return o.prefix + "/nccl_unique_id";
}

}  // namespace

NcclCommunicator::NcclCommunicator(NcclOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {
  const char* op = "init";
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  if (cudaSetDevice(options_.device) != cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    throw CommError(fmt::format("nccl: rank {} of {}: device {} is not usable: {}", options_.rank,
                                options_.size, options_.device, cudaGetErrorString(e)),
                    -1);
  }
  if (cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&state_->barrier_word), sizeof(float)) != cudaSuccess) {
    Fail(op, fmt::format("CUDA: {}", cudaGetErrorString(cudaGetLastError())));
  }
  ncclUniqueId id{};
  if (options_.rank == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      Fail(op, fmt::format("ncclGetUniqueId: {}", ncclGetErrorString(r)));
    }
    options_.store->Set(IdKey(options_), std::string(id.internal, sizeof id.internal));
  } else {
    const std::string bytes = options_.store->Get(IdKey(options_), options_.timeout);
    if (bytes.size() != sizeof id.internal) {
      Fail(op, fmt::format("store key {} holds {} bytes, expected an NCCL unique id of {}",
                           IdKey(options_), bytes.size(), sizeof id.internal));
    }
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait below is ours, with a deadline
  const ncclResult_t r =
      ncclCommInitRankConfig(&state_->comm, options_.size, id, options_.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    Fail(op, fmt::format("ncclCommInitRankConfig: {}", ncclGetErrorString(r)));
  }
  WaitReady(op, deadline);
}

NcclCommunicator::~NcclCommunicator() {
  if (state_->comm != nullptr && !state_->comm_aborted) {
    // A healthy group finalizes; one that failed is torn down at once.
    if (aborted_) {
      ncclCommAbort(state_->comm);
    } else {
      ncclCommDestroy(state_->comm);
    }
  }
}

void NcclCommunicator::Abort(const std::string& reason) {
  const std::lock_guard lock(abort_mu_);
  if (aborted_.exchange(true)) return;
  abort_reason_ = reason;  // the thread waiting in Run aborts the NCCL communicator
}

void NcclCommunicator::Fail(const char* op, const std::string& why) {
  if (state_->comm != nullptr && !state_->comm_aborted) {
    ncclCommAbort(state_->comm);  // frees the peers blocked on this rank
    state_->comm_aborted = true;
  }
  aborted_ = true;
  throw CommError(fmt::format("nccl {} on rank {} of {} (group '{}', device {}): {}", op,
                              options_.rank, options_.size, options_.prefix, options_.device, why),
                  -1);
}

// Polls until NCCL has finished the calls queued so far (non-blocking mode
// returns ncclInProgress), failing on an asynchronous error, an Abort or the
// deadline.
void NcclCommunicator::WaitReady(const char* op, Clock::time_point deadline) {
  int polls = 0;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(state_->comm, &state);
    if (r != ncclSuccess) Fail(op, fmt::format("ncclCommGetAsyncError: {}", ncclGetErrorString(r)));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      Fail(op, fmt::format("{} ({})", ncclGetErrorString(state), ncclGetLastError(state_->comm)));
    }
    if (aborted_) Fail(op, "aborted: " + abort_reason_);
    if (Clock::now() > deadline) {
      Fail(op, fmt::format("NCCL did not finish in {} s (a peer is dead, stalled or never joined)",
                           std::chrono::duration<double>(options_.timeout).count()));
    }
    Backoff(polls);
  }
}

template <typename Fn>
void NcclCommunicator::Run(const char* op, Fn&& enqueue) {
  if (aborted_) {
    throw CommError(fmt::format("nccl {} on rank {}: the group was aborted: {}", op, options_.rank,
                                abort_reason_),
                    -1);
  }
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  const ncclResult_t r = enqueue(state_->comm, state_->stream);
  if (r != ncclSuccess && r != ncclInProgress) {
    Fail(op, fmt::format("{} ({})", ncclGetErrorString(r), ncclGetLastError(state_->comm)));
  }
  WaitReady(op, deadline);
  int polls = 0;
  for (;;) {
    const cudaError_t s = cudaStreamQuery(state_->stream);
    if (s == cudaSuccess) return;
    if (s != cudaErrorNotReady) Fail(op, fmt::format("CUDA: {}", cudaGetErrorString(s)));
    WaitReady(op, deadline);  // a peer's failure shows here while the stream waits
    if (aborted_) Fail(op, "aborted: " + abort_reason_);
    if (Clock::now() > deadline) {
      Fail(op, fmt::format("the collective did not complete in {} s (a peer is dead or stalled)",
                           std::chrono::duration<double>(options_.timeout).count()));
    }
    Backoff(polls);
  }
}

void NcclCommunicator::AllReduce(View buf, ReduceOp op) {
  Run("allreduce", [&](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(buf.data, buf.data, buf.count, NcclType(buf.dtype), NcclOp(op), c, s);
  });
}

// NCCL's reduce-scatter and all-gather take equal shards; ShardOf's may
// differ by one, so uneven sizes are a group of reduces (or broadcasts), one
// rooted at each rank, which NCCL runs concurrently.
void NcclCommunicator::ReduceScatter(View in, View out, ReduceOp op) {
  const int n = size(), me = rank();
  if (out.count != ShardOf(in.count, n, me).count) {
    throw CommError(fmt::format("nccl reduce_scatter on rank {}: out holds {} elements, the shard "
                                "of {} over {} ranks is {}",
                                me, out.count, in.count, n, ShardOf(in.count, n, me).count),
                    -1);
  }
  Run("reduce_scatter", [&](ncclComm_t c, cudaStream_t s) {
    if (in.count % static_cast<size_t>(n) == 0) {
      return ncclReduceScatter(in.data, out.data, out.count, NcclType(in.dtype), NcclOp(op), c, s);
    }
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      const Range shard = ShardOf(in.count, n, r);
      std::byte* recv = r == me ? out.data : in.Sub(shard.begin, shard.count).data;
      ncclReduce(in.Sub(shard.begin, shard.count).data, recv, shard.count, NcclType(in.dtype),
                 NcclOp(op), r, c, s);
    }
    return ncclGroupEnd();
  });
}

void NcclCommunicator::AllGather(View in, View out) {
  const int n = size(), me = rank();
  if (in.count != ShardOf(out.count, n, me).count) {
    throw CommError(fmt::format("nccl allgather on rank {}: in holds {} elements, the shard of {} "
                                "over {} ranks is {}",
                                me, in.count, out.count, n, ShardOf(out.count, n, me).count),
                    -1);
  }
  Run("allgather", [&](ncclComm_t c, cudaStream_t s) {
    if (out.count % static_cast<size_t>(n) == 0) {
      return ncclAllGather(in.data, out.data, in.count, NcclType(in.dtype), c, s);
    }
    ncclGroupStart();
    for (int r = 0; r < n; ++r) {
      const Range shard = ShardOf(out.count, n, r);
      const View to = out.Sub(shard.begin, shard.count);
      ncclBroadcast(r == me ? in.data : to.data, to.data, shard.count, NcclType(out.dtype), r, c,
                    s);
    }
    return ncclGroupEnd();
  });
}

void NcclCommunicator::Broadcast(View buf, int root) {
  Run("broadcast", [&](ncclComm_t c, cudaStream_t s) {
    return ncclBroadcast(buf.data, buf.data, buf.count, NcclType(buf.dtype), root, c, s);
  });
}

void NcclCommunicator::AllToAll(View in, View out) {
  const auto n = static_cast<size_t>(size());
  if (in.count != out.count || in.count % n != 0) {
    throw CommError(fmt::format("nccl alltoall on rank {}: in and out must hold the same multiple "
                                "of {} elements, got {} and {}",
                                rank(), n, in.count, out.count),
                    -1);
  }
  const size_t block = in.count / n;
  Run("alltoall", [&](ncclComm_t c, cudaStream_t s) {
    ncclGroupStart();
    for (size_t j = 0; j < n; ++j) {
      ncclSend(in.Sub(j * block, block).data, block, NcclType(in.dtype), static_cast<int>(j), c, s);
      ncclRecv(out.Sub(j * block, block).data, block, NcclType(out.dtype), static_cast<int>(j), c,
               s);
    }
    return ncclGroupEnd();
  });
}

void NcclCommunicator::Barrier() {
  Run("barrier", [&](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(state_->barrier_word, state_->barrier_word, 1, ncclFloat32, ncclSum, c, s);
  });
}

void NcclCommunicator::SendRecv(View send, int to, View recv, int from) {
  Run("sendrecv", [&](ncclComm_t c, cudaStream_t s) {
    ncclGroupStart();
    if (to >= 0) ncclSend(send.data, send.count, NcclType(send.dtype), to, c, s);
    if (from >= 0) ncclRecv(recv.data, recv.count, NcclType(recv.dtype), from, c, s);
    return ncclGroupEnd();
  });
}

}  // namespace fmstack::comm
