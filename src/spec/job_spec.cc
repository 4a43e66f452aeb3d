#include "spec/job_spec.h"

#include <fmt/format.h>

#include <filesystem>

#include "util/units.h"

namespace fmstack::spec {
namespace {

using KeyPositions = std::map<std::string, SourcePos, std::less<>>;

// Remembers where `keys` were written in `t`, for cross-checks made later.
void RecordPositions(const StrictTable& t, std::string_view prefix,
                     std::initializer_list<const char*> keys, KeyPositions& out) {
  for (const char* key : keys) {
    if (t.Contains(key)) out.emplace(std::string(prefix) + "." + key, t.PosOf(key));
  }
}

TrainSpec ReadTrain(StrictTable& root, KeyPositions& positions) {
  static const std::vector<std::string> kPrecision = {"fp32", "bf16", "fp8"};
  static const std::vector<std::string> kState = {"mixed", "bf16", "fp32"};
  static const std::vector<std::string> kOptimizer = {"adamw"};
  static const std::vector<std::string> kRecompute = {"none", "selective", "full"};
  TrainSpec s;
  std::optional<StrictTable> t = root.Table("train");
  if (!t) return s;
  const std::string precision = t->Choice("precision", kPrecision).value_or("bf16");
  s.precision = precision == "fp32"  ? catalog::Precision::kFp32
                : precision == "fp8" ? catalog::Precision::kFp8
                                     : catalog::Precision::kBf16;
  const std::string state =
      t->Choice("state", kState).value_or(precision == "fp32" ? "fp32" : "mixed");
  s.state = state == "bf16"   ? workload::Bf16Everything()
            : state == "fp32" ? workload::Fp32()
                              : workload::MixedPrecision();
  s.optimizer = t->Choice("optimizer", kOptimizer).value_or("adamw");
  const std::string recompute = t->Choice("recompute", kRecompute).value_or("selective");
  s.recompute = recompute == "none"   ? workload::Recompute::kNone
                : recompute == "full" ? workload::Recompute::kFull
                                      : workload::Recompute::kSelective;
  s.flash_attention = t->Bool("flash_attention").value_or(true);
  s.micro_batch = t->Int("micro_batch", 1, 1 << 20).value_or(1);
  s.global_batch = t->Int("global_batch", 1, int64_t{1} << 30).value_or(0);
  s.tokens = t->Count("tokens").value_or(0);
  s.target_mfu = t->Number("target_mfu", 0.001, 1).value_or(0.4);
  s.steps = t->Int("steps", 1, int64_t{1} << 40).value_or(0);
  s.seed = t->Int("seed", 0).value_or(1337);
  s.eval_interval = t->Int("eval_interval", 0, int64_t{1} << 40).value_or(0);
  s.eval_batches = t->Int("eval_batches", 1, 1 << 20).value_or(8);
  s.threads = t->Int("threads", 0, 1024).value_or(0);
  if (t->Has("backend")) {
    t->Fail("backend", "is now train.device (\"cpu\" or \"cuda\"); rename the key");
  }
  s.device = t->Choice("device", std::vector<std::string>{"cpu", "cuda"}).value_or("cpu");
  s.device_index = t->Int("device_index", 0, 1023).value_or(0);
  if (t->Has("tf32")) {
    t->Fail("tf32",
            "is now train.matmul (\"fp32\", \"tf32\" or \"bf16\"); write matmul = \"tf32\"");
  }
  s.matmul = t->Choice("matmul", std::vector<std::string>{"fp32", "tf32", "bf16"}).value_or("fp32");
  if (s.matmul == "tf32" && s.device != "cuda") {
    t->Fail("matmul", "\"tf32\" is for device = \"cuda\"; the CPU computes in fp32 or bf16");
  }
  RecordPositions(*t, "train", {"global_batch", "device"}, positions);
  t->Finish();
  return s;
}

OptimSpec ReadOptim(StrictTable& root) {
  OptimSpec o;
  std::optional<StrictTable> t = root.Table("optim");
  if (!t) return o;
  o.lr = t->Number("lr", 0, 10).value_or(o.lr);
  o.min_lr = t->Number("min_lr", 0, 10).value_or(o.lr / 10);
  o.warmup_steps = t->Int("warmup_steps", 0, int64_t{1} << 40).value_or(o.warmup_steps);
  o.weight_decay = t->Number("weight_decay", 0, 10).value_or(o.weight_decay);
  o.beta1 = t->Number("beta1", 0, 0.999999).value_or(o.beta1);
  o.beta2 = t->Number("beta2", 0, 0.999999).value_or(o.beta2);
  o.eps = t->Number("eps", 0, 1).value_or(o.eps);
  o.grad_clip = t->Number("grad_clip", 0, 1e9).value_or(o.grad_clip);
  if (o.min_lr > o.lr) t->Fail("min_lr", fmt::format("min_lr {} exceeds lr {}", o.min_lr, o.lr));
  t->Finish();
  return o;
}

workload::Layout ReadParallel(StrictTable& root, KeyPositions& positions) {
  workload::Layout l;
  l.dp = 0;  // "auto" unless given: fill the cluster
  std::optional<StrictTable> t = root.Table("parallel");
  if (!t) return l;
  const toml::node* dp = t->Peek("dp");
  if (dp != nullptr && dp->is_string()) {
    if (dp->value<std::string>() != "auto")
      t->Fail("dp", "expected a positive integer or \"auto\"");
    l.dp = 0;
  } else {
    l.dp = t->Int("dp", 1, 1 << 24).value_or(0);
  }
  l.tp = t->Int("tp", 1, 1 << 16).value_or(1);
  l.pp = t->Int("pp", 1, 1 << 16).value_or(1);
  l.ep = t->Int("ep", 1, 1 << 16).value_or(1);
  l.cp = t->Int("cp", 1, 1 << 16).value_or(1);
  l.zero_stage = static_cast<int>(t->Int("zero_stage", 0, 3).value_or(0));
  l.virtual_stages = t->Int("virtual_stages", 1, 1024).value_or(1);
  l.sequence_parallel = t->Bool("sequence_parallel").value_or(true);
  l.ep_overlap = t->Number("ep_overlap", 0, 1).value_or(0);
  l.fsdp_prefetch = t->Bool("fsdp_prefetch").value_or(true);
  static const std::vector<std::string> kCpComm = {"p2p", "allgather"};
  l.cp_comm = t->Choice("cp_comm", kCpComm).value_or("p2p") == "allgather"
                  ? workload::Layout::CpComm::kAllGather
                  : workload::Layout::CpComm::kP2p;
  l.cp_load_balance = t->Bool("cp_load_balance").value_or(true);
  RecordPositions(*t, "parallel", {"dp", "ep"}, positions);
  t->Finish();
  return l;
}

CheckpointSpec ReadCheckpoint(StrictTable& root, const std::filesystem::path& base) {
  CheckpointSpec c;
  std::optional<StrictTable> t = root.Table("checkpoint");
  if (!t) return c;
  const toml::node* interval = t->Peek("interval");
  if (interval != nullptr && interval->value<std::string>() == "auto") {
    c.interval_auto = true;
  } else if (interval != nullptr) {
    c.interval_auto = false;
    c.interval_seconds = *t->Seconds("interval");
    if (c.interval_seconds <= 0) t->Fail("interval", "expected a positive duration or \"auto\"");
  }
  c.keep = t->Int("keep", 1, 100000).value_or(3);
  if (t->Has("tier")) {
    t->Fail("tier",
            "is no longer read: a save's blocking part is the snapshot into host memory "
            "(resilience.snapshot_bandwidth), and every tier the cluster configures is written "
            "behind it; remove the key");
  }
  c.overhead_budget = t->Number("overhead_budget", 1e-6, 0.99).value_or(0.1);
  c.milestone_seconds = t->Seconds("milestone").value_or(c.milestone_seconds);
  if (c.milestone_seconds < 0) t->Fail("milestone", "expected a duration (0 = none)");
  // Directories relative to the job file, as data.dir.
  auto dir = [&](std::string_view key) {
    const std::optional<std::string> d = t->String(key);
    return d ? (base / *d).lexically_normal().string() : std::string();
  };
  c.local_dir = dir("local");
  c.shared_dir = dir("shared");
  c.object_url = t->String("object").value_or("");
  if (!c.object_url.empty() && c.object_url.rfind("s3://", 0) != 0) {
    t->Fail("object", "expected an S3 URL \"s3://bucket/prefix\"");
  }
  c.object_endpoint = t->String("object_endpoint").value_or("https://s3.amazonaws.com");
  c.object_region = t->String("object_region").value_or("");
  c.pool_bytes = t->Bytes("pool").value_or(0);
  c.every_steps = t->Int("every", 1, int64_t{1} << 40).value_or(0);
  c.drain_timeout = t->Seconds("drain_timeout").value_or(c.drain_timeout);
  c.write_timeout = t->Seconds("write_timeout").value_or(c.write_timeout);
  if (c.write_timeout < 1) t->Fail("write_timeout", "expected at least 1 s");
  c.object_timeout = t->Seconds("object_timeout").value_or(c.object_timeout);
  if (c.object_timeout < 1) t->Fail("object_timeout", "expected at least 1 s");
  c.object_retries = t->Int("object_retries", 1, 100).value_or(c.object_retries);
  t->Finish();
  return c;
}

// Checks that only depend on the job file (no cluster): each names its key.
void CheckLayout(StrictTable& root, const JobSpec& job) {
  std::optional<StrictTable> p = root.Table("parallel");
  auto fail = [&](std::string_view key, const std::string& problem) {
    if (p) p->Fail(key, problem);
    root.Fail("parallel", problem);
  };
  const workload::TransformerShape& m = job.model;
  const workload::Layout& l = job.layout;
  if (m.heads % l.tp != 0) {
    fail("tp", fmt::format("tp ({}) must divide model.heads ({})", l.tp, m.heads));
  }
  if (m.ffn_hidden % l.tp != 0) {
    fail("tp", fmt::format("tp ({}) must divide model.ffn_hidden ({})", l.tp, m.ffn_hidden));
  }
  // Stages may be uneven (Llama 3 405B: 126 layers on 16 stages), not empty.
  if (l.pp > m.layers) {
    fail("pp", fmt::format("pp ({}) cannot exceed model.layers ({}): a stage would be empty", l.pp,
                           m.layers));
  }
  if (m.experts % l.ep != 0) {
    fail("ep", fmt::format("ep ({}) must divide model.experts ({})", l.ep, m.experts));
  }
  if (m.seq_len % l.cp != 0) {
    fail("cp", fmt::format("cp ({}) must divide model.seq_len ({})", l.cp, m.seq_len));
  }
  if (l.dp > 0 && l.dp % l.ep != 0) {
    fail("ep",
         fmt::format("ep ({}) must divide dp ({}): experts are spread over data-parallel ranks",
                     l.ep, l.dp));
  }
}

JobSpec ReadJob(StrictTable& root, const std::string& file, const catalog::Catalog& catalog) {
  JobSpec job;
  job.file = file;
  job.model = ReadModel(root);
  job.name = root.String("name").value_or(job.model.name);
  // The name becomes a directory (runs/<name>) and part of shared-memory and
  // store keys: a plain name only, never a path.
  if (job.name.empty() || job.name.size() > 128 || job.name[0] == '.' ||
      job.name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                 "0123456789._-") != std::string::npos) {
    root.Fail("name",
              fmt::format("\"{}\" is not a plain name: expected 1-128 of A-Z a-z 0-9 . _ -, "
                          "not starting with a dot",
                          job.name));
  }
  job.key_pos.emplace("parallel", root.PosOf("parallel"));
  job.key_pos.emplace("train", root.PosOf("train"));
  job.train = ReadTrain(root, job.key_pos);
  job.layout = ReadParallel(root, job.key_pos);
  job.optim = ReadOptim(root);
  job.checkpoint = ReadCheckpoint(root, std::filesystem::path(file).parent_path());
  job.faults = ReadFaults(root, catalog);
  job.resilience = ReadResilience(root);
  job.health = ReadHealth(root, std::filesystem::path(file).parent_path().string());
  job.serve = ReadServe(root, std::filesystem::path(file).parent_path().string());
  if (std::optional<StrictTable> d = root.Table("data")) {
    job.data.size_bytes = d->Bytes("size").value_or(0);
    if (std::optional<std::string> dir = d->String("dir")) {
      const std::filesystem::path base = std::filesystem::path(file).parent_path();
      job.data.dir = (base / *dir).lexically_normal().string();
    }
    d->Finish();
  }
  CheckLayout(root, job);

  const toml::node* cluster = root.Peek("cluster");
  if (cluster != nullptr && cluster->is_string()) {
    // A path relative to the job file.
    const std::filesystem::path base = std::filesystem::path(file).parent_path();
    const std::string path = (base / *root.String("cluster")).string();
    std::error_code ec;  // a name too long for the file system is an error, not an exception
    if (!std::filesystem::is_regular_file(path, ec)) {
      root.Fail("cluster", "cluster file \"" + path + "\" does not exist" +
                               (ec ? " (" + ec.message() + ")" : ""));
    }
    job.cluster = LoadClusterSpec(path, catalog);
  } else if (cluster != nullptr) {
    std::optional<StrictTable> t = root.Table("cluster");
    job.cluster = ReadClusterSpec(*t, catalog);
  }
  root.Finish();
  if (job.cluster) ResolveLayout(job, *job.cluster);
  return job;
}

}  // namespace

SourcePos JobSpec::PosOf(std::string_view key) const {
  if (auto it = key_pos.find(key); it != key_pos.end()) return it->second;
  if (auto dot = key.find('.'); dot != std::string_view::npos) return PosOf(key.substr(0, dot));
  return SourcePos{file, 0, 0};
}

void ResolveLayout(JobSpec& job, const ClusterSpec& cluster) {
  workload::Layout& l = job.layout;
  const int64_t model_parallel = l.tp * l.pp * l.cp;
  const int64_t accelerators = cluster.accelerators();
  if (accelerators % model_parallel != 0) {
    throw SpecError(job.PosOf("parallel"), "parallel",
                    fmt::format("tp x pp x cp = {} does not divide the cluster's {} accelerators "
                                "({} nodes x {} of {})",
                                model_parallel, accelerators, cluster.nodes,
                                cluster.instance.accelerators, cluster.instance.name));
  }
  if (l.dp == 0) l.dp = accelerators / model_parallel;
  if (l.world() != accelerators) {
    throw SpecError(
        job.PosOf("parallel.dp"), "parallel.dp",
        fmt::format("dp x tp x pp x cp = {} but the cluster has {} accelerators (set dp = "
                    "\"auto\" to fill it)",
                    l.world(), accelerators));
  }
  if (l.dp % l.ep != 0) {
    throw SpecError(job.PosOf("parallel.ep"), "parallel.ep",
                    fmt::format("ep ({}) must divide dp ({})", l.ep, l.dp));
  }
  const int64_t per_step = job.train.micro_batch * l.dp;
  if (job.train.global_batch > 0 && job.train.global_batch % per_step != 0) {
    throw SpecError(
        job.PosOf("train.global_batch"), "train.global_batch",
        fmt::format("global_batch ({}) must be a multiple of micro_batch x dp = {} x {} = {}",
                    job.train.global_batch, job.train.micro_batch, l.dp, per_step));
  }
}

JobSpec ParseJobSpec(std::string_view text, const std::string& name,
                     const catalog::Catalog& catalog) {
  const toml::table doc = ParseTomlText(text, name);
  StrictTable root(doc, name, "");
  return ReadJob(root, name, catalog);
}

JobSpec LoadJobSpec(const std::string& path, const catalog::Catalog& catalog) {
  return ParseJobSpec(ReadTextFile(path), path, catalog);
}

}  // namespace fmstack::spec
