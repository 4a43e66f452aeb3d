// fmstack validate's cases: every one runs, the model keeps each group's
// published order, and a case that names what the catalog lacks or asks
// for a layout the model cannot time is refused with the case named.
#include "sim/validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "catalog/embedded.h"
#include "spec/job_spec.h"
#include "util/error.h"
#include "workload/presets.h"
#include "workload/shape.h"

namespace fmstack::sim {
namespace {

TEST(Validation, EveryCaseRunsAndEveryGroupKeepsItsPublishedOrder) {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  const Validation v = Validate(cat);
  ASSERT_GE(v.results.size(), 14u);
  for (const ValidationResult& r : v.results) {
    EXPECT_GT(r.model, 0) << r.c->name;
    EXPECT_TRUE(std::isfinite(r.error)) << r.c->name;
  }
  ASSERT_FALSE(v.groups.empty());
  std::map<std::string, int> cases;
  for (const GroupOrder& g : v.groups) {
    EXPECT_TRUE(g.kept) << g.group;
    cases[g.group] = g.cases;
  }
  // The comparisons docs/sim.md claims, among them Llama 3's long against
  // short sequence at the same scale (a case in two groups).
  for (const char* group : {"llama2", "llama3-405b-8k", "llama3-405b-16384", "mt-nlg-530b"})
    EXPECT_GE(cases[group], 2) << group;
}

// The embedded catalog plus one more file.
catalog::Catalog With(const std::string& extra) {
  std::vector<catalog::EmbeddedFile> files(catalog::EmbeddedCatalogFiles().begin(),
                                           catalog::EmbeddedCatalogFiles().end());
  files.push_back({"extra.toml", extra});
  return catalog::Catalog::LoadFiles(files);
}

std::string Case(const std::string& name, const std::string& job) {
  return "[[validation]]\nname = \"" + name +
         "\"\npublished = 100\nsource = \"a test\"\njob = \"\"\"\n" + job + "\"\"\"\n";
}

// The error of loading the embedded catalog plus `extra`; "" when it loads.
std::string LoadError(const std::string& extra) {
  try {
    With(extra);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string ErrorOf(const catalog::Catalog& cat) {
  try {
    Validate(cat);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Validation, AnUnknownInstanceIsRefusedWithTheCaseNamed) {
  const std::string e = ErrorOf(With(Case("tpu-run", R"(model = "llama3-8b"
[cluster]
instance = "tpu-v4-pod"
nodes = 4
)")));
  EXPECT_NE(e.find("validation case 'tpu-run'"), std::string::npos) << e;
  EXPECT_NE(e.find("tpu-v4-pod"), std::string::npos) << e;
}

TEST(Validation, ALayoutTheModelCannotTimeIsRefused) {
  // 7 is no divisor of the 16 accelerators: the layout does not tile them.
  const std::string e = ErrorOf(With(Case("odd-layout", R"(model = "llama3-8b"
[train]
micro_batch = 1
global_batch = 16
[parallel]
dp = 2
tp = 7
[cluster]
instance = "p5.48xlarge"
nodes = 2
)")));
  EXPECT_NE(e.find("validation case 'odd-layout'"), std::string::npos) << e;
}

// docs/sim.md states the bound: nccl-tests busbw on A100 systems, median
// within 5% and each case within 20%.
TEST(Validation, CollectivesMeetTheirBound) {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();  // the results point into it
  const Validation v = Validate(cat);
  ASSERT_GE(v.collectives, 6);
  EXPECT_LE(v.collective_median_abs_error, 0.05);
  for (const ValidationResult& r : v.results) {
    if (r.c->IsCollective()) {
      EXPECT_LE(std::fabs(r.error), 0.20) << r.c->name;
    }
  }
}

// docs/sim.md states the bound for training runs that chose no constant:
// median within 10% (issue 21's), and each within 20% except the cases the
// docs name as outside it, each with its own bound.
TEST(Validation, IndependentTrainingRunsMeetTheirBound) {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();  // the results point into it
  const Validation v = Validate(cat);
  ASSERT_GE(v.independent, 14);
  EXPECT_LE(v.independent_median_abs_error, 0.10);
  const std::map<std::string, double> named_misses = {{"mt-nlg-530b-3360", 0.25},
                                                      {"llama2-7b", 0.30}};
  for (const ValidationResult& r : v.results) {
    if (r.c->IsCollective() || r.c->calibration) continue;
    const auto miss = named_misses.find(r.c->name);
    EXPECT_LE(std::fabs(r.error), miss == named_misses.end() ? 0.20 : miss->second) << r.c->name;
  }
}

// GPT-NeoX logged 6 x every parameter + 60 x seq x hidden x layers FLOPs per
// token (its get_flops until PR #1044), where Megatron's unit counts the
// recomputed forward pass and 12 x seq x hidden x layers for attention. The
// same job, counted both ways, differs by exactly that ratio.
TEST(Validation, AGptNeox2021CaseCountsFlopsAsThatCodeLoggedThem) {
  const std::string job = R"(model = "gpt2-774m"
[train]
recompute = "full"
micro_batch = 4
global_batch = 64
[cluster]
instance = "dgx-a100"
nodes = 2
)";
  std::string neox = Case("as-neox", job);
  neox.insert(neox.find("published"), "flops = \"gpt-neox-2021\"\n");
  const catalog::Catalog cat = With(Case("as-megatron", job) + neox);
  const Validation v = Validate(cat);
  std::map<std::string, double> figure;
  for (const ValidationResult& r : v.results) figure[r.c->name] = r.model;
  ASSERT_TRUE(figure.contains("as-neox") && figure.contains("as-megatron"));

  const workload::TransformerShape m = workload::FindPreset("gpt2-774m").value();
  const double s = m.seq_len, h = m.hidden, layers = m.layers;
  const double neox_per_token =
      6.0 * static_cast<double>(workload::CountParams(m).total) + 60.0 * s * h * layers;
  const double megatron_per_token = workload::TrainingFlopsPerToken(m).detailed * 4.0 / 3.0;
  EXPECT_NEAR(figure["as-neox"] / figure["as-megatron"], neox_per_token / megatron_per_token, 1e-9);
}

// The published GPT-NeoX-20B: 20,556,201,984 parameters (its model card), so
// 156.6 GFLOP per 2048-token position as its code counted.
TEST(Validation, TheGptNeox20bCaseHasThePublishedParameterCount) {
  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  for (const catalog::ValidationCase& c : cat.validation_cases()) {
    if (c.name != "gpt-neox-20b") continue;
    EXPECT_EQ(c.flops, "gpt-neox-2021");
    const spec::JobSpec job = spec::ParseJobSpec(c.job, c.origin, cat);
    EXPECT_NEAR(static_cast<double>(workload::CountParams(job.model).total), 20556201984.0,
                20556201984.0 * 0.001);
    return;
  }
  FAIL() << "no gpt-neox-20b case in the catalog";
}

TEST(Validation, AFlopsConventionOnlyQualifiesTflopsAndOnlyKnownOnes) {
  const std::string on_seconds = LoadError(R"([[validation]]
name = "x"
metric = "step_seconds"
flops = "gpt-neox-2021"
published = 10
source = "a test"
job = "model = 'gpt2-774m'"
)");
  EXPECT_NE(on_seconds.find("flops"), std::string::npos) << on_seconds;
  EXPECT_NE(on_seconds.find("step_seconds"), std::string::npos) << on_seconds;
  const std::string unknown = LoadError(R"([[validation]]
name = "y"
flops = "palm"
published = 10
source = "a test"
job = "model = 'gpt2-774m'"
)");
  EXPECT_NE(unknown.find("flops"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("palm"), std::string::npos) << unknown;
}

TEST(Validation, AGpuHoursCaseNeedsTheTokensItsRunTrainedOn) {
  const std::string e = ErrorOf(With(R"([[validation]]
name = "no-tokens"
metric = "gpu_hours"
published = 1000
source = "a test"
job = """
model = "llama3-8b"
[train]
micro_batch = 1
global_batch = 16
[cluster]
instance = "p5.48xlarge"
nodes = 2
"""
)"));
  EXPECT_NE(e.find("validation case 'no-tokens'"), std::string::npos) << e;
  EXPECT_NE(e.find("train.tokens"), std::string::npos) << e;
}

TEST(Validation, ACollectiveCaseWithoutItsOpOrSizeIsRefused) {
  const std::string no_size = LoadError(R"([[validation]]
name = "x"
metric = "busbw_gbps"
collective = "allreduce"
published = 100
source = "a test"
job = "[cluster]"
)");
  EXPECT_NE(no_size.find("collective"), std::string::npos) << no_size;
  const std::string e = ErrorOf(With(R"([[validation]]
name = "gossip"
metric = "busbw_gbps"
collective = "gossip"
bytes = "1GB"
published = 100
source = "a test"
job = """
[cluster]
instance = "dgx-a100"
nodes = 1
"""
)"));
  EXPECT_NE(e.find("validation case 'gossip'"), std::string::npos) << e;
  EXPECT_NE(e.find("gossip\" is not one the model times"), std::string::npos) << e;
}

}  // namespace
}  // namespace fmstack::sim
