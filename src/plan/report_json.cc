// JSON output: stable keys in base units (bytes, seconds, FLOP, USD) so
// scripts need no unit parsing. Schema: docs/plan-schema.json.
#include "plan/report.h"

namespace fmstack::plan {
namespace {

using nlohmann::json;

json MemoryJson(const workload::MemoryBreakdown& m) {
  return {{"params_bytes", m.params},       {"grads_bytes", m.grads},
          {"optimizer_bytes", m.optimizer}, {"activations_bytes", m.activations},
          {"state_bytes", m.state()},       {"total_bytes", m.total()}};
}

json ClusterJson(const spec::ClusterSpec& c) {
  return {{"instance", c.instance.name},
          {"accelerator", c.accelerator.name},
          {"nodes", c.nodes},
          {"spares", c.spares},
          {"accelerators", c.accelerators()},
          {"scaleup_domain", c.scaleup_domain}};
}

}  // namespace

json ToJson(const Plan& p) {
  json j;
  j["schema_version"] = kPlanSchemaVersion;
  j["job"] = p.job;
  j["model"] = {{"name", p.model},
                {"layers", p.shape.layers},
                {"hidden", p.shape.hidden},
                {"heads", p.shape.heads},
                {"kv_heads", p.shape.kv_heads},
                {"head_dim", p.shape.head_dim()},
                {"ffn_hidden", p.shape.ffn_hidden},
                {"vocab", p.shape.vocab},
                {"seq_len", p.shape.seq_len},
                {"experts", p.shape.experts},
                {"active_experts", p.shape.active_experts},
                {"params_total", p.params.total},
                {"params_active", p.params.active},
                {"flops_per_token_6n", p.flops_per_token.six_n},
                {"flops_per_token_detailed", p.flops_per_token.detailed}};
  j["layout"] = {{"dp", p.layout.dp}, {"tp", p.layout.tp}, {"pp", p.layout.pp},
                 {"ep", p.layout.ep}, {"cp", p.layout.cp}, {"zero_stage", p.layout.zero_stage}};
  j["cluster"] = p.cluster ? ClusterJson(*p.cluster) : json(nullptr);

  json memory = {{"convention", p.memory.bytes.name},
                 {"bytes_per_param", p.memory.bytes.per_param()},
                 {"whole", MemoryJson(p.memory.whole)},
                 {"per_accelerator",
                  p.memory.per_accelerator ? MemoryJson(*p.memory.per_accelerator) : json(nullptr)},
                 {"hbm_bytes", p.memory.hbm_bytes}};
  json fits = json::array();
  for (const FitRow& r : p.memory.fits) {
    fits.push_back({{"accelerator", r.accelerator},
                    {"hbm_bytes", r.hbm_bytes},
                    {"min_for_state", r.min_for_state},
                    {"peak_flops", r.peak_flops},
                    {"accelerator_hours", r.hours}});
  }
  memory["fits"] = fits;
  j["memory"] = memory;

  const ComputePlan& c = p.compute;
  j["compute"] = {{"tokens", c.tokens},
                  {"flops_6n", c.flops_6n},
                  {"flops_detailed", c.flops_detailed},
                  {"flop_count", c.flop_count},
                  {"peak_flops", c.peak_flops},
                  {"target_mfu", c.target_mfu},
                  {"accelerator_hours", c.accelerator_hours},
                  {"wall_seconds", c.wall_seconds},
                  {"deadline_days", c.deadline_days},
                  {"accelerators_for_deadline", c.accelerators_for_deadline},
                  {"observed_hours", c.observed_hours},
                  {"implied_mfu_6n", c.implied_mfu_6n},
                  {"implied_mfu_detailed", c.implied_mfu_detailed}};
  j["cost"] = {{"price_per_hour", p.cost.price_per_hour},
               {"instance_hours", p.cost.instance_hours},
               {"on_demand_usd", p.cost.on_demand},
               {"blended_usd", p.cost.blended},
               {"per_month_on_demand_usd", p.cost.per_month_on_demand}};
  const CheckpointPlan& k = p.checkpoint;
  json tiers = json::array();
  for (const resilience::TierCost& t : k.tiers) {
    tiers.push_back({{"name", t.name},
                     {"write_seconds", t.write_seconds},
                     {"read_seconds", t.read_seconds},
                     {"node_local", t.node_local}});
  }
  j["checkpoint"] = {{"bytes", k.bytes},
                     {"save_seconds", k.save_seconds},
                     {"tiers", tiers},
                     {"drain_seconds", k.drain_seconds},
                     {"mtti_seconds", k.mtti},
                     {"mtti_source", k.mtti_source},
                     {"interval_tenth_mtti_seconds", k.interval_tenth_mtti},
                     {"interval_young_daly_seconds", k.interval_young_daly},
                     {"interval_seconds", k.interval},
                     {"interval_rule", k.interval_rule},
                     {"overhead", k.overhead},
                     {"bandwidth_blocking", k.bandwidth_blocking},
                     {"bandwidth_async", k.bandwidth_async},
                     {"nodes_away", k.nodes_away.mean},
                     {"spares_99", k.nodes_away.spares_99}};
  j["storage"] = {{"data_bytes", p.storage.data_bytes},
                  {"generations", p.storage.generations},
                  {"total_bytes", p.storage.total_bytes},
                  {"shared_capacity_bytes", p.storage.shared_capacity},
                  {"monthly_cost_usd", p.storage.monthly_cost}};
  j["vcpus"] = p.vcpus;
  j["fits"] = p.fits ? json{{"ok", *p.fits}, {"reason", p.fit_reason}} : json(nullptr);
  j["warnings"] = p.warnings;
  return j;
}

}  // namespace fmstack::plan
