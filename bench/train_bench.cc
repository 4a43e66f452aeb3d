// bench_train: the CPU trainer against this machine's own limits and a peer.
//   - sgemm GFLOP/s on exactly the model's matmul shapes (OpenBLAS, same threads)
//   - the trainer's achieved model FLOP/s (6 x matmul weights + attention per
//     token), and the ratio of the two (target >= 0.75)
//   - tokens/s of the same model, batch and sequence in PyTorch (CPU, the same
//     threads and OpenBLAS, TCMalloc preloaded as PyTorch's tuning guide
//     recommends), and the ratio (target >= 1.25)
//   - on a CPU with bf16 dot products (AVX-512 BF16, AMX), the same model in
//     PyTorch under bf16 autocast too, which PyTorch's CPU tuning guide
//     recommends there: its fastest setting, at another precision than
//     fmstack's fp32, shown beside the fp32 peer without a target
//   - with --matmul bf16, fmstack's linear layers in bf16 (gpt/bf16_gemm.h):
//     its limit is then that matmul's GFLOP/s on the same shapes, and its
//     peer with a target the bf16 autocast one
//   Both sides warm and kept up (the peer serves rounds on request,
//   bench/torch_server.h); R short rounds of each, alternated with each other
//   and with the sgemm measurement. The ratios are the medians of the R
//   round-by-round ratios: neighbouring rounds share the machine's state.
//   - peak RSS against params + grads + 2 Adam moments + activations as
//     workload/ counts them (target: within 10%)
// Usage: bench_train [--model gpt-mini|gpt2-124m] [--batch 4] [--seq 256] [--steps N]
//        [--rounds R] [--threads N] [--no-torch] [--torch-bf16 auto|on|off]
//        [--matmul fp32|bf16]
#include <fmt/format.h>
#include <signal.h>
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

#include "bench/median.h"
#include "bench/random_tokens.h"
#include "bench/torch_peer.h"
#include "bench/torch_server.h"
#include "gpt/blas_core.h"
#include "gpt/sgemm_peak.h"
#include "train/trainer.h"
#include "util/core_round_trip.h"
#include "util/huge_pages.h"
#include "util/random.h"
#include "util/text_table.h"
#include "util/units.h"
#include "workload/memory.h"
#include "workload/presets.h"

namespace {

using fmstack::bench::Median;

using namespace fmstack;

double PeakRssBytes() {  // VmHWM: the high-water mark of resident memory
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  }
  return 0;
}

// "0.80 (0.72-0.83 over 9 rounds)"
std::string MedianAndRange(const std::vector<double>& v, int digits) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return fmt::format("{:.{}f} ({:.{}f}-{:.{}f} over {} rounds)", Median(v), digits, *lo, digits,
                     *hi, digits, v.size());
}

// x[r] * scale / y[r], round by round.
std::vector<double> Ratios(const std::vector<double>& x, const std::vector<double>& y,
                           double scale) {
  std::vector<double> out;
  for (size_t r = 0; r < x.size() && r < y.size(); ++r) out.push_back(x[r] * scale / y[r]);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // First, before OpenBLAS is used: a CPU newer than the OpenBLAS build gets its fast kernels.
  fmstack::gpt::ReexecWithBestBlasCore(std::span<char* const>(argv, static_cast<size_t>(argc)),
                                       fmstack::gpt::BlasPin::kReplaceNarrower);
  CLI::App app{"bench_train: the CPU GPT trainer vs measured sgemm and PyTorch"};
  std::string model = "gpt-mini";
  int64_t B = 4, T = 256, steps = 0;
  int rounds_wanted = 9, threads = 0;
  bool no_torch = false;
  std::string torch_bf16 = "auto", matmul = "fp32";
  std::string script = std::string(FMSTACK_SOURCE_DIR) + "/bench/torch_gpt.py";
  app.add_option("--model", model, "model preset")->check(CLI::IsMember({"gpt-mini", "gpt2-124m"}));
  app.add_option("--batch", B)->check(CLI::PositiveNumber);
  app.add_option("--seq", T)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "steps per round (default: 3 for gpt-mini, 1 for gpt2-124m)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--rounds", rounds_wanted, "rounds of each side, alternated")
      ->check(CLI::Range(3, 99));
  app.add_option("--threads", threads, "0 = all cores");
  app.add_flag("--no-torch", no_torch, "skip the PyTorch peers");
  app.add_option("--torch-bf16", torch_bf16,
                 "also PyTorch under bf16 autocast (auto: where the CPU has bf16 dot products)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--matmul", matmul, "fmstack's linear layers: fp32 (sgemm) or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  CLI11_PARSE(app, argc, argv);
  if (steps == 0) steps = model == "gpt-mini" ? 3 : 1;
  const std::string tcmalloc = no_torch ? "" : bench::TcmallocPath();
  if (!no_torch && tcmalloc.empty()) {
    std::cerr << "bench_train: the PyTorch peer runs with TCMalloc, as PyTorch's tuning guide "
                 "recommends, and libtcmalloc_minimal.so.4 is not installed: "
                 "scripts/bootstrap.sh --bench (or --no-torch)\n";
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a peer that died is an error from write(), said there

  gpt::SetCpuThreads(threads);
  workload::TransformerShape shape = *workload::FindPreset(model);
  shape.seq_len = T;
  const int n_threads = gpt::CpuThreads();
  // The peer first: it starts while this process holds no model yet.
  const auto start_peer = [&](const char* peer_matmul) -> std::optional<bench::TorchServer> {
    std::cerr << fmt::format("starting the PyTorch peer ({})...\n", peer_matmul);
    std::vector<std::string> args = {"/usr/bin/python3",
                                     script,
                                     "--serve",
                                     "--steps",
                                     std::to_string(steps),
                                     "--threads",
                                     std::to_string(n_threads),
                                     "--matmul",
                                     peer_matmul};
    for (std::string& word : bench::ModelArgv(shape, B, T)) args.push_back(std::move(word));
    return bench::TorchServer::Start(
        args, {"LD_PRELOAD=" + tcmalloc, fmt::format("OMP_NUM_THREADS={}", n_threads)}, 1800);
  };
  std::optional<bench::TorchServer> torch = no_torch ? std::nullopt : start_peer("fp32");
  if (!no_torch && !torch) {
    std::cerr << "bench_train: the PyTorch peer did not start (python3-torch: "
                 "scripts/bootstrap.sh --bench)\n";
    return 1;
  }
  // Without the instructions, autocast would run bf16 in emulation: slower
  // than fp32, and no one's best setting.
  const bool bf16_dot = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  const bool bf16 = matmul == "bf16";
  const bool want_bf16 =
      !no_torch && (bf16 || torch_bf16 == "on" || (torch_bf16 == "auto" && bf16_dot));
  std::optional<bench::TorchServer> torch_bf16_peer = want_bf16 ? start_peer("bf16") : std::nullopt;
  if (want_bf16 && !torch_bf16_peer) {
    std::cerr << "bench_train: the PyTorch bf16 autocast peer did not start\n";
    return 1;
  }
  const train::TokenFile data = bench::RandomTokenFile("/tmp/bench_train_tokens.bin", shape.vocab);
  train::TrainConfig config;
  config.shape = shape;
  config.micro_batch = B;
  config.steps = rounds_wanted * steps + 1;
  config.optim.lr = 1e-4;
  config.matmul = bf16 ? gpt::Matmul::kBf16 : gpt::Matmul::kFp32;
  train::Trainer trainer(config, data);
  trainer.Step();  // warm-up: first touch of every buffer
  // Rounds alternate the machine limit, fmstack and the peer, which side goes
  // first swapping every round, so that a noisy neighbour slows all three
  // alike; each ratio is the median of its round-by-round ratios.
  std::vector<double> rounds, torch_rounds, bf16_rounds, sgemm_rounds, fma_rounds, round_trips;
  int fma_lanes = 0;
  double rss = 0;
  const auto gemms = gpt::TrainingGemms(B * T, shape.hidden, shape.ffn_hidden, shape.vocab);
  const auto start = std::chrono::steady_clock::now();
  const auto progress = [&](int r, const char* what) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << fmt::format("\rround {}/{}: {:<10} ETA {:.0f} s   ", r + 1, rounds_wanted, what,
                             r == 0 ? 0.0 : elapsed / r * (rounds_wanted - r))
              << std::flush;
  };
  const auto fmstack_round = [&](int r) {
    progress(r, "fmstack");
    double seconds = 0;
    for (int64_t i = 0; i < steps; ++i) seconds += trainer.Step().seconds;
    rounds.push_back(static_cast<double>(steps * B * T) / seconds);
    // The trainer's peak, read before the sgemm measurement's buffers exist.
    if (r == 0) rss = PeakRssBytes();
  };
  const auto peer_round = [&](int r, std::optional<bench::TorchServer>& peer, const char* name,
                              std::vector<double>& out) {
    if (!peer) return true;
    progress(r, name);
    const std::optional<double> seconds = peer->Round(static_cast<int>(steps), 1800);
    if (!seconds) return false;
    out.push_back(static_cast<double>(steps * B * T) / *seconds);
    return true;
  };
  const auto torch_round = [&](int r) {
    return peer_round(r, torch, "PyTorch", torch_rounds) &&
           peer_round(r, torch_bf16_peer, "PyTorch bf16", bf16_rounds);
  };
  for (int r = 0; r < rounds_wanted; ++r) {
    round_trips.push_back(CoreRoundTripNs());
    const bool fmstack_first = r % 2 == 0;
    if (fmstack_first) fmstack_round(r);
    if (!fmstack_first && !torch_round(r)) return 1;
    progress(r, "sgemm");
    sgemm_rounds.push_back(bf16 ? gpt::MeasureBf16GemmGflops(gemms)
                                : gpt::MeasureSgemmGflops(gemms));
    const gpt::FmaPeak fma = gpt::MeasureFmaPeak(n_threads);
    fma_rounds.push_back(fma.gflops);
    fma_lanes = fma.lanes;
    if (fmstack_first && !torch_round(r)) return 1;
    if (!fmstack_first) fmstack_round(r);
  }
  std::cerr << "\n";

  const double tok_s = Median(rounds);
  const double flops_per_token = workload::TrainingFlopsPerToken(shape).detailed;
  const double sgemm = Median(sgemm_rounds);
  const char* limit = bf16 ? "the bf16 matmul" : "sgemm";  // the matmul fmstack's step runs
  const std::vector<double> vs_sgemm = Ratios(rounds, sgemm_rounds, flops_per_token / 1e9);

  const double params = static_cast<double>(workload::CountParams(shape).total);
  const double state = 4 * 4 * params;  // fp32 params, grads, m, v
  const double acts = workload::ReferenceTrainerActivationBytes(shape, B, T);
  TextTable t({"metric", "value", "ratio", "target"});
  t.AddRow({"model",
            fmt::format("{} ({} params), batch {} x {}, {} threads, {} step{} a round, {} matmuls",
                        model, units::FormatCount(params), B, T, n_threads, steps,
                        steps == 1 ? "" : "s", matmul),
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
  // sgemm by up to 1.9x on this project's AVX-512 machines, and say when this
  // bench replaced a narrower pin (gpt/blas_core.h).
  if (const char* pinned = std::getenv("OPENBLAS_CORETYPE"); pinned != nullptr) {
    const std::string note = fmstack::gpt::BlasCoreNote();
    t.AddRow({"BLAS kernels",
              note.empty() ? fmt::format("pinned by OPENBLAS_CORETYPE={}", pinned) : note, "", ""});
  }
  t.AddRow(
      {bf16 ? "bf16 matmul (gpt/bf16_gemm.h) on the model's shapes" : "sgemm on the model's shapes",
       fmt::format("{:.1f} GFLOP/s", sgemm), "median " + MedianAndRange(sgemm_rounds, 0), ""});
  // The arithmetic limit, round by round beside sgemm: where sgemm's share of
  // it falls, data movement slowed (the machine's state), not the arithmetic.
  t.AddRow({fmt::format("FMA peak ({}-float vectors, registers only)", fma_lanes),
            fmt::format("{:.1f} GFLOP/s", Median(fma_rounds)),
            "median " + MedianAndRange(fma_rounds, 0), ""});
  t.AddRow({fmt::format("  {} / FMA peak", limit), "",
            MedianAndRange(Ratios(sgemm_rounds, fma_rounds, 1.0), 2), ""});
  // The machine's other state: two vCPUs on one core complex or on two
  // (util/core_round_trip.h). 0: fewer than two CPUs.
  t.AddRow({"core-to-core round trip, before each round",
            fmt::format("{:.0f} ns", Median(round_trips)),
            "median " + MedianAndRange(round_trips, 0), ""});
  t.AddRow({"fmstack tokens/s", fmt::format("{:.0f}", tok_s), "median " + MedianAndRange(rounds, 0),
            ""});
  // Each ratio pairs rounds that ran next to each other, so the two share the
  // machine's state; a ratio of the two medians could pair a round from a
  // fast patch with one from a slow patch.
  t.AddRow({fmt::format("trainer model FLOP/s / {}", limit),
            fmt::format("{:.1f} GFLOP/s", tok_s * flops_per_token / 1e9),
            fmt::format("{:.2f} of {}", Median(vs_sgemm), limit), ">= 0.75"});
  t.AddRow({"  round by round", "", MedianAndRange(vs_sgemm, 2), ""});
  if (torch) {
    const std::vector<double> vs_torch = Ratios(rounds, torch_rounds, 1.0);
    const nlohmann::json& about = torch->about();
    t.AddRow({"PyTorch tokens/s", fmt::format("{:.0f}", Median(torch_rounds)),
              "median " + MedianAndRange(torch_rounds, 0), ""});
    t.AddRow({"PyTorch peer",
              fmt::format("PyTorch {}, BLAS {}, {} threads, {}", about.value("torch", "?"),
                          about.value("blas", "?"), about.value("threads", 0),
                          about.value("allocator", "allocator not reported")),
              "", ""});
    t.AddRow({"fmstack / PyTorch", "", fmt::format("{:.2f}x PyTorch", Median(vs_torch)),
              bf16 ? "none: not the same precision" : ">= 1.25x"});
    t.AddRow({"  round by round", "", MedianAndRange(vs_torch, 2), ""});
  }
  if (torch_bf16_peer) {
    const std::vector<double> vs_bf16 = Ratios(rounds, bf16_rounds, 1.0);
    t.AddRow({"PyTorch bf16 autocast tokens/s", fmt::format("{:.0f}", Median(bf16_rounds)),
              "median " + MedianAndRange(bf16_rounds, 0), ""});
    t.AddRow({fmt::format("fmstack ({}) / PyTorch bf16 autocast", matmul), "",
              fmt::format("{:.2f}x", Median(vs_bf16)),
              bf16 ? ">= 1.25x" : "none: not the same precision"});
    t.AddRow({"  round by round", "", MedianAndRange(vs_bf16, 2), ""});
  }
  t.AddRow({"state (params+grads+m+v)", units::FormatBytes(state), "", ""});
  t.AddRow({"activations (workload/)", units::FormatBytes(acts), "", ""});
  t.AddRow({"peak RSS", units::FormatBytes(rss),
            fmt::format("{:.3f} of state+activations", rss / (state + acts)), "<= 1.10"});
  std::cout << t.RenderText();
  return 0;
}
