#include "catalog/catalog.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>

#include "util/error.h"

namespace fmstack::catalog {
namespace {

TEST(Catalog, EmbeddedHasEverythingTheSeedsName) {
  const Catalog c = Catalog::LoadEmbedded();
  for (const char* a : {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "b200", "b300",
                        "gb200", "gb300", "trainium1", "trainium2", "trainium3"}) {
    EXPECT_NE(c.FindAccelerator(a), nullptr) << a;
  }
  for (const char* i :
       {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
        "p5.4xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge", "u-p6e-gb200x72", "u-p6e-gb300x72",
        "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "trn3-ultraserver"}) {
    EXPECT_NE(c.FindInstance(i), nullptr) << i;
  }
  for (const char* s : {"instance-nvme", "fsx-lustre-scratch2", "fsx-lustre-persistent2-250",
                        "s3-standard", "s3-express-one-zone"}) {
    EXPECT_NE(c.FindStorage(s), nullptr) << s;
  }
}

TEST(Catalog, EveryEntryHasASource) {
  const Catalog c = Catalog::LoadEmbedded();
  for (const auto& a : c.accelerators()) EXPECT_FALSE(a.source.empty()) << a.name;
  for (const auto& i : c.instances()) EXPECT_FALSE(i.source.empty()) << i.name;
  for (const auto& s : c.storage()) EXPECT_FALSE(s.source.empty()) << s.name;
}

TEST(Catalog, VendorFigures) {
  const Catalog c = Catalog::LoadEmbedded();
  EXPECT_DOUBLE_EQ(c.FindAccelerator("a100")->PeakFlops(Precision::kBf16), 312e12);
  EXPECT_DOUBLE_EQ(c.FindAccelerator("H100")->PeakFlops(Precision::kFp8), 1979e12);
  EXPECT_DOUBLE_EQ(c.FindAccelerator("a100-40gb")->PeakFlops(Precision::kFp8), 0);
  const Instance& p5 = *c.FindInstance("P5.48XLARGE");
  EXPECT_EQ(p5.vcpus, 192);
  EXPECT_EQ(p5.accelerators, 8);
  EXPECT_DOUBLE_EQ(p5.network_bandwidth, 400e9);  // 3,200 Gbps
  EXPECT_DOUBLE_EQ(p5.nvme_bytes, 30.72e12);
  // Trn3 UltraServer totals in seed 004 follow from the chip figures.
  const Instance& trn3 = *c.FindInstance("trn3-ultraserver");
  const Accelerator& chip = c.AcceleratorOf(trn3);
  EXPECT_NEAR(static_cast<double>(trn3.accelerators) * chip.fp8_flops / 1e15, 362, 1);
  EXPECT_NEAR(static_cast<double>(trn3.accelerators) * chip.hbm_bandwidth / 1e12, 706, 1);
}

TEST(Catalog, DirectoryMatchesEmbedded) {
  const Catalog dir = Catalog::LoadDirectory(std::string(FMSTACK_SOURCE_DIR) + "/data/catalog");
  const Catalog embedded = Catalog::LoadEmbedded();
  EXPECT_EQ(dir.accelerators().size(), embedded.accelerators().size());
  EXPECT_EQ(dir.instances().size(), embedded.instances().size());
  EXPECT_EQ(dir.storage().size(), embedded.storage().size());
}

TEST(Catalog, BadFilesAreRejectedWithPosition) {
  const EmbeddedFile unknown_key[] = {
      {"a.toml", "[[accelerator]]\nname = \"x\"\nhbm = \"1GB\"\nsource = \"s\"\nbf16_tflop = 1\n"}};
  try {
    Catalog::LoadFiles(unknown_key);
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.pos().line, 5);
    EXPECT_NE(std::string(e.what()).find("did you mean 'bf16_tflops'"), std::string::npos)
        << e.what();
  }
  const EmbeddedFile dangling[] = {
      {"i.toml",
       "[[instance]]\nname = \"x\"\naccelerator = \"h1000\"\naccelerators = 8\nsource = \"s\"\n"}};
  EXPECT_THROW(Catalog::LoadFiles(dangling), Error);
  const EmbeddedFile no_date[] = {
      {"i.toml",
       "[[accelerator]]\nname = \"a\"\nhbm = \"1GB\"\nsource = \"s\"\n[[instance]]\nname = "
       "\"x\"\naccelerator = \"a\"\naccelerators = 1\nprice_per_hour = 3.0\nsource = \"s\"\n"}};
  EXPECT_THROW(Catalog::LoadFiles(no_date), SpecError);
}

// The SpecError one file raises ("" when it loads).
std::string SpecErrorOf(const EmbeddedFile& file) {
  try {
    Catalog::LoadFiles(std::span(&file, 1));
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

// A backward rate alone would be a backward with no forward to pair it
// with; the error names the key that is missing.
TEST(Catalog, FlashAttentionBackwardNeedsTheForwardRate) {
  const std::string e =
      SpecErrorOf({"a.toml",
                   "[[accelerator]]\nname = \"x\"\nhbm = \"1GB\"\nsource = \"s\"\n"
                   "flash_attention_backward_tflops = 300\nflash_attention_source = \"m\"\n"});
  EXPECT_NE(e.find("flash_attention_backward_tflops"), std::string::npos) << e;
  EXPECT_NE(e.find("needs flash_attention_tflops"), std::string::npos) << e;
}

TEST(Catalog, AValidationCaseMayBeInSeveralGroups) {
  const Catalog c = Catalog::LoadEmbedded();
  const auto it =
      std::find_if(c.validation_cases().begin(), c.validation_cases().end(),
                   [](const ValidationCase& v) { return v.name == "llama3-405b-8k-16384"; });
  ASSERT_NE(it, c.validation_cases().end());
  EXPECT_EQ(it->groups, (std::vector<std::string>{"llama3-405b-8k", "llama3-405b-16384"}));
  const std::string e =
      SpecErrorOf({"v.toml",
                   "[[validation]]\nname = \"x\"\ngroups = [\"a\", \"\"]\npublished = 1\n"
                   "job = \"j\"\nsource = \"s\"\n"});
  EXPECT_NE(e.find("non-empty"), std::string::npos) << e;
}

}  // namespace
}  // namespace fmstack::catalog
