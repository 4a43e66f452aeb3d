// bench_ckpt's measurements of the disk: the limits its saves and restores
// are held against (fio, dd and the bench's own O_DIRECT I/O from buffers on
// huge pages), and the deadline of every command the bench starts.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "util/error.h"
#include "util/huge_pages.h"
#include "util/random.h"
#include "util/xxh3.h"

namespace fmstack::bench {

using Clock = std::chrono::steady_clock;
using HugeBytes = std::vector<std::byte, HugePageAllocator<std::byte>>;

inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

namespace fs = std::filesystem;

inline void DropCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Every command the bench starts (dd, fio, the PyTorch peers) has a
// deadline: a disk that stops answering fails the bench with the command's
// name instead of hanging it. 30 minutes is far past any healthy run.
inline constexpr int kCommandSeconds = 1800;

inline std::string WithDeadline(const std::string& cmd) {
  return fmt::format("timeout -k 10 {} {}", kCommandSeconds, cmd);
}

[[noreturn]] void CommandFailed(const std::string& cmd, int status, const std::string& out) {
  const bool late = WIFEXITED(status) && WEXITSTATUS(status) == 124;
  throw fmstack::Error(fmt::format("bench: command {}: {}{}",
                                   late ? fmt::format("ran past {} s", kCommandSeconds) : "failed",
                                   cmd, out.empty() ? "" : "\n" + out));
}

// Seconds a shell command takes.
inline double Timed(const std::string& cmd) {
  const auto t = Clock::now();
  if (const int status = std::system(WithDeadline(cmd).c_str()); status != 0)
    CommandFailed(cmd, status, "");
  return Since(t);
}

inline std::string Output(const std::string& cmd) {
  std::FILE* p = ::popen(WithDeadline(cmd).c_str(), "r");
  if (p == nullptr) CommandFailed(cmd, -1, "");
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  if (const int status = ::pclose(p); status != 0) CommandFailed(cmd, status, out);
  return out;
}

// Seconds for the disk to write (then fdatasync) or read `bytes` of `file`
// with O_DIRECT, four threads each 8 MiB at a time from a buffer of random
// bytes on huge pages. fio and dd take their buffers from 4 KiB pages, and
// on the Zen 5 VM four O_DIRECT readers ran at 1.4-2.2 GB/s into such
// buffers against 4.9 on 2 MiB pages (src/ckpt/stream_reader.cc): the
// disk's limit is the faster of theirs and this.
// HugeDirect's buffers of random bytes, made once: a huge page taken while
// the rounds run may make the kernel compact memory under the state's copy.
struct DirectBuffers {
  static constexpr int64_t kPiece = int64_t{8} << 20;
  static constexpr int kThreads = 4;
  std::vector<HugeBytes> buffers;
  DirectBuffers() {
    Rng rng(3);
    for (int t = 0; t < kThreads; ++t) {
      buffers.emplace_back(static_cast<size_t>(kPiece));
      for (std::byte& b : buffers.back()) b = static_cast<std::byte>(rng.Next());
    }
  }
};

// `over`: writes over the blocks the file already has instead of a fresh
// file, as the engine's saves do once a step has been retired.
inline double HugeDirect(const std::string& file, int64_t bytes, bool write, DirectBuffers& buffers,
                         bool over = false) {
  constexpr int64_t kPiece = DirectBuffers::kPiece;
  constexpr int kThreads = DirectBuffers::kThreads;
  const int64_t total = bytes / kPiece * kPiece;
  const int fd =
      write ? ::open(file.c_str(), O_WRONLY | O_CREAT | (over ? 0 : O_TRUNC) | O_DIRECT, 0644)
            : ::open(file.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) throw fmstack::Error(fmt::format("{}: cannot open with O_DIRECT", file));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::byte* const buf = buffers.buffers[static_cast<size_t>(t)].data();
        for (int64_t at; (at = next.fetch_add(kPiece)) < total;) {
          const ssize_t n = write ? ::pwrite(fd, buf, kPiece, at) : ::pread(fd, buf, kPiece, at);
          if (n != kPiece) failed = true;
        }
      });
    }
  }
  const bool synced = !write || ::fdatasync(fd) == 0;
  const double seconds = Since(t0);
  ::close(fd);
  if (failed || !synced)
    throw fmstack::Error(
        fmt::format("{}: O_DIRECT {} of {} bytes failed", file, write ? "write" : "read", total));
  return seconds * static_cast<double>(bytes) / static_cast<double>(total);
}

// HugeDirect's write over `file`'s blocks with a thread beside it hashing
// `memory` (XXH3, 8 MiB at a time), as the engine hashes every chunk it
// writes: the disk's write when each byte is also read once for its checksum.
// Not a target's limit (issue 22 holds the commit to the bare disk), but what
// says how much of a commit's gap the checksum's reads cost: on the Zen 4 VM
// any 4 GB read beside the O_DIRECT writer (the state's bytes or other
// memory, paced or not) slowed it 5-20%, where a thread that only computed
// did not, since that VM's disk writes are the host copying guest memory.
// Returns the seconds until both the write (with its fdatasync) and the hash
// are done.
inline double HugeDirectHashing(const std::string& file, int64_t bytes, DirectBuffers& buffers,
                                std::span<const std::span<const std::byte>> memory) {
  constexpr size_t kPiece = size_t{8} << 20;
  const auto t0 = Clock::now();
  std::jthread hasher([&] {
    for (const std::span<const std::byte> m : memory)
      for (size_t at = 0; at < m.size(); at += kPiece)
        Xxh3(m.data() + at, std::min(kPiece, m.size() - at));  // through the CPU's build: kept
  });
  HugeDirect(file, bytes, true, buffers, true);
  hasher.join();
  return Since(t0);
}

// The disk's sequential write of `bytes` to `file`, made durable: the faster
// of buffered and O_DIRECT. fio writes non-zero buffers (a virtual disk may
// treat zeros specially), O_DIRECT through libaio with 8 writes in flight:
// the engine keeps two in flight, and on the Zen 5 VM fio's default (one
// synchronous write at a time) wrote 2 GB at 0.66-0.91 GB/s against
// 1.18-1.23 at a depth of 8, so the limit at depth 1 was not the disk's.
// dd from /dev/zero without `fio`. Then the huge-page writer, into a fresh
// file and over that file's blocks right after (`over`: printed, and the
// limit's second half only where no retired shard exists; see the rounds).
// The file is left for a read.
struct DiskWriteRound {
  double fresh = 0, over = 0;  // bytes/s
};
inline DiskWriteRound DiskWrite(const std::string& file, int64_t bytes, bool fio,
                                DirectBuffers& buffers) {
  const int64_t mib8 = (bytes >> 20) / 8 * 8;
  double best = 0;
  for (const int direct : {0, 1}) {
    ::unlink(file.c_str());
    if (!fio) {
      best = std::max(best, static_cast<double>(mib8 << 20) /
                                Timed(fmt::format("dd if=/dev/zero of={} bs=8M count={} {} "
                                                  "conv=fdatasync status=none",
                                                  file, mib8 / 8, direct ? "oflag=direct" : "")));
      continue;
    }
    // fio's own job runtime (it includes the end fsync), not its start-up.
    const nlohmann::json j = nlohmann::json::parse(Output(fmt::format(
        "fio --name=w --filename={} --rw=write --bs=8M --size={}M --direct={} {} --end_fsync=1 "
        "--output-format=json",
        file, mib8, direct, direct ? "--ioengine=libaio --iodepth=8" : "")));
    const double ms = j.at("jobs").at(0).at("job_runtime").get<double>();
    best = std::max(best, static_cast<double>(mib8 << 20) / (ms / 1e3));
  }
  ::unlink(file.c_str());
  best = std::max(best, static_cast<double>(bytes) / HugeDirect(file, bytes, true, buffers));
  return {best, static_cast<double>(bytes) / HugeDirect(file, bytes, true, buffers, true)};
}

// Seconds for dd to read `file` through the page cache.
inline double DdRead(const std::string& file) {
  return Timed(fmt::format("dd if={} of=/dev/null bs=1M status=none", file));
}

// A cold read of a file just written (dd after dropping its pages).
inline double DiskColdRead(const std::string& file) {
  DropCache(file);
  return static_cast<double>(fs::file_size(file)) / DdRead(file);
}

// Seconds for the disk to read `file` sequentially, the fastest of dd
// (buffered, the kernel's read-ahead), with `fio`, O_DIRECT through libaio
// with 8 reads in flight, and HugeDirect; `cold` drops the file's pages
// before each. The restore reads with several threads at once; on the Zen 5
// VM dd alone read 2 GB at 0.64 GB/s where fio at a depth of 8 read it at
// 1.58-1.82.
inline double FileRead(const std::string& file, bool fio, const std::function<void()>& cold,
                       DirectBuffers& buffers) {
  cold();
  double best = DdRead(file);
  if (fio) {
    cold();
    const nlohmann::json j = nlohmann::json::parse(Output(
        fmt::format("fio --name=r --filename={} --rw=read --bs=8M --direct=1 --ioengine=libaio "
                    "--iodepth=8 --readonly --output-format=json",
                    file)));
    best = std::min(best, j.at("jobs").at(0).at("job_runtime").get<double>() / 1e3);
  }
  cold();
  return std::min(best,
                  HugeDirect(file, static_cast<int64_t>(fs::file_size(file)), false, buffers));
}

}  // namespace fmstack::bench
