// sim: the cost of collectives, alpha-beta per link level. Sizes follow
// nccl-tests: `bytes` is the buffer an op is named by (allreduce, broadcast,
// alltoall: the buffer; allgather: the output; reduce-scatter: the input), so
// algbw = bytes / time and busbw = algbw x BusFactor. With zero latency a ring
// on one level reaches busbw = link bandwidth exactly, as nccl-tests reports
// for a saturated link.
#pragma once

#include <span>
#include <string>

namespace fmstack::sim {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast };
enum class Algorithm { kRing, kTree };

const char* CollectiveName(Collective c);

// One level of the topology: `ranks` peers that talk over links of this kind
// (NVLink inside a node, the NIC between nodes ...), each rank with
// `bandwidth` bytes/s in each direction and `latency` seconds per message.
struct LinkLevel {
  std::string name;
  int ranks = 1;
  double bandwidth = 0;
  double latency = 0;
};

// nccl-tests' bus bandwidth factor: 2(n-1)/n for allreduce, (n-1)/n for
// allgather, reduce-scatter and alltoall, 1 for broadcast.
double BusFactor(Collective c, int n);

// Seconds for one collective among the ranks of one level.
double FlatTime(Collective c, Algorithm a, double bytes, const LinkLevel& level);

// Seconds on a hierarchy, innermost level first (ranks = product of the
// levels' ranks), as NCCL runs across NVLink and the network: an allreduce
// reduce-scatters inside, allreduces each shard across the next level out
// (all shards at once, each over its own rank's share of the links), then
// all-gathers inside; allgather and reduce-scatter do their halves of that;
// alltoall sends each level's share of the buffer over that level.
//
// The phases use different links, so a message cut into chunks flows
// through them as a pipeline: every phase's latency, plus the slowest
// phase's wire time, plus the others' for one chunk each. A message of one
// chunk (or less) pays the phases in series.
double HierarchicalTime(Collective c, double bytes, std::span<const LinkLevel> levels);

// The pipeline's chunk: one NCCL buffer (NCCL_BUFFSIZE's default, 4 MiB).
inline constexpr double kPipelineChunkBytes = 4 << 20;

}  // namespace fmstack::sim
