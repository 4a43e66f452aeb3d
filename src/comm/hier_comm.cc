#include "comm/hier_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/gloo_comm.h"
#include "comm/reduce.h"
#include "comm/shm_comm.h"
#include "comm/tcp_comm.h"

namespace fmstack::comm {
namespace {

// The fields GlooOptions and TcpOptions share, for one group.
template <typename Options>
Options GroupOptions(const CommOptions& o, const std::string& prefix, int rank, int size,
                     std::vector<int> job_ranks) {
  Options g;
  g.store = o.store;
  g.prefix = prefix;
  g.rank = rank;
  g.size = size;
  g.job_ranks = std::move(job_ranks);
  g.hostname = o.hostname;
  g.generation = o.generation;
  g.timeout = o.timeout;
  return g;
}

// A communicator between nodes, or over every rank: `net` is "tcp" (our
// mesh) or "gloo" (its reference).
std::unique_ptr<RangeCommunicator> NetCommunicator(const CommOptions& o, const std::string& net,
                                                   const std::string& prefix, int rank, int size,
                                                   std::vector<int> job_ranks) {
  if (net == "gloo") {
    auto g = GroupOptions<GlooOptions>(o, prefix, rank, size, std::move(job_ranks));
    g.segment_bytes = o.gloo_segment_bytes;
    return std::make_unique<GlooCommunicator>(std::move(g));
  }
  auto t = GroupOptions<TcpOptions>(o, prefix, rank, size, std::move(job_ranks));
  t.busy_poll = o.busy_poll;
  t.spin = o.spin;
  t.pipeline_chunk_bytes = o.tcp_pipeline_bytes;
  return std::make_unique<TcpCommunicator>(std::move(t));
}

// The flat mesh over every rank of the job.
std::unique_ptr<RangeCommunicator> World(const CommOptions& o, const std::string& net) {
  return NetCommunicator(o, net, fmt::format("gen{}/world", o.generation), o.rank, o.size, {});
}

class HierarchicalCommunicator final : public Communicator {
 public:
  explicit HierarchicalCommunicator(const CommOptions& o)
      : options_(o), nodes_(o.size / o.local_size), node_(o.rank / o.local_size) {
    const std::string gen = fmt::format("gen{}", o.generation);
    ShmOptions s;
    s.store = o.store;
    s.prefix = fmt::format("{}/node{}", gen, node_);
    s.segment = fmt::format("fmstack.{}.n{}.g{}", o.job_id, node_, o.generation);
    s.rank = o.local_rank;
    s.size = o.local_size;
    for (int l = 0; l < o.local_size; ++l) s.job_ranks.push_back(node_ * o.local_size + l);
    s.generation = o.generation;
    s.timeout = o.timeout;
    s.slot_bytes = o.shm_slot_bytes;
    s.window_bytes = o.shm_window_bytes;
    s.cma_chunk_bytes = o.shm_cma_chunk_bytes;
    shm_ = std::make_unique<ShmCommunicator>(std::move(s));
    if (o.local_rank == 0 && nodes_ > 1) {
      std::vector<int> job_ranks;
      for (int n = 0; n < nodes_; ++n) job_ranks.push_back(n * o.local_size);
      leaders_ = NetCommunicator(o, o.net, gen + "/leaders", node_, nodes_, std::move(job_ranks));
    }
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::string name() const override { return "hierarchical"; }

  // Across nodes, two ways. Through the leaders: the node's sum is gathered
  // on its leader, which all-reduces the whole buffer with the other
  // leaders and hands it back; one rank per node does all the network work.
  // Along rails (NCCL's way, and sim's model of it): the node reduce-scatters
  // so that local rank l holds shard l of the node's sum, every local rank
  // all-reduces its shard with local rank l of the other nodes at the same
  // time, and the node all-gathers the shards. Each rank then moves 1/local
  // of the bytes over the network, and all of them at once.
  void AllReduce(View buf, ReduceOp op) override {
    if (nodes_ == 1) return Guarded([&] { shm_->AllReduce(buf, op); });
    if (UseRails(buf.bytes())) {
      Guarded([&] { RailAllReduce(buf); });
    } else {
      Guarded([&] {
        shm_->Reduce(buf, ReduceOp::kSum, 0);
        if (leaders_) leaders_->AllReduce(buf, ReduceOp::kSum);
        shm_->Broadcast(buf, 0);
      });
    }
    if (op == ReduceOp::kAvg) ScaleInPlace(buf.data, buf.count, buf.dtype, 1.0 / size());
  }

  // Inside the node the leader gathers the sum; among leaders each node's
  // contiguous block of shards is reduce-scattered (half an allreduce's
  // traffic); inside the node the leader hands the block back out.
  void ReduceScatter(View in, View out, ReduceOp op) override {
    if (nodes_ == 1) return Guarded([&] { shm_->ReduceScatter(in, out, op); });
    const size_t es = DTypeSize(in.dtype);
    const Range mine = ReduceScatterShard(in, out, size(), rank(), rank());
    const std::vector<Range> blocks = NodeBlocks(in.count);
    Guarded([&] {
      shm_->Reduce(in, ReduceOp::kSum, 0);
      if (leaders_) leaders_->ReduceScatterRanges(in, blocks, ReduceOp::kSum);
      const Range block = blocks[node_];
      shm_->Broadcast(in.Sub(block.begin, block.count), 0);
    });
    std::memmove(out.data, in.data + mine.begin * es, out.bytes());
    if (op == ReduceOp::kAvg) ScaleInPlace(out.data, out.count, out.dtype, 1.0 / size());
  }

  void AllGather(View in, View out) override {
    if (nodes_ == 1) return Guarded([&] { shm_->AllGather(in, out); });
    const size_t es = DTypeSize(in.dtype);
    const Range mine = AllGatherShard(in, out, size(), rank(), rank());
    std::memmove(out.data + mine.begin * es, in.data, in.bytes());
    std::vector<Range> local(options_.local_size);
    for (int l = 0; l < options_.local_size; ++l) {
      local[l] = ShardOf(out.count, size(), node_ * options_.local_size + l);
    }
    const std::vector<Range> blocks = NodeBlocks(out.count);
    Guarded([&] {
      shm_->AllGatherRanges(out, local);
      if (leaders_) {
        const Range b = blocks[node_];
        leaders_->AllGatherRanges(out.Sub(b.begin, b.count), out, blocks);  // already in place
      }
      if (nodes_ > 1) shm_->Broadcast(out, 0);
    });
  }

  void Broadcast(View buf, int root) override {
    const int root_node = root / options_.local_size;
    Guarded([&] {
      if (node_ == root_node) shm_->Broadcast(buf, root % options_.local_size);
      if (leaders_) leaders_->Broadcast(buf, root_node);
      if (node_ != root_node) shm_->Broadcast(buf, 0);
    });
  }

  // All-to-all is point to point by nature: it goes over a flat mesh,
  // built on first use (every rank calls it, so the build is collective too).
  void AllToAll(View in, View out) override {
    if (nodes_ == 1) return Guarded([&] { shm_->AllToAll(in, out); });
    Guarded([&] {
      if (!world_) world_ = World(options_, options_.net);
      world_->AllToAll(in, out);
    });
  }

  // Point to point over the flat mesh too (a peer replica goes to
  // another node, and inside a node the segment has no pairs).
  void SendRecv(View send, int to, View recv, int from) override {
    Guarded([&] {
      if (!world_) world_ = World(options_, options_.net);
      world_->SendRecv(send, to, recv, from);
    });
  }

  void Barrier() override {
    Guarded([&] {
      shm_->Barrier();
      if (leaders_) leaders_->Barrier();
      shm_->Barrier();
    });
  }

  void Abort(const std::string& reason) override {
    shm_->Abort(reason);
    if (leaders_) leaders_->Abort(reason);
    if (rail_) rail_->Abort(reason);
    if (world_) world_->Abort(reason);
  }

 private:
  bool UseRails(size_t bytes) const {
    return options_.local_size > 1 && options_.rail_min_bytes > 0 &&
           bytes >= options_.rail_min_bytes;
  }

  void RailAllReduce(View buf) {
    std::vector<Range> shards(options_.local_size);
    for (int l = 0; l < options_.local_size; ++l)
      shards[l] = ShardOf(buf.count, options_.local_size, l);
    const Range mine = shards[options_.local_rank];
    shm_->ReduceScatter(buf, buf.Sub(mine.begin, mine.count), ReduceOp::kSum);
    // Built on first use: the members of a rail (local rank l of every
    // node) all reach here together, as every rank calls the collective.
    if (!rail_) rail_ = RailCommunicator();
    if (mine.count > 0) rail_->AllReduce(buf.Sub(mine.begin, mine.count), ReduceOp::kSum);
    shm_->AllGatherRanges(buf, shards);
  }

  std::unique_ptr<RangeCommunicator> RailCommunicator() const {
    std::vector<int> job_ranks;
    for (int n = 0; n < nodes_; ++n)
      job_ranks.push_back(n * options_.local_size + options_.local_rank);
    return NetCommunicator(options_, options_.net,
                           fmt::format("gen{}/rail{}", options_.generation, options_.local_rank),
                           node_, nodes_, std::move(job_ranks));
  }

  // Node n's block: the shards of its ranks, contiguous because ranks are
  // numbered node-major.
  std::vector<Range> NodeBlocks(size_t n) const {
    std::vector<Range> blocks(nodes_);
    for (int k = 0; k < nodes_; ++k) {
      const Range first = ShardOf(n, size(), k * options_.local_size);
      const Range last = ShardOf(n, size(), (k + 1) * options_.local_size - 1);
      blocks[k] = Range{first.begin, last.end() - first.begin};
    }
    return blocks;
  }

  // A failure in one layer is pushed into the others, so that ranks blocked
  // on this node's segment or on another node's leader fail fast too, with
  // the same diagnosis.
  template <typename Fn>
  void Guarded(Fn&& fn) {
    try {
      fn();
    } catch (const CommError& e) {
      shm_->Abort(e.what(), e.failed_rank());
      if (leaders_) leaders_->Abort(e.what());
      if (rail_) rail_->Abort(e.what());
      if (world_) world_->Abort(e.what());
      throw;
    }
  }

  CommOptions options_;
  int nodes_, node_;
  std::unique_ptr<ShmCommunicator> shm_;
  std::unique_ptr<RangeCommunicator> leaders_, rail_, world_;
};

std::string Env(const char* name, const char* fallback = nullptr) {
  const char* v = std::getenv(name);
  if (v != nullptr && *v != '\0') return v;
  if (fallback != nullptr) return fallback;
  throw Error(
      fmt::format("environment variable {} is not set (start workers with `fmstack run`, "
                  "or set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR "
                  "and MASTER_PORT as torchrun does)",
                  name));
}

int64_t EnvInt(const char* name, const char* fallback = nullptr) {
  const std::string v = Env(name, fallback);
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < 0) {
    throw Error(fmt::format("environment variable {}='{}' is not a non-negative integer", name, v));
  }
  return x;
}

}  // namespace

CommOptions OptionsFromEnv() {
  CommOptions o;
  o.rank = static_cast<int>(EnvInt("RANK"));
  o.size = static_cast<int>(EnvInt("WORLD_SIZE"));
  o.local_rank = static_cast<int>(EnvInt("LOCAL_RANK"));
  o.local_size = static_cast<int>(EnvInt("LOCAL_WORLD_SIZE"));
  o.job_id = Env("FMSTACK_JOB_ID", "job");
  o.generation = EnvInt("FMSTACK_GENERATION", "0");
  o.hostname = Env("FMSTACK_HOST", "127.0.0.1");
  o.transport = Env("FMSTACK_COMM_TRANSPORT", "auto");
  o.timeout = std::chrono::milliseconds(EnvInt("FMSTACK_COMM_TIMEOUT_MS", "60000"));
  o.shm_slot_bytes = static_cast<size_t>(EnvInt("FMSTACK_SHM_SLOT_BYTES", "4194304"));
  o.shm_window_bytes = static_cast<size_t>(EnvInt("FMSTACK_SHM_WINDOW_BYTES", "0"));
  o.shm_cma_chunk_bytes = static_cast<size_t>(EnvInt("FMSTACK_SHM_CMA_CHUNK_BYTES", "0"));
  o.gloo_segment_bytes = static_cast<size_t>(EnvInt("FMSTACK_GLOO_SEGMENT_BYTES", "1048576"));
  o.tcp_pipeline_bytes = static_cast<size_t>(EnvInt("FMSTACK_TCP_PIPELINE_BYTES", "0"));
  o.rail_min_bytes = static_cast<size_t>(EnvInt("FMSTACK_COMM_RAIL_MIN_BYTES", "1048576"));
  o.net = Env("FMSTACK_COMM_NET", "tcp");
  o.busy_poll = EnvInt("FMSTACK_COMM_BUSY_POLL", "0") != 0;
  o.spin =
      std::chrono::microseconds(std::min<int64_t>(EnvInt("FMSTACK_COMM_SPIN_US", "50"), 1000000));
  // Under `fmstack run` the store is fmstack's own and MASTER_PORT is left to
  // the program; under torchrun's variables alone, MASTER_ADDR:MASTER_PORT.
  const bool own = std::getenv("FMSTACK_STORE_PORT") != nullptr;
  const char* port_var = own ? "FMSTACK_STORE_PORT" : "MASTER_PORT";
  const std::string addr = Env(own ? "FMSTACK_STORE_ADDR" : "MASTER_ADDR");
  const auto port = EnvInt(port_var);
  if (port == 0 || port > 65535) throw Error(fmt::format("{}={} is not a port", port_var, port));
  o.store = std::make_shared<TcpStore>(addr, static_cast<uint16_t>(port),
                                       Env("FMSTACK_STORE_SECRET", ""));
  return o;
}

std::unique_ptr<Communicator> Connect(const CommOptions& o) {
  if (o.size < 1 || o.rank >= o.size || o.local_size < 1 || o.local_rank >= o.local_size ||
      o.size % o.local_size != 0 || o.rank % o.local_size != o.local_rank) {
    throw Error(
        fmt::format("inconsistent layout: RANK={} WORLD_SIZE={} LOCAL_RANK={} "
                    "LOCAL_WORLD_SIZE={} (ranks must be node-major, every node with "
                    "LOCAL_WORLD_SIZE ranks)",
                    o.rank, o.size, o.local_rank, o.local_size));
  }
  if (o.net != "tcp" && o.net != "gloo") {
    throw Error(fmt::format("FMSTACK_COMM_NET='{}': expected \"tcp\" or \"gloo\"", o.net));
  }
  if (o.transport == "gloo" || o.transport == "tcp") return World(o, o.transport);
  if (o.transport != "auto") {
    throw Error(fmt::format("FMSTACK_COMM_TRANSPORT='{}': expected \"auto\", \"tcp\" or \"gloo\"",
                            o.transport));
  }
  return std::make_unique<HierarchicalCommunicator>(o);
}

}  // namespace fmstack::comm
