// comm: a Communicator over NCCL for device buffers: every View's data is
// memory on this rank's device. The ranks meet through the job's store (rank
// 0 publishes the NCCL unique id), the communicator is non-blocking, and
// every wait polls with a deadline, so a dead or stalled peer is a CommError
// naming the operation and the seconds waited, never a hang. Built only with
// FMSTACK_HAVE_CUDA.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace fmstack::comm {

struct NcclOptions {
  std::shared_ptr<TcpStore> store;
  std::string prefix;  // store namespace of this group, e.g. "gen0/nccl"
  int rank = 0, size = 1;
  int device = 0;  // the CUDA device this rank's buffers live on
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective: every rank of the group calls it. Throws CommError when the
  // device, the id exchange or NCCL's initialisation fails or outlasts the
  // timeout.
  explicit NcclCommunicator(NcclOptions options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::string name() const override { return "nccl"; }

  // Each call queues on the communicator's stream and returns when the
  // result is in `out` (the stream has drained).
  void AllReduce(View buf, ReduceOp op) override;
  void ReduceScatter(View in, View out, ReduceOp op) override;
  void AllGather(View in, View out) override;
  void Broadcast(View buf, int root) override;
  void AllToAll(View in, View out) override;
  void Barrier() override;
  void SendRecv(View send, int to, View recv, int from) override;
  void Abort(const std::string& reason) override;

 private:
  struct State;
  // Runs `enqueue` (NCCL calls, grouped if several), then waits for the
  // stream with the deadline; op names the collective in errors.
  template <typename Fn>
  void Run(const char* op, Fn&& enqueue);
  void WaitReady(const char* op, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void Fail(const char* op, const std::string& why);

  NcclOptions options_;
  std::unique_ptr<State> state_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;
};

}  // namespace fmstack::comm
