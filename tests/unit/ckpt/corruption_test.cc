// Corruption: each kind of damage is detected, named (file and tensor), and
// restore falls back to the next valid copy without losing older commits.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ckpt/engine.h"
#include "ckpt/restore.h"
#include "synthetic.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Loaded;
using testing::MakeState;
using testing::Matches;
using testing::SliceFor;
using testing::SyntheticState;
using testing::TargetsFor;

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("fmstack-corrupt-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    EngineOptions o;
    o.chunk_bytes = 4096;
    Engine engine(Tiers(), o);
    for (int64_t step : {1, 2}) {
      engine.Save(SliceFor(State(step), step, 0, 1));
      engine.Wait();
    }
  }
  void TearDown() override { fs::remove_all(root_); }

  static SyntheticState State(int64_t step) { return MakeState(static_cast<uint64_t>(step), 20); }
  std::string Path(const std::string& tier, int64_t step, const std::string& file) const {
    return (root_ / tier / StepDirName(step) / file).string();
  }
  std::vector<std::unique_ptr<Tier>> Tiers() const {
    std::vector<std::unique_ptr<Tier>> t;
    t.push_back(MakePosixTier("local", (root_ / "local").string()));
    t.push_back(MakePosixTier("shared", (root_ / "shared").string()));
    return t;
  }
  // Restores the whole state; returns the step and the log.
  std::pair<int64_t, std::string> Restore() {
    std::vector<std::unique_ptr<Tier>> tiers = Tiers();
    std::vector<Tier*> all = {tiers[0].get(), tiers[1].get()};
    std::string log;
    Loaded l = TargetsFor(State(1), 0, 1);
    const std::optional<RestoreResult> r =
        ckpt::Restore(all, l.targets, [&](const std::string& s) { log += s + "\n"; });
    if (!r) return {0, log};
    EXPECT_TRUE(Matches(State(r->step), l, 0, 1)) << "restored bytes differ from step " << r->step;
    EXPECT_EQ(r->tier_name, r->rejected.empty() ? "local" : r->tier_name);
    return {r->step, log};
  }
  void FlipBit(const std::string& path, int64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(offset);
    f.write(&c, 1);
  }
  fs::path root_;
};

TEST_F(CorruptionTest, FlippedBitIsNamedAndTheNextTierIsUsed) {
  const std::string shard = Path("local", 2, RankFileName(0));
  FlipBit(shard, 4096 + 100);  // data region, first tensor in name order
  const auto [step, log] = Restore();
  EXPECT_EQ(step, 2);
  EXPECT_NE(
      log.find("rejected step-00000002 on local: " + shard + ": checksum mismatch in chunk 0"),
      std::string::npos)
      << log;
  EXPECT_NE(log.find("\"model.h.0.attn.c_attn.bias\""), std::string::npos) << log;
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  const std::vector<std::string> problems = VerifyCopy(*tiers[0], 2);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(VerifyCopy(*tiers[1], 2).empty());
}

TEST_F(CorruptionTest, TruncatedFilesFallBackToTheOlderStep) {
  for (const char* tier : {"local", "shared"})
    fs::resize_file(Path(tier, 2, RankFileName(0)), 9000);
  const auto [step, log] = Restore();
  EXPECT_EQ(step, 1);
  EXPECT_NE(log.find(Path("shared", 2, RankFileName(0)) + ": 9000 bytes, the manifest says"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("truncated or replaced; tensors \""), std::string::npos) << log;
}

TEST_F(CorruptionTest, MissingManifestIsReported) {
  fs::remove(Path("local", 2, kManifestName));
  const auto [step, log] = Restore();
  EXPECT_EQ(step, 2);
  EXPECT_NE(log.find(Path("local", 2, kManifestName) + ": missing"), std::string::npos) << log;
}

TEST_F(CorruptionTest, GarbledManifestIsReported) {
  std::ofstream(Path("local", 2, kManifestName)) << "{\"format\": \"fmstack-checkpoint\", ";
  fs::remove(Path("shared", 2, kCommittedName));
  const auto [step, log] = Restore();
  EXPECT_EQ(step, 1);
  EXPECT_NE(log.find(Path("local", 2, kManifestName) + ": not valid JSON"), std::string::npos)
      << log;
  EXPECT_NE(log.find("rejected step-00000002 on shared: no COMMITTED marker"), std::string::npos)
      << log;
}

TEST_F(CorruptionTest, DamagedShardHeaderIsRefusedByRestoreAsByVerify) {
  // A header that still parses but describes other bytes than the manifest:
  // one digit of a data offset changed, in place, same length.
  const std::string shard = Path("local", 2, RankFileName(0));
  std::string bytes;
  {
    std::ifstream in(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("\"data_offsets\":[0,");
  ASSERT_NE(at, std::string::npos);
  bytes[at + std::string("\"data_offsets\":[").size()] = '4';  // [0, -> [4,
  {
    std::ofstream out(shard, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  EXPECT_FALSE(VerifyCopy(*tiers[0], 2).empty());
  const auto [step, log] = Restore();
  EXPECT_EQ(step, 2);  // from the shared tier
  EXPECT_NE(log.find("rejected step-00000002 on local: " + shard), std::string::npos) << log;
}

TEST_F(CorruptionTest, AFlippedManifestOffsetIsCaughtByItsChecksum) {
  const std::string path = Path("local", 2, kManifestName);
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"offset\": ");
  ASSERT_NE(at, std::string::npos);
  char& digit = text[at + std::string("\"offset\": ").size()];
  digit = digit == '0' ? '1' : '0';
  std::ofstream(path, std::ios::trunc) << text;
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  const std::vector<std::string> problems = VerifyCopy(*tiers[0], 2);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("manifest checksum mismatch"), std::string::npos) << problems[0];
  const auto [step, log] = Restore();
  EXPECT_EQ(step, 2);
  EXPECT_NE(log.find("manifest checksum mismatch"), std::string::npos) << log;
}

TEST_F(CorruptionTest, EverythingCorruptMeansStartOver) {
  for (const char* tier : {"local", "shared"})
    for (int64_t step : {1, 2}) FlipBit(Path(tier, step, RankFileName(0)), 4096 + 5000);
  const auto [step, log] = Restore();
  EXPECT_EQ(step, 0);
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 4) << log;
}

// A full disk: a 6 MiB tmpfs holds step 1 but not step 2 of a ~3.5 MB state.
// Save reports ENOSPC naming the file; step 1 stays committed and loads.
TEST(FullDiskTest, EnospcIsReportedAndTheCommittedStepSurvives) {
  const fs::path mnt = fs::temp_directory_path() / fmt::format("fmstack-full-{}", ::getpid());
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=6m") != 0) {
    fs::remove(mnt);
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  }
  struct Unmount {
    fs::path dir;
    ~Unmount() {
      ::umount2(dir.c_str(), MNT_DETACH);
      fs::remove(dir);
    }
  } unmount{mnt};
  const SyntheticState big = MakeState(9, 200);  // ~3.5 MB
  std::string error;
  {
    EngineOptions o;
    o.chunk_bytes = 65536;
    o.keep = 2;
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(MakePosixTier("local", (mnt / "job").string()));
    Engine engine(std::move(tiers), o);
    engine.Save(SliceFor(big, 1, 0, 1));
    engine.Wait();
    engine.Save(SliceFor(MakeState(10, 200), 2, 0, 1));
    try {
      engine.Wait();
    } catch (const Error& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("local tier: step-00000002 not saved: " + (mnt / "job").string() +
                       "/step-00000002/rank-00000.safetensors: write of"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  std::unique_ptr<Tier> tier = MakePosixTier("local", (mnt / "job").string());
  Loaded l = TargetsFor(big, 0, 1);
  Tier* all[] = {tier.get()};
  const std::optional<RestoreResult> r = Restore(all, l.targets, nullptr);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 1);
  EXPECT_TRUE(Matches(big, l, 0, 1));
}

}  // namespace
}  // namespace fmstack::ckpt
