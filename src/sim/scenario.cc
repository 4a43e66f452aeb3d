#include "sim/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::sim {
namespace {

constexpr double kDay = 86400;

// Node-local NVMe when the spec does not size it: the catalog's estimate.
double LocalBandwidth(const spec::ClusterSpec& c, const catalog::Catalog& catalog) {
  if (c.local.configured && c.local.write_bandwidth > 0) return c.local.write_bandwidth;
  const catalog::StorageTier* nvme = catalog.FindStorage("instance-nvme");
  return nvme != nullptr ? nvme->write_bandwidth : 0;
}

std::vector<TierModel> Tiers(const spec::JobSpec& job, const catalog::Catalog& catalog,
                             double bytes, int64_t nodes) {
  const spec::ClusterSpec& c = *job.cluster;
  std::vector<TierModel> tiers;
  const double local_bw = LocalBandwidth(c, catalog);
  if (local_bw > 0 && (c.local.configured || c.instance.nvme_bytes > 0)) {
    // Each node writes its share; with a peer replica it also receives one.
    const double per_node = bytes / static_cast<double>(nodes);
    const double copies = job.resilience.local_replica ? 2.0 : 1.0;
    tiers.push_back({"local", copies * per_node / local_bw, per_node / local_bw, true});
  }
  if (c.shared.configured && c.shared.write_bandwidth > 0) {
    tiers.push_back(
        {"shared", bytes / c.shared.write_bandwidth, bytes / c.shared.write_bandwidth, false});
  }
  if (c.object.configured && c.object.write_bandwidth > 0) {
    tiers.push_back(
        {"object", bytes / c.object.write_bandwidth, bytes / c.object.write_bandwidth, false});
  }
  return tiers;
}

}  // namespace

std::vector<catalog::FaultCause> ResolveCauses(const spec::JobSpec& job,
                                               const catalog::Catalog& catalog,
                                               double* planned_per_node_hour, std::string* source) {
  std::vector<catalog::FaultCause> causes;
  *planned_per_node_hour = 0;
  std::string set = job.faults.set;
  const double node_mtbf = job.cluster ? job.cluster->node_mtbf_seconds : 0;
  if (set.empty() && node_mtbf > 0) {
    catalog::FaultCause node;
    node.name = "node";
    node.component = "node";
    node.recovery = catalog::Recovery::kReplace;
    node.rate_per_node_hour = 3600.0 / node_mtbf;
    node.detect_seconds = 60;
    node.out_of_service_seconds = 24 * 3600;
    causes.push_back(node);
    *source = fmt::format("cluster.node_mtbf = {:.0f} h", node_mtbf / 3600);
  } else {
    const bool by_default = set.empty();
    if (by_default) set = "llama3-405b";
    if (set != "none") {
      const catalog::FaultSet* fs = catalog.FindFaultSet(set);
      if (fs == nullptr) throw Error(fmt::format("fault set '{}' is not in the catalog", set));
      causes = fs->causes;
      if (job.faults.planned) *planned_per_node_hour = fs->planned_per_node_hour;
      *source =
          fmt::format("fault set {}{}: {}", fs->name,
                      by_default ? " (the default: the job has no faults.set)" : "", fs->source);
    } else {
      *source = "no catalog fault set";
    }
  }
  if (!job.faults.causes.empty())
    *source += fmt::format(" + {} from the spec", job.faults.causes.size());
  causes.insert(causes.end(), job.faults.causes.begin(), job.faults.causes.end());
  for (catalog::FaultCause& c : causes) c.rate_per_node_hour *= job.faults.scale;
  *planned_per_node_hour *= job.faults.scale;
  return causes;
}

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

  // Checkpoint: weights, master copy and optimizer state, spread over all nodes.
  const workload::ParamCounts params = workload::CountParams(job.model);
  info.checkpoint_bytes =
      static_cast<double>(params.total) * job.train.state.checkpoint_per_param();
  const double per_accelerator = info.checkpoint_bytes / static_cast<double>(job.layout.world());
  s.checkpoint_blocking = per_accelerator / job.resilience.snapshot_bandwidth;
  s.tiers = Tiers(job, catalog, info.checkpoint_bytes, cl.nodes);
  s.local_replica = job.resilience.local_replica;
  s.keep = job.checkpoint.keep;
  s.milestone_interval = job.checkpoint.milestone_seconds;
  for (const TierModel& t : s.tiers) info.drain = std::max(info.drain, t.write_seconds);

  std::string source;
  s.causes = ResolveCauses(job, catalog, &s.planned_per_node_hour, &source);
  info.fault_source = source;
  info.mtti = resilience::JobMtti(s.causes, cl.nodes, cl.job_mtti_seconds);
  if (job.checkpoint.interval_auto) {
    s.checkpoint_interval =
        resilience::CheckpointInterval(s.checkpoint_blocking, info.mtti, info.drain);
    if (s.checkpoint_interval <= 0) s.checkpoint_interval = 3600;
    info.interval_rule = s.checkpoint_interval > info.drain
                             ? "auto: Young/Daly sqrt(2 x blocking x MTTI)"
                             : "auto: slowest tier's drain time";
  } else {
    s.checkpoint_interval = job.checkpoint.interval_seconds;
    info.interval_rule = "checkpoint.interval";
  }

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
