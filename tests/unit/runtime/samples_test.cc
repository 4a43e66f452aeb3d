// The sample ledger: written by ranks, audited from the files.
#include "metrics/samples.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fmstack::metrics {
namespace {

namespace fs = std::filesystem;

class Samples : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/samples_test." + std::to_string(::getpid()) + "." +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Every rank of the group writes the same gathered record, as train does.
  void Step(int64_t gen, int64_t step, std::vector<std::pair<int64_t, int64_t>> ranges,
            int64_t run = 1) {
    for (size_t r = 0; r < ranges.size(); ++r) {
      SampleLedger(dir_ + "/samples/rank" + std::to_string(r) + ".jsonl")
          .Append(
              {.run = run, .generation = gen, .step = step, .micro_batch = 2, .ranges = ranges});
    }
  }
  std::string dir_;
};

TEST_F(Samples, ShrinkAndRollbackStillCoverEveryMicroBatchOnce) {
  for (int64_t s = 1; s <= 5; ++s) Step(0, s, {{0, 1}, {1, 1}, {2, 1}, {3, 1}});
  Step(0, 6, {{0, 1}, {1, 1}, {2, 1}, {3, 1}});  // lost: redone after the shrink
  for (int64_t s = 6; s <= 9; ++s) Step(1, s, {{0, 2}, {2, 2}});
  const SampleAudit a = AuditSamples(dir_, 1, 9, 4);
  EXPECT_TRUE(a.ok()) << a.problems.front();
  EXPECT_EQ(a.superseded, 1);
  ASSERT_EQ(a.worlds.size(), 2u);
  EXPECT_EQ(a.worlds[0].world, 4);
  EXPECT_EQ(a.worlds[0].last, 5);
  EXPECT_EQ(a.worlds[1].world, 2);
  EXPECT_EQ(a.worlds[1].first, 6);
  EXPECT_NE(a.Summary().find("each exactly once"), std::string::npos) << a.Summary();
}

TEST_F(Samples, UnevenSplitIsFine) {
  Step(0, 1, {{0, 2}, {2, 2}, {4, 1}, {5, 1}});
  EXPECT_TRUE(AuditSamples(dir_, 1, 1, 6).ok());
}

TEST_F(Samples, DuplicatesGapsAndMissingStepsAreNamed) {
  Step(0, 1, {{0, 2}, {1, 2}});  // micro-batch 1 twice, 3 never
  Step(0, 3, {{0, 2}, {2, 2}});  // step 2 missing
  const SampleAudit a = AuditSamples(dir_, 1, 3, 4);
  ASSERT_FALSE(a.ok());
  std::string all;
  for (const std::string& p : a.problems) all += p + "\n";
  EXPECT_NE(all.find("step 1: micro-batches 1..1 were trained twice"), std::string::npos) << all;
  EXPECT_NE(all.find("step 1: micro-batches 3..3 were trained by no rank"), std::string::npos)
      << all;
  EXPECT_NE(all.find("step 2: no rank recorded it"), std::string::npos) << all;
}

TEST_F(Samples, ALaterRunOrGenerationWinsAndRanksMustAgree) {
  Step(5, 1, {{0, 1}, {1, 1}}, /*run=*/1);
  Step(0, 1, {{0, 2}, {2, 2}}, /*run=*/2);  // a rerun: generations start again
  SampleAudit a = AuditSamples(dir_, 1, 1, 4);
  EXPECT_TRUE(a.ok());  // the rerun's record, which covers 0..3
  SampleLedger(dir_ + "/samples/rank9.jsonl")
      .Append({.run = 2, .generation = 0, .step = 1, .micro_batch = 2, .ranges = {{0, 4}}});
  a = AuditSamples(dir_, 1, 1, 4);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.problems.front().find("recorded differently by another rank"), std::string::npos);
}

TEST_F(Samples, MalformedAndHostileLinesAreRefusedByName) {
  fs::create_directories(dir_ + "/samples");
  std::ofstream(dir_ + "/samples/rank0.jsonl")
      << R"({"run":1,"gen":0,"step":1,"micro_batch":2,"micro":[[0,-4]]})"
      << "\n";
  try {
    AuditSamples(dir_, 1, 1, 4);
    FAIL() << "a negative count was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("rank0.jsonl:1"), std::string::npos) << e.what();
  }
  std::ofstream(dir_ + "/samples/rank0.jsonl") << "not json\n";
  EXPECT_THROW(AuditSamples(dir_, 1, 1, 4), std::exception);
}

TEST_F(Samples, NoLedgerIsAProblemNotACrash) {
  const SampleAudit a = AuditSamples(dir_, 1, 3, 4);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.problems.front().find("no sample ledger"), std::string::npos);
}

}  // namespace
}  // namespace fmstack::metrics
