// The POSIX tier's reuse of retired shard files: a removed step's shard is
// written over by the next save of the same name (same inode, the new bytes
// and size exactly), never while anyone still has it open, and a run that
// saves through the engine keeps verifying and restoring every step.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "ckpt/engine.h"
#include "ckpt/format.h"
#include "ckpt/restore.h"
#include "ckpt/tier.h"
#include "synthetic.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;

// Fresh at the start, removed at the end even when an assertion returns early.
struct ScratchDir {
  ScratchDir() {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    path = fs::temp_directory_path() / fmt::format("fmstack-recycle-{}-{}", ::getpid(), name);
    fs::remove_all(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  fs::path path;
};

ino_t Inode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `bytes` of a pattern that differs with `seed`, written the engine's way:
// whole aligned blocks through Queue, then an unaligned tail through Write.
std::string WriteShard(Tier& tier, int64_t step, size_t bytes, int seed) {
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  const size_t blocks = bytes / 4096 * 4096;
  std::unique_ptr<char, FreeDeleter> buffer(static_cast<char*>(std::aligned_alloc(4096, bytes)));
  if (!buffer) throw std::bad_alloc();
  for (size_t i = 0; i < bytes; ++i) buffer.get()[i] = static_cast<char>((i * 7 + seed * 13) % 253);
  std::unique_ptr<Sink> sink = tier.Create(step, RankFileName(0));
  if (blocks > 0) sink->Queue({buffer.get(), blocks});
  sink->Queue({buffer.get() + blocks, bytes - blocks});
  sink->Drain();
  sink->Finish();
  tier.Commit(step);
  return {buffer.get(), bytes};
}

TEST(Recycle, ARemovedStepsShardIsWrittenOverByTheNextSaveOfItsName) {
  const ScratchDir dir;
  const std::unique_ptr<Tier> tier = MakePosixTier("local", dir.path.string());
  const std::string first = tier->Where(1, RankFileName(0));
  WriteShard(*tier, 1, 3 << 20, 1);
  const ino_t inode = Inode(first);
  ASSERT_NE(inode, 0u);

  tier->Remove(1);
  EXPECT_FALSE(fs::exists(tier->Where(1, "")));
  EXPECT_TRUE(tier->List().empty()) << ".recycle must not be listed as a step";
  EXPECT_EQ(Inode((dir.path / ".recycle" / RankFileName(0)).string()), inode);

  // Shorter than the retired file, with a tail that is not a whole block:
  // the old bytes past the new end must be gone.
  const std::string second = WriteShard(*tier, 2, (1 << 20) + 100, 2);
  const std::string path2 = tier->Where(2, RankFileName(0));
  EXPECT_EQ(Inode(path2), inode) << "the save wrote a fresh file, not the retired one";
  EXPECT_FALSE(fs::exists(dir.path / ".recycle" / RankFileName(0)));
  EXPECT_TRUE(ReadAll(path2) == second) << "the shard written over differs from what was saved";

  // Longer than the retired file.
  tier->Remove(2);
  const std::string third = WriteShard(*tier, 3, (5 << 20) + 4096, 3);
  const std::string path3 = tier->Where(3, RankFileName(0));
  EXPECT_EQ(Inode(path3), inode);
  EXPECT_TRUE(ReadAll(path3) == third);
  ASSERT_EQ(tier->List().size(), 1u);
  EXPECT_TRUE(tier->List()[0].committed);
}

// A reader that opened the old step's shard keeps reading that step's
// bytes: the shard is deleted (its inode lives on for the reader), and the
// next save writes a fresh file.
TEST(Recycle, AShardSomeoneHasOpenIsDeletedNotWrittenOver) {
  const ScratchDir dir;
  const std::unique_ptr<Tier> tier = MakePosixTier("local", dir.path.string());
  const std::string old_bytes = WriteShard(*tier, 1, 2 << 20, 1);
  const std::string path1 = tier->Where(1, RankFileName(0));
  const ino_t inode = Inode(path1);
  const int reader = ::open(path1.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(reader, 0);

  tier->Remove(1);
  EXPECT_FALSE(fs::exists(dir.path / ".recycle" / RankFileName(0)));
  WriteShard(*tier, 2, 2 << 20, 2);
  EXPECT_NE(Inode(tier->Where(2, RankFileName(0))), inode);

  std::string got(old_bytes.size(), '\0');
  const ssize_t n = ::pread(reader, got.data(), got.size(), 0);
  ::close(reader);
  EXPECT_EQ(n, static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == old_bytes) << "the open reader saw other bytes than its step's";
}

// Only shard files are kept, and only when their step is removed: the
// index, the manifest and files of other names go with the directory.
TEST(Recycle, OnlyShardFilesOfARemovedStepAreKept) {
  const ScratchDir dir;
  const std::unique_ptr<Tier> tier = MakePosixTier("local", dir.path.string());
  WriteShard(*tier, 1, 1 << 20, 1);
  tier->PutSmall(1, RankIndexName(0), "{}");
  tier->PutSmall(1, kManifestName, "{}");  // the engine's, but not a shard
  tier->Remove(1);
  std::vector<std::string> kept;
  for (const fs::directory_entry& e : fs::directory_iterator(dir.path / ".recycle"))
    kept.push_back(e.path().filename().string());
  EXPECT_EQ(kept, std::vector<std::string>{RankFileName(0)});
  EXPECT_TRUE(IsRankFileName("rank-00003.safetensors"));
  EXPECT_TRUE(IsRankFileName("rank-1234567.safetensors"));
  EXPECT_FALSE(IsRankFileName("rank-.safetensors"));
  EXPECT_FALSE(IsRankFileName("rank-00003.index.json"));
  EXPECT_FALSE(IsRankFileName("rank-0/../x.safetensors"));
}

// Saves of different sizes through the engine, keeping one step: each
// save from the third on writes over the shard retired two steps before,
// and every committed step verifies and restores to exactly its state.
TEST(Recycle, EverySaveThroughTheEngineVerifiesAndRestores) {
  const ScratchDir dir;
  EngineOptions o;
  o.keep = 1;
  o.chunk_bytes = 1 << 16;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(MakePosixTier("local", dir.path.string()));
  Engine engine(std::move(tiers), o);
  Tier& tier = *engine.tiers()[0];
  std::vector<ino_t> inodes;
  for (int64_t step = 1; step <= 6; ++step) {
    const int64_t scale = 40 + 30 * (step % 3);  // shards of about 0.3-0.7 MB
    engine.Save(
        testing::SliceFor(testing::MakeState(static_cast<uint64_t>(step), scale), step, 0, 1));
    ASSERT_TRUE(engine.Wait().empty()) << "step " << step;
    inodes.push_back(Inode(tier.Where(step, RankFileName(0))));
    ASSERT_TRUE(VerifyCopy(tier, step).empty()) << "step " << step;
    testing::Loaded l = testing::TargetsFor(testing::MakeState(1, scale), 0, 1);
    const std::optional<RestoreResult> r = engine.Restore(l.targets);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->step, step);
    EXPECT_TRUE(testing::Matches(testing::MakeState(static_cast<uint64_t>(step), scale), l, 0, 1))
        << "step " << step << " restored another state";
  }
  for (size_t i = 2; i < inodes.size(); ++i)
    EXPECT_EQ(inodes[i], inodes[i - 2]) << "step " << i + 1 << " did not reuse a retired shard";
}

// Paths under `root` that this process has open.
std::vector<std::string> OpenFilesUnder(const fs::path& root) {
  std::vector<std::string> open;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().starts_with(root.string())) open.push_back(target.string());
  }
  return open;
}

// Two ranks, two tiers, one step kept. Only rank 0 removes steps, so a
// descriptor that rank 1's drain or restore leaves open would keep a
// removed shard's disk space (and, here, its reuse) until the process ends.
TEST(Recycle, NoRankKeepsAShardOpenOnceItsSaveOrRestoreIsDone) {
  const ScratchDir dir;
  std::vector<std::unique_ptr<Engine>> engines;
  for (int rank = 0; rank < 2; ++rank) {
    EngineOptions o;
    o.rank = rank;
    o.world = 2;
    o.keep = 1;
    o.chunk_bytes = 1 << 16;
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(MakePosixTier("local", (dir.path / "local").string()));
    tiers.push_back(MakePosixTier("shared", (dir.path / "shared").string()));
    engines.push_back(std::make_unique<Engine>(std::move(tiers), o));
  }
  const testing::SyntheticState state = testing::MakeState(7, 40);
  for (int64_t step = 1; step <= 4; ++step) {
    for (int rank = 0; rank < 2; ++rank)
      engines[static_cast<size_t>(rank)]->Save(testing::SliceFor(state, step, rank, 2));
    for (auto& e : engines) ASSERT_TRUE(e->Wait().empty()) << "step " << step;
    if (step == 2) {
      testing::Loaded l = testing::TargetsFor(state, 1, 2);
      ASSERT_TRUE(engines[1]->Restore(l.targets).has_value());
    }
  }
  EXPECT_EQ(OpenFilesUnder(dir.path), std::vector<std::string>{});
  for (const char* tier : {"local", "shared"}) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(fs::exists(dir.path / tier / ".recycle" / RankFileName(rank)))
          << tier << ": rank " << rank << "'s retired shard was not kept for reuse";
    }
  }
}

}  // namespace
}  // namespace fmstack::ckpt
