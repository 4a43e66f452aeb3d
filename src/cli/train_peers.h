// cli: checkpointless recovery inside `fmstack train`, for runs under
// `fmstack run` with resilience.policy = "checkpointless" (or "elastic"):
// peer replicas refreshed after every peer_replica_every steps, and both
// sides of the supervisor's in-place recovery. A survivor whose collective
// failed drops its communicator, waits for the supervisor's "rejoin",
// connects the new generation and restores its own in-memory copy; a
// replacement restores from its holder's copy instead of a checkpoint.
// When no peer copy can serve, every rank reports "peer-restore-failed"
// and the supervisor restarts from the newest checkpoint.
//
// Under resilience.policy = "elastic" the supervisor may instead drop a lost
// node (its "rejoin" then names a smaller world and this rank's place in
// it) or add a returning one (a newcomer is started with
// FMSTACK_RESHAPE_FROM, the world it grows from): every rank then re-forms
// its shards for the new size from the peers' copies (PeerReplicas::Reshape).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "cli/train_checkpoint.h"
#include "comm/communicator.h"
#include "runtime/worker.h"
#include "spec/job_spec.h"
#include "train/peer_replica.h"
#include "train/trainer.h"

namespace fmstack::cli {

class TrainPeers {
 public:
  // `comm` is the trainer's communicator, replaced on recovery.
  TrainPeers(const spec::JobSpec& job, runtime::Worker& control, train::Trainer& trainer,
             TrainCheckpointer& checkpoints, std::unique_ptr<comm::Communicator>& comm);
  ~TrainPeers();
  TrainPeers(const TrainPeers&) = delete;
  TrainPeers& operator=(const TrainPeers&) = delete;

  // Whether this process was started to replace a lost rank
  // (FMSTACK_PEER_RESTORE from the supervisor).
  static bool Joining();

  bool enabled() const { return enabled_; }
  // Whether this process replaces a lost rank (FMSTACK_PEER_RESTORE).
  bool replacement() const { return replacement_; }
  // After every optimizer step: the refresh's seconds (0 on other steps).
  double AfterStep();
  // A replacement's start, instead of a checkpoint restore. False when the
  // peers could not serve (reported; exit with runtime::kFaultExitCode).
  bool Join();
  // A survivor after a failed collective. False when it cannot go on
  // (reported or timed out; exit with runtime::kFaultExitCode).
  bool Recover(const comm::CommError& error);
  void CorruptHeldCopies() { peers_.CorruptHeldCopies(); }
  // The communicator generation this rank trains in now.
  int64_t generation() const { return generation_; }

 private:
  bool Restore(bool fresh);
  // Elastic: the group changed size; this rank was `from_rank` of
  // `from_world` (-1: a newcomer).
  bool Reshape(int from_world, int from_rank);
  bool Report(const train::PeerReplicas::Outcome& o, bool fresh);

  const spec::JobSpec& job_;
  runtime::Worker& control_;
  train::Trainer& trainer_;
  TrainCheckpointer& checkpoints_;
  std::unique_ptr<comm::Communicator>& comm_;
  train::PeerReplicas peers_;
  bool enabled_ = false, replacement_ = false;
  int64_t generation_ = 0;
  std::mutex mu_;                       // guards live_ against the control thread
  comm::Communicator* live_ = nullptr;  // what a "rejoin" aborts
};

}  // namespace fmstack::cli
