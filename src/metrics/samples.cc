#include "metrics/samples.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "util/error.h"

namespace fmstack::metrics {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxFiles = 4096;        // one per rank of a local run, with room
constexpr size_t kMaxLine = 1 << 20;      // a record of ~50k ranks
constexpr int64_t kMaxWorld = 1 << 16;    // ranks in one record
constexpr int64_t kMaxMicro = 1LL << 40;  // micro-batch indices

int64_t Bounded(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer())
    throw Error(fmt::format("{}: \"{}\" missing or not an integer", where, key));
  const auto v = j[key].get<int64_t>();
  if (v < lo || v > hi)
    throw Error(fmt::format("{}: \"{}\" = {} is outside {}..{}", where, key, v, lo, hi));
  return v;
}

SampleRecord Parse(const std::string& line, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) throw Error(where + ": not a JSON object");
  SampleRecord r;
  r.run = j.contains("run") ? Bounded(j, "run", 0, int64_t{1} << 50, where) : 0;
  r.generation = Bounded(j, "gen", 0, kMaxMicro, where);
  r.step = Bounded(j, "step", 1, kMaxMicro, where);
  r.micro_batch = Bounded(j, "micro_batch", 1, kMaxMicro, where);
  const nlohmann::json& ranges = j.value("micro", nlohmann::json());
  if (!ranges.is_array() || ranges.empty() || static_cast<int64_t>(ranges.size()) > kMaxWorld)
    throw Error(
        fmt::format("{}: \"micro\" must list 1..{} (first, count) pairs", where, kMaxWorld));
  for (const nlohmann::json& p : ranges) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
      throw Error(where + ": a \"micro\" entry is not a (first, count) pair");
    const auto first = p[0].get<int64_t>(), count = p[1].get<int64_t>();
    if (first < 0 || count < 0 || first > kMaxMicro || count > kMaxMicro)
      throw Error(fmt::format("{}: micro-batch range ({}, {}) out of bounds", where, first, count));
    r.ranges.emplace_back(first, count);
  }
  return r;
}

// Problems with one step's record: each of [0, G) exactly once.
void CheckCover(const SampleRecord& r, int64_t G, std::vector<std::string>& problems) {
  std::vector<std::pair<int64_t, int64_t>> spans;  // (first, rank)
  for (size_t k = 0; k < r.ranges.size(); ++k) {
    if (r.ranges[k].second > 0) spans.emplace_back(r.ranges[k].first, static_cast<int64_t>(k));
  }
  std::sort(spans.begin(), spans.end());
  int64_t next = 0;
  for (const auto& [first, rank] : spans) {
    const int64_t end = first + r.ranges[static_cast<size_t>(rank)].second;
    if (first > next) {
      problems.push_back(fmt::format("step {}: micro-batches {}..{} were trained by no rank",
                                     r.step, next, first - 1));
    } else if (first < next) {
      problems.push_back(fmt::format("step {}: micro-batches {}..{} were trained twice (rank {})",
                                     r.step, first, std::min(next, end) - 1, rank));
    }
    next = std::max(next, end);
  }
  if (next < G) {
    problems.push_back(
        fmt::format("step {}: micro-batches {}..{} were trained by no rank", r.step, next, G - 1));
  } else if (next > G) {
    problems.push_back(fmt::format("step {}: micro-batches up to {} recorded, the step has {}",
                                   r.step, next - 1, G));
  }
}

}  // namespace

SampleLedger::SampleLedger(std::string path) : path_(std::move(path)) {
  fs::create_directories(fs::path(path_).parent_path());
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot open: {}", path_, std::strerror(errno)));
}

SampleLedger::~SampleLedger() {
  if (fd_ >= 0) ::close(fd_);
}

void SampleLedger::Append(const SampleRecord& r) {
  nlohmann::json ranges = nlohmann::json::array();
  for (const auto& [first, count] : r.ranges) ranges.push_back({first, count});
  const std::string line = nlohmann::json{{"run", r.run},
                                          {"gen", r.generation},
                                          {"step", r.step},
                                          {"micro_batch", r.micro_batch},
                                          {"micro", ranges}}
                               .dump() +
                           "\n";
  // One write: a crash leaves whole lines, or a torn last one the audit names.
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    throw Error(
        fmt::format("{}: append failed: {}", path_, n < 0 ? std::strerror(errno) : "short write"));
}

SampleAudit AuditSamples(const std::string& run_dir, int64_t first, int64_t steps,
                         int64_t micro_per_step) {
  SampleAudit a;
  const fs::path dir = fs::path(run_dir) / "samples";
  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
    if (files.size() > kMaxFiles)
      throw Error(fmt::format("{}: more than {} ledger files", dir.string(), kMaxFiles));
  }
  if (ec || files.empty()) {
    a.problems.push_back(
        fmt::format("{}: no sample ledger (was the run started by `fmstack run`?)", dir.string()));
    return a;
  }
  std::sort(files.begin(), files.end());
  std::map<int64_t, SampleRecord> newest;  // step -> the newest generation's record
  // Step -> the generations that recorded it: more than one, it was rolled
  // back and trained again (every rank's line of one generation is a copy).
  std::map<int64_t, std::set<std::pair<int64_t, int64_t>>> gens;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      const std::string where = fmt::format("{}:{}", f.string(), n);
      if (line.size() > kMaxLine) throw Error(where + ": line too long");
      if (in.eof() && !line.empty() && line.back() != '}') {
        a.problems.push_back(where + ": a torn last line (the rank died while writing it)");
        break;
      }
      SampleRecord r = Parse(line, where);
      ++a.records;
      gens[r.step].insert({r.run, r.generation});
      auto [it, fresh] = newest.try_emplace(r.step, r);
      if (fresh) continue;
      SampleRecord& held = it->second;
      const auto attempt = std::pair{r.run, r.generation};
      const auto held_attempt = std::pair{held.run, held.generation};
      if (attempt > held_attempt) {
        held = std::move(r);
      } else if (attempt == held_attempt &&
                 (r.ranges != held.ranges || r.micro_batch != held.micro_batch)) {
        a.problems.push_back(
            fmt::format("{}: step {} of generation {} recorded differently by another rank", where,
                        r.step, r.generation));
      }
    }
  }
  if (steps <= 0) steps = newest.empty() ? 0 : newest.rbegin()->first;
  if (first <= 0) first = newest.empty() ? 1 : newest.begin()->first;
  if (micro_per_step <= 0 && !newest.empty()) {
    for (const auto& range : newest.begin()->second.ranges) micro_per_step += range.second;
  }
  a.first = first;
  a.steps = steps;
  a.micro_per_step = micro_per_step;
  for (const auto& [step, r] : newest) {
    if (step < first) continue;  // trained before this run's starting point
    if (step > steps) {
      a.problems.push_back(fmt::format("step {} recorded, the run has {}", step, steps));
      continue;
    }
    a.micro_batch = r.micro_batch;
    CheckCover(r, micro_per_step, a.problems);
    const int world = static_cast<int>(r.ranges.size());
    if (a.worlds.empty() || a.worlds.back().world != world || a.worlds.back().last != step - 1) {
      a.worlds.push_back({world, step, step});
    } else {
      a.worlds.back().last = step;
    }
  }
  for (int64_t s = first; s <= steps; ++s) {
    if (!newest.contains(s)) a.problems.push_back(fmt::format("step {}: no rank recorded it", s));
    if (a.problems.size() > 50) {
      a.problems.push_back("... (more problems not listed)");
      break;
    }
  }
  for (const auto& [step, generations] : gens)
    a.superseded += static_cast<int64_t>(generations.size()) - 1;
  return a;
}

nlohmann::json SampleAudit::ToJson() const {
  nlohmann::json w = nlohmann::json::array();
  for (const Span& s : worlds)
    w.push_back({{"world", s.world}, {"first", s.first}, {"last", s.last}});
  return {{"ok", ok()},
          {"first", first},
          {"steps", steps},
          {"micro_per_step", micro_per_step},
          {"micro_batch", micro_batch},
          {"records", records},
          {"steps_redone", superseded},
          {"worlds", w},
          {"problems", problems}};
}

std::string SampleAudit::Summary() const {
  std::string spans;
  for (const Span& s : worlds) {
    spans += fmt::format("{}{} (steps {}-{})", spans.empty() ? "" : ", ", s.world, s.first, s.last);
  }
  return fmt::format("steps {}-{} x {} micro-batches: {}; {} redone; world {}", first, steps,
                     micro_per_step,
                     ok() ? "each exactly once" : fmt::format("{} problem(s)", problems.size()),
                     superseded, spans.empty() ? "-" : spans);
}

}  // namespace fmstack::metrics
