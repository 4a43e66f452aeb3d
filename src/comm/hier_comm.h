// comm: the job's communicator. Ranks on one node talk through shared memory
// (ShmCommunicator), ranks across nodes over TCP, as NCCL uses NVLink
// inside a node and the network between nodes. A large allreduce runs
// along rails (reduce-scatter inside the node, each local rank all-reduces
// its shard with the same local rank of the other nodes, all-gather inside);
// a small one through the node leaders (local rank 0: reduce, allreduce
// among leaders, broadcast). Connect() builds it from the torchrun-style environment
// that `fmstack run` (or torchrun, or Slurm via fmstack) sets.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/tcp_store.h"

namespace fmstack::comm {

struct CommOptions {
  std::shared_ptr<TcpStore> store;
  int rank = 0, size = 1;              // RANK, WORLD_SIZE
  int local_rank = 0, local_size = 1;  // LOCAL_RANK, LOCAL_WORLD_SIZE
  std::string job_id = "job";          // names shared-memory segments
  int64_t generation = 0;              // bumped on every rebuild after a failure
  std::string hostname = "127.0.0.1";  // address this rank listens on
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // "auto": shared memory inside a node, `net` across nodes (hierarchical);
  // "gloo" or "tcp": that transport between every pair of ranks, the node
  // boundary ignored.
  std::string transport = "auto";
  // Between nodes: "tcp", our own mesh (tcp_comm.h, the default), or
  // "gloo", Gloo's TCP transport (its reference). FMSTACK_COMM_NET.
  std::string net = "tcp";
  size_t shm_slot_bytes = 4 << 20;
  size_t shm_window_bytes = 0;  // 0: sized from the L3 cache (shm_comm.h)
  // A peer read of the single-copy path; 0: by the node's rank count
  // (shm_comm.h, CmaChunkFor), which all-reduce times against 256 KiB.
  // FMSTACK_SHM_CMA_CHUNK_BYTES.
  size_t shm_cma_chunk_bytes = 0;
  size_t gloo_segment_bytes = 1 << 20;
  // The TCP mesh's pipelined allreduce chunk (TcpOptions::
  // pipeline_chunk_bytes; 0, the default: windows only).
  // FMSTACK_TCP_PIPELINE_BYTES.
  size_t tcp_pipeline_bytes = 0;
  // Allreduces of at least this many bytes go along rails rather than
  // through the leaders; 0 = always the leaders (FMSTACK_COMM_RAIL_MIN_BYTES).
  size_t rail_min_bytes = 1 << 20;
  // The TCP mesh spins on its sockets for the whole of every wait instead
  // of sleeping after a short spin (FMSTACK_COMM_BUSY_POLL=1): lowest
  // latency, a core per rank while waiting.
  bool busy_poll = false;
  // Else each wait spins this long before it sleeps (FMSTACK_COMM_SPIN_US).
  std::chrono::microseconds spin{50};
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, the store's address
// (FMSTACK_STORE_ADDR and _PORT under `fmstack run`, else MASTER_ADDR and
// MASTER_PORT) and FMSTACK_{JOB_ID,GENERATION,HOST,COMM_TRANSPORT,COMM_NET,
// COMM_TIMEOUT_MS,COMM_BUSY_POLL,COMM_SPIN_US,COMM_RAIL_MIN_BYTES,
// STORE_SECRET}; connects to the store and authenticates.
// Throws Error naming a missing or malformed variable.
CommOptions OptionsFromEnv();

// Collective over all ranks of options: every rank must call it.
std::unique_ptr<Communicator> Connect(const CommOptions& options);

}  // namespace fmstack::comm
