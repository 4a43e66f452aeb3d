// comm: a Communicator over Gloo's TCP transport, full mesh. Gloo's own
// algorithms do small allreduces (bcube, then ring), broadcast, alltoall and
// barrier; reduce-scatter and allgather with uneven shards are rings of our
// own on Gloo's unbound buffers, and a large allreduce is the two in turn.
// Opt-in, small float allreduces run on a second mesh of synchronous pairs
// (gloo_sync_allreduce.h).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace gloo::rendezvous {
class Context;
}
namespace gloo::transport {
class UnboundBuffer;
}

namespace fmstack::comm {

class GlooSyncAllreduce;

struct GlooOptions {
  std::shared_ptr<TcpStore> store;
  std::string prefix;                  // store namespace of this group, e.g. "gen0/world"
  int rank = 0, size = 1;              // within this group
  std::vector<int> job_ranks;          // group rank -> job rank, for messages; empty = same
  std::string hostname = "127.0.0.1";  // address this rank listens on
  int64_t generation = 0;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  size_t small_message_bytes = 256 * 1024;  // below this, allreduce uses bcube
  size_t segment_bytes = 1 << 20;           // ring pipelining unit (Gloo's default)
  // From here up, allreduce = reduce-scatter ring + allgatherv ring.
  size_t split_allreduce_bytes = size_t{1} << 20;
  // Float allreduces up to this size run on a second mesh of synchronous
  // pairs (gloo_sync_allreduce.h); 0 = none. Larger messages would deadlock
  // there: each message must fit the sockets' default buffers (16 KiB send
  // + 128 KiB receive), and 128 KiB ones already stalled for 300 us.
  // busy_poll makes those reads spin instead of sleeping: lowest latency,
  // one core per rank while waiting.
  size_t sync_allreduce_max_bytes = 0;
  bool busy_poll = false;
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects the full mesh through the store; throws CommError on failure.
  explicit GlooCommunicator(GlooOptions options);
  ~GlooCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::string name() const override { return "gloo"; }

  void AllReduce(View buf, ReduceOp op) override;
  void ReduceScatter(View in, View out, ReduceOp op) override;
  void AllGather(View in, View out) override;
  void Broadcast(View buf, int root) override;
  void AllToAll(View in, View out) override;
  void Barrier() override;
  void SendRecv(View send, int to, View recv, int from) override;
  void Abort(const std::string& reason) override;

  // Gathers variable-sized blocks: rank r contributes `in` = ranges[r] of out.
  void AllGatherRanges(View in, View out, const std::vector<Range>& ranges);
  // Ring reduce-scatter where rank r owns ranges[r] of `buf` (in place).
  void ReduceScatterRanges(View buf, const std::vector<Range>& ranges, ReduceOp op);

 private:
  template <typename Fn>
  void Guarded(const char* op, Fn&& fn);
  [[noreturn]] void Fail(const char* op, const std::string& transport_error);
  int JobRank(int group_rank) const;

  GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;
  int abort_rank_ = -1;
  std::vector<std::byte> scratch_;
  std::vector<int> sockets_;  // opened by connectFullMesh; shut down by Abort
  std::unique_ptr<GlooSyncAllreduce> sync_;
  // Buffers with a send or receive in flight. A closed socket does not
  // always wake Gloo's waits on them (a peer that left before posting its
  // side), so Abort wakes them itself.
  class Pending;
  std::mutex pending_mu_;
  std::set<gloo::transport::UnboundBuffer*> pending_;
};

}  // namespace fmstack::comm
