// bench/plan: how long a whole `fmstack plan` takes (catalog load, spec parse,
// plan, render), against the 100 ms budget the planner promises.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "plan/plan.h"
#include "plan/report.h"
#include "spec/job_spec.h"

namespace {

constexpr double kBudgetMs = 100.0;

const char* kJob = R"(
name = "bench"
model = "llama3.1-405b"
[train]
tokens = 15.6e12
target_mfu = 0.4
[parallel]
dp = "auto"
tp = 8
pp = 16
zero_stage = 1
[checkpoint]
keep = 3
[data]
size = "170TB"
[cluster]
instance = "p5.48xlarge"
nodes = 512
job_mtti = "150min"
)";

double TimeOnceMs() {
  const auto start = std::chrono::steady_clock::now();
  const auto catalog = fmstack::catalog::Catalog::LoadEmbedded();
  const auto job = fmstack::spec::ParseJobSpec(kJob, "bench.toml", catalog);
  const auto plan = fmstack::plan::MakePlan(job, catalog, {});
  const std::string text = fmstack::plan::RenderText(plan) + fmstack::plan::ToJson(plan).dump();
  const auto end = std::chrono::steady_clock::now();
  if (text.empty()) std::puts("empty plan");
  return std::chrono::duration<double, std::milli>(end - start).count();
}

}  // namespace

int main() {
  std::vector<double> ms;
  for (int i = 0; i < 200; ++i) ms.push_back(TimeOnceMs());
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const double p99 = ms[ms.size() * 99 / 100];
  std::printf("plan (catalog load + parse + plan + render), %zu runs\n", ms.size());
  std::printf("%-10s %10s %10s %12s\n", "stat", "ms", "budget ms", "budget/this");
  std::printf("%-10s %10.3f %10.1f %11.0fx\n", "median", median, kBudgetMs, kBudgetMs / median);
  std::printf("%-10s %10.3f %10.1f %11.0fx\n", "p99", p99, kBudgetMs, kBudgetMs / p99);
  return 0;
}
