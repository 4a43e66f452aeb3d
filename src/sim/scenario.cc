#include "sim/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "resilience/job_model.h"
#include "util/error.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::sim {
namespace {

constexpr double kDay = 86400;

}  // namespace

BuiltScenario MakeScenario(const spec::JobSpec& job, const catalog::Catalog& catalog,
                           const ScenarioOptions& options) {
  if (!job.cluster) {
    throw SpecError(job.PosOf("cluster"), "cluster",
                    "sim needs a [cluster] (or cluster = \"file.toml\") to play the job out on");
  }
  const spec::ClusterSpec& cl = *job.cluster;
  BuiltScenario b;
  Scenario& s = b.scenario;
  ScenarioInfo& info = b.info;
  const Topology topo = BuildTopology(cl, options.network);
  info.step = ModelStep(job, topo, cl.accelerator, options.step);

  s.job_nodes = cl.nodes;
  s.spare_nodes = options.spares.value_or(cl.spares);
  s.dp = job.layout.dp;
  s.step_seconds = info.step.total;
  const int64_t global =
      job.train.global_batch > 0 ? job.train.global_batch : job.train.micro_batch * job.layout.dp;
  const double tokens_per_step = static_cast<double>(global * job.model.seq_len);
  if (job.train.tokens > 0) {
    info.steps = static_cast<int64_t>(std::ceil(job.train.tokens / tokens_per_step));
  } else if (job.train.steps > 0) {
    info.steps = job.train.steps;
  }
  s.work_seconds = static_cast<double>(info.steps) * s.step_seconds;
  s.horizon_seconds = options.horizon_seconds > 0 ? options.horizon_seconds
                      : s.work_seconds > 0        ? 20 * s.work_seconds
                                                  : 30 * kDay;
  if (options.horizon_seconds > 0) {  // a fixed window: train throughout
    s.work_seconds = 0;
    info.steps = 0;
  }

  // Faults and checkpoints as plan and the runtime see them (resilience/).
  const resilience::FaultLoad load = resilience::ResolveFaultLoad(job, catalog);
  s.causes = load.causes;
  s.planned_per_node_hour = load.planned_per_node_hour;
  info.fault_source = load.source;
  info.mtti = load.mtti;
  info.nodes_away = resilience::NodesOutOfService(load, s.job_nodes, s.spare_nodes);
  const resilience::CheckpointCost ck = resilience::ModelCheckpoints(job, catalog, info.mtti);
  info.checkpoint_bytes = ck.bytes;
  s.checkpoint_blocking = ck.blocking_seconds;
  s.tiers = ck.tiers;
  info.drain = ck.drain_seconds;
  s.checkpoint_interval = ck.interval_seconds;
  info.interval_rule = ck.interval_rule;
  s.local_replica = job.resilience.local_replica;
  s.keep = job.checkpoint.keep;
  s.milestone_interval = job.checkpoint.milestone_seconds;

  // Peers send a replacement node its ranks' state over its NICs.
  workload::ActivationOptions a;
  a.micro_batch = job.train.micro_batch;
  const double state_per_accelerator =
      workload::PerAccelerator(job.model, job.train.state, job.layout, a).state();
  info.state_per_node = state_per_accelerator * static_cast<double>(cl.instance.accelerators);
  const double nic = topo.network.bandwidth * static_cast<double>(topo.per_node);
  s.restart_seconds = job.resilience.restart_seconds;
  s.peer_rebuild_seconds = job.resilience.peer_rebuild_seconds;
  s.peer_restore_seconds = nic > 0 ? info.state_per_node / nic : 0;

  s.policy.strategy =
      options.strategy.value_or(resilience::ParseStrategy(job.resilience.policy)
                                    .value_or(resilience::Strategy::kCheckpointRestart));
  s.policy.min_dp_fraction = job.resilience.min_dp_fraction;
  s.price_per_node_hour = cl.instance.price_per_hour;
  s.record_timeline = options.timeline;
  return b;
}

}  // namespace fmstack::sim
