#include "plan/plan.h"

#include <fmt/format.h>

#include <cmath>

#include "plan/sizing.h"
#include "util/units.h"

namespace fmstack::plan {
namespace {

using catalog::Precision;

MemoryPlan PlanMemory(const spec::JobSpec& job, double num_params, const Plan& plan) {
  MemoryPlan m;
  m.bytes = job.train.state;
  m.whole = workload::TrainingState(num_params, m.bytes);
  if (plan.cluster) {
    workload::ActivationOptions a;
    a.micro_batch = job.train.micro_batch;
    a.recompute = job.train.recompute;
    a.flash_attention = job.train.flash_attention;
    a.sequence_parallel = job.layout.sequence_parallel;
    m.per_accelerator = workload::PerAccelerator(job.model, m.bytes, job.layout, a);
    m.hbm_bytes = plan.cluster->accelerator.hbm_bytes;
  }
  return m;
}

void AddFits(MemoryPlan& m, const catalog::Catalog& catalog, Precision precision) {
  for (const catalog::Accelerator& a : catalog.accelerators()) {
    FitRow row;
    row.accelerator = a.name;
    row.hbm_bytes = a.hbm_bytes;
    row.min_for_state = workload::MinDevices(m.whole.state(), a.hbm_bytes);
    row.peak_flops = a.PeakFlops(precision);
    m.fits.push_back(row);
  }
}

CheckpointPlan PlanCheckpoint(const spec::JobSpec& job, double num_params,
                              const std::optional<spec::ClusterSpec>& cluster,
                              const catalog::Catalog& catalog) {
  CheckpointPlan c;
  c.bytes = workload::CheckpointBytes(num_params, job.train.state);
  if (!cluster) return c;
  const resilience::FaultLoad load = resilience::ResolveFaultLoad(job, catalog);
  c.mtti = load.mtti;
  c.mtti_source = load.source;
  c.nodes_away = resilience::NodesOutOfService(load, cluster->nodes, cluster->spares);
  const resilience::CheckpointCost cost = resilience::ModelCheckpoints(job, catalog, c.mtti);
  c.save_seconds = cost.blocking_seconds;
  c.tiers = cost.tiers;
  c.drain_seconds = cost.drain_seconds;
  c.interval = cost.interval_seconds;
  c.interval_rule = cost.interval_rule;
  if (c.mtti > 0) {
    c.interval_tenth_mtti = IntervalTenthOfMtti(c.mtti);
    c.interval_young_daly = c.save_seconds > 0 ? IntervalYoungDaly(c.save_seconds, c.mtti) : 0;
  }
  if (c.interval > 0) {
    if (c.mtti > 0) c.overhead = CheckpointOverhead(c.interval, c.save_seconds, c.mtti);
    c.bandwidth_blocking =
        BlockingSaveBandwidth(c.bytes, c.interval, job.checkpoint.overhead_budget);
    c.bandwidth_async = AsyncSaveBandwidth(c.bytes, c.interval, job.checkpoint.overhead_budget);
  }
  return c;
}

void PlanCompute(Plan& plan, const spec::JobSpec& job, const PlanOptions& options) {
  ComputePlan& c = plan.compute;
  c.tokens = job.train.tokens;
  if (c.tokens <= 0 && job.train.steps > 0 && job.train.global_batch > 0) {
    c.tokens = static_cast<double>(job.train.steps) * static_cast<double>(job.train.global_batch) *
               static_cast<double>(job.model.seq_len);
    c.tokens_from_steps = true;
  }
  c.flops_6n = plan.flops_per_token.six_n * c.tokens;
  c.flops_detailed = plan.flops_per_token.detailed * c.tokens;
  c.target_mfu = job.train.target_mfu;
  c.deadline_days = options.deadline_days;
  for (FitRow& row : plan.memory.fits) {
    if (row.peak_flops > 0 && c.tokens > 0) {
      row.hours = workload::AcceleratorHours(c.flops_6n, row.peak_flops, c.target_mfu);
    }
  }
  if (!plan.cluster) return;
  c.peak_flops = plan.cluster->accelerator.PeakFlops(job.train.precision);
  if (c.peak_flops <= 0) {
    plan.warnings.push_back(fmt::format("{} has no published {} peak; compute time not estimated",
                                        plan.cluster->accelerator.name,
                                        catalog::PrecisionName(job.train.precision)));
    return;
  }
  if (options.observed_hours > 0 && c.tokens > 0) {
    c.observed_hours = options.observed_hours;
    c.implied_mfu_6n = workload::ImpliedMfu(c.flops_6n, c.peak_flops, c.observed_hours);
    c.implied_mfu_detailed = workload::ImpliedMfu(c.flops_detailed, c.peak_flops, c.observed_hours);
  }
  if (c.tokens <= 0) {
    plan.warnings.push_back(
        "train.tokens (or train.steps and train.global_batch) is not set; time and cost not "
        "estimated");
    return;
  }
  c.accelerator_hours = workload::AcceleratorHours(c.flops_6n, c.peak_flops, c.target_mfu);
  c.wall_seconds = WallSeconds(c.accelerator_hours, plan.cluster->accelerators());
  c.accelerators_for_deadline =
      AcceleratorsToFinish(c.accelerator_hours, options.deadline_days * units::kDay);
}

void PlanCost(Plan& plan) {
  if (!plan.cluster) return;
  const spec::ClusterSpec& cl = *plan.cluster;
  CostPlan& c = plan.cost;
  c.price_per_hour = cl.instance.price_per_hour;
  const double nodes = static_cast<double>(cl.nodes + cl.spares);
  c.instance_hours = plan.compute.wall_seconds / units::kHour * nodes;
  c.per_month_on_demand = Cost(units::kMonth / units::kHour * nodes, c.price_per_hour, 0, 0);
  if (c.price_per_hour <= 0) {
    plan.warnings.push_back(fmt::format(
        "{} has no on-demand price in the catalog; set cluster.price_per_hour to estimate cost",
        cl.instance.name));
    return;
  }
  c.on_demand = Cost(c.instance_hours, c.price_per_hour, 0, 0);
  c.blended = Cost(c.instance_hours, c.price_per_hour, cl.spot_fraction, cl.spot_discount);
}

void CheckFeasibility(Plan& plan, const spec::JobSpec& job) {
  if (!plan.cluster || !plan.memory.per_accelerator) return;
  const spec::ClusterSpec& cl = *plan.cluster;
  const double need = plan.memory.per_accelerator->total();
  plan.fits = need <= cl.accelerator.hbm_bytes;
  if (!*plan.fits) {
    plan.fit_reason =
        fmt::format("{} per accelerator > {} HBM of {}", units::FormatBytes(need),
                    units::FormatBytes(cl.accelerator.hbm_bytes), cl.accelerator.name);
    plan.warnings.push_back(fmt::format(
        "does not fit: {} (raise tp/pp, zero_stage, or recompute; `fmstack sim --search` ranks "
        "the layouts that fit); wall time and cost assume a layout that fits",
        plan.fit_reason));
  }
  if (!cl.shared.configured && !cl.object.configured) {
    plan.warnings.push_back(
        "no durable tier (cluster.shared or cluster.object): checkpoints live only on node-local "
        "disks, so a lost node's shard survives only through resilience.local_replica, and "
        "silent data corruption found after the local copies rotate out restarts from step 0");
  }
  if (job.layout.tp > cl.scaleup_domain) {
    plan.warnings.push_back(
        fmt::format("tp = {} spans more than one {}-accelerator NVLink/NeuronLink domain: TP "
                    "traffic crosses EFA",
                    job.layout.tp, cl.scaleup_domain));
  }
}

}  // namespace

Plan MakePlan(const spec::JobSpec& job, const catalog::Catalog& catalog,
              const PlanOptions& options) {
  Plan plan;
  plan.job = job.name;
  plan.model = job.model.name;
  plan.shape = job.model;
  plan.params = workload::CountParams(job.model);
  plan.flops_per_token = workload::TrainingFlopsPerToken(job.model);
  plan.layout = job.layout;
  plan.cluster = job.cluster;
  // A local-backend cluster of plain processes has no hardware to plan for.
  if (plan.cluster && plan.cluster->instance.name == spec::kLocalInstance) plan.cluster.reset();
  const double n = static_cast<double>(plan.params.total);

  plan.memory = PlanMemory(job, n, plan);
  AddFits(plan.memory, catalog, job.train.precision);
  PlanCompute(plan, job, options);
  PlanCost(plan);
  plan.checkpoint = PlanCheckpoint(job, n, plan.cluster, catalog);

  StoragePlan& s = plan.storage;
  s.data_bytes = job.data.size_bytes;
  s.generations = job.checkpoint.keep;
  s.total_bytes = StorageCapacity(s.data_bytes, plan.checkpoint.bytes, s.generations);
  if (plan.cluster) {
    s.shared_capacity = plan.cluster->shared.capacity_bytes;
    s.monthly_cost = s.total_bytes / units::kGB * plan.cluster->shared.price_per_gb_month;
    if (s.shared_capacity > 0 && s.shared_capacity < s.total_bytes) {
      plan.warnings.push_back(fmt::format(
          "shared storage {} is smaller than data + {} checkpoints = {}",
          units::FormatBytes(s.shared_capacity), s.generations, units::FormatBytes(s.total_bytes)));
    }
    plan.vcpus =
        VcpuQuota(plan.cluster->nodes + plan.cluster->spares, plan.cluster->instance.vcpus);
  }
  CheckFeasibility(plan, job);
  return plan;
}

}  // namespace fmstack::plan
