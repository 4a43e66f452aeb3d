// bench_train: the CPU trainer against this machine's own limits and a peer.
//   - sgemm GFLOP/s on exactly the model's matmul shapes (OpenBLAS, same threads)
//   - the trainer's achieved model FLOP/s (6 x matmul weights + attention per
//     token), and the ratio of the two (target >= 0.75)
//   - tokens/s of the same model, batch and sequence in PyTorch (CPU, the same
//     threads and OpenBLAS, TCMalloc preloaded as PyTorch's tuning guide
//     recommends), and the ratio (target >= 1.25)
//   Both sides warm, 3 rounds of N steps each, interleaved with each other and
//   with the sgemm measurement; the median round of each is reported.
//   - peak RSS against params + grads + 2 Adam moments + activations as
//     workload/ counts them (target: within 10%)
// Usage: bench_train [--model gpt-mini|gpt2-124m] [--batch 4] [--seq 256] [--steps N]
//        [--threads N] [--no-torch]
#include <fmt/format.h>
#include <stdio.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/random_tokens.h"
#include "bench/torch_peer.h"
#include "gpt/sgemm_peak.h"
#include "train/trainer.h"
#include "util/huge_pages.h"
#include "util/random.h"
#include "util/text_table.h"
#include "util/units.h"
#include "workload/memory.h"
#include "workload/presets.h"

namespace {

using namespace fmstack;

double PeakRssBytes() {  // VmHWM: the high-water mark of resident memory
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  }
  return 0;
}

constexpr int kRounds = 3;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_train: the CPU GPT trainer vs measured sgemm and PyTorch"};
  std::string model = "gpt-mini";
  int64_t B = 4, T = 256, steps = 0;
  int threads = 0;
  bool no_torch = false;
  std::string script = std::string(FMSTACK_SOURCE_DIR) + "/bench/torch_gpt.py";
  app.add_option("--model", model, "model preset")->check(CLI::IsMember({"gpt-mini", "gpt2-124m"}));
  app.add_option("--batch", B)->check(CLI::PositiveNumber);
  app.add_option("--seq", T)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps (default: 10 for gpt-mini, 4 for gpt2-124m)");
  app.add_option("--threads", threads, "0 = all cores");
  app.add_flag("--no-torch", no_torch, "skip the PyTorch peer");
  CLI11_PARSE(app, argc, argv);
  if (steps == 0) steps = model == "gpt-mini" ? 10 : 4;
  const std::string tcmalloc = no_torch ? "" : bench::TcmallocPath();
  if (!no_torch && tcmalloc.empty()) {
    std::cerr << "bench_train: the PyTorch peer runs with TCMalloc, as PyTorch's tuning guide "
                 "recommends, and libtcmalloc_minimal.so.4 is not installed: "
                 "scripts/bootstrap.sh --bench (or --no-torch)\n";
    return 1;
  }

  gpt::SetCpuThreads(threads);
  workload::TransformerShape shape = *workload::FindPreset(model);
  shape.seq_len = T;
  const train::TokenFile data = bench::RandomTokenFile("/tmp/bench_train_tokens.bin", shape.vocab);
  train::TrainConfig config;
  config.shape = shape;
  config.micro_batch = B;
  config.steps = kRounds * steps + 1;
  config.optim.lr = 1e-4;
  train::Trainer trainer(config, data);
  trainer.Step();  // warm-up: first touch of every buffer
  // Rounds interleave the machine limit, fmstack and the peer, so that a
  // noisy neighbour slows all three alike; each is the median of its rounds.
  std::vector<double> rounds, torch_rounds, sgemm_rounds;
  double rss = 0;
  bench::TorchResult torch;
  const auto gemms = gpt::TrainingGemms(B * T, shape.hidden, shape.ffn_hidden, shape.vocab);
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < kRounds; ++r) {
    double seconds = 0;
    for (int64_t i = 0; i < steps; ++i) {
      seconds += trainer.Step().seconds;
      const int64_t done = r * steps + i + 1, total = kRounds * steps;
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cerr << fmt::format(
                       "\rround {}/{}: fmstack step {}/{}  ETA {:.0f} s", r + 1, kRounds, done,
                       total,
                       elapsed / static_cast<double>(done) * static_cast<double>(total - done))
                << std::flush;
    }
    rounds.push_back(static_cast<double>(steps * B * T) / seconds);
    // The trainer's peak, read before the sgemm measurement's buffers exist.
    if (r == 0) rss = PeakRssBytes();
    sgemm_rounds.push_back(gpt::MeasureSgemmGflops(gemms));
    if (!no_torch) {
      std::cerr << fmt::format("\rround {}/{}: PyTorch {} steps                    ", r + 1,
                               kRounds, steps)
                << std::flush;
      const int n = gpt::CpuThreads();
      torch = bench::RunTorchPeer(fmt::format("LD_PRELOAD={} OMP_NUM_THREADS={}", tcmalloc, n),
                                  "/usr/bin/python3", script, shape, B, T, steps, n, "--rounds 1",
                                  1800);
      if (torch.tokens_per_s <= 0) {
        std::cerr << "install python3-torch: scripts/bootstrap.sh --bench\n";
        return 1;
      }
      torch_rounds.push_back(torch.tokens_per_s);
    }
  }
  std::cerr << "\n";
  const double tok_s = Median(rounds);
  const double flops_per_token = workload::TrainingFlopsPerToken(shape).detailed;
  const double model_gflops = tok_s * flops_per_token / 1e9;
  const double sgemm = Median(sgemm_rounds);
  const double torch_tok_s = torch_rounds.empty() ? 0 : Median(torch_rounds);
  auto listed = [](const std::vector<double>& v, int digits = 0) {
    std::string out;
    for (const double x : v) out += fmt::format("{}{:.{}f}", out.empty() ? "" : ", ", x, digits);
    return out;
  };

  const double params = static_cast<double>(workload::CountParams(shape).total);
  const double state = 4 * 4 * params;  // fp32 params, grads, m, v
  const double acts = workload::ReferenceTrainerActivationBytes(shape, B, T);
  TextTable t({"metric", "value", "ratio", "target"});
  t.AddRow({"model",
            fmt::format("{} ({} params), batch {} x {}, {} threads", model,
                        units::FormatCount(params), B, T, gpt::CpuThreads()),
            "", ""});
  t.AddRow({"BLAS", gpt::BlasConfig(), "", ""});
  // fmstack's buffers and the sgemm limit ask for huge pages (util/huge_pages.h);
  // the kernel grants them unless THP is "never".
  const std::string thp = HugePagesMode();
  t.AddRow({"transparent huge pages",
            thp == "madvise" || thp == "always"
                ? thp + ": fmstack's buffers ask for 2 MiB pages and get them"
                : thp + ": fmstack's buffers get 4 KiB pages",
            "", ""});
  if (const std::string tuning = trainer.model().Tuning(); !tuning.empty())
    t.AddRow({"tuned by timing", tuning, "", ""});
  // OpenBLAS takes its kernels from OPENBLAS_CORETYPE when the environment
  // sets it (the PyTorch peer inherits it): say so, since the choice moves
  // sgemm by up to 1.9x on this project's AVX-512 machines.
  if (const char* pinned = std::getenv("OPENBLAS_CORETYPE"); pinned != nullptr)
    t.AddRow({"BLAS kernels", fmt::format("pinned by OPENBLAS_CORETYPE={}", pinned), "", ""});
  t.AddRow({"sgemm on the model's shapes", fmt::format("{:.1f} GFLOP/s", sgemm),
            "median of " + listed(sgemm_rounds), ""});
  t.AddRow({"trainer model FLOP/s", fmt::format("{:.1f} GFLOP/s", model_gflops),
            fmt::format("{:.2f} of sgemm", model_gflops / sgemm), ">= 0.75"});
  t.AddRow({"fmstack tokens/s", fmt::format("{:.0f}", tok_s), "median of " + listed(rounds), ""});
  // A round's three measurements run back to back, so their ratios share
  // the machine's state; on a VM whose sgemm rate jumps between states, the
  // ratio of medians above can pair rounds from different states.
  const auto round_by_round = [&](const std::vector<double>& over, double scale) {
    std::vector<double> ratios;
    for (size_t r = 0; r < rounds.size() && r < over.size(); ++r)
      ratios.push_back(rounds[r] * scale / over[r]);
    return fmt::format("{:.2f} (median of {})", Median(ratios), listed(ratios, 2));
  };
  t.AddRow({"  trainer / sgemm, round by round",
            round_by_round(sgemm_rounds, flops_per_token / 1e9), "", ""});
  if (torch_tok_s > 0) {
    t.AddRow({"PyTorch tokens/s", fmt::format("{:.0f}", torch_tok_s),
              fmt::format("{:.2f}x PyTorch", tok_s / torch_tok_s), ">= 1.25x"});
    t.AddRow({"PyTorch peer", torch.about, "median of " + listed(torch_rounds), ""});
    t.AddRow({"  fmstack / PyTorch, round by round", round_by_round(torch_rounds, 1.0), "", ""});
  }
  t.AddRow({"state (params+grads+m+v)", units::FormatBytes(state), "", ""});
  t.AddRow({"activations (workload/)", units::FormatBytes(acts), "", ""});
  t.AddRow({"peak RSS", units::FormatBytes(rss),
            fmt::format("{:.3f} of state+activations", rss / (state + acts)), "<= 1.10"});
  std::cout << t.RenderText();
  return 0;
}
