// bench_gemm: the linear layers' products of one training step, on OpenBLAS
// sgemm (matmul = "fp32") against gpt/bf16_gemm.h (matmul = "bf16"), side
// by side in one run: the same fp32 operands, layouts and threads as the
// trainer's (forward: out += inp W^T; input gradient: dinp = dout W; weight
// gradient: dW += dout^T inp), the two alternating for `--rounds` rounds, the
// median of each, and the ratio. Shapes are those of `--model` at `--rows`
// tokens a step. The bf16 side rounds its operands, so this is the speed of
// the two modes, not of two ways to the same result.
#include <cblas.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bench/median.h"
#include "gpt/bf16_gemm.h"
#include "gpt/blas_core.h"
#include "gpt/sgemm_peak.h"
#include "util/huge_pages.h"
#include "util/text_table.h"

namespace {

using fmstack::bench::Median;

struct Product {
  std::string name;
  int64_t m, n, k;
  std::function<void()> sgemm, ours;
};

double Seconds(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Model {
  int64_t C, F, V;
};

Model ModelNamed(const std::string& name) {
  if (name == "gpt2-124m") return {768, 3072, 50257};
  if (name == "gpt-mini") return {384, 1536, 50257};
  throw std::invalid_argument(fmt::format("--model: {} is not gpt2-124m or gpt-mini", name));
}

}  // namespace

int main(int argc, char** argv) {
  fmstack::gpt::ReexecWithBestBlasCore({argv, static_cast<size_t>(argc)},
                                       fmstack::gpt::BlasPin::kReplaceNarrower);
  CLI::App app{"bench_gemm: the trainer's matmuls on OpenBLAS and on gpt/bf16_gemm.h"};
  std::string model_name = "gpt2-124m";
  int64_t rows = 1024;
  int threads = 0, rounds = 5;
  app.add_option("--model", model_name, "gpt2-124m or gpt-mini");
  app.add_option("--rows", rows, "tokens a step (batch x sequence)")->check(CLI::Range(1, 65536));
  app.add_option("--threads", threads, "threads (0 = all cores)")->check(CLI::Range(0, 256));
  app.add_option("--rounds", rounds, "alternated rounds, median of each side")
      ->check(CLI::Range(1, 99));
  CLI11_PARSE(app, argc, argv);
  try {
    const Model model = ModelNamed(model_name);
    fmstack::gpt::SetCpuThreads(threads);
    const int used = fmstack::gpt::CpuThreads();
    const auto peak = fmstack::gpt::MeasureFmaPeak(used);
    std::cout << fmt::format(
        "bench_gemm: {} at {} rows, {} threads; {}; bf16 tile: {}; FMA peak {:.0f} GFLOP/s\n",
        model_name, rows, used, fmstack::gpt::BlasConfig(),
        fmstack::gpt::Bf16GemmIsFast() ? "AVX-512 BF16 12 x 32" : "plain loops (no AVX-512 BF16)",
        peak.gflops);
    const int64_t biggest = std::max(rows, model.V) * model.F + rows * model.V;
    const fmstack::HugeFloats x(static_cast<size_t>(biggest), 0.5f);
    const fmstack::HugeFloats w(static_cast<size_t>(biggest), 0.25f);
    fmstack::HugeFloats out(static_cast<size_t>(biggest), 0.0f);
    std::vector<Product> products;
    const auto N = static_cast<blasint>(rows);
    for (const auto& [label, in, oc] :
         std::vector<std::tuple<std::string, int64_t, int64_t>>{{"qkv", model.C, 3 * model.C},
                                                                {"attn proj", model.C, model.C},
                                                                {"fc", model.C, model.F},
                                                                {"fc proj", model.F, model.C},
                                                                {"LM head", model.C, model.V}}) {
      const auto c = static_cast<blasint>(in), o = static_cast<blasint>(oc);
      const float* X = x.data();
      const float* W = w.data();
      float* Y = out.data();
      products.push_back(
          {label + " forward", rows, oc, in,
           [=] {
             cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, o, c, 1.0f, X, c, W, c, 1.0f,
                         Y, o);
           },
           [=] {
             fmstack::gpt::Bf16Gemm(rows, oc, in, {X, in, 1}, {W, 1, in}, true, Y, oc);
           }});
      products.push_back(
          {label + " input grad", rows, in, oc,
           [=] {
             cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, c, o, 1.0f, X, o, W, c, 0.0f,
                         Y, c);
           },
           [=] {
             fmstack::gpt::Bf16Gemm(rows, in, oc, {X, oc, 1}, {W, in, 1}, false, Y, in);
           }});
      products.push_back(
          {label + " weight grad", oc, in, rows,
           [=] {
             cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, c, N, 1.0f, X, o, W, c, 1.0f,
                         Y, c);
           },
           [=] {
             fmstack::gpt::Bf16Gemm(oc, in, rows, {X, 1, oc}, {W, in, 1}, true, Y, in);
           }});
    }
    fmstack::TextTable table(
        {"product", "m x n x k", "sgemm GFLOP/s", "bf16 GFLOP/s", "bf16 / sgemm"});
    double total_sgemm = 0, total_ours = 0, flops_all = 0;
    for (size_t i = 0; i < products.size(); ++i) {
      const Product& p = products[i];
      std::cerr << fmt::format("[{}/{}] {}...\n", i + 1, products.size(), p.name);
      p.sgemm();  // warm both
      p.ours();
      std::vector<double> s, o;
      for (int r = 0; r < rounds; ++r) {
        if (r % 2 == 0) {
          s.push_back(Seconds(p.sgemm));
          o.push_back(Seconds(p.ours));
        } else {
          o.push_back(Seconds(p.ours));
          s.push_back(Seconds(p.sgemm));
        }
      }
      const double flops = 2.0 * static_cast<double>(p.m * p.n * p.k);
      const double ts = Median(s), to = Median(o);
      total_sgemm += ts, total_ours += to, flops_all += flops;
      table.AddRow({p.name, fmt::format("{} x {} x {}", p.m, p.n, p.k),
                    fmt::format("{:.0f}", flops / ts / 1e9),
                    fmt::format("{:.0f}", flops / to / 1e9), fmt::format("{:.2f}x", ts / to)});
    }
    table.AddRow({"all, time-weighted", "", fmt::format("{:.0f}", flops_all / total_sgemm / 1e9),
                  fmt::format("{:.0f}", flops_all / total_ours / 1e9),
                  fmt::format("{:.2f}x", total_sgemm / total_ours)});
    std::cout << table.RenderText();
    std::cout << fmt::format("sgemm at {:.2f} of the fp32 FMA peak, bf16 at {:.2f}\n",
                             flops_all / total_sgemm / 1e9 / peak.gflops,
                             flops_all / total_ours / 1e9 / peak.gflops);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_gemm: " << e.what() << "\n";
    return 1;
  }
}
