#include "data/pipeline.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "data/dedup.h"
#include "data/utf8.h"
#include "data/work_dir.h"
#include "train/corpus.h"
#include "util/atomic_file.h"
#include "util/dir_lock.h"
#include "util/xxh3.h"

extern char** environ;

namespace fmstack::data {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ------------------------------------------------------------- phase a ---

void RunShard(const PipelineSpec& spec, const WorkDir& dir, ShardStages& stages, int shard) {
  const auto start = Clock::now();
  const ShardOutput out = stages.Run(shard);
  std::string docs;
  for (const KeptDocument& d : out.docs) {
    docs += nlohmann::json{{"key", d.key}, {"url", d.url}, {"lang", d.lang}, {"text", d.text}}.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    docs.push_back('\n');
  }
  std::string removed;
  for (const RemovedDocument& r : out.removed) {
    removed +=
        nlohmann::json{{"url", r.url}, {"stage", r.stage}, {"reason", r.reason}, {"lang", r.lang}}
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    removed.push_back('\n');
  }
  DirCommit commit(dir.ShardA(shard));
  commit.Write("docs.jsonl", docs);
  commit.Write("removed.jsonl", removed);
  for (int p = 0; p < spec.partitions; ++p) {
    if (spec.Find("exact-dedup"))
      WriteRecords(commit, fmt::format("exact-{:04}.bin", p), out.exact[static_cast<size_t>(p)]);
    if (spec.Find("minhash-dedup"))
      WriteRecords(commit, fmt::format("bands-{:04}.bin", p), out.bands[static_cast<size_t>(p)]);
  }
  commit.Write("stats.json", nlohmann::json{{"counts", out.counts},
                                            {"kept", out.docs.size()},
                                            {"minhash_shingles", out.minhash_shingles},
                                            {"minhash_seconds", out.minhash_seconds},
                                            {"seconds", Since(start)}}
                                 .dump());
  commit.Commit();
}

// ------------------------------------------------------------- phase d ---

void WriteOutputShard(const WorkDir& dir, const std::vector<RemovedKey>& removed, int shard) {
  const std::string docs = ReadWholeFile(dir.ShardA(shard) + "/docs.jsonl", int64_t{1} << 40);
  std::string out;
  int64_t kept = 0, bytes = 0, exact = 0, near = 0;
  ForEachLine(docs, [&](std::string_view line) {
    nlohmann::json d = nlohmann::json::parse(line);
    const auto key = d.at("key").get<uint64_t>();
    const auto it = std::lower_bound(removed.begin(), removed.end(), key,
                                     [](const RemovedKey& r, uint64_t k) { return r.key < k; });
    if (it != removed.end() && it->key == key) {
      (it->why == RemovedWhy::kExact ? exact : near) += 1;
      return;
    }
    d.erase("key");
    ++kept;
    bytes += static_cast<int64_t>(d.at("text").get_ref<const std::string&>().size());
    out += d.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.push_back('\n');
  });
  AtomicFileWriter w(dir.OutShard(shard));
  w.Write(out.data(), out.size());
  w.Commit();
  const std::string stats =
      nlohmann::json{{"kept", kept}, {"bytes", bytes}, {"exact", exact}, {"near", near}}.dump();
  AtomicFileWriter marker(dir.StatsD(shard));
  marker.Write(stats.data(), stats.size());
  marker.Commit();
}

// ------------------------------------------------------------ workers ---

struct Worker {
  int rank;
  pid_t pid;
  std::string log;
};

Worker Spawn(const PipelineSpec& spec, const PipelineOptions& o, const WorkDir& dir, char phase,
             int rank) {
  const std::string log = fmt::format("{}/{}-worker{}.log", dir.Logs(), phase, rank);
  const std::string role = fmt::format("{}:{}:{}", phase, rank, spec.workers);
  std::vector<std::string> args;
  if (spec.backend == "slurm") {
    // One job step per worker, on whichever node of the allocation is free:
    // steps beyond the allocation's nodes wait for one.
    args = {"srun",
            "--nodes=1",
            "--ntasks=1",
            "--exact",
            "--kill-on-bad-exit=1",
            fmt::format("--job-name=fmstack-data-{}{}", phase, rank)};
  }
  for (const std::string& a : {o.self, std::string("data"), std::string("pipeline"), spec.file,
                               std::string("--worker"), role})
    args.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw Error(fmt::format("cannot start {} for phase {}: {}", argv[0], phase, std::strerror(rc)));
  return {rank, pid, log};
}

std::vector<int> Pending(const PipelineSpec& spec, const WorkDir& dir, char phase) {
  std::vector<int> out;
  for (int i = 0; i < PhaseItems(spec, phase); ++i)
    if (!dir.Committed(phase, i)) out.push_back(i);
  return out;
}

// Docs and bytes read by the committed shards of phase a.
void CountRead(const WorkDir& dir, int shard, PhaseProgress& p) {
  try {
    const nlohmann::json s =
        nlohmann::json::parse(ReadWholeFile(dir.ShardA(shard) + "/stats.json", 64 << 20));
    p.docs += s.at("counts").at("read").at("docs_in").get<int64_t>();
    p.bytes += s.at("counts").at("read").at("bytes_in").get<int64_t>();
  } catch (const std::exception&) {
    // progress only: the report reads the same file and fails loudly
  }
}

// The last line a failed worker wrote: its error.
std::string LastLine(const std::string& log) {
  std::string text;
  try {
    text = ReadWholeFile(log, int64_t{1} << 30);
  } catch (const std::exception&) {
    return "";
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::string line = text.substr(text.rfind('\n') + 1);
  if (line.size() > 600) line = line.substr(0, 600) + "...";
  return line;
}

// Returns the largest peak memory (RSS, bytes) of the phase's workers.
int64_t RunPhase(const PipelineSpec& spec, const PipelineOptions& o, const WorkDir& dir,
                 char phase) {
  const auto start = Clock::now();
  std::string last_error;
  int64_t max_rss = 0;
  for (int attempt = 0;; ++attempt) {
    const std::vector<int> pending = Pending(spec, dir, phase);
    if (pending.empty()) return max_rss;
    if (attempt > spec.max_retries) {
      std::string items;
      for (size_t i = 0; i < pending.size() && i < 8; ++i)
        items += fmt::format("{}{}", i ? ", " : "", pending[i]);
      throw Error(
          fmt::format("phase {}: item(s) {}{} not committed after {} attempt(s) "
                      "(data.pipeline.max_retries){}; the workers' logs are in {}",
                      phase, items, pending.size() > 8 ? ", ..." : "", attempt,
                      last_error.empty() ? "" : "; the last error: " + last_error, dir.Logs()));
    }
    if (attempt > 0 && o.on_note)
      o.on_note(fmt::format("phase {}: {} item(s) not committed; attempt {} of {}", phase,
                            pending.size(), attempt + 1, spec.max_retries + 1));
    std::vector<Worker> workers;
    for (int r = 0; r < spec.workers; ++r) {
      const bool has_work =
          std::any_of(pending.begin(), pending.end(), [&](int i) { return i % spec.workers == r; });
      if (has_work) workers.push_back(Spawn(spec, o, dir, phase, r));
    }
    PhaseProgress p{.phase = phase, .total = PhaseItems(spec, phase)};
    std::vector<bool> counted(static_cast<size_t>(p.total), false);
    size_t running = workers.size();
    while (running > 0) {
      for (Worker& w : workers) {
        if (w.pid <= 0) continue;
        int status = 0;
        struct rusage usage {};
        const pid_t got = ::wait4(w.pid, &status, WNOHANG, &usage);
        if (got == w.pid) {
          max_rss = std::max(max_rss, static_cast<int64_t>(usage.ru_maxrss) * 1024);
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            const std::string why = WIFSIGNALED(status)
                                        ? fmt::format("killed by signal {}", WTERMSIG(status))
                                        : fmt::format("exited {}", WEXITSTATUS(status));
            const std::string error = WIFEXITED(status) ? LastLine(w.log) : "";
            if (!error.empty()) last_error = error;
            if (o.on_note)
              o.on_note(fmt::format("phase {}: worker {} {}{} (log: {})", phase, w.rank, why,
                                    error.empty() ? "" : ": " + error, w.log));
          }
          w.pid = -1;
          --running;
        }
      }
      p.done = 0;
      for (int i = 0; i < p.total; ++i) {
        if (!dir.Committed(phase, i)) continue;
        ++p.done;
        if (phase == 'a' && !counted[static_cast<size_t>(i)]) {
          counted[static_cast<size_t>(i)] = true;
          CountRead(dir, i, p);
        }
      }
      p.seconds = Since(start);
      if (o.on_progress) o.on_progress(p);
      if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

// ------------------------------------------------------------- report ---

nlohmann::json Report(const PipelineSpec& spec, const WorkDir& dir, const nlohmann::json& dedup) {
  std::map<std::string, StageCounts> counts;
  int64_t shingles = 0;
  double minhash_seconds = 0, stage_seconds = 0;
  for (int s = 0; s < static_cast<int>(spec.inputs.size()); ++s) {
    const nlohmann::json j =
        nlohmann::json::parse(ReadWholeFile(dir.ShardA(s) + "/stats.json", 64 << 20));
    for (const auto& [stage, c] : j.at("counts").items()) counts[stage].Add(c.get<StageCounts>());
    shingles += j.at("minhash_shingles").get<int64_t>();
    minhash_seconds += j.at("minhash_seconds").get<double>();
    stage_seconds += j.at("seconds").get<double>();
  }
  int64_t kept = 0, bytes = 0, exact = 0, near = 0;
  for (int s = 0; s < static_cast<int>(spec.inputs.size()); ++s) {
    const nlohmann::json j = nlohmann::json::parse(ReadWholeFile(dir.StatsD(s), 1 << 20));
    kept += j.at("kept").get<int64_t>();
    bytes += j.at("bytes").get<int64_t>();
    exact += j.at("exact").get<int64_t>();
    near += j.at("near").get<int64_t>();
  }
  nlohmann::json stages = nlohmann::json::array();
  auto add = [&](const std::string& name, const StageCounts& c) {
    nlohmann::json e = c;
    e["stage"] = name;
    stages.push_back(e);
  };
  add("read", counts["read"]);
  StageCounts last = counts["read"];
  for (const Stage& st : spec.stages) {
    if (st.kind == "exact-dedup" || st.kind == "minhash-dedup") {
      StageCounts c;
      c.docs_in = last.docs_out;
      c.bytes_in = last.bytes_out;
      const int64_t gone = st.kind == "exact-dedup" ? exact : near;
      c.docs_out = c.docs_in - gone;
      if (gone > 0)
        c.removed[st.kind == "exact-dedup" ? "exact-duplicate" : "near-duplicate"] = gone;
      // Bytes after dedup are known at the end only (the last dedup stage).
      c.bytes_out = (st.kind == "minhash-dedup" || !spec.Find("minhash-dedup")) ? bytes : -1;
      add(st.kind, c);
      last = c;
      if (c.bytes_out < 0) last.bytes_out = c.bytes_in;
    } else if (st.kind != "tokenize") {
      add(st.kind, counts[st.kind]);
      last = counts[st.kind];
    }
  }
  return {{"job", spec.name},
          {"inputs", spec.inputs.size()},
          {"workers", spec.workers},
          {"partitions", spec.partitions},
          {"stages", stages},
          {"dedup", dedup},
          {"kept", {{"docs", kept}, {"bytes", bytes}}},
          {"minhash", {{"shingles", shingles}, {"seconds", minhash_seconds}}},
          {"phase_a_cpu_seconds", stage_seconds}};
}

// What the work directory's content depends on: the inputs, the partitions,
// the document bound and every stage with its parameters. Not the workers,
// the backend or the retries: a resume may run on more or fewer workers.
std::string Fingerprint(const PipelineSpec& spec) {
  nlohmann::json stages = nlohmann::json::array();
  for (const Stage& st : spec.stages) {
    const QualityOptions& q = st.quality;
    stages.push_back({st.kind, st.keep, st.candidates, st.sample_bytes, st.phrases, st.last_lines,
                      st.block_hosts, st.block_url_substrings, st.minhash.ngram, st.minhash.bands,
                      st.minhash.rows, st.minhash.seed, st.vocab, st.held_out_every,
                      nlohmann::json::array(
                          {q.min_chars, q.max_chars, q.max_duplicate_lines,
                           q.max_duplicate_line_chars, q.max_top_2gram_chars, q.max_bullet_lines,
                           q.max_ellipsis_lines, q.max_digit_chars, q.min_words, q.max_words,
                           q.min_mean_word_length, q.max_mean_word_length, q.max_symbol_words,
                           q.min_alpha_words, q.min_stop_words, q.min_cjk_chars, q.min_hiragana})});
  }
  const std::string text = nlohmann::json{
      {"inputs", spec.inputs},
      {"partitions", spec.partitions},
      {"max_document_bytes", spec.limits.max_document_bytes},
      {"stages", stages}}.dump();
  return fmt::format("{:016x}", Xxh3(text.data(), text.size()));
}

void CheckFingerprint(const PipelineSpec& spec, const WorkDir& dir) {
  const std::string path = dir.work + "/job.fingerprint";
  const std::string mine = Fingerprint(spec);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    const std::string theirs = ReadWholeFile(path, 64);
    if (theirs != mine) {
      throw Error(fmt::format(
          "{}: made by another version of the job (its inputs, partitions, "
          "max_document_bytes or stages changed; workers and backend may change on a resume); "
          "remove {} to start over, or set data.pipeline.out elsewhere",
          dir.work, dir.work));
    }
    return;
  }
  AtomicFileWriter w(path);
  w.Write(mine.data(), mine.size());
  w.Commit();
}

}  // namespace

void RunWorker(const PipelineSpec& spec, char phase, int rank, int workers) {
  // A worker dies with its coordinator: no orphan goes on writing.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const WorkDir dir(spec);
  std::optional<ShardStages> stages;
  std::vector<RemovedKey> removed;
  if (phase == 'a') stages.emplace(spec);
  if (phase == 'd') removed = ReadRemoved(dir);
  for (int i = rank; i < PhaseItems(spec, phase); i += workers) {
    if (dir.Committed(phase, i)) continue;
    try {
      if (phase == 'a') RunShard(spec, dir, *stages, i);
      if (phase == 'b') DedupPartition(spec, dir, i);
      if (phase == 'd') WriteOutputShard(dir, removed, i);
    } catch (const std::exception& e) {
      throw Error(fmt::format(
          "phase {}, {} {}{}: {}", phase, phase == 'b' ? "partition" : "shard", i,
          phase == 'b' ? "" : fmt::format(" ({})", spec.inputs[static_cast<size_t>(i)]), e.what()));
    }
  }
}

nlohmann::json RunPipeline(const PipelineSpec& spec, const PipelineOptions& o) {
  if (spec.backend == "slurm" && std::getenv("SLURM_JOB_ID") == nullptr) {
    throw Error(fmt::format(
        "{}: data.pipeline.backend = \"slurm\" starts its workers as job steps of an "
        "allocation; run it inside one (sbatch --nodes=N --wrap \"fmstack data pipeline {}\", "
        "or under salloc)",
        spec.file, spec.file));
  }
  const WorkDir dir(spec);
  std::error_code ec;
  for (const char* sub : {"/a", "/b", "/d", "/logs"}) fs::create_directories(dir.work + sub, ec);
  if (ec) throw Error(fmt::format("{}: cannot create: {}", dir.work, ec.message()));
  const DirLock lock(dir.work, "LOCK", "corpus pipeline");
  CheckFingerprint(spec, dir);
  RemoveTemporaries(dir.work);
  const auto start = Clock::now();
  const int64_t rss_a = RunPhase(spec, o, dir, 'a');
  const int64_t rss_b = RunPhase(spec, o, dir, 'b');
  nlohmann::json dedup = ClusterDuplicates(spec, dir);
  const int64_t rss_d = RunPhase(spec, o, dir, 'd');
  nlohmann::json report = Report(spec, dir, dedup);
  // The workers of this run (0 for a phase that was committed before it).
  report["worker_peak_rss_bytes"] = {{"a", rss_a}, {"b", rss_b}, {"d", rss_d}};
  if (const Stage* t = spec.Find("tokenize")) {
    std::string text;
    for (int s = 0; s < static_cast<int>(spec.inputs.size()); ++s) {
      ForEachLine(ReadWholeFile(dir.OutShard(s), int64_t{1} << 40), [&](std::string_view line) {
        text += nlohmann::json::parse(line).at("text").get_ref<const std::string&>();
        text.push_back('\n');
      });
    }
    if (text.empty()) throw Error("tokenize: no document was kept; nothing to tokenize");
    const train::PrepareReport r = train::PrepareData(
        text,
        {.out_dir = spec.out + "/tokens", .vocab = t->vocab, .held_out_every = t->held_out_every},
        nullptr);
    report["tokenize"] = {{"dir", spec.out + "/tokens"},
                          {"train_tokens", r.train_tokens},
                          {"held_out_tokens", r.held_out_tokens},
                          {"vocab", r.vocab}};
  }
  report["seconds"] = Since(start);
  const std::string text = report.dump(2) + "\n";
  AtomicFileWriter w(spec.out + "/report.json");
  w.Write(text.data(), text.size());
  w.Commit();
  return report;
}

}  // namespace fmstack::data
