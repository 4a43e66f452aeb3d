// spec: JobSpec — what to train and how: model shape (a preset plus
// overrides), precision, optimizer, ZeRO stage, parallelism, batch, tokens,
// checkpoint policy, data. Read from TOML with errors that name file:line:col
// and key; no value is silently ignored.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  int64_t steps = 0;           // optimizer steps; 0 = tokens / (global_batch x seq_len)
  int64_t seed = 1337;         // initialisation and data order
  int64_t eval_interval = 0;   // evaluate on held-out data every N steps; 0 = at the end only
  int64_t eval_batches = 8;    // micro-batches per evaluation
  int64_t threads = 0;         // CPU threads; 0 = all cores
  std::string device = "cpu";  // where the trainer computes: "cpu" or "cuda"
  int64_t device_index = 0;    // cuda: which device this process uses
  // cuda: "fp32", or "tf32"/"bf16": fp32 values multiplied on tensor cores
  // with operands rounded to TF32 or bf16, fp32 accumulation (gpt::Matmul)
  std::string matmul = "fp32";
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
  double overhead_budget = 0.1;  // share of time checkpointing may take
  // Besides the newest `keep`, one checkpoint per this much wall time stays on
  // the durable tiers, so that silent corruption found late has a clean
  // restore point older than itself. 0 = none.
  double milestone_seconds = 3600;
  // Where `fmstack train` / `run` write (ckpt/): a node-local directory
  // ("" = <run dir>/ckpt), an optional shared file system directory, and an
  // optional object store URL "s3://bucket/prefix" at `object_endpoint`
  // (credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never the file).
  std::string local_dir, shared_dir, object_url, object_endpoint, object_region;
  double pool_bytes = 0;  // staging pool; 0 = one state
  int64_t every_steps =
      0;  // `fmstack train`: save every N steps (overrides interval); 0 = by interval
  double drain_timeout = 60;    // at the end, wait this long for the slower tiers
  double write_timeout = 1800;  // then this long for the first tier (a hung disk)
  double object_timeout = 120;  // one object-store request, transfer included
  int64_t object_retries = 5;   // attempts per object-store request
};

// Faults `fmstack run` can inject into its own workers (`fmstack fault
// inject` and [[faults.inject]]), by name.
inline const std::vector<std::string>& InjectKinds() {
  static const std::vector<std::string> kinds = {"crash",
                                                 "exit",
                                                 "hang",
                                                 "stall",
                                                 "straggler",
                                                 "nan",
                                                 "bitflip",
                                                 "network-cut",
                                                 "disk-full",
                                                 "kill-during-save",
                                                 "corrupt-checkpoint",
                                                 "supervisor-restart",
                                                 "notice",
                                                 "corrupt-replica",
                                                 "node-down",
                                                 "xid-79",
                                                 "xid-48",
                                                 "xid-13",
                                                 "ecc-dbe",
                                                 "gpu-hot",
                                                 "gpu-lost"};
  return kinds;
}

// One fault to inject into a real run: `kind` on `rank` once step `at_step`
// is complete (0 = at once).
struct InjectSpec {
  std::string kind;
  int64_t rank = 0;
  int64_t at_step = 0;
};

// [faults]: what breaks and how often, for `fmstack sim` (and the MTTI that
// sets the checkpoint interval of `fmstack run`); inject, for `fmstack run`.
struct FaultsSpec {
  // A catalog fault set (data/catalog/faults.toml), "none", or "" = the
  // cluster's node_mtbf as one "node" cause when set, else "llama3-405b".
  std::string set;
  double scale = 1.0;                       // multiplies every rate (planned maintenance too)
  bool planned = true;                      // include the set's planned maintenance
  std::vector<catalog::FaultCause> causes;  // [[faults.cause]]: added to the set's
  std::vector<InjectSpec> inject;           // [[faults.inject]]: rehearsal faults for `run`
};

// [resilience]: how the job recovers - the policy and the costs it pays.
struct ResilienceSpec {
  std::string policy = "checkpoint";  // checkpoint | checkpointless | elastic
  double restart_seconds = 300;       // relaunch: scheduler, process start, comm init, warm-up
  double peer_rebuild_seconds = 30;   // survivors rebuild their groups in place
  double snapshot_bandwidth = 25e9;   // device -> host, per accelerator: a save's blocking part
  double min_dp_fraction = 0.5;       // elastic: below this share of replicas, wait instead
  bool local_replica = true;          // each node's local checkpoint is also on a peer node
  // A real run (`fmstack run`):
  int64_t max_restarts = 3;         // automatic restarts before the run gives up
  double restart_backoff = 1;       // seconds before restart k: backoff x 2^k, at most 60 s
  double heartbeat_interval = 1;    // seconds between a worker's heartbeats
  double heartbeat_timeout = 30;    // silent this long: hung (< collective_timeout)
  double collective_timeout = 60;   // a collective waiting this long on a peer fails
  double straggler_factor = 2;      // compute time this many x the median of the others ...
  int64_t straggler_steps = 5;      // ... for this many steps in a row: a straggler
  int64_t replica_check_every = 1;  // compare parameter replicas every N steps (0 = never)
  double notice_deadline = 120;     // a termination notice gives this long to save
  // A stop by signal (SIGTERM/SIGINT/SIGHUP) gives this long to save; inside
  // Slurm's KillWait and Kubernetes' terminationGracePeriodSeconds (30 s).
  double stop_deadline = 25;
  std::string on_hangup = "stop";  // stop | ignore: what SIGHUP (a closed terminal) does
  // checkpointless/elastic: refresh the in-memory peer replicas every N steps
  int64_t peer_replica_every = 1;
  // A lost node of a local run comes back (is repaired) this long after it
  // was lost; 0 = not during the run. An elastic job grows back onto it.
  double node_repair = 0;
};

// [health]: node health agents for `fmstack run` (absent: none).
struct HealthSpec {
  bool agent = false;            // one `fmstack agent` per node slot
  std::string checks;            // check table file, resolved against the job file; "" = built-in
  std::string devices = "none";  // none | nvml | fake (one fake GPU per rank, for rehearsals)
  bool auto_actions = true;      // act on failed checks (false: only log them)
  double reboot_time = 5;        // local backend: how long a node's reboot takes
  double replace_time = 30;      // local backend: how long a replacement takes to arrive
  std::string reboot_command;    // run (sh -c, FMSTACK_NODE set) to reboot a node instead
  std::string burnin;            // expected figures: a repaired node's burn-in must pass
  double burnin_tolerance = 0.7;
  double burnin_seconds = 2;
};

struct DataSpec {
  double size_bytes = 0;  // training corpus on disk; 0 = not set
  std::string dir;        // `fmstack data prepare` output (train.bin, val.bin, tokenizer.bpe),
                          // resolved against the job file's directory
};

// [serve]: how `fmstack serve` runs the model (docs/specs.md, docs/serve.md).
struct ServeSpec {
  double kv_cache_bytes = 0;    // the KV block pool; 0 = kv_cache_share of available memory
  double kv_cache_share = 0.2;  // used when kv_cache is written as "NN%"
  int64_t block_size = 16;      // tokens per KV block
  int64_t max_batch_tokens = 2048;
  int64_t max_seqs = 64;
  bool prefix_caching = true;
  int64_t max_waiting = 1024;
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  int64_t grpc_port = 8001;   // the gRPC stream; -1 = off, 0 = any free port
  std::string api_key_file;   // resolved against the job file's directory
  std::string model_name;     // "" = the job's name
  double ping_interval = 60;  // seconds
  double max_body_bytes = 1 << 20;
  double request_timeout = 10, idle_timeout = 60, drain_timeout = 30;  // seconds
  int64_t max_connections = 4096;
  int64_t threads = 0;  // CPU threads; 0 = all
};

struct JobSpec {
  std::string file;
  std::string name;
  workload::TransformerShape model;
  TrainSpec train;
  OptimSpec optim;
  workload::Layout layout;  // dp == 0 means "auto": fill the cluster (the default)
  CheckpointSpec checkpoint;
  FaultsSpec faults;
  ResilienceSpec resilience;
  HealthSpec health;
  DataSpec data;
  ServeSpec serve;
  std::optional<ClusterSpec> cluster;  // [cluster] inline or cluster = "file.toml"
  // Where keys that later cross-checks name were written ("parallel.dp").
  std::map<std::string, SourcePos, std::less<>> key_pos;

  // The position of `key`, or of the file when it was not written.
  SourcePos PosOf(std::string_view key) const;
};

JobSpec LoadJobSpec(const std::string& path, const catalog::Catalog& catalog);
JobSpec ParseJobSpec(std::string_view text, const std::string& name,
                     const catalog::Catalog& catalog);

// Read the [faults] and [resilience] tables (absent: the defaults).
FaultsSpec ReadFaults(StrictTable& root, const catalog::Catalog& catalog);
ResilienceSpec ReadResilience(StrictTable& root);
HealthSpec ReadHealth(StrictTable& root, const std::string& job_dir);
ServeSpec ReadServe(StrictTable& root, const std::string& job_dir);

// Reads `model = "preset"` or a [model] table (preset + overrides) from `root`.
workload::TransformerShape ReadModel(StrictTable& root);

// Fills layout.dp when it is "auto" (0) from the cluster and checks that the
// layout tiles the cluster; throws SpecError naming the job file and key.
void ResolveLayout(JobSpec& job, const ClusterSpec& cluster);

}  // namespace fmstack::spec
