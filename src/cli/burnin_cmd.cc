// `fmstack burnin`: this node's GEMM and memory bandwidth, verified, judged
// against expected figures (`--expect FILE`, written on a known-good node by
// `--calibrate FILE`). Under `fmstack run` with several nodes each node
// measures in turn (alone, so the nodes of the local backend do not share
// the cores while measuring), then all of them all-reduce together, and rank
// 0 prints one row per node:
//   fmstack run --nodes 4 --procs-per-node 1 -- fmstack burnin --expect ref.json
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "comm/hier_comm.h"
#include "gpt/sgemm_peak.h"
#include "health/burnin.h"
#include "util/error.h"
#include "util/json_file.h"
#include "util/strict_table.h"
#include "util/text_table.h"

namespace fmstack::cli {
namespace {

struct BurninArgs {
  double seconds = 4, tolerance = 0.7;
  int threads = 1;
  std::string expect, calibrate;
  bool json = false;
};

health::BurninFigures ReadExpected(const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(ReadTextFile(path), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Error(path + ": not a JSON object of expected figures (write one with --calibrate)");
  try {
    return health::BurninFiguresFromJson(j);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
}

// The all-reduce part: 64 MiB of floats, best of 3, every element checked.
double AllReduce(comm::Communicator& c, std::string& problems) {
  std::vector<float> buf(size_t{16} << 20);
  double best = 0;
  const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
  for (int rep = 0; rep < 3; ++rep) {
    std::fill(buf.begin(), buf.end(), static_cast<float>(c.rank() + 1));
    c.Barrier();
    const auto t0 = std::chrono::steady_clock::now();
    c.AllReduce(std::span<float>(buf), comm::ReduceOp::kSum);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bus = 2.0 * (c.size() - 1) / c.size() * static_cast<double>(buf.size() * 4);
    best = std::max(best, bus / s / 1e9);
  }
  for (size_t i = 0; i < buf.size(); ++i) {
    if (buf[i] != want) {
      problems +=
          fmt::format("all-reduce: element {} = {} where {} was expected; ", i, buf[i], want);
      break;
    }
  }
  return best;
}

int Report(const std::vector<health::BurninFigures>& nodes, const BurninArgs& a) {
  const health::BurninFigures expected =
      a.expect.empty() ? health::BurninFigures{} : ReadExpected(a.expect);
  bool all_pass = true;
  nlohmann::json out = nlohmann::json::array();
  TextTable t({"NODE", "GEMM GFLOP/s", "MEMORY GB/s", "ALL-REDUCE GB/s", "RESULT", "WHY"},
              {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight,
               TextTable::Align::kRight, TextTable::Align::kLeft, TextTable::Align::kLeft});
  for (size_t n = 0; n < nodes.size(); ++n) {
    const health::BurninVerdict v = health::Judge(nodes[n], expected, a.tolerance);
    all_pass &= v.pass;
    std::string why;
    for (const std::string& l : v.lines) {
      if (l.find("FAIL") != std::string::npos || l.starts_with("wrong"))
        why += (why.empty() ? "" : "; ") + l;
    }
    nlohmann::json j = health::ToJson(nodes[n]);
    j["node"] = n;
    j["pass"] = v.pass;
    j["verdict"] = v.lines;
    out.push_back(j);
    t.AddRow({std::to_string(n), fmt::format("{:.1f}", nodes[n].gemm_gflops),
              fmt::format("{:.1f}", nodes[n].memory_gbps),
              nodes[n].allreduce_gbps > 0 ? fmt::format("{:.2f}", nodes[n].allreduce_gbps) : "-",
              v.pass ? "pass" : "FAIL", why.empty() ? "-" : why});
  }
  if (a.json) {
    std::cout << out.dump(1) << "\n";
  } else {
    std::cout << fmt::format("burn-in: {} node(s), {} thread(s) each, tolerance {:.2f} x {}\n",
                             nodes.size(), a.threads, a.tolerance,
                             a.expect.empty() ? "nothing (no --expect: results are only verified)"
                                              : a.expect)
              << t.RenderText();
  }
  return all_pass ? 0 : 1;
}

int Burnin(const BurninArgs& a) {
  gpt::SetCpuThreads(a.threads);
  const char* world = std::getenv("WORLD_SIZE");
  std::vector<health::BurninFigures> nodes;
  if (world != nullptr && std::atoi(world) > 1 && std::getenv("FMSTACK_RUN") != nullptr) {
    std::unique_ptr<comm::Communicator> c = comm::Connect(comm::OptionsFromEnv());
    health::BurninFigures mine;
    for (int r = 0; r < c->size(); ++r) {  // one node at a time has the machine
      c->Barrier();
      if (r == c->rank()) mine = health::MeasureNode(a.seconds);
    }
    mine.allreduce_gbps = AllReduce(*c, mine.problems);
    std::vector<float> all(static_cast<size_t>(c->size()) * 4);
    std::vector<float> own = {
        static_cast<float>(mine.gemm_gflops), static_cast<float>(mine.memory_gbps),
        static_cast<float>(mine.allreduce_gbps), mine.problems.empty() ? 0.0f : 1.0f};
    c->AllGather(std::span<float>(own), std::span<float>(all));
    if (!mine.problems.empty())
      std::cerr << "burn-in rank " << c->rank() << ": " << mine.problems << "\n";
    if (c->rank() != 0) return 0;
    for (int r = 0; r < c->size(); ++r) {
      const float* f = &all[static_cast<size_t>(r) * 4];
      nodes.push_back({f[0], f[1], f[2], f[3] != 0 ? "wrong results (see that rank's log)" : ""});
    }
  } else {
    nodes.push_back(health::MeasureNode(a.seconds));
  }
  if (!a.calibrate.empty()) {
    if (!nodes[0].problems.empty())
      throw Error("refusing to calibrate on a node that computes wrong results: " +
                  nodes[0].problems);
    WriteJsonFile(a.calibrate, health::ToJson(nodes[0]));
    std::cout << fmt::format("expected figures written to {}\n", a.calibrate);
  }
  return Report(nodes, a);
}

}  // namespace

Runner AddBurninCommand(CLI::App& app) {
  auto a = std::make_shared<BurninArgs>();
  CLI::App* cmd = app.add_subcommand(
      "burnin",
      "a node's burn-in: verified GEMM, memory bandwidth and (under `fmstack run`, "
      "several nodes) all-reduce, judged against expected figures");
  cmd->add_option("--seconds", a->seconds, "measuring time per node")->check(Between(0.1, 3600.0));
  cmd->add_option("--threads", a->threads, "BLAS/OpenMP threads")->check(Between(1, 1024));
  cmd->add_option("--expect", a->expect, "expected figures (JSON from --calibrate)")
      ->check(ExistingFile());
  cmd->add_option("--calibrate", a->calibrate,
                  "write this node's figures as the expected ones (on known-good hardware)");
  cmd->add_option("--tolerance", a->tolerance, "pass at this share of the expected figure")
      ->check(Between(0.01, 1.0));
  cmd->add_flag("--json", a->json, "results as JSON");
  return [a] { return Burnin(*a); };
}

}  // namespace fmstack::cli
