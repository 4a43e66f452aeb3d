#include "health/burnin.h"

#include <cblas.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "util/error.h"

namespace fmstack::health {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Deterministic inputs whose products are known exactly enough to check.
float Input(size_t i, uint32_t salt) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + salt;
  return static_cast<float>((h >> 8) % 1024) / 1024.0f - 0.5f;
}

void Gemm(BurninFigures& f, double seconds) {
  const int n = 768;
  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> a(nn), b(nn), c(nn);
  for (size_t i = 0; i < nn; ++i) {
    a[i] = Input(i, 1);
    b[i] = Input(i, 2);
  }
  const double flops = 2.0 * n * n * n;
  // Sustained, not best-of: a throttled device is fast in bursts.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c.data(), n);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  int reps = 0;
  do {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    ++reps;
  } while (reps < 3 || Seconds(t0) < seconds);
  f.gemm_gflops = flops * reps / Seconds(t0) / 1e9;
  // A sample of entries against a double-precision dot product: float
  // accumulation over 768 terms of size <= 0.25 stays well inside 1e-3.
  for (int s = 0; s < 64; ++s) {
    const int i = (s * 97) % n, j = (s * 193 + 11) % n;
    double want = 0;
    for (int k = 0; k < n; ++k)
      want += static_cast<double>(a[static_cast<size_t>(i) * n + k]) *
              b[static_cast<size_t>(k) * n + j];
    const double got = c[static_cast<size_t>(i) * n + j];
    if (std::abs(got - want) > 1e-3 * (1 + std::abs(want))) {
      f.problems += fmt::format("gemm: C[{},{}] = {} where {} was expected; ", i, j, got, want);
      break;
    }
  }
}

void Memory(BurninFigures& f, double seconds) {
  const size_t n = size_t{16} << 20;  // 3 x 64 MiB: well past any cache
  std::vector<float> a(n), b(n), c(n);
  for (size_t i = 0; i < n; ++i) {
    b[i] = static_cast<float>(i % 1000);
    c[i] = static_cast<float>(i % 7);
  }
  const float s = 3.0f;
  const auto t0 = std::chrono::steady_clock::now();
  int reps = 0;
  do {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    ++reps;
  } while (reps < 3 || Seconds(t0) < seconds);
  f.memory_gbps = 3.0 * static_cast<double>(n) * sizeof(float) * reps / Seconds(t0) / 1e9;
  for (size_t i = 0; i < n; i += 4099) {
    if (a[i] != b[i] + s * c[i]) {
      f.problems +=
          fmt::format("memory: a[{}] = {} where {} was expected; ", i, a[i], b[i] + s * c[i]);
      break;
    }
  }
}

}  // namespace

nlohmann::json ToJson(const BurninFigures& f) {
  return {{"gemm_gflops", f.gemm_gflops},
          {"memory_gbps", f.memory_gbps},
          {"allreduce_gbps", f.allreduce_gbps},
          {"problems", f.problems}};
}

BurninFigures BurninFiguresFromJson(const nlohmann::json& j) {
  BurninFigures f;
  for (const auto& [key, field] : {std::pair{"gemm_gflops", &f.gemm_gflops},
                                   {"memory_gbps", &f.memory_gbps},
                                   {"allreduce_gbps", &f.allreduce_gbps}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number() || j[key].get<double>() < 0)
      throw Error(fmt::format("\"{}\": expected a non-negative number", key));
    *field = j[key].get<double>();
  }
  f.problems = j.value("problems", "");
  return f;
}

BurninFigures MeasureNode(double seconds) {
  BurninFigures f;
  Gemm(f, seconds / 2);
  Memory(f, seconds / 2);
  return f;
}

BurninVerdict Judge(const BurninFigures& got, const BurninFigures& expected, double tolerance) {
  BurninVerdict v;
  auto judge = [&](const char* what, const char* unit, double g, double e) {
    if (g <= 0) return;
    if (e <= 0) {
      v.lines.push_back(fmt::format("{} {:.1f} {}: no expected figure", what, g, unit));
      return;
    }
    const bool ok = g >= tolerance * e;
    v.pass &= ok;
    v.lines.push_back(fmt::format("{} {:.1f} {} {} {:.2f} x {:.1f} ({:.0f}%): {}", what, g, unit,
                                  ok ? ">=" : "<", tolerance, e, 100 * g / e,
                                  ok ? "pass" : "FAIL"));
  };
  judge("gemm", "GFLOP/s", got.gemm_gflops, expected.gemm_gflops);
  judge("memory", "GB/s", got.memory_gbps, expected.memory_gbps);
  judge("all-reduce", "GB/s", got.allreduce_gbps, expected.allreduce_gbps);
  if (!got.problems.empty()) {
    v.pass = false;
    v.lines.push_back("wrong results: " + got.problems);
  }
  return v;
}

}  // namespace fmstack::health
