// catalog: accelerators, instances and storage tiers with their published
// figures (data/catalog/*.toml). Values are in base units: FLOP/s, bytes,
// bytes/s, USD. Immutable after loading; safe to share between threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/embedded.h"
#include "util/strict_table.h"

namespace fmstack::catalog {

enum class Precision { kFp32, kBf16, kFp8, kFp4 };

std::string_view PrecisionName(Precision p);  // "fp32", "bf16", ...

struct Accelerator {
  std::string name;
  std::vector<std::string> aliases;
  std::string vendor;
  double bf16_flops = 0, fp8_flops = 0, fp4_flops = 0, fp32_flops = 0;  // dense peak; 0 = n/a
  double hbm_bytes = 0;
  double hbm_bandwidth = 0;
  std::string scaleup;
  double scaleup_bandwidth = 0;  // per device, 0 = not published
  // Throughput of a flash-attention kernel (bf16) as its authors measured
  // it; 0 = not published. Attention kernels reach a smaller share of peak
  // than GEMMs on some devices (FlashAttention-2 on H100), which long
  // sequences expose. The backward's own figure where the source gives one
  // (else the backward runs at the forward's rate).
  double flash_attention_flops = 0;
  double flash_attention_backward_flops = 0;
  std::string flash_attention_source;
  std::string source, note;

  // Dense peak for matmuls in `p`; 0 when the device has none.
  double PeakFlops(Precision p) const;
};

struct Instance {
  std::string name;
  std::vector<std::string> aliases;
  std::string accelerator;     // Accelerator::name
  int64_t accelerators = 0;    // per instance
  int64_t scaleup_domain = 0;  // accelerators sharing one NVLink/NeuronLink domain
  int64_t vcpus = 0;           // 0 = not recorded
  double memory_bytes = 0;
  double network_bandwidth = 0;  // aggregate EFA, bytes/s
  std::string efa;
  double nvme_bytes = 0;
  double price_per_hour = 0;  // USD on-demand; 0 = not published
  std::string price_as_of;
  double previous_price_per_hour = 0;
  std::string source, note;
};

enum class StorageKind { kLocal, kShared, kObject };

struct StorageTier {
  std::string name;
  StorageKind kind = StorageKind::kShared;
  double throughput_per_tib = 0;  // bytes/s per TiB stored (Lustre); 0 = n/a
  double write_bandwidth = 0;     // bytes/s when it does not scale with capacity
  double price_per_gb_month = 0;
  std::string price_as_of;
  double previous_price_per_gb_month = 0;
  std::string source, note;
};

// What a failed node needs before it can train again.
enum class Recovery { kRestart, kReboot, kReplace };
std::string_view RecoveryName(Recovery r);  // "restart", "reboot", "replace"

// One cause of interruptions, as a per-node Poisson rate.
struct FaultCause {
  std::string name, component;
  Recovery recovery = Recovery::kReplace;
  double rate_per_node_hour = 0;
  double detect_seconds = 0;          // fault -> the job knows
  double out_of_service_seconds = 0;  // reboot / replace: the node is away this long
  bool silent = false;                // silent data corruption: work since the fault is wrong
};

// Causes observed together on one cluster (data/catalog/faults.toml).
struct FaultSet {
  std::string name;
  std::vector<FaultCause> causes;
  double planned_per_node_hour = 0;  // planned maintenance interruptions
  double observed_nodes = 0, observed_hours = 0;
  std::string source;

  double UnplannedPerNodeHour() const;
};

// A published training run that `fmstack validate` models: the job as a job
// file's text, and the figure its authors report for it.
struct ValidationCase {
  std::string name;
  // Cases of one group are compared for their ordering: a scaling trend, or
  // one source's comparison of configurations. A case may be in several.
  std::vector<std::string> groups;
  // "tflops_per_gpu" (model FLOP/s per accelerator, recomputation counted as
  // Megatron counts it), "mfu_percent" (model FLOPs only, of the peak),
  // "step_seconds", "gpu_hours" (accelerator-hours to train the job's
  // train.tokens), or "busbw_gbps": nccl-tests' bus bandwidth of one
  // collective over every accelerator of the job's cluster (GB/s).
  std::string metric;
  double published = 0;
  std::string collective;  // busbw_gbps: nccl-tests' name of the op ("allreduce" ...)
  double bytes = 0;        // busbw_gbps: the message size
  bool IsCollective() const { return metric == "busbw_gbps"; }
  // How the source counted the FLOPs of a tflops_per_gpu figure: "megatron"
  // (Narayanan et al. 2021, recomputation counted), or "gpt-neox-2021": the
  // GPT-NeoX code's own logging from its PR #167 (2021) until PR #1044
  // (2023-09), 6 x all parameters + 60 x seq x hidden x layers per token,
  // recomputation not counted.
  std::string flops = "megatron";
  bool sequence_parallel = true;  // false for runs before Korthikanti et al. (2022)
  bool calibration = false;       // a constant of the model was chosen with this case in view
  std::string job;                // TOML of a job file with a [cluster] (collectives: only that)
  std::string source;
  std::string origin;  // "validation.toml" and the case's line, for errors
};

// Reads one cause: `count` over `node_hours` of exposure when node_hours > 0
// (catalog fault sets), else `node_mtbf` (a spec's own causes).
FaultCause ReadFaultCause(StrictTable& t, double node_hours);

class Catalog {
 public:
  // The catalog compiled into the binary.
  static Catalog LoadEmbedded();
  // Every *.toml in `dir`. Throws SpecError / Error naming file:line and key.
  static Catalog LoadDirectory(const std::string& dir);
  // From in-memory files (tests).
  static Catalog LoadFiles(std::span<const EmbeddedFile> files);

  std::span<const Accelerator> accelerators() const { return accelerators_; }
  std::span<const Instance> instances() const { return instances_; }
  std::span<const StorageTier> storage() const { return storage_; }
  std::span<const FaultSet> fault_sets() const { return fault_sets_; }
  std::span<const ValidationCase> validation_cases() const { return validation_; }

  // By name or alias (case-insensitive); nullptr when unknown.
  const Accelerator* FindAccelerator(std::string_view name) const;
  const Instance* FindInstance(std::string_view name) const;
  const StorageTier* FindStorage(std::string_view name) const;
  const FaultSet* FindFaultSet(std::string_view name) const;

  // REQUIRES: the instance came from this catalog (its accelerator was checked on load).
  const Accelerator& AcceleratorOf(const Instance& instance) const;

  // All names and aliases, for "did you mean".
  std::vector<std::string> InstanceNames() const;
  std::vector<std::string> StorageNames() const;

 private:
  void AddFile(std::string_view text, const std::string& name);
  void CheckReferences(const std::string& origin) const;

  std::vector<Accelerator> accelerators_;
  std::vector<Instance> instances_;
  std::vector<StorageTier> storage_;
  std::vector<FaultSet> fault_sets_;
  std::vector<ValidationCase> validation_;
};

}  // namespace fmstack::catalog
