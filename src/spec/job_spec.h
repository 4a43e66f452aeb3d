// spec: JobSpec — what to train and how: model shape (a preset plus
// overrides), precision, optimizer, ZeRO stage, parallelism, batch, tokens,
// checkpoint policy, data. Read from TOML with errors that name file:line:col
// and key; no value is silently ignored.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "catalog/catalog.h"
#include "spec/cluster_spec.h"
#include "workload/memory.h"
#include "workload/shape.h"

namespace fmstack::spec {

struct TrainSpec {
  catalog::Precision precision = catalog::Precision::kBf16;  // matmul precision
  workload::StateBytes state = workload::MixedPrecision();   // bytes per parameter
  std::string optimizer = "adamw";
  workload::Recompute recompute = workload::Recompute::kSelective;
  bool flash_attention = true;
  int64_t micro_batch = 1;   // sequences per micro-batch per data-parallel rank
  int64_t global_batch = 0;  // sequences per optimizer step; 0 = not set
  double tokens = 0;         // tokens to train on; 0 = not set
  double target_mfu = 0.4;
  // The reference trainer (`fmstack train`):
  int64_t steps = 0;          // optimizer steps; 0 = tokens / (global_batch x seq_len)
  int64_t seed = 1337;        // initialisation and data order
  int64_t eval_interval = 0;  // evaluate on held-out data every N steps; 0 = at the end only
  int64_t eval_batches = 8;   // micro-batches per evaluation
  int64_t threads = 0;        // CPU threads; 0 = all cores
  std::string backend = "cpu";
};

// AdamW and its schedule: warm-up, cosine decay to min_lr, gradient clipping.
struct OptimSpec {
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;
};

struct CheckpointSpec {
  bool interval_auto = true;  // Young/Daly from save time and MTTI
  double interval_seconds = 0;
  int64_t keep = 3;              // generations kept
  std::string tier = "local";    // where the blocking save lands: local | shared | object
  double overhead_budget = 0.1;  // share of time checkpointing may take
};

struct DataSpec {
  double size_bytes = 0;  // training corpus on disk; 0 = not set
  std::string dir;        // `fmstack data prepare` output (train.bin, val.bin, tokenizer.bpe),
                          // resolved against the job file's directory
};

struct JobSpec {
  std::string file;
  std::string name;
  workload::TransformerShape model;
  TrainSpec train;
  OptimSpec optim;
  workload::Layout layout;  // dp == 0 means "auto": fill the cluster (the default)
  CheckpointSpec checkpoint;
  DataSpec data;
  std::optional<ClusterSpec> cluster;  // [cluster] inline or cluster = "file.toml"
  // Where keys that later cross-checks name were written ("parallel.dp").
  std::map<std::string, SourcePos, std::less<>> key_pos;

  // The position of `key`, or of the file when it was not written.
  SourcePos PosOf(std::string_view key) const;
};

JobSpec LoadJobSpec(const std::string& path, const catalog::Catalog& catalog);
JobSpec ParseJobSpec(std::string_view text, const std::string& name,
                     const catalog::Catalog& catalog);

// Reads `model = "preset"` or a [model] table (preset + overrides) from `root`.
workload::TransformerShape ReadModel(StrictTable& root);

// Fills layout.dp when it is "auto" (0) from the cluster and checks that the
// layout tiles the cluster; throws SpecError naming the job file and key.
void ResolveLayout(JobSpec& job, const ClusterSpec& cluster);

}  // namespace fmstack::spec
