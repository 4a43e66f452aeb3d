// comm: a Communicator over Gloo's TCP transport, full mesh. Gloo's own
// algorithms do small allreduces (bcube, then ring), broadcast, alltoall and
// barrier; reduce-scatter and allgather with uneven shards are rings of our
// own on Gloo's unbound buffers, and a large allreduce is the two in turn.
// Between nodes the default is TcpCommunicator (tcp_comm.h); this one is
// its reference and FMSTACK_COMM_NET=gloo.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm/abort_latch.h"
#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace gloo::rendezvous {
class Context;
}
namespace gloo::transport {
class UnboundBuffer;
}

namespace fmstack::comm {

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
};

class GlooCommunicator final : public RangeCommunicator {
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

  void AllGatherRanges(View in, View out, const std::vector<Range>& ranges) override;
  void ReduceScatterRanges(View buf, const std::vector<Range>& ranges, ReduceOp op) override;

 private:
  template <typename Fn>
  void Guarded(const char* op, Fn&& fn);
  [[noreturn]] void Fail(const char* op, const std::string& transport_error);
  int JobRank(int group_rank) const;

  GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  AbortLatch abort_;
  std::vector<std::byte> scratch_;
  std::vector<int> sockets_;  // opened by connectFullMesh; shut down by Abort
  // Buffers with a send or receive in flight. A closed socket does not
  // always wake Gloo's waits on them (a peer that left before posting its
  // side), so Abort wakes them itself.
  class Pending;
  std::mutex pending_mu_;
  std::set<gloo::transport::UnboundBuffer*> pending_;
};

}  // namespace fmstack::comm
