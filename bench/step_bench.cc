// bench_step: where one CPU training step's time goes, phase by phase, each
// phase against a limit measured on this machine in the same run.
//   - forward and backward: the phase's model FLOP/s (a third and two thirds
//     of workload/'s training FLOPs) over sgemm's GFLOP/s on the model's own
//     shapes (gpt::MeasureSgemmGflops), same threads
//   - the global norm and the AdamW update: the bytes each reads and writes
//     per second over those of a loop with the same streams and no
//     arithmetic to speak of, on every thread: a float sum of the gradients
//     (4 bytes a parameter), and p, m, v += 0 * g (28 bytes a parameter,
//     leaving the values as they were)
//   - zeroing the gradients: its bytes per second, without a limit (it is a
//     memset on every thread, the limit itself)
// The phases are the calls train::Trainer::Step makes without data
// parallelism, in its order, on the model and optimizer it builds. Each
// round measures the limits and then S steps; every figure is the median
// over the rounds. bench_train says how the whole step compares with
// PyTorch; this says which part of it has room left.
// Usage: bench_step [--model gpt-mini|gpt2-124m] [--batch 4] [--seq 256]
//        [--steps 2] [--rounds 3] [--threads N]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <iostream>
#include <memory>
#include <vector>

#include "bench/median.h"
#include "gpt/blas_core.h"
#include "gpt/model.h"
#include "gpt/sgemm_peak.h"
#include "train/optimizer.h"
#include "util/random.h"
#include "util/text_table.h"
#include "workload/presets.h"
#include "workload/shape.h"

namespace {

using namespace fmstack;
using bench::Median;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds of a float sum of g on every thread: the norm's reads without its
// conversions to double. The sum is returned so that it is computed.
double TimeReadStream(std::span<const float> g, float& sum) {
  // Sixteen running sums a block: one would be a chain of dependent adds,
  // slower than memory, and the compiler may not reorder a float sum.
  constexpr int64_t kLanes = 16, kBlock = int64_t{1} << 16;
  const auto n = static_cast<int64_t>(g.size());
  const float* x = g.data();
  const auto start = Clock::now();
  float total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    float lane[kLanes] = {};
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lane[l] += x[i + l];
    }
    for (; i < end; ++i) lane[0] += x[i];
    for (const float s : lane) total += s;
  }
  sum = total;
  return Since(start);
}

// Seconds of p, m, v += zero * g on every thread: AdamW's reads and writes
// without its arithmetic. `zero` is 0 at run time, so the state keeps its
// values (the gradients are finite after a step).
double TimeUpdateStream(std::span<float> p, std::span<const float> g, std::span<float> m,
                        std::span<float> v, float zero) {
  const auto n = static_cast<int64_t>(g.size());
  const auto start = Clock::now();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float d = zero * g[i];
    p[i] += d, m[i] += d, v[i] += d;
  }
  return Since(start);
}

enum Phase { kZero, kForward, kBackward, kNorm, kAdamW, kPhases };
constexpr const char* kPhaseNames[kPhases] = {"zero the gradients", "forward", "backward",
                                              "global norm", "AdamW update"};

}  // namespace

int main(int argc, char** argv) {
  gpt::ReexecWithBestBlasCore(std::span<char* const>(argv, static_cast<size_t>(argc)),
                              gpt::BlasPin::kReplaceNarrower);
  CLI::App app{"bench_step: a CPU training step, phase by phase, against this machine's limits"};
  std::string model = "gpt2-124m";
  int64_t B = 4, T = 256, steps = 2;
  int rounds_wanted = 3, threads = 0;
  app.add_option("--model", model, "model preset")->check(CLI::IsMember({"gpt-mini", "gpt2-124m"}));
  app.add_option("--batch", B)->check(CLI::Range(1, 64));
  app.add_option("--seq", T)->check(CLI::Range(1, 4096));
  app.add_option("--steps", steps, "timed steps per round")->check(CLI::Range(1, 100));
  app.add_option("--rounds", rounds_wanted, "rounds; each figure is their median")
      ->check(CLI::Range(1, 99));
  app.add_option("--threads", threads, "0 = all cores")->check(CLI::Range(0, 256));
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) gpt::SetCpuThreads(threads);

  workload::TransformerShape shape = *workload::FindPreset(model);
  if (T > shape.seq_len) {
    std::cerr << fmt::format("--seq {} exceeds {}'s context of {}\n", T, model, shape.seq_len);
    return 2;
  }
  shape.seq_len = T;
  gpt::ModelOptions options;
  options.max_batch = B;
  const std::unique_ptr<gpt::Model> net = gpt::CreateModel(shape, options);
  gpt::InitParams(net->params_layout(), net->params(), 1);
  const train::OptimConfig optim;
  train::AdamW adamw(optim, net->params_layout());
  std::vector<int32_t> tokens(B * T), targets(B * T);
  Rng rng(1);
  for (std::vector<int32_t>* ids : {&tokens, &targets}) {
    for (int32_t& id : *ids)
      id = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(shape.vocab)));
  }
  int64_t step = 0;
  std::array<double, kPhases> seconds{};
  const auto one_step = [&] {
    auto t = Clock::now();
    const auto lap = [&](Phase p) {
      seconds[p] += Since(t);
      t = Clock::now();
    };
    net->ZeroGrad();
    lap(kZero);
    net->Forward(tokens, targets, B, T);
    lap(kForward);
    net->Backward(1.0f);
    lap(kBackward);
    const double norm = train::GlobalNorm(net->grads());
    lap(kNorm);
    adamw.Update(net->params(), net->grads(), ++step, 1e-4,
                 train::ClipScale(norm, optim.grad_clip));
    lap(kAdamW);
  };
  one_step();  // warm-up: first touch of every buffer, OpenBLAS's threads

  const float zero = static_cast<float>(argc) * 0.0f;  // 0, not known to the compiler
  float sink = 0;
  const auto gemms = gpt::TrainingGemms(B * T, shape.hidden, shape.ffn_hidden, shape.vocab);
  std::array<std::vector<double>, kPhases> phase_rounds;
  std::vector<double> read_rounds, update_rounds, sgemm_rounds, step_rounds;
  const auto start = Clock::now();
  for (int r = 0; r < rounds_wanted; ++r) {
    std::cerr << fmt::format("\rround {}/{}  ETA {:.0f} s   ", r + 1, rounds_wanted,
                             r == 0 ? 0.0 : Since(start) / r * (rounds_wanted - r))
              << std::flush;
    read_rounds.push_back(TimeReadStream(net->grads(), sink));
    update_rounds.push_back(
        TimeUpdateStream(net->params(), net->grads(), adamw.m(), adamw.v(), zero));
    sgemm_rounds.push_back(gpt::MeasureSgemmGflops(gemms));
    seconds.fill(0);
    for (int64_t i = 0; i < steps; ++i) one_step();
    double total = 0;
    for (int p = 0; p < kPhases; ++p) {
      phase_rounds[p].push_back(seconds[p] / static_cast<double>(steps));
      total += seconds[p];
    }
    step_rounds.push_back(total / static_cast<double>(steps));
  }
  std::cerr << "\n";

  const double params = static_cast<double>(net->params().size());
  const double read_gbs = 4 * params / Median(read_rounds) / 1e9;
  const double update_gbs = 7 * 4 * params / Median(update_rounds) / 1e9;
  const double sgemm = Median(sgemm_rounds);
  const double step_s = Median(step_rounds);
  const double flops = workload::TrainingFlopsPerToken(shape).detailed * static_cast<double>(B * T);
  // Per phase: what it computes (FLOP) or moves (bytes) a step, the rate
  // that work is held to (0: none), and that limit's name.
  struct Work {
    double amount, limit;
    const char* unit;
    const char* limit_name;
  };
  const std::array<Work, kPhases> work = {{
      {4 * params, 0, "GB/s", ""},
      {flops / 3, sgemm, "GFLOP/s", "sgemm"},
      {2 * flops / 3, sgemm, "GFLOP/s", "sgemm"},
      {4 * params, read_gbs, "GB/s", "the float sum"},
      {7 * 4 * params, update_gbs, "GB/s", "p, m, v += 0 * g"},
  }};

  std::cout << fmt::format("model: {}, batch {} x {}, {} threads, {} step{} a round, {} round{}\n",
                           model, B, T, gpt::CpuThreads(), steps, steps == 1 ? "" : "s",
                           rounds_wanted, rounds_wanted == 1 ? "" : "s");
  std::cout << fmt::format("BLAS: OpenBLAS {} kernels{}\n", gpt::BlasCoreName(),
                           gpt::BlasCoreNote().empty() ? "" : " (" + gpt::BlasCoreNote() + ")");
  std::cout << fmt::format(
      "limits: sgemm on the model's shapes {:.1f} GFLOP/s; float sum of the gradients {:.1f} "
      "GB/s; p, m, v += 0 * g {:.1f} GB/s (bytes read + written)\n",
      sgemm, read_gbs, update_gbs);
  TextTable t({"phase", "ms a step", "share", "rate", "of the limit"},
              {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kRight,
               TextTable::Align::kRight, TextTable::Align::kRight});
  for (int p = 0; p < kPhases; ++p) {
    const double s = Median(phase_rounds[p]);
    const double rate = work[p].amount / s / 1e9;
    t.AddRow(
        {kPhaseNames[p], fmt::format("{:.1f}", s * 1e3), fmt::format("{:.1f}%", 100 * s / step_s),
         fmt::format("{:.1f} {}", rate, work[p].unit),
         work[p].limit > 0 ? fmt::format("{:.2f} of {}", rate / work[p].limit, work[p].limit_name)
                           : "-"});
  }
  t.AddRow({"step", fmt::format("{:.1f}", step_s * 1e3), "100%",
            fmt::format("{:.0f} tokens/s", static_cast<double>(B * T) / step_s),
            fmt::format("{:.2f} of sgemm", flops / step_s / 1e9 / sgemm)});
  std::cout << t.RenderText();
  // The sum is printed only so that its loop is not optimised away.
  if (sink != sink) std::cout << "the gradients hold a NaN\n";
  return 0;
}
