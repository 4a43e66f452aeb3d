#include "ckpt/engine.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "ckpt/restore.h"
#include "ckpt/staging_copy.h"
#include "ckpt/stream_reader.h"
#include "synthetic.h"
#include "util/error.h"
#include "util/huge_pages.h"
#include "util/random.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Loaded;
using testing::MakeState;
using testing::Matches;
using testing::SliceFor;
using testing::SyntheticState;
using testing::SyntheticTensor;
using testing::TargetsFor;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterized test's name has a '/' ("Name/2to1"): one directory,
    // not a parent that TearDown would leave behind.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    root_ = fs::temp_directory_path() / fmt::format("fmstack-ckpt-{}-{}", ::getpid(), name);
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Root(const std::string& tier) const { return (root_ / tier).string(); }

  // Rank 0's file of `state` saved as step 2 of a world of one, read whole.
  std::vector<char> SavedRankFile(const SyntheticState& state, Tier& tier) {
    SaveAsWorld(state, 2, 1);
    std::vector<char> whole(static_cast<size_t>(*tier.Size(2, RankFileName(0))));
    tier.Read(2, RankFileName(0), 0, whole);
    return whole;
  }

  std::vector<std::unique_ptr<Tier>> Tiers(int n = 1) const {
    static const char* kNames[] = {"local", "shared", "archive"};
    std::vector<std::unique_ptr<Tier>> t;
    for (int i = 0; i < n; ++i) t.push_back(MakePosixTier(kNames[i], Root(kNames[i])));
    return t;
  }

  EngineOptions Options(int rank = 0, int world = 1) {
    EngineOptions o;
    o.rank = rank;
    o.world = world;
    o.chunk_bytes = 4096;
    o.log = [this](const std::string& line) {
      const std::lock_guard lock(log_mu_);
      log_.push_back(line);
    };
    return o;
  }

  std::string LogText() {
    const std::lock_guard lock(log_mu_);
    std::string all;
    for (const auto& l : log_) all += l + "\n";
    return all;
  }

  // Saves `state` as `world` ranks, one engine each, all tiers drained.
  void SaveAsWorld(const SyntheticState& state, int64_t step, int world, int tiers = 1) {
    std::vector<std::unique_ptr<Engine>> engines;
    for (int r = 0; r < world; ++r)
      engines.push_back(std::make_unique<Engine>(Tiers(tiers), Options(r, world)));
    for (int r = 0; r < world; ++r)
      engines[static_cast<size_t>(r)]->Save(SliceFor(state, step, r, world));
    for (auto& e : engines) e->Wait();
  }

  fs::path root_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
};

TEST_F(EngineTest, RoundTripIsBitExactForF32AndBf16) {
  const SyntheticState state = MakeState(1, 40);  // ~200 KB: many 4 KiB chunks
  {
    Engine engine(Tiers(), Options());
    const SaveTiming t = engine.Save(SliceFor(state, 100, 0, 1));
    EXPECT_GT(t.bytes, 0);
    engine.Wait();
    EXPECT_EQ(engine.Latest(), 100);
  }
  Engine engine(Tiers(), Options());
  Loaded l = TargetsFor(state, 0, 1);
  const std::optional<RestoreResult> r = engine.Restore(l.targets);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 100);
  EXPECT_EQ(r->manifest.counters.data_position, 100000);
  EXPECT_EQ(r->manifest.counters.rng, 0xabcdefu + 100);
  EXPECT_TRUE(Matches(state, l, 0, 1));
  EXPECT_TRUE(VerifyCopy(*engine.tiers()[0], 100).empty());
}

TEST_F(EngineTest, ShardIsAValidSafetensorsFile) {
  const SyntheticState state = MakeState(2);
  SaveAsWorld(state, 5, 1);
  const std::string path = Root("local") + "/step-00000005/rank-00000.safetensors";
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const SafetensorsIndex idx = ParseSafetensorsHeader(bytes, path);
  EXPECT_EQ(idx.data_offset % 4096, 0);
  const SafetensorsEntry& e = idx.entries.at("model.odd");
  EXPECT_EQ(e.dtype, DType::kBF16);
  EXPECT_EQ(e.shape, (std::vector<int64_t>{3, 5, 7}));
  const auto& want = state.tensors.at("model.odd").bytes;
  ASSERT_EQ(e.end - e.begin, static_cast<int64_t>(want.size()));
  EXPECT_EQ(std::memcmp(bytes.data() + idx.data_offset + e.begin, want.data(), want.size()), 0);
  // Entries tile the data region with no holes, as safetensors requires.
  int64_t covered = 0;
  for (const auto& [n, x] : idx.entries) covered += x.end - x.begin;
  EXPECT_EQ(idx.data_offset + covered, static_cast<int64_t>(bytes.size()));
}

struct ReshardCase {
  int from, to;
};
class ReshardTest : public EngineTest, public ::testing::WithParamInterface<ReshardCase> {};

TEST_P(ReshardTest, LoadedShardsEqualTheOriginalBitForBit) {
  const auto [from, to] = GetParam();
  const SyntheticState state = MakeState(3, 7);
  SaveAsWorld(state, 10, from);
  for (int r = 0; r < to; ++r) {
    std::vector<std::unique_ptr<Tier>> tiers = Tiers();
    Loaded l = TargetsFor(state, r, to);
    int64_t read = 0;
    const Manifest m = ReadCopy(*tiers[0], 10, l.targets, &read);
    EXPECT_EQ(m.layout.world, from);
    EXPECT_TRUE(Matches(state, l, r, to)) << from << "->" << to << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Zero1, ReshardTest,
                         ::testing::Values(ReshardCase{2, 1}, ReshardCase{1, 2}, ReshardCase{2, 3},
                                           ReshardCase{4, 3}, ReshardCase{3, 5}, ReshardCase{5, 2}),
                         [](const ::testing::TestParamInfo<ReshardCase>& c) {
                           return fmt::format("{}to{}", c.param.from, c.param.to);
                         });

TEST_F(EngineTest, ReshardReadsEachByteOnce) {
  const SyntheticState state = MakeState(4, 200);
  SaveAsWorld(state, 1, 3);
  int64_t total = 0, data = 0;
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  for (const auto& [name, f] : ReadManifest(*tiers[0], 1).files) data += f.size - f.data_offset;
  Loaded l = TargetsFor(state, 0, 1);
  ReadCopy(*tiers[0], 1, l.targets, &total);
  EXPECT_TRUE(Matches(state, l, 0, 1));
  // Whole-state load: exactly the data regions (pads and all), each chunk once.
  EXPECT_EQ(total, data);
}

// The same files seen as a remote tier: restore then takes the streamed
// path (one reader thread, in order, copies out of a ring), the reference
// that the parallel chunk reads of a local tier must agree with.
class RemoteView final : public Tier {
 public:
  explicit RemoteView(Tier& inner) : inner_(inner) {}
  const std::string& name() const override { return inner_.name(); }
  std::string Where(int64_t step, const std::string& file) const override {
    return inner_.Where(step, file);
  }
  std::unique_ptr<Sink> Create(int64_t step, const std::string& file) override {
    return inner_.Create(step, file);
  }
  void PutSmall(int64_t step, const std::string& f, const std::string& t) override {
    inner_.PutSmall(step, f, t);
  }
  void Commit(int64_t step) override { inner_.Commit(step); }
  std::vector<StepListing> List() override { return inner_.List(); }
  std::optional<std::string> ReadSmall(int64_t step, const std::string& f) override {
    return inner_.ReadSmall(step, f);
  }
  std::optional<int64_t> Size(int64_t step, const std::string& f) override {
    return inner_.Size(step, f);
  }
  void Read(int64_t step, const std::string& f, int64_t o, std::span<char> out) override {
    inner_.Read(step, f, o, out);
  }
  void Remove(int64_t step) override { inner_.Remove(step); }
  bool local_reads() const override { return false; }

 private:
  Tier& inner_;
};

TEST_F(EngineTest, ParallelAndStreamedReadsAgree) {
  // Chunks of 4 KiB and tensors from 2 bytes to ~80 KB, saved by 3 ranks:
  // pieces end at chunk edges, at tensor edges and mid-chunk.
  const SyntheticState state = MakeState(6, 800);
  SaveAsWorld(state, 3, 3);
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  Tier& local = *tiers[0];
  ASSERT_TRUE(local.local_reads());
  RemoteView remote(local);
  for (const int to : {1, 2, 5}) {
    for (int r = 0; r < to; ++r) {
      Loaded parallel = TargetsFor(state, r, to), streamed = TargetsFor(state, r, to);
      // Two targets that want the same bytes, starting mid-chunk.
      const SyntheticTensor& t = state.tensors.at("optim.exp_avg");
      std::vector<std::byte> again_a(4 * 700), again_b(4 * 700);
      parallel.targets.push_back({"optim.exp_avg", t.dtype, 313, again_a});
      streamed.targets.push_back({"optim.exp_avg", t.dtype, 313, again_b});
      parallel.targets.push_back({"optim.exp_avg", t.dtype, 313, again_a});
      int64_t read_a = 0, read_b = 0;
      ReadCopy(local, 3, parallel.targets, &read_a);
      ReadCopy(remote, 3, streamed.targets, &read_b);
      EXPECT_TRUE(Matches(state, parallel, r, to)) << "parallel, rank " << r << " of " << to;
      EXPECT_TRUE(Matches(state, streamed, r, to)) << "streamed, rank " << r << " of " << to;
      EXPECT_EQ(std::memcmp(again_a.data(), t.bytes.data() + 4 * 313, again_a.size()), 0);
      EXPECT_EQ(again_a, again_b);
      EXPECT_EQ(read_a, read_b);
    }
  }
  EXPECT_TRUE(VerifyCopy(local, 3).empty());
  EXPECT_TRUE(VerifyCopy(remote, 3).empty());

  // Flipped bytes in two chunks: both ways refuse the copy naming the
  // earlier chunk, however the parallel readers happen to finish.
  const std::string shard = local.Where(3, RankFileName(1));
  for (const int64_t from_end : {5000, 60000}) {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-from_end, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(-from_end, std::ios::end);
    f.write(&c, 1);
  }
  Loaded a = TargetsFor(state, 0, 1), b = TargetsFor(state, 0, 1);
  std::string error_a, error_b;
  try {
    ReadCopy(local, 3, a.targets);
  } catch (const Error& e) {
    error_a = e.what();
  }
  try {
    ReadCopy(remote, 3, b.targets);
  } catch (const Error& e) {
    error_b = e.what();
  }
  EXPECT_NE(error_a.find("checksum mismatch in chunk"), std::string::npos) << error_a;
  EXPECT_EQ(error_a, error_b);
  EXPECT_EQ(VerifyCopy(local, 3), VerifyCopy(remote, 3));
}

// The bytes a placement names are read straight into it and handed to fn
// as pieces of it; the others go through the worker's buffer. Either way fn
// sees the file's bytes, in order within each chunk.
TEST_F(EngineTest, PlacedPiecesAreReadStraightIntoTheirSpan) {
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  const std::string file = RankFileName(0);
  const std::vector<char> whole = SavedRankFile(MakeState(3, 900), *tiers[0]);
  const auto size = static_cast<int64_t>(whole.size());
  // Chunks of 20 KiB, pieces of 4 KiB: the pieces at a multiple of 8 KiB
  // are placed, the rest not, nor the file's short last piece (under the
  // 4 KiB a buffered reader reads into the caller's memory).
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t p = 0; p < size; p += 20480) chunks.emplace_back(p, std::min(size, p + 20480));
  std::vector<char> placed(whole.size()), seen(whole.size());
  std::mutex mu;
  int64_t straight = 0, buffered = 0;
  RemoteView through_the_cache(*tiers[0]);  // its reader is buffered: reads of 4 KiB
  ReadChunksInParallel(
      through_the_cache, 2, file, 0, chunks, 3, 4096,
      [&](int, int64_t pos, std::span<const char> bytes) {
        const std::lock_guard lock(mu);
        const bool in_place = bytes.data() == placed.data() + pos;
        EXPECT_EQ(in_place, pos % 8192 == 0 && bytes.size() == 4096) << "piece at " << pos;
        (in_place ? straight : buffered) += 1;
        std::memcpy(seen.data() + pos, bytes.data(), bytes.size());
      },
      [&](int64_t pos, int64_t n) {
        if (pos % 8192 != 0) return Placement{nullptr, std::min(n, 8192 - pos % 8192)};
        return Placement{placed.data() + pos, std::min<int64_t>(n, 4096)};
      });
  EXPECT_EQ(seen, whole);
  EXPECT_GT(straight, 10);
  EXPECT_GT(buffered, 10);
}

// A direct reader takes the whole aligned blocks of a placement straight
// into it and reads the bytes around them (a placement's ragged edges, the
// bytes no placement names) into its buffer, within the same read.
TEST_F(EngineTest, ADirectReaderReadsAPlacementsAlignedBlocksStraightIn) {
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  const std::string file = RankFileName(0);
  const std::vector<char> whole = SavedRankFile(MakeState(5, 3000), *tiers[0]);
  const auto size = static_cast<int64_t>(whole.size());
  const size_t direct = tiers[0]->OpenReader(2, file)->direct_alignment();
  ASSERT_TRUE(direct == 0 || direct == 4096) << direct;
  // Placements of 10,000 bytes from every multiple of 10,000, after a hole
  // of 100 bytes that no placement names; byte x goes to placed + x.
  constexpr int64_t kChunk = 64 << 10, kPiece = 16 << 10;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t p = 0; p < size; p += kChunk) chunks.emplace_back(p, std::min(size, p + kChunk));
  const HugeFloats placed_floats(static_cast<size_t>(size) / sizeof(float) + 1);
  char* const placed = const_cast<char*>(reinterpret_cast<const char*>(placed_floats.data()));
  std::vector<char> seen(whole.size());
  std::mutex mu;
  int64_t straight = 0, copied = 0;
  ReadChunksInParallel(
      *tiers[0], 2, file, 0, chunks, 3, kPiece,
      [&](int, int64_t pos, std::span<const char> bytes) {
        const std::lock_guard lock(mu);
        EXPECT_LE(static_cast<int64_t>(bytes.size()), kPiece);
        const bool in_place = bytes.data() == placed + pos;
        if (in_place && direct > 0) {  // whole blocks, none in a hole
          EXPECT_EQ(pos % 4096, 0);
          EXPECT_TRUE(bytes.size() % 4096 == 0 || pos + static_cast<int64_t>(bytes.size()) == size);
          EXPECT_GE(pos % 10000, 100);
          EXPECT_LE((pos + static_cast<int64_t>(bytes.size()) - 1) / 10000, pos / 10000);
        }
        (in_place ? straight : copied) += static_cast<int64_t>(bytes.size());
        std::memcpy(seen.data() + pos, bytes.data(), bytes.size());
      },
      [&](int64_t pos, int64_t n) {
        const int64_t in = pos % 10000;
        if (in < 100) return Placement{nullptr, std::min(n, 100 - in)};
        return Placement{placed + pos, std::min(n, 10000 - in)};
      });
  EXPECT_EQ(seen, whole);
  if (direct == 0) {  // a file system without O_DIRECT: placements whole (4 KiB or more)
    EXPECT_GT(straight, size / 2);
    return;
  }
  // Each placement of 9,900 bytes holds at least one whole aligned block.
  EXPECT_GT(straight, size / 10);
  EXPECT_GT(copied, size / 10);
}

// A reader past the page cache (the POSIX tier's, where the file system
// takes O_DIRECT) reads whole chunks at once; fn still gets pieces of at
// most piece_bytes, in order, and a read goes straight into a place that is
// aligned for it, through the worker's buffer into one that is not.
TEST_F(EngineTest, ADirectReaderReadsWholeChunksAndCopiesIntoMisalignedPlaces) {
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  const std::string file = RankFileName(0);
  const std::vector<char> whole = SavedRankFile(MakeState(4, 3000), *tiers[0]);
  const auto size = static_cast<int64_t>(whole.size());
  const size_t direct = tiers[0]->OpenReader(2, file)->direct_alignment();
  ASSERT_TRUE(direct == 0 || direct == 4096) << direct;
  // Chunks of 64 KiB, the last one short; pieces of 4 KiB. Even chunks are
  // placed at an aligned address, odd ones 4 bytes past one.
  constexpr int64_t kChunk = 64 << 10, kPiece = 4096;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t p = 0; p < size; p += kChunk) chunks.emplace_back(p, std::min(size, p + kChunk));
  ASSERT_GT(chunks.size(), 4u);
  const HugeFloats placed_floats(static_cast<size_t>(size + 2 * kPiece) / sizeof(float) + 1);
  char* const placed = const_cast<char*>(reinterpret_cast<const char*>(placed_floats.data()));
  std::vector<char> seen(whole.size());
  std::mutex mu;
  int64_t largest_read = 0, straight = 0, copied = 0;
  const auto shift = [&](int64_t pos) { return (pos / kChunk) % 2 == 0 ? 0 : 4; };
  ReadChunksInParallel(
      *tiers[0], 2, file, 0, chunks, 3, kPiece,
      [&](int, int64_t pos, std::span<const char> bytes) {
        const std::lock_guard lock(mu);
        EXPECT_LE(static_cast<int64_t>(bytes.size()), kPiece);
        (bytes.data() == placed + pos + shift(pos) ? straight : copied) += 1;
        std::memcpy(seen.data() + pos, bytes.data(), bytes.size());
      },
      [&](int64_t pos, int64_t n) {
        const std::lock_guard lock(mu);
        largest_read = std::max(largest_read, n);
        return Placement{placed + pos + shift(pos), n};
      });
  EXPECT_EQ(seen, whole);
  if (direct == 0) {  // a file system without O_DIRECT: pieces read one by one, all in place
    EXPECT_EQ(largest_read, kPiece);
    EXPECT_EQ(copied, 0);
    return;
  }
  EXPECT_EQ(largest_read, kChunk);
  EXPECT_GT(straight, 10);
  EXPECT_GT(copied, 10);
}

// Copies sources of `sizes` into slots of `slot` bytes on 1, 2, 3 and 8
// threads: the bytes must land as one stream, whatever the split, and
// nothing past the stream's end is written.
void ExpectConcatenationInSlots(const std::vector<size_t>& sizes, int64_t slot) {
  Rng rng(11);
  std::vector<std::vector<std::byte>> data;
  for (const size_t n : sizes) {
    std::vector<std::byte> v(n);
    for (auto& b : v) b = static_cast<std::byte>(rng.Next() & 0xff);
    data.push_back(std::move(v));
  }
  std::vector<std::span<const std::byte>> sources;
  std::vector<std::byte> want;
  for (const auto& v : data) {
    sources.emplace_back(v);
    want.insert(want.end(), v.begin(), v.end());
  }
  const size_t n_slots = (want.size() + slot - 1) / slot;
  for (const int threads : {1, 2, 3, 8}) {
    std::vector<std::vector<char>> slots(n_slots, std::vector<char>(slot, 'x'));
    std::vector<char*> to;
    for (auto& s : slots) to.push_back(s.data());
    CopyToSlots(sources, to, slot, threads);
    std::vector<std::byte> got;
    for (const auto& s : slots) {
      for (const char c : s) got.push_back(static_cast<std::byte>(c));
    }
    got.resize(want.size());
    EXPECT_EQ(got, want) << threads << " threads";
    EXPECT_EQ(slots.back()[want.size() % slot], 'x') << threads << " threads";
  }
}

TEST(StagingCopy, EveryThreadCountFillsTheSlotsWithTheConcatenation) {
  // Odd sizes, one empty, one spanning several slots of 4 KiB.
  ExpectConcatenationInSlots({1, 4095, 0, 9000, 17, 6001}, 4096);
}

TEST(StagingCopy, ThreadsTakingRunsOfSlotsInTurnFillThemAll) {
  // About 15 MiB in 64 KiB slots: the threads take several runs of slots
  // each (4 MiB at a time), with tensors across the runs' edges.
  ExpectConcatenationInSlots({(3 << 20) + 5, 0, (7 << 20) - 3, 1, 5 << 20, 3}, 64 << 10);
}

// Save() blocks on the copy with the process's CPUs idle: it takes as many
// threads as there are CPUs, never fewer than two (one core does not
// saturate memory) nor more than kMaxCopyThreads.
TEST(CopyThreads, FollowTheCpusFromTwoToTheCap) {
  EXPECT_EQ(CopyThreadsFor(1), 2);
  EXPECT_EQ(CopyThreadsFor(2), 2);
  EXPECT_EQ(CopyThreadsFor(5), 5);
  EXPECT_EQ(CopyThreadsFor(kMaxCopyThreads + 56), kMaxCopyThreads);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  EXPECT_EQ(DefaultCopyThreads(), CopyThreadsFor(CPU_COUNT(&allowed)));
  EXPECT_EQ(EngineOptions{}.copy_threads, DefaultCopyThreads());
}

TEST_F(EngineTest, SavesWithOneOrManyCopyThreadsWriteTheSameFile) {
  const SyntheticState state = MakeState(8, 90);
  std::vector<std::string> files;
  for (const int threads : {1, 3}) {
    fs::remove_all(root_);
    EngineOptions o = Options();
    o.copy_threads = threads;
    Engine engine(Tiers(), o);
    engine.Save(SliceFor(state, 2, 0, 1));
    engine.Wait();
    std::ifstream f(Root("local") + "/step-00000002/rank-00000.safetensors", std::ios::binary);
    files.emplace_back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  EXPECT_GT(files[0].size(), 4096u * 8);
  EXPECT_EQ(files[0], files[1]);
}

TEST_F(EngineTest, DrainsEveryTierAndKeepsTheNewestK) {
  {
    EngineOptions o = Options();
    o.keep = 2;
    Engine engine(Tiers(3), o);
    for (int64_t step = 1; step <= 5; ++step) {
      engine.Save(SliceFor(MakeState(static_cast<uint64_t>(step)), step, 0, 1));
      engine.Wait();
    }
  }
  for (const char* t : {"local", "shared", "archive"}) {
    std::vector<int64_t> steps;
    for (const StepListing& s : MakePosixTier(t, Root(t))->List()) {
      EXPECT_TRUE(s.committed);
      steps.push_back(s.step);
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{4, 5})) << t;
  }
}

TEST_F(EngineTest, SmallPoolStreamsTheSnapshot) {
  const SyntheticState state = MakeState(5, 100);
  EngineOptions o = Options();
  o.pool_bytes = 2 * 4096;
  {
    Engine engine(Tiers(), o);
    engine.Save(SliceFor(state, 3, 0, 1));
    EXPECT_EQ(engine.pool_bytes(), 2 * 4096);
    engine.Wait();
  }
  Engine engine(Tiers(), Options());
  Loaded l = TargetsFor(state, 0, 1);
  ASSERT_TRUE(engine.Restore(l.targets).has_value());
  EXPECT_TRUE(Matches(state, l, 0, 1));
}

// Slots of 2 MiB and more sit on huge pages (staging_pool.h says why) where
// the kernel allows them; with THP "never", on ordinary pages.
TEST_F(EngineTest, TheStagingPoolIsOnHugePagesWhereTheKernelAllowsThem) {
  EngineOptions o = Options();
  o.chunk_bytes = 8 << 20;
  o.pool_bytes = 4 * o.chunk_bytes;
  const int64_t before = ProcessHugePageBytes();
  ASSERT_GE(before, 0) << "/proc/self/smaps_rollup has no AnonHugePages line";
  Engine engine(Tiers(), o);
  engine.Reserve(o.pool_bytes);
  ASSERT_EQ(engine.pool_bytes(), o.pool_bytes);
  const int64_t gained = ProcessHugePageBytes() - before;
  const std::string mode = HugePagesMode();
  if (mode == "always" || mode == "madvise") {
    EXPECT_GE(gained, o.chunk_bytes) << "THP mode " << mode;
  } else {
    EXPECT_EQ(gained, 0) << "THP mode " << mode;
  }
}

// The writer keeps slots in flight while it takes the next; with one slot
// in the pool the copy waits for that very slot, so the writer must hand it
// back before it waits for the next.
TEST_F(EngineTest, OneSlotPoolStreamsTheSnapshot) {
  const SyntheticState state = MakeState(5, 1000);  // 18 MB
  EngineOptions o = Options();
  o.chunk_bytes = 1 << 20;  // slow enough to write that one is still in flight when the next comes
  o.pool_bytes = o.chunk_bytes;
  o.slot_timeout_seconds = 20;
  {
    Engine engine(Tiers(), o);
    engine.Save(SliceFor(state, 3, 0, 1));
    EXPECT_EQ(engine.pool_bytes(), o.chunk_bytes);
    engine.Wait();
  }
  Engine engine(Tiers(), Options());
  Loaded l = TargetsFor(state, 0, 1);
  ASSERT_TRUE(engine.Restore(l.targets).has_value());
  EXPECT_TRUE(Matches(state, l, 0, 1));
}

TEST_F(EngineTest, IncompleteStepsAreCollectedOnStart) {
  SaveAsWorld(MakeState(6), 1, 1);
  fs::create_directories(Root("local") + "/step-00000002");
  std::ofstream(Root("local") + "/step-00000002/rank-00000.safetensors") << "partial";
  Engine engine(Tiers(), Options());
  EXPECT_FALSE(fs::exists(Root("local") + "/step-00000002"));
  EXPECT_TRUE(fs::exists(Root("local") + "/step-00000001/COMMITTED"));
  EXPECT_NE(LogText().find("removed incomplete step-00000002"), std::string::npos);
}

TEST_F(EngineTest, WrongShapeIsAClearError) {
  SaveAsWorld(MakeState(7), 1, 1);
  std::vector<std::unique_ptr<Tier>> tiers = Tiers();
  std::vector<std::byte> buf(4 * 5000);
  const TensorTarget t{"optim.exp_avg", DType::kF32, 0, buf};
  try {
    ReadCopy(*tiers[0], 1, std::span(&t, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"optim.exp_avg\" is F32 with 1013 elements"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fmstack::ckpt
