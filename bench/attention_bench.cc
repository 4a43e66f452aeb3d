// bench_attention: the small products inside causal attention on OpenBLAS
// sgemm (as the trainer ran them until 2026-11-26) against gpt/tile_gemm.h
// (as it runs them now), side by side on one thread, in one run: three
// rounds, alternating the two, median of each. Shapes are those of a model
// with head width `--head`, `--heads` heads (they set the stride of the qkv
// rows: gpt-mini has 6, gpt2-124m 12; the default is 4) and sequence
// `--seq`, in blocks of 64 query rows, plus two probes of OpenBLAS itself:
// an output 256 columns wide (its slow range on Haswell/Zen kernels) and
// one 1024 wide (its fast range), where the tile is not meant to win.
#include <cblas.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "bench/median.h"
#include "gpt/blas_core.h"
#include "gpt/sgemm_peak.h"
#include "gpt/tile_gemm.h"
#include "util/text_table.h"

namespace {

using fmstack::bench::Median;

using fmstack::gpt::StridedMatrix;
using fmstack::gpt::TileGemm;

struct Product {
  std::string name;
  int64_t m, n, k;
  std::function<void()> sgemm, tile;
};

// Best GFLOP/s of `reps` calls, timed as one batch, over a few batches.
double Gflops(const Product& p, const std::function<void()>& run) {
  const int64_t reps = std::max<int64_t>(1, 200'000'000 / (2 * p.m * p.n * p.k));
  double best = 0;
  for (int batch = 0; batch < 3; ++batch) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < reps; ++r) run();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(p.m * p.n * p.k * reps) / s / 1e9);
  }
  return best;
}

std::string Listed(const std::vector<double>& v) {
  std::string out;
  for (double x : v) out += fmt::format("{}{:.1f}", out.empty() ? "" : ", ", x);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  // First, before OpenBLAS is used: a CPU newer than the OpenBLAS build gets its fast kernels.
  fmstack::gpt::ReexecWithBestBlasCore(std::span<char* const>(argv, static_cast<size_t>(argc)),
                                       fmstack::gpt::BlasPin::kReplaceNarrower);
  CLI::App app{"bench_attention: attention's small products, OpenBLAS sgemm vs the register tile"};
  int64_t T = 256, hs = 64, heads = 4;
  app.add_option("--seq", T, "sequence length (keys)")->check(CLI::Range(64, 4096));
  app.add_option("--head", hs, "head width")->check(CLI::Range(16, 256));
  app.add_option("--heads", heads, "heads (a qkv row is 3 x heads x head wide)")
      ->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);

  fmstack::gpt::SetCpuThreads(1);
  constexpr int64_t kBlock = 64;
  const int64_t ld = 3 * hs * heads;  // a qkv row of a model with `heads` heads of this width
  std::vector<float> qkv(T * ld), kt(hs * T), scores(T * T), out(T * ld);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>(i % 89) / 89.0f;
  fmstack::gpt::PackTransposed(qkv.data() + hs, T, hs, ld, kt.data());
  const float* q = qkv.data();
  const float* k = q + hs;
  const float* v = q + 2 * hs;
  const auto n = [](int64_t x) { return static_cast<blasint>(x); };

  std::vector<Product> products;
  for (int64_t keys = kBlock; keys <= T; keys += std::max<int64_t>(kBlock, T / 4)) {
    products.push_back(
        {fmt::format("S = Q K^T, {} keys", keys), kBlock, keys, hs,
         [=, &scores] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n(kBlock), n(keys), n(hs), 1.0f, q,
                       n(ld), k, n(ld), 0.0f, scores.data(), n(T));
         },
         [=, &scores, &kt] {
           TileGemm(kBlock, keys, hs, 1.0f, {q, ld, 1}, kt.data(), T, false, scores.data(), T);
         }});
    products.push_back(
        {fmt::format("O = P V, {} keys", keys), kBlock, hs, keys,
         [=, &scores, &out] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n(kBlock), n(hs), n(keys), 1.0f,
                       scores.data(), n(T), v, n(ld), 0.0f, out.data(), n(ld));
         },
         [=, &scores, &out] {
           TileGemm(kBlock, hs, keys, 1.0f, {scores.data(), T, 1}, v, ld, false, out.data(), ld);
         }});
    products.push_back(
        {fmt::format("dV += P^T dO, {} keys", keys), keys, hs, kBlock,
         [=, &scores, &out] {
           cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n(keys), n(hs), n(kBlock), 1.0f,
                       scores.data(), n(T), q, n(ld), 1.0f, out.data(), n(ld));
         },
         [=, &scores, &out] {
           TileGemm(keys, hs, kBlock, 1.0f, {scores.data(), 1, T}, q, ld, true, out.data(), ld);
         }});
  }
  // The probes: plain row-major A (1024 x 384) times B (384 x cols).
  std::vector<float> a(1024 * 384, 0.5f), b(384 * 1024, 0.25f), c(1024 * 1024);
  for (int64_t cols : {256, 1024}) {
    products.push_back({fmt::format("probe 1024 x {} x 384", cols), 1024, cols, 384,
                        [=, &a, &b, &c] {
                          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1024, n(cols), 384,
                                      1.0f, a.data(), 384, b.data(), n(cols), 0.0f, c.data(),
                                      n(cols));
                        },
                        [=, &a, &b, &c] {
                          TileGemm(1024, cols, 384, 1.0f, {a.data(), 384, 1}, b.data(), cols, false,
                                   c.data(), cols);
                        }});
  }

  std::cerr << fmt::format("{} products x 3 rounds, one thread...\n", products.size());
  fmstack::TextTable t({"product (m x n x k)", "sgemm GFLOP/s", "tile GFLOP/s", "tile / sgemm",
                        "rounds (sgemm | tile)"},
                       {fmstack::TextTable::Align::kLeft, fmstack::TextTable::Align::kRight,
                        fmstack::TextTable::Align::kRight, fmstack::TextTable::Align::kRight,
                        fmstack::TextTable::Align::kLeft});
  for (const Product& p : products) {
    std::vector<double> blas, tile;
    for (int round = 0; round < 3; ++round) {
      blas.push_back(Gflops(p, p.sgemm));
      tile.push_back(Gflops(p, p.tile));
    }
    const double s = Median(blas), m = Median(tile);
    t.AddRow({fmt::format("{} ({} x {} x {})", p.name, p.m, p.n, p.k), fmt::format("{:.1f}", s),
              fmt::format("{:.1f}", m), fmt::format("{:.2f}x", m / s),
              Listed(blas) + " | " + Listed(tile)});
  }
  std::cout << fmt::format("BLAS: {} (kernels: {}); 1 thread; seq {}, head width {}\n",
                           fmstack::gpt::BlasConfig(), fmstack::gpt::BlasCoreName(), T, hs)
            << t.RenderText();
  return 0;
}
