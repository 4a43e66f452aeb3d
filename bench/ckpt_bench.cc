// bench_ckpt: the checkpoint engine against this machine's limits and peers.
//   limits: memcpy bandwidth (one thread, best of 3 on 1 GB, for reference,
//           and of the state's own bytes beside each save); the disk's sequential
//           write with fdatasync (the fastest of fio or dd, buffered or
//           O_DIRECT with 8 writes in flight, and O_DIRECT from buffers on
//           huge pages, 4 threads, into a fresh file; and the same writer
//           over the retired shard that the next save writes over, as the
//           engine reuses a retired step's shard; 3 runs alternated with
//           fmstack's saves, median) and cold read (dd after posix_fadvise),
//           per state size, in the bench dir
//   per state size (default 1 GB and 4 GB, in 64 float32 tensors):
//     saves     live, as fmstack train's, two per round in turn:
//               released at once: Save() + Release() time / memcpy time of the
//               state in the same round, median of 3           target <= 1.2x;
//               its commit, and the same less that blocking copy
//               released after its commit (a step that outlasts the write):
//               its Save() + Release() time, and the state / time to
//               COMMITTED on the local tier, median of 3 saves, over the
//               median disk write of the same rounds           target >= 85%
//     restore   state / cold restore time (page cache dropped), against the disk
//               reading the same checkpoint file cold (the fastest of dd, fio
//               O_DIRECT with 8 reads in flight and O_DIRECT into buffers on
//               huge pages), alternated, median of 3               target >= 80%
//     overlap   step time of a training loop (sgemm, one thread) while the
//               background write runs / without it             target <= 1.05x
//     XXH3      the checksum of every slot and chunk: fmstack's build for this
//               CPU against Debian's libxxhash (x86-64 baseline)
//     hand-off  the writer's helpers: three tasks through its standing threads,
//               against a std::async thread each (what it used before)
//     peers     torch.save + fsync, torch.distributed.checkpoint + fsync
//               (python3-torch): their blocking time / fmstack's target >= 5x
//               (torch.save blocks until its bytes are durable); their durable
//               time / fmstack's is printed beside, with no target: both sides
//               wait for the same disk there
// Usage: bench_ckpt [--dir DIR] [--sizes 1,4] [--no-torch] [--copy-threads N]
//                   [--python P] [--torch-script F]
#include <cblas.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/disk_limits.h"
#include "bench/median.h"
#include "ckpt/engine.h"
#include "gpt/blas_core.h"
#include "gpt/sgemm_peak.h"
#include "util/error.h"
#include "util/huge_pages.h"
#include "util/random.h"
#include "util/text_table.h"
#include "util/units.h"
#include "util/worker_pool.h"
#include "util/xxh3.h"

namespace {

using fmstack::bench::Clock;
using fmstack::bench::DirectBuffers;
using fmstack::bench::DiskColdRead;
using fmstack::bench::DiskWrite;
using fmstack::bench::DiskWriteRound;
using fmstack::bench::DropCache;
using fmstack::bench::FileRead;
using fmstack::bench::HugeBytes;
using fmstack::bench::HugeDirect;
using fmstack::bench::HugeDirectHashing;
using fmstack::bench::Median;
using fmstack::bench::Output;
using fmstack::bench::Since;
using fmstack::bench::Timed;

using namespace fmstack;
namespace fs = std::filesystem;

double MemcpyBandwidth(size_t bytes) {
  std::vector<char, HugePageAllocator<char>> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, Since(t));
  }
  return static_cast<double>(bytes) / best;
}

// XXH3 of an 8 MiB slot (what the writer hashes beside each write, and the
// restore per chunk), GB/s, best of 5 over 32 slots: fmstack's build for this
// CPU (util/xxh3.h) and Debian's libxxhash, which is built for the x86-64
// baseline. The digests must agree.
std::pair<double, double> HashBandwidths() {
  constexpr size_t kSlot = size_t{8} << 20, kSlots = 32;
  std::vector<char, HugePageAllocator<char>> data(kSlot * kSlots);
  Rng rng(3);
  for (size_t i = 0; i + 8 <= data.size(); i += 8) {
    const uint64_t word = rng.Next();
    std::memcpy(data.data() + i, &word, 8);
  }
  auto best = [&](auto&& hash) {
    double t_best = 1e30;
    uint64_t sum = 0;
    for (int r = 0; r < 5; ++r) {
      const auto t = Clock::now();
      for (size_t i = 0; i < kSlots; ++i) sum += hash(data.data() + i * kSlot, kSlot);
      t_best = std::min(t_best, Since(t));
    }
    return std::pair{static_cast<double>(data.size()) / t_best, sum};
  };
  const auto [ours, ours_sum] = best([](const char* p, size_t n) { return Xxh3(p, n); });
  const auto [lib, lib_sum] = best([](const char* p, size_t n) { return XXH3_64bits(p, n); });
  if (ours_sum != lib_sum) throw Error("bench: util/xxh3.h and libxxhash disagree on XXH3");
  return {ours, lib};
}

// The writer hands each slot's other pieces and its hash to helpers:
// microseconds to hand off three empty tasks and collect them, through the
// engine's standing threads and through a std::async thread each, median of
// 3 runs of 1000.
std::pair<double, double> HandOffMicros() {
  constexpr int kRuns = 3, kIterations = 1000;
  auto time = [](auto&& submit_three) {
    std::vector<double> runs;
    for (int r = 0; r < kRuns; ++r) {
      const auto t = Clock::now();
      for (int i = 0; i < kIterations; ++i) submit_three();
      runs.push_back(Since(t) * 1e6 / kIterations);
    }
    return Median(std::move(runs));
  };
  WorkerPool pool(3);
  const double pooled = time([&] {
    std::future<void> f[3] = {pool.Submit([] {}), pool.Submit([] {}), pool.Submit([] {})};
    for (auto& x : f) x.get();
  });
  const double spawned = time([] {
    std::future<void> f[3] = {std::async(std::launch::async, [] {}),
                              std::async(std::launch::async, [] {}),
                              std::async(std::launch::async, [] {})};
    for (auto& x : f) x.get();
  });
  return {pooled, spawned};
}

// A synthetic training state: 64 float32 tensors of equal size, on huge
// pages as the trainer's buffers are (util/huge_pages.h).
struct State {
  std::vector<HugeFloats> tensors;
  int64_t bytes = 0;
};

State MakeState(int64_t bytes) {
  State s;
  const int64_t n = bytes / 4 / 64;
  Rng rng(7);
  for (int i = 0; i < 64; ++i) {
    HugeFloats t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<float>(rng.Next() >> 40);
    s.bytes += n * 4;
    s.tensors.push_back(std::move(t));
  }
  return s;
}

// Seconds to memcpy the state's tensors, one thread, into `to`, from its
// start again whenever the next tensor would pass its end.
double CopyOfState(const State& s, HugeBytes& to) {
  const auto t = Clock::now();
  size_t at = 0;
  for (const auto& tensor : s.tensors) {
    const size_t n = tensor.size() * sizeof(float);
    if (at + n > to.size()) at = 0;
    std::memcpy(to.data() + at, tensor.data(), n);
    at += n;
  }
  return Since(t);
}

int64_t LargestTensorBytes(const State& s) {
  size_t most = 0;
  for (const auto& tensor : s.tensors) most = std::max(most, tensor.size() * sizeof(float));
  return static_cast<int64_t>(most);
}

ckpt::Snapshot SnapshotOf(const State& s, int64_t step) {
  ckpt::Snapshot snap;
  snap.counters.step = step;
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const auto& t = s.tensors[i];
    snap.slices.push_back({fmt::format("t{:03d}", i),
                           ckpt::DType::kF32,
                           {static_cast<int64_t>(t.size())},
                           0,
                           std::as_bytes(std::span(t))});
  }
  return snap;
}

// The training loop: 1024^3 sgemm steps on one thread.
struct Loop {
  std::vector<float> a, b, c;
  Loop() : a(1024 * 1024, 1.0f), b(1024 * 1024, 0.5f), c(1024 * 1024) {}
  double Step() {
    const auto t = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1024, 1024, 1024, 1.0f, a.data(), 1024,
                b.data(), 1024, 0.0f, c.data(), 1024);
    return Since(t);
  }
};

nlohmann::json TorchPeers(const std::string& python, const std::string& script,
                          const std::string& dir, int64_t bytes) {
  try {
    const std::string out =
        Output(fmt::format("{} {} --bytes {} --dir {} 2>&1", python, script, bytes, dir));
    return nlohmann::json::parse(out.substr(out.rfind('{')));
  } catch (const std::exception& e) {
    std::cerr << "PyTorch peers failed (install python3-torch: scripts/bootstrap.sh --bench): "
              << e.what() << "\n";
    return nullptr;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // First, before OpenBLAS is used: a CPU newer than the OpenBLAS build gets its fast kernels.
  fmstack::gpt::ReexecWithBestBlasCore(std::span<char* const>(argv, static_cast<size_t>(argc)),
                                       fmstack::gpt::BlasPin::kReplaceNarrower);
  CLI::App app{"bench_ckpt: the checkpoint engine vs this machine's limits and PyTorch"};
  std::string dir = "bench-ckpt.tmp";
  std::vector<double> sizes = {1, 4};
  bool no_torch = false;
  // Debian's python3-torch by default; a GPU machine's pip PyTorch elsewhere.
  std::string python = "/usr/bin/python3";
  std::string script = std::string(FMSTACK_SOURCE_DIR) + "/bench/torch_ckpt.py";
  app.add_option("--dir", dir, "scratch directory on the disk to measure");
  int copy_threads = ckpt::DefaultCopyThreads();
  app.add_option("--copy-threads", copy_threads, "threads copying a save into the staging pool");
  app.add_option("--python", python, "the Python that has PyTorch");
  app.add_option("--torch-script", script, "the PyTorch peers (bench/torch_ckpt.py)");
  app.add_option("--sizes", sizes, "state sizes in GB")->delimiter(',');
  app.add_flag("--no-torch", no_torch, "skip the PyTorch peers");
  CLI11_PARSE(app, argc, argv);
  try {
    gpt::SetCpuThreads(1);
    fs::remove_all(dir);
    fs::create_directories(dir);
    dir = fs::absolute(dir).string();
    std::cerr << "measuring memcpy...\n";
    const double memcpy_bw = MemcpyBandwidth(size_t{1} << 30);
    const auto [hash_ours, hash_lib] = HashBandwidths();

    const bool fio = std::system("command -v fio > /dev/null") == 0;
    DirectBuffers direct_buffers;
    for (const double gb : sizes) {
      const State state = MakeState(static_cast<int64_t>(gb * 1e9));
      const double size = static_cast<double>(state.bytes);
      // The disk's limits on a file of the state's size, just before fmstack's run.
      std::cerr << fmt::format("{}: measuring the disk with fio/dd...\n", units::FormatBytes(size));
      const std::string disk_file = dir + "/dd.bin";
      DiskWrite(disk_file, state.bytes, fio, direct_buffers);  // warm-up, as fmstack's save 1
      const double disk_read = DiskColdRead(disk_file);
      fs::remove(disk_file);
      std::cerr << fmt::format(
          "{}: saving and writing with fio/dd in turn, restoring cold, "
          "training alongside...\n",
          units::FormatBytes(size));
      fs::remove_all(dir + "/engine");
      std::vector<std::unique_ptr<ckpt::Tier>> tiers;
      tiers.push_back(ckpt::MakePosixTier("local", dir + "/engine"));
      ckpt::EngineOptions o;
      o.keep = 1;
      o.copy_threads = copy_threads;
      ckpt::Engine engine(std::move(tiers), o);
      const int64_t huge_before = ProcessHugePageBytes();
      engine.Reserve(state.bytes);
      // What the kernel gave the staging pool: its advice is a hint.
      const std::string pool_pages =
          fmt::format("staging pool {} on huge pages (THP {})",
                      units::FormatBytes(static_cast<double>(std::clamp<int64_t>(
                          ProcessHugePageBytes() - huge_before, 0, engine.pool_bytes()))),
                      HugePagesMode());
      // Saves 1 and 2 warm up: from save 3 on, each writes over the shard
      // retired two saves before, as a run's saves do after its first two.
      // Saves 3-5 alternate with the disk's write limit, each side first in
      // turn, and the median of each counts. A virtual disk changes speed
      // from minute to minute: with the limit taken once before the saves,
      // one Intel VM run measured it at 2.69 GB/s against 1.66-2.11 in
      // three others, and the commit's ratio moved with it.
      // Saves are live, as `fmstack train` makes them (ckpt/engine.h):
      // written straight from the state until Release(). Two per round: one
      // released at once, as a step whose update comes before the write has
      // begun would (Release() then copies nearly all of it), and one
      // released after its commit, as a step that outlasts the write would.
      int64_t step = 1;
      const auto save = [&](bool at_once) {
        ckpt::Snapshot snap = SnapshotOf(state, step++);
        snap.live = true;
        const double b = engine.Save(snap).blocking_seconds;
        const double now = at_once ? engine.Release() : 0;
        engine.Wait();  // not beside the background write: it would slow the copy
        const double late = engine.Release();
        ckpt::SaveTiming t = engine.TakeTimings().at(0);
        t.blocking_seconds = b + now + late;
        return t;
      };
      save(false);
      save(true);
      std::vector<ckpt::SaveTiming> runs, runs_late;  // released at once; after the commit
      std::vector<double> disk_writes, fresh_writes, over_writes, next_shard_writes, copy_seconds;
      std::vector<double> verified_writes;  // the writer with a thread hashing beside it
      std::vector<std::span<const std::byte>> state_bytes;
      for (const HugeFloats& t : state.tensors) state_bytes.push_back(std::as_bytes(std::span(t)));
      // On huge pages, as the engine's staging slots are: the best memcpy.
      // At most 512 MiB, written over and over: a target as large as the
      // state took the process to three states' worth of memory (state,
      // staging pool, target), and on the Zen 5 VM a scratch program of that
      // footprint (12 GB) had a 4 GB save block for 1.2-1.9 s and the memcpy
      // take 5.65 s in two rounds of eight, where without the target (8 GB)
      // eight rounds blocked for 0.15-0.34 s. A target reused only favours
      // the memcpy: its pages stay warm.
      const int64_t copy_target = std::clamp<int64_t>(
          state.bytes, 1, std::max(int64_t{512} << 20, LargestTensorBytes(state)));
      HugeBytes copy_to(static_cast<size_t>(copy_target), std::byte{3});
      for (int64_t round = 0; round < 3; ++round) {
        for (int side = 0; side < 2; ++side) {
          if ((round + side) % 2 == 0) {
            // The engine writes over a retired step's shard
            // (src/ckpt/posix_tier.cc), which on the Zen 5 VM's ext4 (online
            // discard) ran 1.2-2x a fresh file. So the limit is the faster
            // of a fresh file and the huge-page writer over the retired
            // shard that the next save takes back, first: the very blocks
            // that save writes, as long after they were last written. Over
            // a file written seconds before, which no save writes over, the
            // same writer ran 1.24-1.94x as fast in eight of eighteen rounds
            // at 4 GB there, and 0.85-1.09x in the other ten (six runs;
            // their medians 0.91-1.35x).
            const std::string next =
                engine.tiers()[0]->RetiredFiles().where + "/" + ckpt::RankFileName(0);
            // Beside it, not counted: the same writer with a thread
            // hashing the state (disk_limits.h), each first in turn.
            const auto hashing = [&] {
              verified_writes.push_back(
                  static_cast<double>(state.bytes) /
                  HugeDirectHashing(next, state.bytes, direct_buffers, state_bytes));
            };
            const bool have_next = fs::exists(next);
            if (have_next && round % 2 == 1) hashing();
            const double over_next =
                have_next ? static_cast<double>(state.bytes) /
                                HugeDirect(next, state.bytes, true, direct_buffers, true)
                          : 0;
            if (have_next && round % 2 == 0) hashing();
            if (over_next > 0) next_shard_writes.push_back(over_next);
            const DiskWriteRound w = DiskWrite(disk_file, state.bytes, fio, direct_buffers);
            disk_writes.push_back(std::max(w.fresh, over_next > 0 ? over_next : w.over));
            fresh_writes.push_back(w.fresh);
            over_writes.push_back(w.over);
            fs::remove(disk_file);
            std::cerr << fmt::format(
                "  round {}: disk write {}/s fresh, {}/s over the last file, {} over the next "
                "shard ({} with the state hashed beside it)\n",
                round + 1, units::FormatBytes(w.fresh), units::FormatBytes(w.over),
                over_next > 0 ? units::FormatBytes(over_next) + "/s" : std::string("-"),
                have_next ? units::FormatBytes(verified_writes.back()) + "/s" : std::string("-"));
            continue;
          }
          // The memcpy of the same bytes, beside the save and in turn
          // before or after it (and its write): on the Zen 5 VM of 2026-11-29 a 4 GB copy
          // right after the disk's write took 0.32-0.48 s where the quiet
          // 1 GB limit (18.8 GB/s) says 0.21.
          double copy_s = 0;
          if (round % 2 == 1) copy_s = CopyOfState(state, copy_to);
          for (int k = 0; k < 2; ++k) {
            const bool at_once = (round + k) % 2 == 0;
            (at_once ? runs : runs_late).push_back(save(at_once));
          }
          if (round % 2 == 0) copy_s = CopyOfState(state, copy_to);
          std::cerr << fmt::format(
              "  round {}: released at once: blocked {:.3f} s (memcpy {:.3f} s), committed in "
              "{:.2f} s; released after the commit: blocked {:.4f} s, committed in {:.2f} s\n",
              round + 1, runs.back().blocking_seconds, copy_s, runs.back().commit_seconds[0],
              runs_late.back().blocking_seconds, runs_late.back().commit_seconds[0]);
          copy_seconds.push_back(copy_s);
        }
      }
      const double disk_write = Median(disk_writes);
      // Each round's commit rate over its own disk limit.
      const auto commit_ratios = [&](const std::vector<ckpt::SaveTiming>& of) {
        std::vector<double> v;
        for (size_t r = 0; r < of.size(); ++r)
          v.push_back(size / of[r].commit_seconds[0] / disk_writes[r]);
        std::sort(v.begin(), v.end());
        return v;
      };
      auto median = [&](const std::vector<ckpt::SaveTiming>& of, auto field) {
        std::vector<double> v;
        for (const ckpt::SaveTiming& r : of) v.push_back(field(r));
        return Median(std::move(v));
      };
      const auto blocking_of = [](const ckpt::SaveTiming& r) { return r.blocking_seconds; };
      const auto commit_of = [](const ckpt::SaveTiming& r) { return r.commit_seconds[0]; };
      ckpt::SaveTiming blocking, t;
      blocking.blocking_seconds = median(runs, blocking_of);
      t.commit_seconds = {median(runs, commit_of)};
      copy_to = HugeBytes();                // its memory back before the restores
      std::vector<double> blocking_ratios;  // each save over its own round's memcpy
      for (size_t r = 0; r < runs.size(); ++r)
        blocking_ratios.push_back(runs[r].blocking_seconds / copy_seconds[r]);
      const double memcpy_s = Median(copy_seconds);

      // Cold restore against the disk reading the same file (FileRead: dd
      // or fio, the faster), alternated, median of 3 each. The same file matters: on the
      // development VM the first cold read of a file just written ran at 0.6-0.9 GB/s and later
      // ones at 3.3 GB/s, so a fresh dd file and a fresh checkpoint are not alike. One throwaway
      // cold read by each side first lets the disk settle and warms both programs: here the first
      // cold read after a save was the slowest, by either program (dd 1.27 s against 0.59-0.60 at 1
      // GB). Each side goes first in turn and every timed read starts after the same idle second:
      // on that VM a read right after a busy CPU (the check of a restore) ran in 1.4-1.8 s at 4 GB,
      // the same read right after another read in 2.1-2.4, whichever program did it, so a fixed
      // order with nothing in between favoured one side.
      ckpt::Tier& tier = *engine.tiers()[0];
      const int64_t last = step - 1;
      const std::string file = tier.Where(last, ckpt::RankFileName(0));
      std::vector<HugeFloats> back(state.tensors.size());
      std::vector<ckpt::TensorTarget> targets;
      for (size_t i = 0; i < back.size(); ++i) {
        back[i].resize(state.tensors[i].size());
        targets.push_back({fmt::format("t{:03d}", i), ckpt::DType::kF32, 0,
                           std::as_writable_bytes(std::span(back[i]))});
      }
      std::vector<double> read_s, restore_s;
      const auto cold = [&] {
        DropCache(file);
        tier.DropCache(last, ckpt::RankFileName(0));
        std::this_thread::sleep_for(std::chrono::seconds(1));
      };
      FileRead(file, fio, cold, direct_buffers);
      cold();
      if (!engine.Restore(targets)) throw fmstack::Error("bench: restore found no checkpoint");
      for (int round = 0; round < 3; ++round) {
        for (int side = 0; side < 2; ++side) {
          if ((round + side) % 2 == 0) {
            read_s.push_back(FileRead(file, fio, cold, direct_buffers));
            continue;
          }
          cold();
          const std::optional<ckpt::RestoreResult> r = engine.Restore(targets);
          if (!r || back != state.tensors)
            throw fmstack::Error("bench: restore did not return the state");
          restore_s.push_back(r->seconds);
        }
      }
      const double file_read = static_cast<double>(fs::file_size(file)) / Median(read_s);
      const double restore_seconds = Median(restore_s);

      // Training alongside the background write.
      Loop loop;
      for (int i = 0; i < 3; ++i) loop.Step();
      double alone = 0;
      int n_alone = 0;
      for (const auto t0 = Clock::now(); Since(t0) < 3 || n_alone < 10; ++n_alone)
        alone += loop.Step();
      // The machine's own share first: on the AMD VM a plain dd writing with
      // O_DIRECT, which costs its own CPU next to nothing, slowed this loop
      // by 4-7% (the disk's emulation runs on the host).
      const std::string load = dir + "/dd-load";
      std::atomic<bool> dd_done{false};
      std::thread dd_thread([&] {
        Timed(
            fmt::format("dd if=/dev/zero of={} bs=8M count={} oflag=direct conv=fsync status=none",
                        load, std::max<int64_t>(1, state.bytes >> 23)));
        dd_done = true;
      });
      double during_dd = 0;
      int n_during_dd = 0;
      for (; !dd_done; ++n_during_dd) during_dd += loop.Step();
      dd_thread.join();
      fs::remove(load);
      const double dd_slowdown = (during_dd / n_during_dd) / (alone / n_alone);

      // A live save, as the trainer's: the loop's steps do not change the
      // state, so nothing releases it before the commit.
      ckpt::Snapshot during_snap = SnapshotOf(state, step);
      during_snap.live = true;
      engine.Save(during_snap);
      double during = 0;
      int n_during = 0;
      const auto t1 = Clock::now();
      bool done = false;
      while (!done) {
        during += loop.Step();
        ++n_during;
        done = engine.Latest() == step;
      }
      const double write_window = Since(t1);
      engine.Wait();
      engine.Release();
      const double slowdown = (during / n_during) / (alone / n_alone);

      TextTable table({"metric", "fmstack", "ratio", "target"});
      table.AddRow({"limit: memcpy of 1 GB, 1 thread, best of 3, before the rounds",
                    units::FormatBytes(memcpy_bw) + "/s", "", ""});
      table.AddRow({"limit: disk write + fsync (the faster of the two below), median of 3",
                    units::FormatBytes(disk_write) + "/s",
                    fmt::format("rounds {}/s - {}/s",
                                units::FormatBytes(*std::ranges::min_element(disk_writes)),
                                units::FormatBytes(*std::ranges::max_element(disk_writes))),
                    ""});
      table.AddRow({"  of which: fresh file (fio/dd/huge pages), median of 3",
                    units::FormatBytes(Median(fresh_writes)) + "/s",
                    next_shard_writes.size() == disk_writes.size()
                        ? fmt::format("over the next save's blocks: {}/s",
                                      units::FormatBytes(Median(next_shard_writes)))
                        : fmt::format("over the file's blocks (no retired shard): {}/s",
                                      units::FormatBytes(Median(over_writes))),
                    ""});
      table.AddRow({"  not counted: over a file written just before, median of 3",
                    units::FormatBytes(Median(over_writes)) + "/s", "no save writes so", ""});
      if (!verified_writes.empty()) {
        // Where the commit stands against writing and hashing alone.
        const double verified = Median(verified_writes);
        table.AddRow(
            {"  not counted: over the next save's blocks with the state hashed beside "
             "(XXH3), median of 3",
             units::FormatBytes(verified) + "/s",
             fmt::format("{:.0f}% of the limit; released after its commit, a save commits at "
                         "{:.0f}% of it",
                         100 * verified / disk_write,
                         100 * size / median(runs_late, commit_of) / verified),
             ""});
      }
      table.AddRow(
          {"limit: disk cold read (dd, fresh file)", units::FormatBytes(disk_read) + "/s", "", ""});
      const auto [pooled_us, spawned_us] = HandOffMicros();
      table.AddRow({"writer hand-off of 3 tasks, median of 3 x 1000",
                    fmt::format("{:.1f} us", pooled_us),
                    fmt::format("std::async: {:.1f} us", spawned_us), ""});
      table.AddRow({fmt::format("XXH3 of 8 MiB slots, {} build, best of 5", Xxh3Best().name),
                    units::FormatBytes(hash_ours) + "/s",
                    fmt::format("{:.1f}x Debian libxxhash ({}/s)", hash_ours / hash_lib,
                                units::FormatBytes(hash_lib)),
                    ""});
      table.AddRow({"limit: checkpoint read cold (dd/fio/huge pages), median of 3",
                    units::FormatBytes(file_read) + "/s", "", ""});
      table.AddRow({"limit: training step during dd O_DIRECT of the same bytes",
                    fmt::format("{:.1f} ms ({} steps)", 1e3 * during_dd / n_during_dd, n_during_dd),
                    fmt::format("{:.3f}x", dd_slowdown), ""});
      table.AddRow({fmt::format("limit: memcpy of the state, 1 thread, beside each save (into {})",
                                units::FormatBytes(static_cast<double>(copy_target))),
                    fmt::format("{:.3f} s = {}/s", memcpy_s, units::FormatBytes(size / memcpy_s)),
                    fmt::format("rounds {:.3f}-{:.3f} s", *std::ranges::min_element(copy_seconds),
                                *std::ranges::max_element(copy_seconds)),
                    ""});
      const std::vector<double> now_ratios = commit_ratios(runs),
                                late_ratios = commit_ratios(runs_late);
      const double late_commit = median(runs_late, commit_of);
      table.AddRow({"live save released at once: Save() + Release(), median of 3",
                    fmt::format("{:.3f} s", blocking.blocking_seconds),
                    fmt::format("{:.2f}x memcpy (rounds {:.2f}-{:.2f}x)", Median(blocking_ratios),
                                *std::ranges::min_element(blocking_ratios),
                                *std::ranges::max_element(blocking_ratios)),
                    "<= 1.20x"});
      table.AddRow({"  its durable commit, local",
                    fmt::format("{:.2f} s = {}/s", t.commit_seconds[0],
                                units::FormatBytes(size / t.commit_seconds[0])),
                    fmt::format("{:.0f}% of disk write (rounds {:.0f}-{:.0f}%)",
                                100 * size / t.commit_seconds[0] / disk_write,
                                100 * now_ratios.front(), 100 * now_ratios.back()),
                    ""});
      // What follows Release()'s copy is the engine's own writing (and the
      // commit protocol's small files), against the same limit.
      const double after_copy = median(
          runs, [](const ckpt::SaveTiming& r) { return r.commit_seconds[0] - r.blocking_seconds; });
      table.AddRow(
          {"    of which: after the blocking copy",
           fmt::format("{:.2f} s = {}/s", after_copy, units::FormatBytes(size / after_copy)),
           fmt::format("{:.0f}% of disk write", 100 * size / after_copy / disk_write), ""});
      table.AddRow(
          {"live save released after its commit: Save() + Release(), median of 3",
           fmt::format("{:.4f} s", median(runs_late, blocking_of)),
           fmt::format("chunks straight from the state: {} of {} ({} but for their edge blocks)",
                       runs_late.back().chunks_direct,
                       runs_late.back().chunks_direct + runs_late.back().chunks_gathered,
                       runs_late.back().chunks_split),
           ""});
      table.AddRow(
          {"  its durable commit, local",
           fmt::format("{:.2f} s = {}/s", late_commit, units::FormatBytes(size / late_commit)),
           fmt::format("{:.0f}% of disk write (rounds {:.0f}-{:.0f}%)",
                       100 * size / late_commit / disk_write, 100 * late_ratios.front(),
                       100 * late_ratios.back()),
           ">= 85%"});
      table.AddRow(
          {"cold restore, median of 3",
           fmt::format("{:.2f} s = {}/s", restore_seconds,
                       units::FormatBytes(size / restore_seconds)),
           fmt::format("{:.0f}% of the disk on it", 100 * size / restore_seconds / file_read),
           ">= 80%"});
      table.AddRow(
          {"training step during the write",
           fmt::format("{:.1f} ms vs {:.1f} ms ({} steps in {:.1f} s)", 1e3 * during / n_during,
                       1e3 * alone / n_alone, n_during, write_window),
           fmt::format("{:.3f}x ({:.3f}x dd's)", slowdown, slowdown / dd_slowdown), "<= 1.05x"});
      std::string torch_version = "skipped";
      if (!no_torch) {
        std::cerr << "  PyTorch peers...\n";
        const nlohmann::json peers = TorchPeers(python, script, dir, state.bytes);
        if (!peers.is_null()) {
          torch_version = peers.value("torch", "?") + ", 1 thread";
          for (const auto& [key, label] :
               {std::pair{"torch_save_s", "torch.save(path) + fsync, median of 3"},
                std::pair{"dcp_save_s", "torch.distributed.checkpoint"}}) {
            if (!peers.contains(key)) {
              table.AddRow({label, "unavailable", peers.value("dcp_error", "?").substr(0, 60), ""});
              continue;
            }
            const double s = peers[key].get<double>();
            table.AddRow({std::string(label) + " (durable = blocking)", fmt::format("{:.2f} s", s),
                          fmt::format("{:.0f}x longer blocking, {:.1f}x slower to durable",
                                      s / blocking.blocking_seconds, s / t.commit_seconds[0]),
                          key == std::string("torch_save_s") ? ">= 5x blocking" : ""});
          }
        }
      }
      std::cout << fmt::format(
                       "state {} ({} tensors; fmstack: {} copy threads, {} restore readers, {}; "
                       "training loop: 1 thread of {}; PyTorch {})\n",
                       units::FormatBytes(size), state.tensors.size(), copy_threads,
                       ckpt::kLocalRestoreReaders, pool_pages, gpt::BlasConfig(), torch_version)
                << table.RenderText() << "\n";
    }
    fs::remove_all(dir);
  } catch (const std::exception& e) {
    std::cerr << "bench_ckpt: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
