// comm: the job's communicator. Ranks on one node talk through shared memory
// (ShmCommunicator), node leaders (local rank 0) across nodes through Gloo,
// as NCCL uses NVLink inside a node and the network between nodes:
// allreduce = reduce inside the node, allreduce among leaders, broadcast
// inside the node. Connect() builds it from the torchrun-style environment
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
  std::string hostname = "127.0.0.1";  // address Gloo listens on (this node's)
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // "auto": shared memory inside a node, Gloo across nodes (hierarchical);
  // "gloo": Gloo between every pair of ranks, the node boundary ignored.
  std::string transport = "auto";
  size_t shm_slot_bytes = 4 << 20;
  size_t gloo_segment_bytes = 1 << 20;
  // Gloo's float allreduce spins on its sockets instead of sleeping
  // (FMSTACK_COMM_BUSY_POLL=1): lowest latency, a core per rank while waiting.
  bool gloo_busy_poll = false;
  // Float allreduces up to this size use Gloo's synchronous pairs
  // (FMSTACK_GLOO_SYNC_MAX_BYTES, at most 64 KiB; 0 = never, the default:
  // opt-in until a run that differed with it on is explained, docs/comm.md).
  size_t gloo_sync_max_bytes = 0;
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, the store's address
// (FMSTACK_STORE_ADDR and _PORT under `fmstack run`, else MASTER_ADDR and
// MASTER_PORT) and FMSTACK_{JOB_ID,GENERATION,HOST,COMM_TRANSPORT,
// COMM_TIMEOUT_MS,STORE_SECRET}; connects to the store and authenticates.
// Throws Error naming a missing or malformed variable.
CommOptions OptionsFromEnv();

// Collective over all ranks of options: every rank must call it.
std::unique_ptr<Communicator> Connect(const CommOptions& options);

}  // namespace fmstack::comm
