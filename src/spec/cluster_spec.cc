#include "spec/cluster_spec.h"

#include <fmt/format.h>

#include "util/units.h"

namespace fmstack::spec {
namespace {

StorageSpec ReadStorage(StrictTable& parent, std::string_view key, catalog::StorageKind kind,
                        std::string_view default_tier, const catalog::Catalog& catalog) {
  StorageSpec s;
  std::optional<StrictTable> t = parent.Table(key);
  s.tier = default_tier;
  if (t) {
    s.configured = true;
    s.tier = t->String("tier").value_or(s.tier);
  }
  const catalog::StorageTier* tier = catalog.FindStorage(s.tier);
  if (tier == nullptr) {
    const std::vector<std::string> names = catalog.StorageNames();
    (t ? *t : parent)
        .Fail(t ? "tier" : key, "unknown storage tier \"" + s.tier + "\"",
              DidYouMeanOrList(s.tier, names, "the catalog's storage tiers"));
  }
  if (tier->kind != kind) {
    (t ? *t : parent)
        .Fail(t ? "tier" : key,
              "storage tier \"" + s.tier + "\" is not a " + std::string(key) + " tier");
  }
  s.price_per_gb_month = tier->price_per_gb_month;
  if (t) {
    s.capacity_bytes = t->Bytes("capacity").value_or(0);
    s.price_per_gb_month = t->Number("price_per_gb_month", 0, 1e6).value_or(s.price_per_gb_month);
    if (auto bw = t->Bandwidth("write_bandwidth")) s.write_bandwidth = *bw;
    t->Finish();
  }
  if (s.write_bandwidth == 0) {
    s.write_bandwidth = tier->throughput_per_tib > 0 && s.capacity_bytes > 0
                            ? tier->throughput_per_tib * s.capacity_bytes / units::kTiB
                            : tier->write_bandwidth;
  }
  return s;
}

}  // namespace

double ClusterSpec::JobMtti() const {
  if (job_mtti_seconds > 0) return job_mtti_seconds;
  if (node_mtbf_seconds > 0) return node_mtbf_seconds / static_cast<double>(nodes);
  return 0;
}

ClusterSpec ReadClusterSpec(StrictTable& t, const catalog::Catalog& catalog) {
  ClusterSpec c;
  c.file = t.file();
  c.backend = t.Choice("backend", std::vector<std::string>{"local", "slurm"}).value_or("");
  const std::optional<std::string> name = t.String("instance");
  catalog::Instance local;
  const catalog::Instance* instance = nullptr;
  const bool runs = c.backend == "local" || c.backend == "slurm";
  if (!name && runs) {
    local.name = kLocalInstance;
    local.accelerators = 1;
    local.scaleup_domain = 1;
    instance = &local;
    c.accelerator.name = "cpu";
  } else if (!name) {
    t.Fail("instance",
           "is required (an instance type from the catalog, e.g. \"p5.48xlarge\"), "
           "unless backend = \"local\" or \"slurm\" (CPU workers)");
  } else {
    instance = catalog.FindInstance(*name);
    if (instance == nullptr) {
      const std::vector<std::string> names = catalog.InstanceNames();
      t.Fail("instance", "unknown instance type \"" + *name + "\"",
             DidYouMeanOrList(*name, names, "the catalog's instances"));
    }
    c.accelerator = catalog.AcceleratorOf(*instance);
  }
  c.instance = *instance;
  if (runs) {
    // One worker process per "accelerator" of the layout.
    c.procs_per_node = t.Int("procs_per_node", 1, 256).value_or(1);
    if (c.backend == "local") c.netns = t.Bool("netns").value_or(false);
    if (c.backend == "slurm") c.partition = t.String("partition").value_or("");
    c.instance.accelerators = c.procs_per_node;
  }
  // Up to a million accelerators, with room for spares: counts stay far
  // from overflow in every product downstream.
  constexpr int64_t kMaxNodes = int64_t{1} << 20;
  c.nodes = t.Int("nodes", 1, kMaxNodes).value_or(1);
  c.spares = t.Int("spares", 0, kMaxNodes).value_or(0);
  c.nodes_per_rack = t.Int("nodes_per_rack", 1, kMaxNodes).value_or(0);
  c.scaleup_domain = t.Int("scaleup_domain", 1, 1 << 16).value_or(instance->scaleup_domain);
  if (c.nodes * std::max<int64_t>(1, instance->accelerators) > (int64_t{1} << 24)) {
    t.Fail("nodes", fmt::format("{} nodes x {} accelerators is more than 16,777,216 accelerators",
                                c.nodes, instance->accelerators));
  }
  c.instance.price_per_hour = t.Number("price_per_hour", 0, 1e6).value_or(instance->price_per_hour);
  c.spot_fraction = t.Number("spot_fraction", 0, 1).value_or(0);
  c.spot_discount = t.Number("spot_discount", 0, 1).value_or(0);
  if (c.spot_fraction > 0 && !t.Has("spot_discount")) {
    t.Fail("spot_fraction", "needs spot_discount (Spot price = (1 - spot_discount) x on-demand)");
  }

  const std::optional<double> mtbf = t.Seconds("node_mtbf");
  const std::optional<double> per_day = t.Number("node_failures_per_day", 0, 1e6);
  const std::optional<double> mtti = t.Seconds("job_mtti");
  if (mtbf && per_day)
    t.Fail("node_failures_per_day", "give node_mtbf or node_failures_per_day, not both");
  // A mean time between failures of zero would mean failing all the time.
  if (mtbf && *mtbf < 1)
    t.Fail("node_mtbf", fmt::format("expected at least 1 s, got {:g} s", *mtbf));
  if (mtti && *mtti < 1)
    t.Fail("job_mtti", fmt::format("expected at least 1 s, got {:g} s", *mtti));
  if (mtbf) c.node_mtbf_seconds = *mtbf;
  if (per_day && *per_day > 0) c.node_mtbf_seconds = units::kDay / *per_day;
  if (mtti) c.job_mtti_seconds = *mtti;

  c.local = ReadStorage(t, "local", catalog::StorageKind::kLocal, "instance-nvme", catalog);
  c.shared = ReadStorage(t, "shared", catalog::StorageKind::kShared, "fsx-lustre-persistent2-250",
                         catalog);
  c.object = ReadStorage(t, "object", catalog::StorageKind::kObject, "s3-standard", catalog);
  t.Finish();
  return c;
}

ClusterSpec ParseClusterSpec(std::string_view text, const std::string& name,
                             const catalog::Catalog& catalog) {
  const toml::table doc = ParseTomlText(text, name);
  StrictTable root(doc, name, "");
  std::optional<StrictTable> cluster = root.Table("cluster");
  if (!cluster) root.Fail("cluster", "a cluster file needs a [cluster] table");
  ClusterSpec c = ReadClusterSpec(*cluster, catalog);
  root.Finish();
  return c;
}

ClusterSpec LoadClusterSpec(const std::string& path, const catalog::Catalog& catalog) {
  return ParseClusterSpec(ReadTextFile(path), path, catalog);
}

}  // namespace fmstack::spec
