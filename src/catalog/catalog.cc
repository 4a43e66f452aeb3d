#include "catalog/catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "util/strict_table.h"
#include "util/units.h"

namespace fmstack::catalog {
namespace {

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

template <typename T>
const T* FindByName(const std::vector<T>& items, std::string_view name) {
  for (const T& item : items) {
    if (SameName(item.name, name)) return &item;
    if constexpr (requires { item.aliases; }) {
      for (const std::string& alias : item.aliases) {
        if (SameName(alias, name)) return &item;
      }
    }
  }
  return nullptr;
}

double Tflops(StrictTable& t, std::string_view key) {
  return t.Number(key, 0, 1e6).value_or(0) * units::kTera;
}

std::string RequireString(StrictTable& t, std::string_view key) {
  auto value = t.String(key);
  if (!value || value->empty()) t.Fail(key, "is required (a non-empty string)");
  return *value;
}

Accelerator ReadAccelerator(StrictTable& t) {
  Accelerator a;
  a.name = RequireString(t, "name");
  a.aliases = t.StringArray("aliases");
  a.vendor = t.String("vendor").value_or("");
  a.bf16_flops = Tflops(t, "bf16_tflops");
  a.fp8_flops = Tflops(t, "fp8_tflops");
  a.fp4_flops = Tflops(t, "fp4_tflops");
  a.fp32_flops = Tflops(t, "fp32_tflops");
  a.hbm_bytes = t.Bytes("hbm").value_or(0);
  if (a.hbm_bytes <= 0) t.Fail("hbm", "is required (device memory, e.g. \"80GB\")");
  a.hbm_bandwidth = t.Bandwidth("hbm_bandwidth").value_or(0);
  a.scaleup = t.String("scaleup").value_or("");
  a.scaleup_bandwidth = t.Bandwidth("scaleup_bandwidth").value_or(0);
  a.flash_attention_flops = Tflops(t, "flash_attention_tflops");
  a.flash_attention_backward_flops = Tflops(t, "flash_attention_backward_tflops");
  a.flash_attention_source = t.String("flash_attention_source").value_or("");
  if (a.flash_attention_flops > 0 && a.flash_attention_source.empty())
    t.Fail("flash_attention_source", "is required with flash_attention_tflops (the measurement)");
  if (a.flash_attention_backward_flops > 0 && a.flash_attention_flops <= 0) {
    t.Fail("flash_attention_backward_tflops",
           "needs flash_attention_tflops (the forward's rate) beside it");
  }
  a.source = RequireString(t, "source");
  a.note = t.String("note").value_or("");
  t.Finish();
  return a;
}

Instance ReadInstance(StrictTable& t) {
  Instance i;
  i.name = RequireString(t, "name");
  i.aliases = t.StringArray("aliases");
  i.accelerator = RequireString(t, "accelerator");
  i.accelerators = t.Int("accelerators", 1).value_or(0);
  if (i.accelerators == 0) t.Fail("accelerators", "is required (accelerators per instance)");
  i.scaleup_domain = t.Int("scaleup_domain", 1).value_or(i.accelerators);
  i.vcpus = t.Int("vcpus", 1).value_or(0);
  i.memory_bytes = t.Bytes("memory").value_or(0);
  i.network_bandwidth = t.Bandwidth("network").value_or(0);
  i.efa = t.String("efa").value_or("");
  i.nvme_bytes = t.Bytes("nvme").value_or(0);
  i.price_per_hour = t.Number("price_per_hour", 0).value_or(0);
  i.price_as_of = t.String("price_as_of").value_or("");
  i.previous_price_per_hour = t.Number("previous_price_per_hour", 0).value_or(0);
  if (i.price_per_hour > 0 && i.price_as_of.empty()) {
    t.Fail("price_as_of", "is required when price_per_hour is set (prices change)");
  }
  i.source = RequireString(t, "source");
  i.note = t.String("note").value_or("");
  t.Finish();
  return i;
}

StorageTier ReadStorage(StrictTable& t) {
  static const std::vector<std::string> kKinds = {"local", "shared", "object"};
  StorageTier s;
  s.name = RequireString(t, "name");
  const std::string kind = t.Choice("kind", kKinds).value_or("");
  if (kind.empty()) t.Fail("kind", "is required (\"local\", \"shared\" or \"object\")");
  s.kind = kind == "local"    ? StorageKind::kLocal
           : kind == "shared" ? StorageKind::kShared
                              : StorageKind::kObject;
  s.throughput_per_tib = t.Bandwidth("throughput_per_tib").value_or(0);
  s.write_bandwidth = t.Bandwidth("write_bandwidth").value_or(0);
  if (s.throughput_per_tib <= 0 && s.write_bandwidth <= 0) {
    t.Fail("write_bandwidth", "a storage tier needs write_bandwidth or throughput_per_tib");
  }
  s.price_per_gb_month = t.Number("price_per_gb_month", 0).value_or(0);
  s.price_as_of = t.String("price_as_of").value_or("");
  s.previous_price_per_gb_month = t.Number("previous_price_per_gb_month", 0).value_or(0);
  s.source = RequireString(t, "source");
  s.note = t.String("note").value_or("");
  t.Finish();
  return s;
}

FaultSet ReadFaultSet(StrictTable& t) {
  FaultSet f;
  f.name = RequireString(t, "name");
  f.observed_nodes = t.Number("nodes", 1).value_or(0);
  f.observed_hours = t.Number("hours", 1e-6).value_or(0);
  if (f.observed_nodes <= 0 || f.observed_hours <= 0) {
    t.Fail(f.observed_nodes <= 0 ? "nodes" : "hours",
           "is required: the exposure (nodes x hours) the counts were observed over");
  }
  const double node_hours = f.observed_nodes * f.observed_hours;
  f.planned_per_node_hour = t.Number("planned", 0).value_or(0) / node_hours;
  f.source = RequireString(t, "source");
  for (StrictTable& c : t.TableArray("cause")) f.causes.push_back(ReadFaultCause(c, node_hours));
  if (f.causes.empty()) t.Fail("cause", "a fault set needs at least one [[fault_set.cause]]");
  t.Finish();
  return f;
}

ValidationCase ReadValidationCase(StrictTable& t, const std::string& file) {
  ValidationCase v;
  v.name = RequireString(t, "name");
  if (auto group = t.String("group")) v.groups.push_back(*group);
  for (std::string& g : t.StringArray("groups")) v.groups.push_back(std::move(g));
  for (const std::string& g : v.groups) {
    if (g.empty()) t.Fail("groups", "a group name is a non-empty string");
  }
  v.metric = t.Choice("metric", std::vector<std::string>{"tflops_per_gpu", "mfu_percent",
                                                         "step_seconds", "gpu_hours", "busbw_gbps"})
                 .value_or("tflops_per_gpu");
  v.collective = t.String("collective").value_or("");
  v.bytes = t.Bytes("bytes").value_or(0);
  if (v.IsCollective() && (v.collective.empty() || v.bytes <= 0))
    t.Fail("collective", "a busbw_gbps case needs collective (\"allreduce\" ...) and bytes");
  if (!v.IsCollective() && (!v.collective.empty() || v.bytes > 0))
    t.Fail("collective", "only a busbw_gbps case names a collective and its bytes");
  v.flops =
      t.Choice("flops", std::vector<std::string>{"megatron", "gpt-neox-2021"}).value_or("megatron");
  if (v.flops != "megatron" && v.metric != "tflops_per_gpu")
    t.Fail("flops",
           "names how a tflops_per_gpu figure was counted; this case's metric is " + v.metric);
  v.published = t.Number("published", 1e-9, 1e9).value_or(0);
  if (v.published <= 0) t.Fail("published", "is required: the figure the source reports");
  v.sequence_parallel = t.Bool("sequence_parallel").value_or(true);
  v.calibration = t.Bool("calibration").value_or(false);
  v.job = RequireString(t, "job");
  v.source = RequireString(t, "source");
  v.origin = fmt::format("{} (validation case {})", file, v.name);
  t.Finish();
  return v;
}

}  // namespace

std::string_view RecoveryName(Recovery r) {
  switch (r) {
    case Recovery::kRestart:
      return "restart";
    case Recovery::kReboot:
      return "reboot";
    case Recovery::kReplace:
      return "replace";
  }
  return "?";
}

double FaultSet::UnplannedPerNodeHour() const {
  double sum = 0;
  for (const FaultCause& c : causes) sum += c.rate_per_node_hour;
  return sum;
}

FaultCause ReadFaultCause(StrictTable& t, double node_hours) {
  static const std::vector<std::string> kRecoveries = {"restart", "reboot", "replace"};
  FaultCause c;
  c.name = RequireString(t, "name");
  c.component = t.String("component").value_or("");
  if (node_hours > 0) {
    const std::optional<double> count = t.Number("count", 0);
    if (!count) t.Fail("count", "is required (interruptions observed over the set's exposure)");
    c.rate_per_node_hour = *count / node_hours;
  } else {
    const std::optional<double> mtbf = t.Seconds("node_mtbf");
    if (!mtbf || *mtbf <= 0) {
      t.Fail("node_mtbf", "is required (mean time between failures of this cause, per node)");
    }
    c.rate_per_node_hour = 3600.0 / *mtbf;
  }
  const std::string recovery = t.Choice("recovery", kRecoveries).value_or("");
  if (recovery.empty()) t.Fail("recovery", "is required (\"restart\", \"reboot\" or \"replace\")");
  c.recovery = recovery == "restart"  ? Recovery::kRestart
               : recovery == "reboot" ? Recovery::kReboot
                                      : Recovery::kReplace;
  c.detect_seconds = t.Seconds("detect").value_or(60);
  c.out_of_service_seconds = t.Seconds("out_of_service").value_or(0);
  if (c.recovery != Recovery::kRestart && c.out_of_service_seconds <= 0) {
    t.Fail("out_of_service", "is required for reboot and replace (how long the node is away)");
  }
  c.silent = t.Bool("silent").value_or(false);
  t.Finish();
  return c;
}

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp8:
      return "fp8";
    case Precision::kFp4:
      return "fp4";
  }
  return "?";
}

double Accelerator::PeakFlops(Precision p) const {
  switch (p) {
    case Precision::kFp32:
      return fp32_flops;
    case Precision::kBf16:
      return bf16_flops;
    case Precision::kFp8:
      return fp8_flops;
    case Precision::kFp4:
      return fp4_flops;
  }
  return 0;
}

void Catalog::AddFile(std::string_view text, const std::string& name) {
  const toml::table doc = ParseTomlText(text, name);
  StrictTable root(doc, name, "");
  for (StrictTable& t : root.TableArray("accelerator")) {
    Accelerator a = ReadAccelerator(t);
    if (FindAccelerator(a.name) != nullptr)
      t.Fail("name", "duplicate accelerator '" + a.name + "'");
    accelerators_.push_back(std::move(a));
  }
  for (StrictTable& t : root.TableArray("instance")) {
    Instance i = ReadInstance(t);
    if (FindInstance(i.name) != nullptr) t.Fail("name", "duplicate instance '" + i.name + "'");
    instances_.push_back(std::move(i));
  }
  for (StrictTable& t : root.TableArray("storage")) {
    StorageTier s = ReadStorage(t);
    if (FindStorage(s.name) != nullptr) t.Fail("name", "duplicate storage tier '" + s.name + "'");
    storage_.push_back(std::move(s));
  }
  for (StrictTable& t : root.TableArray("fault_set")) {
    FaultSet f = ReadFaultSet(t);
    if (FindFaultSet(f.name) != nullptr) t.Fail("name", "duplicate fault set '" + f.name + "'");
    fault_sets_.push_back(std::move(f));
  }
  for (StrictTable& t : root.TableArray("validation")) {
    ValidationCase v = ReadValidationCase(t, name);
    for (const ValidationCase& o : validation_) {
      if (o.name == v.name) t.Fail("name", "duplicate validation case '" + v.name + "'");
    }
    validation_.push_back(std::move(v));
  }
  root.Finish();
}

void Catalog::CheckReferences(const std::string& origin) const {
  std::vector<std::string> names;
  for (const Accelerator& a : accelerators_) names.push_back(a.name);
  for (const Instance& i : instances_) {
    if (FindAccelerator(i.accelerator) == nullptr) {
      throw Error(fmt::format("{}: instance '{}' names unknown accelerator '{}' {}", origin, i.name,
                              i.accelerator, DidYouMean(i.accelerator, names)));
    }
  }
}

Catalog Catalog::LoadFiles(std::span<const EmbeddedFile> files) {
  Catalog c;
  for (const EmbeddedFile& f : files) c.AddFile(f.text, std::string(f.name));
  c.CheckReferences("catalog");
  return c;
}

Catalog Catalog::LoadEmbedded() {
  return LoadFiles(EmbeddedCatalogFiles());
}

Catalog Catalog::LoadDirectory(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(fmt::format("{}: catalog directory does not exist", dir));
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".toml") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw Error(fmt::format("{}: no *.toml catalog files", dir));
  Catalog c;
  for (const fs::path& p : paths) {
    c.AddFile(ReadTextFile(p.string()), p.string());
  }
  c.CheckReferences(dir);
  return c;
}

const Accelerator* Catalog::FindAccelerator(std::string_view name) const {
  return FindByName(accelerators_, name);
}
const Instance* Catalog::FindInstance(std::string_view name) const {
  return FindByName(instances_, name);
}
const StorageTier* Catalog::FindStorage(std::string_view name) const {
  return FindByName(storage_, name);
}

const FaultSet* Catalog::FindFaultSet(std::string_view name) const {
  return FindByName(fault_sets_, name);
}

const Accelerator& Catalog::AcceleratorOf(const Instance& instance) const {
  return *FindAccelerator(instance.accelerator);
}

std::vector<std::string> Catalog::InstanceNames() const {
  std::vector<std::string> names;
  for (const Instance& i : instances_) {
    names.push_back(i.name);
    names.insert(names.end(), i.aliases.begin(), i.aliases.end());
  }
  return names;
}

std::vector<std::string> Catalog::StorageNames() const {
  std::vector<std::string> names;
  for (const StorageTier& s : storage_) names.push_back(s.name);
  return names;
}

}  // namespace fmstack::catalog
