// health: burn-in, the checks a node passes before it joins a job or returns
// from repair: matrix multiply (the accelerator's, here OpenBLAS sgemm),
// memory bandwidth and, across nodes, all-reduce. Each measurement is also
// verified (results checked against a reference), so a node that is fast
// and wrong fails as surely as one that is slow.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fmstack::health {

struct BurninFigures {
  double gemm_gflops = 0;     // sgemm, sustained over the measuring time (a throttled
                              // device is fast in bursts)
  double memory_gbps = 0;     // STREAM triad a = b + s*c, bytes moved / time, sustained
  double allreduce_gbps = 0;  // bus bandwidth 2(n-1)/n * bytes / time; 0 = not measured
  std::string problems;       // wrong results; "" when every result checked out
};
nlohmann::json ToJson(const BurninFigures& f);
BurninFigures BurninFiguresFromJson(const nlohmann::json& j);  // throws Error naming the key

// GEMM and memory on this node for about `seconds` in all, on the current
// BLAS/OpenMP threads.
BurninFigures MeasureNode(double seconds);

struct BurninVerdict {
  bool pass = true;
  std::vector<std::string> lines;  // one per figure: "gemm 41.2 GFLOP/s >= 0.70 x 58.1: pass"
};
// Each measured figure against tolerance x the expected one (an expected 0
// is not judged); any wrong result fails.
BurninVerdict Judge(const BurninFigures& got, const BurninFigures& expected, double tolerance);

}  // namespace fmstack::health
