// `fmstack bench comm`: an nccl-tests-style table (size, algbw, busbw) of
// fmstack's collectives at 2, 4 and 8 ranks, on one node (shared memory) and
// across nodes (our TCP mesh), next to OpenMPI's MPI_Allreduce etc. on the
// same machine (shared-memory and TCP transports) and the machine's memcpy
// bandwidth, all in one run.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/bench_comm_mpi.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "comm/hier_comm.h"
#include "comm/path_tuner.h"
#include "runtime/supervisor.h"
#include "util/core_round_trip.h"
#include "util/error.h"
#include "util/paired_rounds.h"
#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::cli {
namespace {

const std::vector<std::string> kOps = {"allreduce", "allgather", "reduce_scatter", "alltoall"};

struct BenchArgs {
  std::string ranks = "2,4,8";
  std::string min = "1KiB", max = "256MiB";
  std::string ops = "allreduce,allgather,reduce_scatter,alltoall";
  bool mpi = true;
  std::string mpi_bench;  // path of bench_mpi_coll
  bool markdown = false;
  bool netns = false;  // also n nodes in network namespaces (root)
  int rounds = 3;      // each side's time per size is the median over rounds
  // Sizes per pair of runs (0: all of them): each side runs this many sizes,
  // then the other side the same ones, so that what a ratio compares ran
  // seconds apart, not the length of a whole sweep.
  int sizes_per_run = 3;
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string w; std::getline(in, w, ',');) {
    if (!w.empty()) out.push_back(w);
  }
  return out;
}

// The sizes from --min to --max in spans of --sizes-per-run (one run of
// each side per span).
std::vector<SizeSpan> Spans(const BenchArgs& a) {
  auto spans = SizeSpans(static_cast<size_t>(units::ParseBytes(a.min)),
                         static_cast<size_t>(units::ParseBytes(a.max)), a.sizes_per_run);
  if (spans.empty())
    throw Error(
        fmt::format("bench comm: --min {} and --max {}: expected 0 < min <= max", a.min, a.max));
  return spans;
}

// The bench's progress over its runs (each side of each layout on each span
// of sizes in each round: one process group through those sizes), with the
// rate and an ETA. A run's time grows with its ranks on the same cores, so
// each run counts as many units as it has ranks.
class RunProgress {
 public:
  explicit RunProgress(const BenchArgs& a) : start_(std::chrono::steady_clock::now()) {
    const int layouts = a.netns ? 3 : 2, sides = a.mpi ? 2 : 1;
    const auto spans = static_cast<int>(Spans(a).size());
    for (const std::string& rs : Split(a.ranks)) {
      runs_ += a.rounds * layouts * sides * spans;
      units_ += static_cast<int64_t>(std::stoi(rs)) * a.rounds * layouts * sides * spans;
    }
  }
  void Done(int ranks, const std::string& what) {
    ++runs_done_;
    units_done_ += ranks;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta =
        elapsed / static_cast<double>(units_done_) * static_cast<double>(units_ - units_done_);
    line_.Show(runs_done_, runs_,
               fmt::format("bench comm: {}/{} runs ({:.0f}%), last {}, {:.1f} runs/min, {} "
                           "elapsed, ETA {}",
                           runs_done_, runs_,
                           100.0 * static_cast<double>(units_done_) / static_cast<double>(units_),
                           what, 60.0 * static_cast<double>(runs_done_) / elapsed,
                           units::FormatSeconds(elapsed), units::FormatSeconds(eta)));
  }

 private:
  std::chrono::steady_clock::time_point start_;
  int64_t runs_ = 0, units_ = 0, runs_done_ = 0, units_done_ = 0;
  ProgressLine line_;
};

// nccl-tests' bus bandwidth factor: what each link carries relative to algbw.
double BusFactor(const std::string& op, int n) {
  const double r = static_cast<double>(n - 1) / n;
  return op == "allreduce" ? 2 * r : r;
}

// Every size is a multiple of 4 bytes x ranks, so blocks are equal.
size_t Aligned(size_t bytes, int n) {
  return bytes / (4 * n) * (4 * n);
}

// ------------------------------------------------------------- worker ---

double SlowestRank(comm::Communicator& c, double seconds) {
  std::vector<float> all(c.size());
  std::vector<float> mine{static_cast<float>(seconds)};
  c.AllGather(std::span<float>(mine), std::span<float>(all));
  return *std::max_element(all.begin(), all.end());
}

double TimeOp(comm::Communicator& c, const std::string& op, std::vector<float>& in,
              std::vector<float>& out, size_t count, int iters) {
  const int n = c.size();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    if (op == "allreduce") {
      c.AllReduce(std::span<float>(out.data(), count), comm::ReduceOp::kSum);
    } else if (op == "allgather") {
      c.AllGather(std::span<float>(in.data(), count / n), std::span<float>(out.data(), count));
    } else if (op == "reduce_scatter") {
      c.ReduceScatter(std::span<float>(in.data(), count), std::span<float>(out.data(), count / n),
                      comm::ReduceOp::kSum);
    } else {
      c.AllToAll(std::span<float>(in.data(), count), std::span<float>(out.data(), count));
    }
  }
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  return SlowestRank(c, t);
}

// Iterations for about 0.2 s of one (op, size), judged from a batch that ran
// at least 20 ms. At 1 KiB a call takes about a microsecond: the count once
// came from one timed call and was capped at 200, so a size was timed over a
// fifth of a millisecond, and one call that met a preempted vCPU or a page
// fault set its result (0.02 GB/s against about 1, on both sides). Every
// rank gets the same count: TimeOp returns the slowest rank's time.
int CalibratedIters(comm::Communicator& c, const std::string& op, std::vector<float>& in,
                    std::vector<float>& out, size_t count) {
  constexpr int kMaxIters = 100'000;
  for (int n = 1;; n = std::min(kMaxIters, n * 8)) {
    const double t = TimeOp(c, op, in, out, count, n);
    if (t * n >= 0.02 || n == kMaxIters)
      return std::clamp(static_cast<int>(0.2 / std::max(t, 1e-9)), 1, kMaxIters);
  }
}

int RunWorker(const BenchArgs& args) {
  auto c = comm::Connect(comm::OptionsFromEnv());
  const size_t lo = static_cast<size_t>(units::ParseBytes(args.min));
  const size_t hi = static_cast<size_t>(units::ParseBytes(args.max));
  std::vector<float> in(hi / 4, 1.0f), out(hi / 4, 1.0f);
  for (const std::string& op : Split(args.ops)) {
    for (size_t bytes = lo; bytes <= hi; bytes *= 4) {
      const size_t b = Aligned(bytes, c->size());
      // Warm-up: connections and page faults, and for all-reduce the calls in
      // which its tuners time their two ways (path_tuner.h), so that what is
      // timed is the way a job's repeated calls settle on.
      TimeOp(*c, op, in, out, b / 4, op == "allreduce" ? comm::PathTuner::kExplore + 1 : 1);
      const double t = TimeOp(*c, op, in, out, b / 4, CalibratedIters(*c, op, in, out, b / 4));
      if (c->rank() == 0) {
        EmitEvent(nlohmann::json{{"op", op}, {"bytes", b}, {"seconds", t}});
      }
    }
  }
  return 0;
}

// -------------------------------------------------------- coordinator ---

using Results = CollectiveTimes;

// The OpenMPI peer's share of the arguments.
MpiSweep Sweep(const BenchArgs& a) {
  return {.bench = a.mpi_bench,
          .min_bytes = static_cast<size_t>(units::ParseBytes(a.min)),
          .max_bytes = static_cast<size_t>(units::ParseBytes(a.max))};
}

Results RunFmstack(const BenchArgs& args, int nodes, int procs, const std::string& self,
                   bool netns = false) {
  runtime::SuperviseOptions o;
  o.netns = netns;
  o.layout = {nodes, procs};
  o.argv = {self, "bench", "comm", "--min", args.min, "--max", args.max, "--ops", args.ops};
  o.run_dir = fmt::format("runs/bench-comm/fmstack-{}x{}", nodes, procs);
  o.job_name = "bench-comm";
  o.job_id = fmt::format("bench{}", ::getpid());
  o.extra_env["OMP_NUM_THREADS"] = "1";
  // A bench run is not scraped; its endpoint line per run only broke up the
  // progress line.
  o.metrics_listen = "off";
  Results r;
  const auto result = runtime::Supervise(
      o,
      [&](int, const std::string& text) {
        const auto e = nlohmann::json::parse(text);
        r[{e.at("op"), e.at("bytes")}] = e.at("seconds");
        if (::isatty(2) == 1)
          std::cerr << fmt::format("\r\033[K  fmstack {}x{}: {} {}", nodes, procs,
                                   e.at("op").get<std::string>(),
                                   units::FormatBytes(e.at("bytes").get<double>()))
                    << std::flush;
      },
      [](int rank, bool is_stderr, const std::string& line) {
        if (is_stderr) std::cerr << fmt::format("\n[rank {}] {}\n", rank, line);
      },
      [](const std::string& line) { std::cerr << "\nbench comm: " << line << "\n"; });
  if (::isatty(2) == 1) std::cerr << "\r\033[K";
  if (!result.ok()) throw Error("bench comm: a worker failed: " + result.failure);
  return r;
}

double MemcpyBandwidth() {
  const size_t bytes = 256 << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / t);
  }
  return best;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double Min(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

std::string Gbs(double bytes, double seconds) {
  return seconds > 0 ? fmt::format("{:.2f}", bytes / seconds / 1e9) : "-";
}

// One layout's runs, round by round: ours[i] and theirs[i] ran one right
// after the other.
struct Layout {
  std::vector<Results> ours, theirs;
};

// Every layout for one world size: one node (shared memory against vader),
// n nodes on loopback (TCP mesh against the tcp BTL), n nodes in network
// namespaces.
struct Sides {
  Layout node, nodes, netns;
};

// One size's times for one layout: from the round with the median ratio
// (util/paired_rounds.h), so that every figure the table shows for a size
// comes from two runs made one right after the other. Without OpenMPI, the
// median of our rounds (the longer of the middle two), theirs 0.
TimedPair MedianPair(const Layout& l, const Results::key_type& key) {
  std::vector<TimedPair> rounds;
  for (size_t i = 0; i < l.ours.size(); ++i) {
    const auto o = l.ours[i].find(key);
    if (o == l.ours[i].end()) return {};
    TimedPair p{.ours = o->second};
    if (i < l.theirs.size()) {
      const auto t = l.theirs[i].find(key);
      if (t != l.theirs[i].end()) p.theirs = t->second;
    }
    rounds.push_back(p);
  }
  if (const auto mid = MedianRatioRound(rounds)) return *mid;
  if (rounds.empty()) return {};
  std::ranges::sort(rounds, {}, &TimedPair::ours);
  return {.ours = rounds[rounds.size() / 2].ours};
}

// Per round, layout and span of sizes, the two sides run one right after
// the other and take turns to go first, so that a slow minute of this shared
// machine lands on one pair, whose ratio the median over rounds then
// outvotes. The AMD VMs switch state for minutes at a time; when each side
// ran all its layouts in one block, 4 ranks inside a node came out at 0.40x
// OpenMPI in a run whose figures for our block were the slow state's and
// OpenMPI's were not. With every size in one run, the two sides' runs of a
// size were still a whole sweep apart (8 ranks inside a node: 10 s of ours,
// 20 s of OpenMPI's), and a switch between them set 1.07 GB/s of the slow
// state against OpenMPI's 2.10 of the fast one (docs/comm.md); in spans of a
// few sizes they are seconds apart.
Sides RunRounds(const BenchArgs& a, int n, const std::string& self, std::string* mpi_shm_config,
                std::vector<double>* round_trips, RunProgress* progress) {
  Sides s;
  int round = 0;
  const std::vector<SizeSpan> spans = Spans(a);
  const auto pair = [&](Layout& l, const char* layout, bool ours_first, const auto& ours,
                        const auto& theirs) {
    l.ours.emplace_back();
    if (a.mpi) l.theirs.emplace_back();
    for (const SizeSpan& span : spans) {
      BenchArgs part = a;
      part.min = std::to_string(span.min);
      part.max = std::to_string(span.max);
      const std::string what = fmt::format("{} ranks {} round {}, {}-{}", n, layout, round + 1,
                                           units::FormatBytes(static_cast<double>(span.min)),
                                           units::FormatBytes(static_cast<double>(span.max)));
      const auto run_ours = [&] {
        l.ours.back().merge(ours(part));
        progress->Done(n, "fmstack " + what);
      };
      const auto run_theirs = [&] {
        l.theirs.back().merge(theirs(Sweep(part)));
        progress->Done(n, "OpenMPI " + what);
      };
      if (!a.mpi) {
        run_ours();
      } else if (ours_first) {
        run_ours();
        run_theirs();
      } else {
        run_theirs();
        run_ours();
      }
    }
  };
  for (; round < a.rounds; ++round) {
    round_trips->push_back(CoreRoundTripNs());
    const bool ours_first = round % 2 == 0;
    pair(
        s.node, "in one node", ours_first,
        [&](const BenchArgs& p) { return RunFmstack(p, 1, n, self); },
        [&](const MpiSweep& p) { return RunMpiShm(p, n, mpi_shm_config); });
    pair(
        s.nodes, "on loopback", ours_first,
        [&](const BenchArgs& p) { return RunFmstack(p, n, 1, self); },
        [&](const MpiSweep& p) { return RunMpi(p, n, "tcp,self"); });
    if (a.netns) {
      pair(
          s.netns, "in namespaces", ours_first,
          [&](const BenchArgs& p) { return RunFmstack(p, n, 1, self, true); },
          [&](const MpiSweep& p) { return RunMpiNetns(p, n); });
    }
  }
  round_trips->push_back(CoreRoundTripNs());
  return s;
}

std::string RoundTrips(const std::vector<double>& ns) {
  std::string out;
  for (const double v : ns)
    out += (out.empty() ? "" : ", ") + (v > 0 ? fmt::format("{:.0f}", v) : "-");
  return out;
}

int RunCoordinator(const BenchArgs& args) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  BenchArgs a = args;
  if (a.mpi && a.mpi_bench.empty()) {
    a.mpi_bench = (std::filesystem::path(self).parent_path() / "bench_mpi_coll").string();
  }
  if (a.mpi && !std::filesystem::exists(a.mpi_bench)) {
    std::cerr << "OpenMPI peer not built (scripts/bootstrap.sh --bench installs libopenmpi-dev); "
                 "comparing without it\n";
    a.mpi = false;
  }
  const double memcpy_bw = MemcpyBandwidth();
  std::cout << fmt::format("memcpy bandwidth (one core, 256 MiB): {:.2f} GB/s\n\n",
                           memcpy_bw / 1e9);
  std::vector<std::string> summary;
  std::string mpi_shm_config = "-";
  RunProgress progress(a);
  for (const std::string& rs : Split(a.ranks)) {
    const int n = std::stoi(rs);
    std::vector<double> round_trips;
    const Sides sides = RunRounds(a, n, self, &mpi_shm_config, &round_trips, &progress);
    // In plain text a bar sets the groups apart; in markdown it would be a
    // column of its own and shift every heading after it.
    const std::string sep = a.markdown ? "" : "| ";
    for (const std::string& op : Split(a.ops)) {
      std::vector<std::string> header = {
          "size",  "1 node algbw",        "busbw", "OpenMPI shm busbw",
          "ratio", sep + "n nodes algbw", "busbw", "OpenMPI tcp busbw",
          "ratio"};
      if (a.netns) header.push_back(sep + "netns nodes busbw");
      if (a.netns && a.mpi) {
        header.push_back("OpenMPI netns busbw");
        header.push_back("ratio");
      }
      TextTable t(header);
      std::vector<double> shm_ratios, tcp_ratios, netns_ratios;
      const auto ratio = [](const TimedPair& p, std::vector<double>* all) {
        if (p.Ratio() > 0) all->push_back(p.Ratio());
        return p.Ratio() > 0 ? fmt::format("{:.2f}", p.Ratio()) : std::string("-");
      };
      if (sides.node.ours.empty()) continue;
      for (const auto& [key, unused] : sides.node.ours.front()) {
        if (key.first != op) continue;
        const double bytes = static_cast<double>(key.second), f = BusFactor(op, n);
        const TimedPair node = MedianPair(sides.node, key), nodes = MedianPair(sides.nodes, key);
        std::vector<std::string> row = {
            units::FormatBytes(bytes),   Gbs(bytes, node.ours),        Gbs(f * bytes, node.ours),
            Gbs(f * bytes, node.theirs), ratio(node, &shm_ratios),     Gbs(bytes, nodes.ours),
            Gbs(f * bytes, nodes.ours),  Gbs(f * bytes, nodes.theirs), ratio(nodes, &tcp_ratios)};
        if (a.netns) {
          const TimedPair netns = MedianPair(sides.netns, key);
          row.push_back(Gbs(f * bytes, netns.ours));
          if (a.mpi) {
            row.push_back(Gbs(f * bytes, netns.theirs));
            row.push_back(ratio(netns, &netns_ratios));
          }
        }
        t.AddRow(std::move(row));
      }
      std::cout << fmt::format(
                       "{} — {} ranks (GB/s; ratio = fmstack busbw / OpenMPI busbw; per size, "
                       "the round with the median ratio)\n",
                       op, n)
                << (a.markdown ? t.RenderMarkdown() : t.RenderText()) << "\n";
      if (a.mpi && !shm_ratios.empty() && !tcp_ratios.empty()) {
        std::string line =
            fmt::format("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |", op, n,
                        Median(shm_ratios), Min(shm_ratios), Median(tcp_ratios), Min(tcp_ratios));
        if (!netns_ratios.empty()) {
          line += fmt::format(" {:.2f} | {:.2f} |", Median(netns_ratios), Min(netns_ratios));
        }
        summary.push_back(std::move(line));
      }
    }
    std::cout << fmt::format(
        "{} ranks: core-to-core round trip before each round and after the "
        "last: {} ns\n\n",
        n, RoundTrips(round_trips));
  }
  if (!summary.empty()) {
    std::cout << fmt::format(
        "fmstack busbw / OpenMPI busbw over every size {}..{} (targets: median >= 1.0, worst >= "
        "0.8); per size, the median ratio over {} round(s), in each of which the two sides ran "
        "one right after the other on {}, taking turns to go first\nOpenMPI: {}; shared memory: "
        "{}\n\n",
        a.min, a.max, a.rounds,
        a.sizes_per_run > 0 ? fmt::format("up to {} sizes at a time", a.sizes_per_run)
                            : std::string("every size at once"),
        MpiVersion(), mpi_shm_config);
    std::cout << "| op | ranks | one node, median | one node, worst | across nodes, median | "
                 "across nodes, worst |"
              << (a.netns ? " netns nodes, median | netns nodes, worst |" : "")
              << "\n|---|--:|--:|--:|--:|--:|" << (a.netns ? "--:|--:|" : "") << "\n";
  }
  for (const std::string& s : summary) std::cout << s << "\n";
  return 0;
}

}  // namespace

Runner AddBenchCommand(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = app.add_subcommand("bench", "measure fmstack against peers and machine limits");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand(
      "comm", "collectives: fmstack (shared memory, TCP mesh) vs OpenMPI, nccl-tests style");
  cmd->add_option("--ranks", args->ranks, "comma-separated world sizes");
  cmd->add_option("--min", args->min,
                  "smallest message (64KiB = 65,536 bytes; 64K = 64KB = 64,000)")
      ->check(Size());
  cmd->add_option("--max", args->max, "largest message (sizes step x4)")->check(Size());
  cmd->add_option("--ops", args->ops,
                  "comma-separated: allreduce,allgather,reduce_scatter,alltoall");
  cmd->add_flag("!--no-mpi", args->mpi, "skip the OpenMPI peer");
  cmd->add_option("--mpi-bench", args->mpi_bench,
                  "the OpenMPI peer binary (default: next to fmstack)");
  cmd->add_flag("--markdown", args->markdown, "tables as Markdown");
  cmd->add_option("--rounds", args->rounds,
                  "rounds of both sides back to back; per size, the round with the median ratio")
      ->check(Between(1, 99))
      ->capture_default_str();
  cmd->add_option("--sizes-per-run", args->sizes_per_run,
                  "sizes each side runs before the other runs them (0: every size in one run)")
      ->check(Between(0, 64))
      ->capture_default_str();
  cmd->add_flag("--netns", args->netns,
                "also run the n-node layout with every node in its own network namespace (root)");
  const Runner serve = AddBenchServeCommand(*bench);
  return [args, bench, serve] {
    if (bench->got_subcommand("serve")) return serve();
    // Started by the coordinator through the supervisor: a worker.
    if (std::getenv("FMSTACK_RUN") != nullptr) return RunWorker(*args);
    return RunCoordinator(*args);
  };
}

}  // namespace fmstack::cli
