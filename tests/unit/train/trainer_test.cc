// The loop end to end on a tiny model: it learns, it is bitwise
// deterministic, and a resumed run equals an uninterrupted one.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "ckpt/engine.h"
#include "ckpt/hooked_tier.h"
#include "ckpt/tier.h"
#include "gpt/sgemm_peak.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/random.h"

namespace fmstack::train {
namespace {

workload::TransformerShape Tiny() {
  workload::TransformerShape s;
  s.name = "tiny";
  s.layers = 2, s.hidden = 32, s.heads = 4, s.kv_heads = 4, s.ffn_hidden = 128;
  s.vocab = 64, s.seq_len = 16;
  return s;
}

TokenFile MakeData(const std::string& name, int64_t n, uint64_t seed) {
  // A learnable stream: mostly "next = prev + 1", with random jumps.
  Rng rng(seed);
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = i == 0 || rng.Below(8) == 0 ? static_cast<int32_t>(rng.Below(64))
                                            : (tokens[i - 1] + 1) % 64;
  }
  const std::string path = ::testing::TempDir() + "/" + name;
  WriteTokenFile(path, tokens, 64);
  return TokenFile::Load(path);
}

TrainConfig Config(int64_t steps) {
  TrainConfig c;
  c.shape = Tiny();
  c.micro_batch = 2, c.grad_accum = 2, c.steps = steps, c.seed = 11;
  c.optim.lr = 3e-3, c.optim.min_lr = 3e-4, c.optim.warmup_steps = 5;
  return c;
}

TEST(Trainer, SameSeedAndThreadsGiveBitwiseIdenticalRuns) {
  gpt::SetCpuThreads(2);
  const TokenFile data = MakeData("det.bin", 5000, 1);
  Trainer a(Config(15), data), b(Config(15), data);
  for (int i = 0; i < 15; ++i) {
    const StepStats sa = a.Step(), sb = b.Step();
    ASSERT_EQ(sa.loss, sb.loss) << "step " << i;
    ASSERT_EQ(sa.grad_norm, sb.grad_norm) << "step " << i;
  }
  EXPECT_EQ(a.ParamHash(), b.ParamHash());
  TrainConfig other = Config(15);
  other.seed = 12;
  Trainer c(other, data);
  c.Step();
  EXPECT_NE(c.ParamHash(), a.ParamHash());
}

// One checkpoint of `t` in `dir` through the engine, as `fmstack train` saves.
void SaveTo(Trainer& t, const std::string& dir) {
  std::vector<std::unique_ptr<ckpt::Tier>> tiers;
  tiers.push_back(ckpt::MakePosixTier("local", dir));
  ckpt::Engine engine(std::move(tiers), {});
  engine.Save(CheckpointSnapshot(t));
  engine.Wait();
}

// Restores the newest checkpoint in `dir` into `t`; throws what FinishRestore throws.
void LoadFrom(Trainer& t, const std::string& dir) {
  const ckpt::CheckpointDir d = ckpt::OpenCheckpointDir(dir);
  ckpt::Tier* tier = d.tier.get();
  const std::optional<ckpt::RestoreResult> r =
      ckpt::Restore(std::span(&tier, 1), CheckpointTargets(t), nullptr);
  if (!r) throw Error(dir + ": nothing restored");
  FinishRestore(t, *r);
}

TEST(Trainer, ResumedRunEqualsUninterruptedRun) {
  const TokenFile data = MakeData("resume.bin", 5000, 2);
  const std::string dir = ::testing::TempDir() + "/resume-ckpt";
  std::filesystem::remove_all(dir);
  Trainer straight(Config(20), data);
  for (int i = 0; i < 20; ++i) straight.Step();
  {
    Trainer first(Config(20), data);
    for (int i = 0; i < 8; ++i) first.Step();
    SaveTo(first, dir);
  }
  Trainer resumed(Config(20), data);
  LoadFrom(resumed, dir);
  EXPECT_EQ(resumed.step(), 8);
  EXPECT_EQ(resumed.counters().tokens, 8 * Config(20).tokens_per_step());
  while (resumed.step() < 20) resumed.Step();
  EXPECT_EQ(resumed.ParamHash(), straight.ParamHash());
}

// `fmstack train` saves live: the write reads the trainer's memory during
// the next step's forward and backward passes, and the step releases it
// before its optimizer update.
TEST(Trainer, ALiveSaveHoldsTheStateOfItsStepWhileTheNextStepRuns) {
  const TokenFile data = MakeData("live.bin", 5000, 3);
  const std::string dir = ::testing::TempDir() + "/live-ckpt";
  std::filesystem::remove_all(dir);
  Trainer t(Config(20), data);
  for (int i = 0; i < 4; ++i) t.Step();
  const uint64_t at_save = t.ParamHash();
  // The writer stops inside its third write (after the header and one
  // chunk) until the step is over.
  std::mutex mu;
  std::condition_variable cv;
  int writes = 0;
  bool open = false;
  std::vector<std::unique_ptr<ckpt::Tier>> tiers;
  tiers.push_back(
      std::make_unique<ckpt::testing::HookedTier>(ckpt::MakePosixTier("local", dir), "local", [&] {
        std::unique_lock lock(mu);
        if (++writes == 3) cv.notify_all();
        cv.wait(lock, [&] { return open || writes < 3; });
      }));
  ckpt::EngineOptions o;
  o.chunk_bytes = 4096;
  ckpt::Engine engine(std::move(tiers), o);
  std::atomic<int> releases{0};
  t.set_before_state_change([&] {
    engine.Release();
    ++releases;
  });
  ckpt::Snapshot snap = CheckpointSnapshot(t);
  snap.live = true;
  engine.Save(snap);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return writes >= 3; });
  }
  // The shard puts the parameters at their address modulo 4 KiB, so the
  // stopped write reads them straight from the trainer's array: the step's
  // release copies the chunks not yet taken, then waits for that write
  // before the optimizer update changes the array.
  std::atomic<bool> stepped{false};
  std::thread step([&] {
    t.Step();
    stepped = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(stepped.load());
  EXPECT_EQ(releases.load(), 0);
  {
    const std::lock_guard lock(mu);
    open = true;
  }
  cv.notify_all();
  step.join();
  EXPECT_EQ(releases.load(), 1);
  EXPECT_NE(t.ParamHash(), at_save);
  engine.Wait();
  t.set_before_state_change(nullptr);
  const ckpt::SaveTiming timing = engine.TakeTimings().at(0);
  EXPECT_GE(timing.chunks_direct, 1);
  EXPECT_GT(timing.chunks_released, 0);
  Trainer loaded(Config(20), data);
  LoadFrom(loaded, dir);
  EXPECT_EQ(loaded.step(), 4);
  EXPECT_EQ(loaded.ParamHash(), at_save);
}

TEST(Trainer, OverfitsASingleBatch) {
  // T + 1 tokens: the sampler has exactly one window to draw.
  const TokenFile data = MakeData("one.bin", Tiny().seq_len + 1, 3);
  TrainConfig c = Config(150);
  c.grad_accum = 1;
  c.optim.lr = 1e-2, c.optim.min_lr = 1e-2, c.optim.weight_decay = 0;
  Trainer t(c, data);
  double loss = 0;
  for (int i = 0; i < 150; ++i) loss = t.Step().loss;
  EXPECT_LT(loss, 0.05);
}

TEST(Trainer, LearnsTheStreamBeyondItsUnigramEntropy) {
  const TokenFile data = MakeData("learn.bin", 20000, 4);
  const TokenFile held_out = MakeData("learn_val.bin", 4000, 5);
  Trainer t(Config(150), data);
  const double before = t.Evaluate(held_out, 4);
  for (int i = 0; i < 150; ++i) t.Step();
  const double after = t.Evaluate(held_out, 4);
  EXPECT_NEAR(before, std::log(64.0), 0.05 * std::log(64.0));
  // Unigram entropy here is ~ln 64 = 4.16; "next = prev + 1" 7 times in 8
  // leaves about 0.38 + 1/8 ln 64 = 0.9 nats.
  EXPECT_LT(after, 1.5);
}

TEST(TrainerCheckpoint, AnotherModelOrSeedIsRefusedByName) {
  const TokenFile data = MakeData("state.bin", 1000, 6);
  const std::string dir = ::testing::TempDir() + "/mismatch-ckpt";
  std::filesystem::remove_all(dir);
  Trainer t(Config(5), data);
  t.Step();
  SaveTo(t, dir);
  TrainConfig bigger = Config(5);
  bigger.shape.layers = 3;
  Trainer w(bigger, data);
  // The third layer's tensors are not in the checkpoint.
  EXPECT_THROW(LoadFrom(w, dir), Error);
  TrainConfig seed = Config(5);
  seed.seed = 99;
  Trainer x(seed, data);
  try {
    LoadFrom(x, dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved with seed 11"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fmstack::train
