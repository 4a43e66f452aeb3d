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
#include "util/error.h"

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
  const std::map<std::string, double> named_misses = {
      {"mt-nlg-530b-3360", 0.25}, {"gpt-neox-20b", 0.25}, {"llama2-7b", 0.30}};
  for (const ValidationResult& r : v.results) {
    if (r.c->IsCollective() || r.c->calibration) continue;
    const auto miss = named_misses.find(r.c->name);
    EXPECT_LE(std::fabs(r.error), miss == named_misses.end() ? 0.20 : miss->second) << r.c->name;
  }
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
  const auto load = [](const std::string& extra) -> std::string {
    try {
      With(extra);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string no_size = load(R"([[validation]]
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
