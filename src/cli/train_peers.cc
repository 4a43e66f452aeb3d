#include "cli/train_peers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "comm/hier_comm.h"

namespace fmstack::cli {
namespace {

int ProcsPerNode() {
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  const int n = v != nullptr ? std::atoi(v) : 1;
  return std::max(1, n);
}

}  // namespace

TrainPeers::TrainPeers(const spec::JobSpec& job, runtime::Worker& control, train::Trainer& trainer,
                       TrainCheckpointer& checkpoints, std::unique_ptr<comm::Communicator>& comm)
    : job_(job),
      control_(control),
      trainer_(trainer),
      checkpoints_(checkpoints),
      comm_(comm),
      peers_(job.resilience.peer_replica_every, ProcsPerNode()) {
  enabled_ = control.active() && comm && comm->size() >= 2 && job.resilience.policy != "checkpoint";
  if (Joining() && !enabled_) {
    throw Error(fmt::format(
        "FMSTACK_PEER_RESTORE is set, but this rank has no peers to restore "
        "from (resilience.policy = \"{}\", {} ranks, {}supervised)",
        job.resilience.policy, comm ? comm->size() : 1, control.active() ? "" : "not "));
  }
  if (!enabled_) return;
  replacement_ = Joining();
  live_ = comm.get();
  // The supervisor's "rejoin" ends whatever collective this rank waits in:
  // a peer that was lost will not answer it.
  control.OnArrival("rejoin", [this](const nlohmann::json& cmd) {
    const std::lock_guard lock(mu_);
    if (live_ != nullptr)
      live_->Abort(fmt::format("the supervisor replaces a lost rank (generation {})",
                               cmd.value("generation", int64_t{-1})));
  });
}

TrainPeers::~TrainPeers() {
  if (enabled_) control_.OnArrival("rejoin", nullptr);
}

bool TrainPeers::Joining() {
  return std::getenv("FMSTACK_PEER_RESTORE") != nullptr;
}

double TrainPeers::AfterStep() {
  return enabled_ ? peers_.AfterStep(trainer_) : 0;
}

bool TrainPeers::Join() {
  return Restore(/*fresh=*/true);
}

bool TrainPeers::Recover(const comm::CommError& error) {
  const int rank = trainer_.rank();
  control_.Progress(trainer_.step(), "recover");
  std::cerr << fmt::format(
      "rank {}: {}\nrank {}: waiting for the supervisor to replace the lost "
      "rank\n",
      rank, error.what(), rank);
  {
    const std::lock_guard lock(mu_);
    live_ = nullptr;
  }
  // An exchange in flight uses the communicator: abort it, then wait.
  if (comm_) comm_->Abort("this rank recovers from a failed collective");
  peers_.Wait();
  trainer_.Detach();
  comm_.reset();
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(job_.resilience.collective_timeout * 1000));
  const std::optional<nlohmann::json> cmd = control_.WaitCommand("rejoin", timeout);
  if (!cmd || !(*cmd)["generation"].is_number_integer()) {
    std::cerr << fmt::format("rank {}: no rejoin from the supervisor within {:.0f} s; exiting\n",
                             rank, job_.resilience.collective_timeout);
    return false;
  }
  comm::CommOptions options = comm::OptionsFromEnv();
  options.generation = (*cmd)["generation"].get<int64_t>();
  try {
    comm_ = comm::Connect(options);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("rank {}: rejoining generation {} failed: {}\n", rank,
                             options.generation, e.what());
    return false;
  }
  trainer_.Attach(comm_.get());
  {
    const std::lock_guard lock(mu_);
    live_ = comm_.get();
  }
  return Restore(/*fresh=*/false);
}

bool TrainPeers::Restore(bool fresh) {
  control_.Progress(trainer_.step(), "restore");
  const train::PeerReplicas::Outcome o = peers_.Restore(trainer_, fresh);
  const int rank = trainer_.rank();
  if (o.step < 0) {
    const std::string what = fmt::format(
        "checkpointless recovery failed: {}; the newest checkpoint must serve", o.source);
    std::cerr << fmt::format("rank {}: {}\n", rank, what);
    control_.Send({{"ev", "fault"},
                   {"kind", "peer-restore-failed"},
                   {"rank", rank},
                   {"step", trainer_.step()},
                   {"what", what}});
    return false;
  }
  // The survivors' checkpoint cadence and newest save hold for everyone.
  const std::vector<double> every =
      trainer_.AllValues(static_cast<double>(checkpoints_.every_steps()));
  const std::vector<double> saved =
      trainer_.AllValues(static_cast<double>(checkpoints_.saved_through()));
  checkpoints_.Rejoined(static_cast<int64_t>(*std::max_element(every.begin(), every.end())),
                        static_cast<int64_t>(*std::max_element(saved.begin(), saved.end())));
  control_.Send({{"ev", "restore"},
                 {"step", o.step},
                 {"seconds", o.seconds},
                 {"source", "peers"},
                 {"bytes", o.bytes},
                 {"what", o.source}});
  if (rank == 0 || fresh) {
    std::cerr << fmt::format("rank {}: step {} restored from peer memory in {:.3f} s ({})\n", rank,
                             o.step, o.seconds, o.source);
  }
  return true;
}

}  // namespace fmstack::cli
