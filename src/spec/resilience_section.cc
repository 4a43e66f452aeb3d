// The [faults] and [resilience] sections: what `fmstack sim` breaks, and how
// the job recovers.
#include <fmt/format.h>

#include <filesystem>

#include "spec/job_spec.h"

namespace fmstack::spec {

FaultsSpec ReadFaults(StrictTable& root, const catalog::Catalog& catalog) {
  FaultsSpec f;
  std::optional<StrictTable> t = root.Table("faults");
  if (!t) return f;
  f.set = t->String("set").value_or("");
  if (!f.set.empty() && f.set != "none" && catalog.FindFaultSet(f.set) == nullptr) {
    std::vector<std::string> names{"none"};
    for (const catalog::FaultSet& s : catalog.fault_sets()) names.push_back(s.name);
    t->Fail("set", "unknown fault set \"" + f.set + "\"",
            DidYouMeanOrList(f.set, names, "the catalog's fault sets"));
  }
  f.scale = t->Number("scale", 0, 1e6).value_or(1.0);
  f.planned = t->Bool("planned").value_or(true);
  for (StrictTable& c : t->TableArray("cause")) f.causes.push_back(catalog::ReadFaultCause(c, 0));
  for (StrictTable& i : t->TableArray("inject")) {
    InjectSpec in;
    in.kind = i.Choice("kind", InjectKinds()).value_or("");
    if (in.kind.empty()) {
      std::string list;
      for (const std::string& k : InjectKinds()) list += (list.empty() ? "" : ", ") + k;
      i.Fail("kind", "missing: the fault to inject, one of " + list);
    }
    in.rank = i.Int("rank", 0, 1 << 20).value_or(0);
    in.at_step = i.Int("at_step", 0, int64_t{1} << 40).value_or(0);
    i.Finish();
    f.inject.push_back(in);
  }
  t->Finish();
  return f;
}

ResilienceSpec ReadResilience(StrictTable& root) {
  static const std::vector<std::string> kPolicies = {"checkpoint", "checkpointless", "elastic"};
  ResilienceSpec r;
  std::optional<StrictTable> t = root.Table("resilience");
  if (!t) return r;
  r.policy = t->Choice("policy", kPolicies).value_or(r.policy);
  r.restart_seconds = t->Seconds("restart").value_or(r.restart_seconds);
  r.peer_rebuild_seconds = t->Seconds("peer_rebuild").value_or(r.peer_rebuild_seconds);
  r.snapshot_bandwidth = t->Bandwidth("snapshot_bandwidth").value_or(r.snapshot_bandwidth);
  if (r.snapshot_bandwidth <= 0) t->Fail("snapshot_bandwidth", "expected a positive bandwidth");
  r.min_dp_fraction = t->Number("min_dp_fraction", 0, 1).value_or(r.min_dp_fraction);
  r.local_replica = t->Bool("local_replica").value_or(r.local_replica);
  r.max_restarts = t->Int("max_restarts", 0, 1000).value_or(r.max_restarts);
  r.restart_backoff = t->Seconds("restart_backoff").value_or(r.restart_backoff);
  r.heartbeat_interval = t->Seconds("heartbeat_interval").value_or(r.heartbeat_interval);
  r.heartbeat_timeout = t->Seconds("heartbeat_timeout").value_or(r.heartbeat_timeout);
  r.collective_timeout = t->Seconds("collective_timeout").value_or(r.collective_timeout);
  r.straggler_factor = t->Number("straggler_factor", 1.1, 1000).value_or(r.straggler_factor);
  r.straggler_steps = t->Int("straggler_steps", 1, 1000000).value_or(r.straggler_steps);
  r.replica_check_every = t->Int("replica_check_every", 0, 1 << 30).value_or(r.replica_check_every);
  r.notice_deadline = t->Seconds("notice_deadline").value_or(r.notice_deadline);
  r.stop_deadline = t->Seconds("stop_deadline").value_or(r.stop_deadline);
  static const std::vector<std::string> kHangup = {"stop", "ignore"};
  r.on_hangup = t->Choice("on_hangup", kHangup).value_or(r.on_hangup);
  r.peer_replica_every = t->Int("peer_replica_every", 1, 1 << 30).value_or(r.peer_replica_every);
  r.node_repair = t->Seconds("node_repair").value_or(r.node_repair);
  for (auto [key, v] : {std::pair{"restart_backoff", r.restart_backoff},
                        {"heartbeat_interval", r.heartbeat_interval},
                        {"heartbeat_timeout", r.heartbeat_timeout},
                        {"collective_timeout", r.collective_timeout},
                        {"notice_deadline", r.notice_deadline},
                        {"stop_deadline", r.stop_deadline},
                        {"node_repair", r.node_repair}}) {
    if (!(v >= 0 && v <= 7 * 86400)) t->Fail(key, "expected a duration between 0 and 7 days");
  }
  if (r.heartbeat_interval <= 0 || r.heartbeat_interval * 2 > r.heartbeat_timeout) {
    t->Fail("heartbeat_interval",
            fmt::format("{} s: expected > 0 and at most half of heartbeat_timeout ({} s)",
                        r.heartbeat_interval, r.heartbeat_timeout));
  }
  if (r.heartbeat_timeout >= r.collective_timeout) {
    // Otherwise a survivor's collective times out first and the run blames
    // the survivor instead of the rank that hung.
    t->Fail("heartbeat_timeout",
            fmt::format("{} s: expected shorter than collective_timeout ({} s), so that a hung "
                        "rank is named before its peers' collectives give up on it",
                        r.heartbeat_timeout, r.collective_timeout));
  }
  t->Finish();
  return r;
}

HealthSpec ReadHealth(StrictTable& root, const std::string& job_dir) {
  static const std::vector<std::string> kDevices = {"none", "nvml", "fake"};
  HealthSpec h;
  std::optional<StrictTable> t = root.Table("health");
  if (!t) return h;
  h.agent = t->Bool("agent").value_or(true);
  h.checks = t->String("checks").value_or("");
  if (!h.checks.empty()) {
    std::filesystem::path p(h.checks);
    if (p.is_relative() && !job_dir.empty()) p = std::filesystem::path(job_dir) / p;
    if (!std::filesystem::is_regular_file(p))
      t->Fail("checks", p.string() + " is not a file",
              "`fmstack agent --print-checks` prints the built-in table to start from");
    h.checks = std::filesystem::absolute(p).string();
  }
  h.devices = t->Choice("devices", kDevices).value_or(h.devices);
  h.auto_actions = t->Bool("auto_actions").value_or(h.auto_actions);
  h.reboot_time = t->Seconds("reboot_time").value_or(h.reboot_time);
  h.replace_time = t->Seconds("replace_time").value_or(h.replace_time);
  for (auto [key, v] :
       {std::pair{"reboot_time", h.reboot_time}, {"replace_time", h.replace_time}}) {
    if (!(v >= 0 && v <= 7 * 86400)) t->Fail(key, "expected a duration between 0 and 7 days");
  }
  h.reboot_command = t->String("reboot_command").value_or("");
  h.burnin = t->String("burnin").value_or("");
  if (!h.burnin.empty()) {
    std::filesystem::path p(h.burnin);
    if (p.is_relative() && !job_dir.empty()) p = std::filesystem::path(job_dir) / p;
    if (!std::filesystem::is_regular_file(p))
      t->Fail("burnin", p.string() + " is not a file",
              "write the expected figures on known-good hardware: fmstack burnin --calibrate FILE");
    h.burnin = std::filesystem::absolute(p).string();
  }
  h.burnin_tolerance = t->Number("burnin_tolerance", 0.01, 1).value_or(h.burnin_tolerance);
  h.burnin_seconds = t->Seconds("burnin_seconds").value_or(h.burnin_seconds);
  if (!(h.burnin_seconds >= 0.1 && h.burnin_seconds <= 3600))
    t->Fail("burnin_seconds", "expected a duration from 0.1 s to 1 h");
  t->Finish();
  return h;
}

}  // namespace fmstack::spec
