// Live snapshots: the writer reads the caller's memory until Release().
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "ckpt/engine.h"
#include "ckpt/restore.h"
#include "hooked_tier.h"
#include "synthetic.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::HookedTier;
using testing::Loaded;
using testing::MakeState;
using testing::Matches;
using testing::SliceFor;
using testing::SyntheticState;
using testing::TargetsFor;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// A training state laid out as a trainer's: tensors that are views of two
// flat arrays on 4 KiB boundaries (parameters, moments), and one array off
// them by a float (the chunks over it cannot go out without a copy).
struct FlatState {
  static constexpr size_t kParams = 100'000, kMoments = 60'000, kOdd = 9'000;
  std::unique_ptr<float, FreeDeleter> params, moments, odd_base;
  float* odd = nullptr;

  explicit FlatState(uint32_t seed)
      : params(Alloc(kParams)), moments(Alloc(kMoments)), odd_base(Alloc(kOdd + 1)) {
    odd = odd_base.get() + 1;
    Fill(seed);
  }
  static float* Alloc(size_t n) {
    return static_cast<float*>(std::aligned_alloc(4096, (n * sizeof(float) + 4095) / 4096 * 4096));
  }
  void Fill(uint32_t seed) {
    for (size_t i = 0; i < kParams; ++i) params.get()[i] = static_cast<float>(seed * 7 + i);
    for (size_t i = 0; i < kMoments; ++i) moments.get()[i] = static_cast<float>(seed * 11 + i);
    for (size_t i = 0; i < kOdd; ++i) odd[i] = static_cast<float>(seed * 13 + i);
  }
  struct View {
    std::string name;
    const float* data;
    size_t n;
  };
  std::vector<View> Views() const {
    // Parameters split into three tensors; a run continues across them.
    return {{"model.a", params.get(), 30'000},
            {"model.b", params.get() + 30'000, 40'001},
            {"model.c", params.get() + 70'001, kParams - 70'001},
            {"optim.m", moments.get(), kMoments},
            {"optim.odd", odd, kOdd}};
  }
  Snapshot Live(int64_t step) const {
    Snapshot s;
    s.counters.step = step;
    s.live = true;
    for (const View& v : Views()) {
      s.slices.push_back({v.name,
                          DType::kF32,
                          {static_cast<int64_t>(v.n)},
                          0,
                          std::as_bytes(std::span(v.data, v.n))});
    }
    return s;
  }
};

// What a restore of FlatState reads back, to compare with a copy taken at save.
struct FlatCopy {
  std::map<std::string, std::vector<float>> tensors;
  explicit FlatCopy(const FlatState& s) {
    for (const auto& v : s.Views()) tensors[v.name].assign(v.data, v.data + v.n);
  }
};

class LiveSaveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("fmstack-live-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<Tier> Local() const { return MakePosixTier("local", (root_ / "local").string()); }
  std::vector<std::unique_ptr<Tier>> Tiers() const {
    std::vector<std::unique_ptr<Tier>> t;
    t.push_back(Local());
    return t;
  }
  static EngineOptions Options() {
    EngineOptions o;
    o.chunk_bytes = 16384;
    return o;
  }
  // The tensors of `step` as the first tier holds them.
  std::map<std::string, std::vector<float>> Restored(const FlatCopy& like, int64_t step) {
    std::map<std::string, std::vector<float>> got;
    std::vector<TensorTarget> targets;
    for (const auto& [name, t] : like.tensors) {
      auto& buf = got[name];
      buf.assign(t.size(), -1.0f);
      targets.push_back({name, DType::kF32, 0, std::as_writable_bytes(std::span(buf))});
    }
    Engine engine(Tiers(), Options());
    const std::optional<RestoreResult> r = engine.Restore(targets, step);
    if (!r || r->step != step) throw Error(fmt::format("step {} not restored", step));
    EXPECT_TRUE(VerifyCopy(*engine.tiers()[0], step).empty());
    return got;
  }

  fs::path root_;
};

TEST_F(LiveSaveTest, AlignedRunsGoOutWithNoCopyAndChunksAcrossRunsCopyOnlyTheirEdges) {
  FlatState state(1);
  const FlatCopy saved(state);
  SaveTiming t;
  {
    Engine engine(Tiers(), Options());
    const SaveTiming s = engine.Save(state.Live(5));
    // The state and two pads: 1,408 bytes bring the moments to a block of
    // the file, 1,668 bring the odd array 4 bytes past one, as in memory.
    EXPECT_EQ(s.bytes,
              static_cast<int64_t>(
                  4 * (FlatState::kParams + FlatState::kMoments + FlatState::kOdd) + 1408 + 1668));
    engine.Wait();
    EXPECT_EQ(engine.Latest(), 5);
    engine.Release();  // after the commit: nothing left to copy
    state.Fill(2);     // training goes on
    t = engine.TakeTimings().at(0);
  }
  EXPECT_EQ(t.chunks_released, 0);
  // 16 KiB chunks: 24 whole ones of the 400,000 bytes of parameters, 14 of
  // the moments, and the odd array's two go out from the arrays, and so do
  // the two across runs, each but for the block that holds a run's ragged
  // end and the pad after it (split). Nothing is gathered whole.
  EXPECT_EQ(t.chunks_direct, 24 + 14 + 2 + 2) << t.chunks_split << " split";
  EXPECT_EQ(t.chunks_split, 2 + 1);  // and the shard's short last chunk's tail
  EXPECT_EQ(t.chunks_gathered, 0);
  EXPECT_EQ(t.chunks_direct + t.chunks_gathered, (t.bytes + 16383) / 16384);
  EXPECT_EQ(Restored(saved, 5), saved.tensors);
}

// Blocks apart in memory, each where the file has it modulo 4 KiB: a chunk
// of a few goes out from them with no copy, in one write of many parts; a
// chunk of more than the sink writes at once (64) is gathered whole.
TEST_F(LiveSaveTest, AChunkOfBlocksApartIsOneWriteOfPartsUpToALimit) {
  constexpr size_t kBlockFloats = 1024;
  for (const size_t blocks : {size_t{40}, size_t{256}}) {
    std::unique_ptr<float, FreeDeleter> memory(FlatState::Alloc(2 * blocks * kBlockFloats));
    Snapshot snap;
    snap.counters.step = 3;
    snap.live = true;
    std::map<std::string, std::vector<float>> saved;
    for (size_t b = 0; b < blocks; ++b) {
      float* block = memory.get() + 2 * b * kBlockFloats;  // every other block
      for (size_t i = 0; i < kBlockFloats; ++i) block[i] = static_cast<float>(b * 10'000 + i);
      const std::string name = fmt::format("t.{:03}", b);
      saved[name].assign(block, block + kBlockFloats);
      snap.slices.push_back({name,
                             DType::kF32,
                             {static_cast<int64_t>(kBlockFloats)},
                             0,
                             std::as_bytes(std::span(block, kBlockFloats))});
    }
    EngineOptions o;
    o.chunk_bytes = 1 << 20;  // one chunk holds the state
    SaveTiming t;
    {
      Engine engine(Tiers(), o);
      engine.Save(snap);
      engine.Wait();
      engine.Release();
      t = engine.TakeTimings().at(0);
    }
    EXPECT_EQ(t.chunks_direct, blocks <= 64 ? 1 : 0) << blocks << " blocks";
    EXPECT_EQ(t.chunks_split, 0) << blocks << " blocks";
    EXPECT_EQ(t.chunks_gathered, blocks <= 64 ? 0 : 1) << blocks << " blocks";
    std::map<std::string, std::vector<float>> got;
    std::vector<TensorTarget> targets;
    for (const auto& [name, values] : saved) {
      got[name].assign(values.size(), -1.0f);
      targets.push_back({name, DType::kF32, 0, std::as_writable_bytes(std::span(got[name]))});
    }
    Engine engine(Tiers(), o);
    ASSERT_TRUE(engine.Restore(targets, 3).has_value());
    EXPECT_TRUE(got == saved) << blocks << " blocks";
    fs::remove_all(root_);
  }
}

// The shard stays a safetensors file with no holes: the pads are entries of
// their own (U8 zeros) that the manifest does not list, and each run starts
// at the offset that agrees with its address modulo 4 KiB.
TEST_F(LiveSaveTest, PadsAreSafetensorsEntriesThatPutEachRunAtItsAddressModuloABlock) {
  FlatState state(6);
  {
    Engine engine(Tiers(), Options());
    engine.Save(state.Live(3));
    engine.Wait();
  }
  const std::unique_ptr<Tier> tier = Local();
  const std::string path = tier->Where(3, RankFileName(0));
  const auto bytes = static_cast<int64_t>(fs::file_size(path));
  std::string raw(static_cast<size_t>(bytes), '\0');
  tier->Read(3, RankFileName(0), 0, std::span<char>(raw.data(), raw.size()));
  const SafetensorsIndex idx = ParseSafetensorsHeader(raw, path, bytes - 4096);
  EXPECT_EQ(idx.data_offset, 4096);
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& [name, e] : idx.entries) spans.emplace_back(e.begin, e.end);
  std::sort(spans.begin(), spans.end());
  ASSERT_FALSE(spans.empty());
  EXPECT_EQ(spans.front().first, 0);
  EXPECT_EQ(spans.back().second, bytes - idx.data_offset);
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_EQ(spans[i].first, spans[i - 1].second);
  ASSERT_EQ(idx.entries.count("__pad.0"), 1u);
  ASSERT_EQ(idx.entries.count("__pad.1"), 1u);
  EXPECT_EQ(idx.entries.count("__pad.2"), 0u);
  for (const char* pad : {"__pad.0", "__pad.1"}) {
    const SafetensorsEntry& e = idx.entries.at(pad);
    EXPECT_EQ(e.dtype, DType::kU8);
    EXPECT_EQ(e.shape, std::vector<int64_t>{e.end - e.begin});
    for (int64_t b = e.begin; b < e.end; ++b) ASSERT_EQ(raw[static_cast<size_t>(4096 + b)], 0);
  }
  for (const auto& v : state.Views()) {
    const auto address = reinterpret_cast<uintptr_t>(v.data) % 4096;
    EXPECT_EQ(static_cast<uintptr_t>(idx.entries.at(v.name).begin) % 4096, address) << v.name;
  }
  const Manifest m = ReadManifest(*tier, 3);
  EXPECT_EQ(m.tensors.size(), state.Views().size());
  EXPECT_TRUE(VerifyCopy(*tier, 3).empty());
}

TEST_F(LiveSaveTest, ATensorNamedLikeAPadIsRefused) {
  FlatState state(2);
  Snapshot snap = state.Live(1);
  snap.slices[1].name = "__pad.7";
  Engine engine(Tiers(), Options());
  try {
    engine.Save(snap);
    FAIL() << "saved a tensor named __pad.7";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor \"__pad.7\""), std::string::npos) << e.what();
  }
}

TEST_F(LiveSaveTest, ReleaseCopiesWhatTheWriterHasNotTakenAndWaitsForWhatItReads) {
  FlatState state(3);
  const FlatCopy saved(state);
  // The writer stops inside its fourth write (the header, then chunks)
  // until the gate opens.
  std::mutex mu;
  std::condition_variable cv;
  int writes = 0;
  bool open = false;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<HookedTier>(Local(), "local", [&] {
    std::unique_lock lock(mu);
    if (++writes == 4) cv.notify_all();
    cv.wait(lock, [&] { return open || writes < 4; });
  }));
  Engine engine(std::move(tiers), Options());
  engine.Save(state.Live(7));
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return writes >= 4; });
  }
  std::atomic<bool> released{false}, opened{false};
  std::thread training([&] {
    engine.Release();
    released = true;
    EXPECT_TRUE(opened.load());  // it waited for the write that read the memory
    state.Fill(4);               // the optimizer step
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(released.load());
  {
    const std::lock_guard lock(mu);
    opened = open = true;
  }
  cv.notify_all();
  training.join();
  engine.Wait();
  const SaveTiming t = engine.TakeTimings().at(0);
  EXPECT_EQ(t.chunks_direct + t.chunks_gathered, 3);  // taken before the gate
  EXPECT_EQ(t.chunks_released, (t.bytes + 16383) / 16384 - 3);
  EXPECT_EQ(Restored(saved, 7), saved.tensors);
}

TEST_F(LiveSaveTest, AReleaseThatOutwaitsTheWriteTimeoutAbandonsTheSave) {
  FlatState state(5);
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> writes{0};
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(std::make_unique<HookedTier>(Local(), "local", [&] {
    if (++writes < 3) return;
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open; });
  }));
  EngineOptions o = Options();
  o.write_timeout_seconds = 0.3;
  Engine engine(std::move(tiers), o);
  engine.Save(state.Live(9));
  while (writes < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  try {
    engine.Release();
    ADD_FAILURE() << "Release() returned while the disk held a write from the memory";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step-00000009"), std::string::npos) << what;
    EXPECT_NE(what.find("local"), std::string::npos) << what;
    EXPECT_NE(what.find("rank-00000.safetensors"), std::string::npos) << what;
  }
  {
    const std::lock_guard lock(mu);
    open = true;
  }
  cv.notify_all();
  engine.Wait();
  EXPECT_EQ(engine.Latest(), std::nullopt);  // nothing torn was committed
}

TEST_F(LiveSaveTest, TheNextSaveAndTheDestructorReleaseAPendingOne) {
  const SyntheticState other = MakeState(8, 20);
  FlatState state(6);
  const FlatCopy first(state);
  {
    Engine engine(Tiers(), Options());
    engine.Save(state.Live(1));
    engine.Save(SliceFor(other, 2, 0, 1));  // releases step 1's memory first
    state.Fill(7);
    const FlatCopy second(state);
    engine.Save(state.Live(3));
  }  // the destructor releases step 3's before the state goes
  EXPECT_EQ(Restored(first, 1), first.tensors);
  Engine engine(Tiers(), Options());
  Loaded l = TargetsFor(other, 0, 1);
  ASSERT_TRUE(engine.Restore(l.targets, 2).has_value());
  EXPECT_TRUE(Matches(other, l, 0, 1));
}

TEST_F(LiveSaveTest, AStateOfManySmallSlicesIsExact) {
  const SyntheticState state = MakeState(10, 40);  // fp32 and bf16, odd sizes
  Snapshot snap = SliceFor(state, 4, 0, 1);
  snap.live = true;
  {
    Engine engine(Tiers(), Options());
    engine.Save(snap);
    engine.Wait();
    // The two largest tensors are padded to their addresses, and their
    // inner chunks go out with no copy; the small ones are gathered.
    const SaveTiming t = engine.TakeTimings().at(0);
    EXPECT_GT(t.chunks_direct, 0);
    EXPECT_GT(t.chunks_gathered, 0);
  }
  Engine engine(Tiers(), Options());
  Loaded l = TargetsFor(state, 0, 1);
  ASSERT_TRUE(engine.Restore(l.targets).has_value());
  EXPECT_TRUE(Matches(state, l, 0, 1));
  EXPECT_TRUE(VerifyCopy(*engine.tiers()[0], 4).empty());
}

}  // namespace
}  // namespace fmstack::ckpt
