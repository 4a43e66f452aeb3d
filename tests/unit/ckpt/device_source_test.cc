// Snapshots whose tensors live in device memory (ckpt::DeviceSource). No
// accelerator here, so the "device" is a host arena that the source copies
// from with memcpy, checking what a real device's copy engine needs: every
// destination inside a slot the engine pinned, and the pins undone before the
// pool is freed. The CUDA source itself runs in the device bundle
// (scripts/device-bundle.sh: fmstack train stopped and resumed on a GPU).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "ckpt/engine.h"
#include "ckpt/staging_copy.h"
#include "synthetic.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::MakeState;
using testing::SliceFor;
using testing::SyntheticState;

struct SourceLog {
  std::map<const char*, size_t> pinned;  // start -> bytes
  int pins = 0, unpins = 0, calls = 0;
  std::vector<DeviceSource::Copy> copies;
  std::vector<std::string> errors;
};

class ArenaSource final : public DeviceSource {
 public:
  explicit ArenaSource(SourceLog& log, int fail_on_call = 0)
      : log_(log), fail_on_call_(fail_on_call) {}
  void Pin(std::span<char> host) override {
    ++log_.pins;
    log_.pinned[host.data()] = host.size();
  }
  void Unpin(std::span<char> host) noexcept override {
    ++log_.unpins;
    log_.pinned.erase(host.data());
  }
  void CopyToHost(std::span<const Copy> copies) override {
    if (++log_.calls == fail_on_call_)
      throw Error("CUDA: an illegal memory access was encountered");
    for (const Copy& c : copies) {
      if (!InsideOnePinnedRegion(c)) {
        log_.errors.push_back(fmt::format("copy of {} bytes to an unpinned address", c.bytes));
      }
      std::memcpy(c.to, c.from, c.bytes);
      log_.copies.push_back(c);
    }
  }

 private:
  bool InsideOnePinnedRegion(const Copy& c) const {
    auto it = log_.pinned.upper_bound(c.to);
    if (it == log_.pinned.begin()) return false;
    --it;
    return c.to + c.bytes <= it->first + it->second;
  }
  SourceLog& log_;
  int fail_on_call_;  // 0: never
};

class DeviceSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("fmstack-devsrc-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Saves `snap` as step `step` with a pool of `pool_bytes` (0: the whole
  // state) and returns the rank's shard file.
  std::string SaveAndRead(const Snapshot& snap, int64_t pool_bytes = 0) {
    fs::remove_all(root_);
    EngineOptions o;
    o.chunk_bytes = 4096;
    o.pool_bytes = pool_bytes;
    {
      std::vector<std::unique_ptr<Tier>> tiers;
      tiers.push_back(MakePosixTier("local", root_.string()));
      Engine engine(std::move(tiers), o);
      engine.Save(snap);
      engine.Wait();
    }
    const fs::path file =
        root_ / fmt::format("step-{:08d}", snap.counters.step) / "rank-00000.safetensors";
    std::ifstream f(file, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }

  fs::path root_;
};

// Marks every slice with an index in `which` (all when empty) as on the
// device, reading it from a copy of its bytes in `arena` instead: apart
// from one another, each at its address modulo 4 KiB, which is what the
// shard's padding follows (a device snapshot then writes the same file).
Snapshot OnDevice(Snapshot snap, std::vector<std::byte>& arena, SourceLog& log,
                  const std::vector<size_t>& which = {}, int fail_on_call = 0) {
  size_t total = 0;
  for (const TensorSlice& s : snap.slices) total += s.data.size() + 8192;
  arena.assign(total, std::byte{0});
  size_t at = 0;
  for (size_t i = 0; i < snap.slices.size(); ++i) {
    TensorSlice& s = snap.slices[i];
    if (!which.empty() && std::find(which.begin(), which.end(), i) == which.end()) continue;
    const auto want = reinterpret_cast<uintptr_t>(s.data.data()) % 4096;
    at += 4096;  // never continuing the slice before it
    at += (want + 4096 - reinterpret_cast<uintptr_t>(arena.data() + at) % 4096) % 4096;
    std::memcpy(arena.data() + at, s.data.data(), s.data.size());
    s.data = std::span(arena).subspan(at, s.data.size());
    s.on_device = true;
    at += s.data.size();
  }
  snap.device = std::make_shared<ArenaSource>(log, fail_on_call);
  return snap;
}

TEST_F(DeviceSourceTest, ADeviceSnapshotWritesTheSameFileAsTheHostOne) {
  const SyntheticState state = MakeState(21, 40);
  const Snapshot host = SliceFor(state, 3, 0, 1);
  const std::string want = SaveAndRead(host);
  ASSERT_GT(want.size(), 4096u * 8);

  for (const bool all : {true, false}) {
    SourceLog log;
    std::vector<std::byte> arena;
    const Snapshot dev =
        OnDevice(host, arena, log, all ? std::vector<size_t>{} : std::vector<size_t>{0, 2, 5, 7});
    EXPECT_EQ(SaveAndRead(dev), want) << (all ? "all" : "some") << " slices on the device";
    EXPECT_EQ(log.calls, 1) << "one batch of copies per save";
    EXPECT_TRUE(log.errors.empty()) << log.errors.front();
    const int slots = static_cast<int>((want.size() + 4095) / 4096);  // header rounds up
    EXPECT_GE(log.pins, slots - 1);
    EXPECT_EQ(log.pins, log.unpins) << "every pinned slot unpinned before the pool is freed";
    EXPECT_TRUE(log.pinned.empty());
  }
}

TEST_F(DeviceSourceTest, AStreamingSaveCopiesFromTheDeviceSlotBySlot) {
  const SyntheticState state = MakeState(22, 40);
  const Snapshot host = SliceFor(state, 4, 0, 1);
  const std::string want = SaveAndRead(host, 3 * 4096);
  SourceLog log;
  std::vector<std::byte> arena;
  EXPECT_EQ(SaveAndRead(OnDevice(host, arena, log), 3 * 4096), want);
  EXPECT_GT(log.calls, 3);
  EXPECT_EQ(log.pins, 3);
  EXPECT_EQ(log.unpins, 3);
  EXPECT_TRUE(log.errors.empty()) << log.errors.front();
}

TEST_F(DeviceSourceTest, ADeviceSliceWithoutASourceIsRefusedAndEarlierStepsStay) {
  const SyntheticState state = MakeState(23);
  EngineOptions o;
  o.chunk_bytes = 4096;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(MakePosixTier("local", root_.string()));
  Engine engine(std::move(tiers), o);
  engine.Save(SliceFor(state, 1, 0, 1));
  engine.Wait();
  Snapshot bad = SliceFor(state, 2, 0, 1);
  bad.slices[1].on_device = true;
  try {
    engine.Save(bad);
    FAIL() << "a device slice with no source was saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.slices[1].name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("device"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.Latest(), 1);
}

// A device error during the copy (the whole pool at once, or streamed slot
// by slot): Save() names the step and the cause, the slots go back to the
// pool (the next save would otherwise wait out slot_timeout_seconds for
// them and fail), and step 1 stays the newest committed one until step 3.
TEST_F(DeviceSourceTest, ADeviceErrorAbandonsTheSaveAndKeepsWhatWasCommitted) {
  const SyntheticState state = MakeState(24, 40);
  for (const int64_t pool : {int64_t{0}, int64_t{3 * 4096}}) {
    SCOPED_TRACE(pool == 0 ? "whole pool" : "streaming pool");
    fs::remove_all(root_);
    EngineOptions o;
    o.chunk_bytes = 4096;
    o.pool_bytes = pool;
    o.slot_timeout_seconds = 5;
    // Before the engine: the pool unpins through the first source when it
    // is freed (ArenaSource's Unpin writes to its log).
    SourceLog bad_log, good_log;
    std::vector<std::byte> bad_arena, good_arena;
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(MakePosixTier("local", root_.string()));
    Engine engine(std::move(tiers), o);
    engine.Save(SliceFor(state, 1, 0, 1));
    engine.Wait();
    try {
      engine.Save(OnDevice(SliceFor(state, 2, 0, 1), bad_arena, bad_log, {}, pool == 0 ? 1 : 3));
      FAIL() << "a save whose device copy failed returned";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("step-00000002"), std::string::npos) << m;
      EXPECT_NE(m.find("illegal memory access"), std::string::npos) << m;
    }
    engine.Wait();
    EXPECT_EQ(engine.Latest(), 1);
    EXPECT_FALSE(fs::exists(root_ / "step-00000002" / "rank-00000.safetensors"));
    engine.Save(OnDevice(SliceFor(state, 3, 0, 1), good_arena, good_log));
    engine.Wait();
    EXPECT_EQ(engine.Latest(), 3);
  }
}

TEST(PlanDeviceCopies, ContiguousSourcesMergeButNeverAcrossASlot) {
  // Three tensors back to back in device memory, into slots that are
  // themselves adjacent in one buffer: merging must still stop at each slot,
  // which is pinned on its own.
  constexpr int64_t kSlot = 1000;
  std::vector<std::byte> device(2500);
  std::vector<std::span<const std::byte>> sources = {std::span(device).subspan(0, 700),
                                                     std::span(device).subspan(700, 900),
                                                     std::span(device).subspan(1600, 900)};
  std::vector<char> host(3 * kSlot);
  std::vector<char*> slots = {host.data(), host.data() + kSlot, host.data() + 2 * kSlot};
  const std::vector<char> all = {1, 1, 1};
  const std::vector<DeviceSource::Copy> copies = PlanDeviceCopies(sources, all, slots, kSlot);
  ASSERT_EQ(copies.size(), 3u);
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(copies[i].to, slots[i]);
    EXPECT_EQ(copies[i].from, device.data() + i * kSlot);
    EXPECT_EQ(copies[i].bytes, i < 2 ? 1000u : 500u);
  }
  // A host source in the middle: its bytes are no device copy's, and the
  // device copies around it do not merge over it.
  const std::vector<char> ends = {1, 0, 1};
  const std::vector<DeviceSource::Copy> split = PlanDeviceCopies(sources, ends, slots, kSlot);
  ASSERT_EQ(split.size(), 3u);  // 700 into slot 0 | the third: 400 into slot 1, 500 into 2
  EXPECT_EQ(split[0].bytes, 700u);
  EXPECT_EQ(split[1].to, slots[1] + 600);
  EXPECT_EQ(split[1].bytes, 400u);
  EXPECT_EQ(split[2].bytes, 500u);
}

}  // namespace
}  // namespace fmstack::ckpt
