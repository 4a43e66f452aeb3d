#include "resilience/job_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "resilience/policy.h"
#include "util/error.h"
#include "util/units.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::resilience {
namespace {

// Node-local NVMe when the spec does not size it: the catalog's estimate.
double LocalBandwidth(const spec::ClusterSpec& c, const catalog::Catalog& catalog) {
  if (c.local.configured && c.local.write_bandwidth > 0) return c.local.write_bandwidth;
  const catalog::StorageTier* nvme = catalog.FindStorage("instance-nvme");
  return nvme != nullptr ? nvme->write_bandwidth : 0;
}

std::vector<TierCost> Tiers(const spec::JobSpec& job, const catalog::Catalog& catalog,
                            double bytes) {
  const spec::ClusterSpec& c = *job.cluster;
  std::vector<TierCost> tiers;
  const double local_bw = LocalBandwidth(c, catalog);
  if (local_bw > 0 && (c.local.configured || c.instance.nvme_bytes > 0)) {
    // Each node writes its share; with a peer replica it also receives one.
    const double per_node = bytes / static_cast<double>(c.nodes);
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

catalog::FaultCause NodeCause(double rate_per_node_hour) {
  catalog::FaultCause node;
  node.name = "node";
  node.component = "node";
  node.recovery = catalog::Recovery::kReplace;
  node.rate_per_node_hour = rate_per_node_hour;
  node.detect_seconds = 60;
  node.out_of_service_seconds = 24 * 3600;
  return node;
}

}  // namespace

FaultLoad ResolveFaultLoad(const spec::JobSpec& job, const catalog::Catalog& catalog) {
  FaultLoad load;
  std::string set = job.faults.set;
  const double node_mtbf = job.cluster ? job.cluster->node_mtbf_seconds : 0;
  if (set.empty() && node_mtbf > 0) {
    load.causes.push_back(NodeCause(3600.0 / node_mtbf));
    // With its unit: a bare number is seconds, and "0 h" hid a 1270 meant as hours.
    load.source = fmt::format("cluster.node_mtbf = {}", units::FormatSeconds(node_mtbf));
  } else {
    const bool by_default = set.empty();
    if (by_default) set = "llama3-405b";
    if (set != "none") {
      const catalog::FaultSet* fs = catalog.FindFaultSet(set);
      if (fs == nullptr) throw Error(fmt::format("fault set '{}' is not in the catalog", set));
      load.causes = fs->causes;
      if (job.faults.planned) load.planned_per_node_hour = fs->planned_per_node_hour;
      load.source =
          fmt::format("fault set {}{}: {}", fs->name,
                      by_default ? " (the default: the job has no faults.set)" : "", fs->source);
    } else {
      load.source = "no catalog fault set";
    }
  }
  if (!job.faults.causes.empty())
    load.source += fmt::format(" + {} from the spec", job.faults.causes.size());
  load.causes.insert(load.causes.end(), job.faults.causes.begin(), job.faults.causes.end());
  for (catalog::FaultCause& c : load.causes) c.rate_per_node_hour *= job.faults.scale;
  load.planned_per_node_hour *= job.faults.scale;

  const int64_t nodes = job.cluster ? job.cluster->nodes : 1;
  const double job_mtti = job.cluster ? job.cluster->job_mtti_seconds : 0;
  if (job_mtti > 0) {
    // The MTTI the cluster file states wins; the causes keep their mix.
    const double want = 3600.0 / (job_mtti * static_cast<double>(nodes));  // per node-hour
    double have = 0;
    for (const catalog::FaultCause& c : load.causes) have += c.rate_per_node_hour;
    if (have > 0) {
      for (catalog::FaultCause& c : load.causes) c.rate_per_node_hour *= want / have;
    } else {
      load.causes.push_back(NodeCause(want));
    }
    load.source += fmt::format(", rescaled to cluster.job_mtti = {:.3g} h", job_mtti / 3600);
  }
  load.mtti = JobMtti(load.causes, nodes, 0);
  return load;
}

NodesAway NodesOutOfService(const FaultLoad& load, int64_t nodes, int64_t spares) {
  double away_per_node = load.planned_per_node_hour / 3600 * kPlannedOutOfService;
  for (const catalog::FaultCause& c : load.causes) {
    if (c.recovery != catalog::Recovery::kRestart)
      away_per_node += c.rate_per_node_hour / 3600 * c.out_of_service_seconds;
  }
  NodesAway a;
  a.mean = away_per_node * static_cast<double>(nodes);
  // Poisson terms in logs: exp(-mean) underflows for a mean above ~745.
  const auto pmf = [&](int64_t k) {
    const double kd = static_cast<double>(k);
    return a.mean > 0 ? std::exp(kd * std::log(a.mean) - a.mean - std::lgamma(kd + 1))
                      : (k == 0 ? 1.0 : 0.0);
  };
  double cdf = 0;
  bool have_99 = false;
  const int64_t last = static_cast<int64_t>(a.mean + 12 * std::sqrt(a.mean) + 20);
  for (int64_t k = 0; k <= std::max(last, spares); ++k) {
    cdf += pmf(k);
    if (k == spares) a.beyond_spares = std::max(0.0, 1 - cdf);
    if (!have_99 && cdf >= 0.99) a.spares_99 = k, have_99 = true;
  }
  if (!have_99) a.spares_99 = last;
  return a;
}

std::string SparesWarning(const NodesAway& away, int64_t spares) {
  if (away.beyond_spares < 0.10) return "";
  return fmt::format(
      "about {:.1f} nodes are away at any time (each fault's rate x how long it keeps a node "
      "away); with {} spare node{} more are away than spares {:.0f}% of the time, and the job "
      "waits then unless resilience.policy = \"elastic\" lets it shrink: cluster.spares = {} "
      "covers 99%",
      away.mean, spares, spares == 1 ? "" : "s", 100 * away.beyond_spares, away.spares_99);
}

CheckpointCost ModelCheckpoints(const spec::JobSpec& job, const catalog::Catalog& catalog,
                                double mtti) {
  if (!job.cluster) throw Error(job.file + ": checkpoint costs need a [cluster]");
  CheckpointCost c;
  const workload::ParamCounts params = workload::CountParams(job.model);
  c.bytes = static_cast<double>(params.total) * job.train.state.checkpoint_per_param();
  const double per_accelerator = c.bytes / static_cast<double>(job.layout.world());
  c.blocking_seconds = per_accelerator / job.resilience.snapshot_bandwidth;
  c.tiers = Tiers(job, catalog, c.bytes);
  for (const TierCost& t : c.tiers) c.drain_seconds = std::max(c.drain_seconds, t.write_seconds);
  if (job.checkpoint.interval_auto) {
    c.interval_seconds = CheckpointInterval(c.blocking_seconds, mtti, c.drain_seconds);
    if (c.interval_seconds <= 0) c.interval_seconds = 3600;
    c.interval_rule = c.interval_seconds > c.drain_seconds
                          ? "auto: Daly, sqrt(2 x blocking x MTTI) to higher order"
                          : "auto: slowest tier's drain time";
  } else {
    c.interval_seconds = job.checkpoint.interval_seconds;
    c.interval_rule = "checkpoint.interval";
  }
  return c;
}

}  // namespace fmstack::resilience
