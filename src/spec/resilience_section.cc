// The [faults] and [resilience] sections: what `fmstack sim` breaks, and how
// the job recovers.
#include <fmt/format.h>

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
    t->Fail("set", "unknown fault set \"" + f.set + "\"", DidYouMean(f.set, names));
  }
  f.scale = t->Number("scale", 0, 1e6).value_or(1.0);
  f.planned = t->Bool("planned").value_or(true);
  for (StrictTable& c : t->TableArray("cause")) f.causes.push_back(catalog::ReadFaultCause(c, 0));
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
  t->Finish();
  return r;
}

}  // namespace fmstack::spec
