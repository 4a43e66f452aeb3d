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

// FMSTACK_RESHAPE_FROM: the world a newcomer's group grows from; 0 = none.
int ReshapeFrom() {
  const char* v = std::getenv("FMSTACK_RESHAPE_FROM");
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 1 || n > 1 << 20)
    throw Error(fmt::format("FMSTACK_RESHAPE_FROM={}: expected a world size", v));
  return static_cast<int>(n);
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
  if (const char* g = std::getenv("FMSTACK_GENERATION")) generation_ = std::atoll(g);
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
  if (const int from = ReshapeFrom(); from > 0) return Reshape(from, -1);
  return Restore(/*fresh=*/true);
}

bool TrainPeers::Recover(const comm::CommError& error) {
  const int rank = trainer_.rank(), world = trainer_.world();
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
  // An elastic rejoin names the new group and this rank's place in it.
  const int from_world = world, from_rank = rank;
  options.size = (*cmd).value("world", from_world);
  options.rank = (*cmd).value("rank", from_rank);
  generation_ = options.generation;
  try {
    comm_ = comm::Connect(options);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("rank {}: rejoining generation {} failed: {}\n", rank,
                             options.generation, e.what());
    return false;
  }
  const bool reshape = options.size != from_world || options.rank != from_rank;
  if (reshape) {
    trainer_.Reshape(comm_.get());
  } else {
    trainer_.Attach(comm_.get());
  }
  {
    const std::lock_guard lock(mu_);
    live_ = comm_.get();
  }
  return reshape ? Reshape(from_world, from_rank) : Restore(/*fresh=*/false);
}

bool TrainPeers::Reshape(int from_world, int from_rank) {
  control_.Progress(trainer_.step(), "restore");
  const train::PeerReplicas::Outcome o = peers_.Reshape(trainer_, from_world, from_rank);
  if (o.step >= 0) checkpoints_.Reshaped();
  if (!Report(o, from_rank < 0)) return false;
  if (trainer_.rank() == 0) {
    const comm::Range mine = trainer_.MicroBatches();
    const int64_t G = trainer_.config().grad_accum;
    std::cerr << fmt::format(
        "elastic: {} -> {} data-parallel ranks; the global batch stays {} micro-batches of {} "
        "({} per rank{})\n",
        from_world, trainer_.world(), G, trainer_.config().micro_batch, mine.count,
        G % trainer_.world() == 0 ? "" : ", some ranks one fewer");
  }
  return true;
}

bool TrainPeers::Restore(bool fresh) {
  control_.Progress(trainer_.step(), "restore");
  const train::PeerReplicas::Outcome o = peers_.Restore(trainer_, fresh);
  if (o.step >= 0) checkpoints_.Rejoined();  // the survivors' cadence and saves hold for all
  return Report(o, fresh);
}

bool TrainPeers::Report(const train::PeerReplicas::Outcome& o, bool fresh) {
  const int rank = trainer_.rank();
  if (o.step < 0) {
    const std::string what = fmt::format(
        "checkpointless recovery failed: {}; the newest checkpoint must serve", o.source);
    std::cerr << fmt::format("rank {}: {}\n", rank, what);
    control_.Send({{"ev", "fault"},
                   {"kind", "peer-restore-failed"},
                   {"rank", rank},
                   {"step", trainer_.step()},
                   {"gen", generation_},
                   {"what", what}});
    return false;
  }
  control_.Send({{"ev", "restore"},
                 {"step", o.step},
                 {"seconds", o.seconds},
                 {"source", "peers"},
                 {"world", trainer_.world()},
                 {"bytes", o.bytes},
                 {"what", o.source}});
  if (rank == 0 || fresh) {
    std::cerr << fmt::format("rank {}: step {} restored from peer memory in {:.3f} s ({})\n", rank,
                             o.step, o.seconds, o.source);
  }
  return true;
}

}  // namespace fmstack::cli
