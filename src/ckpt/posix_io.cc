// ckpt: the POSIX tier's files. Data goes through large sequential pwrites,
// with O_DIRECT where the file system takes it. Without it, writeback of
// each window is started at once (sync_file_range) so that the disk is busy
// from the first window and the final fdatasync finds little left to do.
#include "ckpt/posix_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <vector>

#include "util/error.h"
#include "util/worker_pool.h"

namespace fmstack::ckpt::posix {

[[noreturn]] void Fail(const std::string& what, const std::string& path) {
  throw Error(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}

void FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) Fail("cannot open directory to fsync it", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) Fail("fsync of directory failed", dir);
}

namespace {

constexpr int64_t kWindow = 32 << 20;

// Reads exactly out.size() bytes of `fd` at `offset`.
void ReadExactly(int fd, const std::string& path, int64_t offset, std::span<char> out) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, offset + static_cast<int64_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail(fmt::format("read at offset {} failed", offset + done), path);
    if (n == 0) {
      throw Error(fmt::format("{}: truncated: {} bytes wanted at offset {}, the file ends at {}",
                              path, out.size(), offset, offset + static_cast<int64_t>(done)));
    }
    done += static_cast<size_t>(n);
  }
}

// A descriptor advised for sequential reading (the kernel doubles its
// read-ahead window).
int OpenForReading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) Fail("cannot open", path);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return fd;
}

// Reads of whole 4 KiB blocks into aligned memory go through a second,
// O_DIRECT descriptor, the rest through the page cache. The engine writes
// with O_DIRECT, so a checkpoint is seldom in the page cache when it is
// restored, and a cold buffered read pays for the page cache's copy and its
// read-ahead's pace. On the Zen 5 VM the engine's restore of 4 GB, three
// times each, alternated: 4.8-5.6 GB/s with O_DIRECT (8 MiB reads into huge
// pages, stream_reader.cc), 0.6-4.8 GB/s buffered (1 MiB reads); of 1 GB
// 5.7-5.9 against 2.5-4.7. A file system that refuses O_DIRECT (tmpfs)
// gets buffered reads only.
class PosixFileReader final : public FileReader {
 public:
  explicit PosixFileReader(std::string path)
      : path_(std::move(path)),
        fd_(OpenForReading(path_)),
        direct_fd_(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_DIRECT)) {}
  ~PosixFileReader() override {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }
  PosixFileReader(const PosixFileReader&) = delete;
  PosixFileReader& operator=(const PosixFileReader&) = delete;
  // A direct read that comes back short (the end of the file) or failing
  // is finished, or retried and reported, through the page cache. EINVAL
  // means the device wants more than 4 KiB alignment: from then on, the
  // page cache only.
  void Read(int64_t offset, std::span<char> out) override {
    if (direct_ && offset % kDirectBlock == 0 && out.size() % kDirectBlock == 0 &&
        reinterpret_cast<uintptr_t>(out.data()) % kDirectBlock == 0) {
      const ssize_t n = ::pread(direct_fd_, out.data(), out.size(), offset);
      if (n == static_cast<ssize_t>(out.size())) return;
      if (n < 0 && errno == EINVAL) direct_ = false;
      if (n > 0) {
        offset += n;
        out = out.subspan(static_cast<size_t>(n));
      }
    }
    ReadExactly(fd_, path_, offset, out);
  }
  // One preadv past the page cache when every part is whole aligned blocks
  // (a read split between tensors and the worker's buffer); a part that is
  // not, or a direct read that fails or comes back short, goes part by part.
  void ReadV(int64_t offset, std::span<const std::span<char>> parts) override {
    if (direct_ && offset % kDirectBlock == 0 && parts.size() <= kMaxParts &&
        std::ranges::all_of(parts, [](std::span<char> p) { return Aligned(p); })) {
      std::array<iovec, kMaxParts> iov{};
      size_t total = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        iov[i] = {parts[i].data(), parts[i].size()};
        total += parts[i].size();
      }
      const ssize_t n = ::preadv(direct_fd_, iov.data(), static_cast<int>(parts.size()), offset);
      if (n == static_cast<ssize_t>(total)) return;
      if (n < 0 && errno == EINVAL) direct_ = false;
    }
    FileReader::ReadV(offset, parts);
  }
  size_t direct_alignment() const override { return direct_ ? kDirectBlock : 0; }

 private:
  static constexpr size_t kDirectBlock = 4096, kMaxParts = 64;
  static bool Aligned(std::span<char> p) {
    return p.size() % kDirectBlock == 0 &&
           reinterpret_cast<uintptr_t>(p.data()) % kDirectBlock == 0;
  }
  const std::string path_;
  const int fd_;
  const int direct_fd_;  // -1 where the file system refuses O_DIRECT
  bool direct_ = direct_fd_ >= 0;
};

// Writes with O_DIRECT where the file system allows it: the disk DMAs
// straight from the staging pool, so no page-cache copy competes with
// training for memory bandwidth and CPU (measured here: dd oflag=direct 750-850
// MB/s against 390-470 MB/s buffered). Aligned runs go straight out; anything
// unaligned (the header string, a short last slot, drained chunks) goes
// through an aligned bounce buffer; Finish pads the last block and truncates.
class PosixSink final : public Sink {
 public:
  PosixSink(std::string path, bool over) : path_(std::move(path)), over_(over) {
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (over ? 0 : O_TRUNC);
    fd_ = ::open(path_.c_str(), flags | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
    if (fd_ < 0 && errno == EINVAL) {  // tmpfs and some others refuse O_DIRECT
      fd_ = ::open(path_.c_str(), flags, 0644);
    }
    if (fd_ < 0) Fail("cannot create", path_);
  }
  ~PosixSink() override {
    // No write may still go to the descriptor (or read a caller's buffer)
    // once it is closed.
    try {
      Drain();
    } catch (...) {  // an unfinished sink is discarded anyway
    }
    if (fd_ >= 0) ::close(fd_);
    if (!finished_) ::unlink(path_.c_str());
  }

  void Write(std::span<const char> data) override {
    if (!direct_) {
      PwriteAll(data);
      while (offset_ - started_ >= kWindow) {
        ::sync_file_range(fd_, started_, kWindow, SYNC_FILE_RANGE_WRITE);
        started_ += kWindow;
      }
      return;
    }
    while (!data.empty()) {
      const bool aligned = pending_ == 0 && reinterpret_cast<uintptr_t>(data.data()) % kBlock == 0;
      if (aligned && data.size() >= kBlock) {
        const size_t n = data.size() / kBlock * kBlock;
        PwriteInFlight(data.first(n));
        data = data.subspan(n);
        continue;
      }
      if (!bounce_) {
        bounce_.reset(static_cast<char*>(std::aligned_alloc(kBlock, kBounce)));
        if (!bounce_) Fail("cannot allocate an aligned write buffer", path_);
      }
      const size_t n = std::min(data.size(), kBounce - pending_);
      std::memcpy(bounce_.get() + pending_, data.data(), n);
      pending_ += n;
      data = data.subspan(n);
      if (pending_ == kBounce) FlushBounce(false);
    }
  }

  // Whole blocks from aligned memory go out as one pwrite (pwritev for a
  // buffer in parts) on a writer of their own, kQueueWriters of them at
  // once, and one more waits its turn: the disk always has writes to do.
  // Anything else is written at once, after the queued writes.
  size_t Queue(std::span<const char> data) override {
    const std::array<std::span<const char>, 1> parts{data};
    return QueueV(parts);
  }

  size_t QueueV(std::span<const std::span<const char>> parts) override {
    // Whole blocks waiting in the bounce buffer (the header) go out on their
    // own, so that the slot after them is queued as one write from its own
    // memory rather than copied into the bounce buffer.
    if (direct_ && pending_ > 0 && pending_ % kBlock == 0 && queued_.empty()) FlushBounce(false);
    const bool whole = direct_ && pending_ == 0 && !parts.empty() && parts.size() <= kMaxParts &&
                       std::ranges::all_of(parts, WholeBlocks);
    if (!whole) {
      const size_t done = Drain();
      for (const std::span<const char> part : parts) Write(part);
      return done + 1;
    }
    if (!queue_writers_) queue_writers_ = std::make_unique<WorkerPool>(kQueueWriters);
    std::vector<iovec> iov;
    size_t bytes = 0;
    for (const std::span<const char> part : parts) {
      iov.push_back({const_cast<char*>(part.data()), part.size()});  // pwritev only reads it
      bytes += part.size();
    }
    const int64_t offset = offset_;
    queued_.push_back(queue_writers_->Submit(
        [this, iov = std::move(iov), offset]() mutable { PwritevAt(iov, offset); }));
    Advance(bytes);
    size_t done = 0;
    while (!queued_.empty() &&
           (queued_.size() > kQueueWriters ||
            queued_.front().wait_for(std::chrono::seconds(0)) == std::future_status::ready)) {
      SettleFront();
      ++done;
    }
    return done;
  }

  size_t Drain() override {
    const size_t done = queued_.size();
    while (!queued_.empty()) SettleFront();
    return done;
  }

  void Finish() override {
    Drain();
    if (direct_ && pending_ > 0) FlushBounce(true);
    // A file written over keeps the retired shard's bytes past the new end.
    if ((over_ || size_ != offset_) && ::ftruncate(fd_, size_) != 0)
      Fail("ftruncate failed", path_);
    if (::fdatasync(fd_) != 0) Fail("fdatasync failed", path_);
    if (::close(fd_) != 0) {
      fd_ = -1;
      Fail("close failed", path_);
    }
    fd_ = -1;
    finished_ = true;
  }

 private:
  static constexpr size_t kBlock = 4096, kBounce = 4 << 20;
  // Parts of one queued buffer: far under IOV_MAX (1024); a live chunk has
  // a few (engine_live.cc).
  static constexpr size_t kMaxParts = 64;
  static bool WholeBlocks(std::span<const char> p) {
    return !p.empty() && p.size() % kBlock == 0 &&
           reinterpret_cast<uintptr_t>(p.data()) % kBlock == 0;
  }
  static constexpr size_t kInFlight = 4, kMinPiece = 1 << 20;
  // Queued 8 MiB slots, each one pwrite, two at a time with no gap between
  // them: 2.13-2.22 GB/s (4 GB, three alternated rounds, Intel VM), against
  // 1.80-2.01 for each slot as four 2 MiB pieces at once, waiting for all
  // four before the next slot. Four at a time ran alike (1.99-2.22); four 2
  // MiB or 4 MiB pieces at a time without the wait 2.05-2.09.
  static constexpr size_t kQueueWriters = 2;
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };

  void PwriteAll(std::span<const char> data) {
    PwriteAt(data, offset_);
    Advance(data.size());
  }

  void Advance(size_t bytes) {
    offset_ += static_cast<int64_t>(bytes);
    size_ += static_cast<int64_t>(bytes);
  }

  // One aligned run as up to kInFlight pwrites at once, the calling thread
  // writing the first piece: a virtio disk given one 8 MiB O_DIRECT write
  // at a time wrote 1.31 GB/s, four at a time 1.41 and eight 2 MiB ones
  // 1.47 (fio, 1 GB, Intel VM).
  void PwriteInFlight(std::span<const char> data) {
    const size_t blocks = data.size() / kBlock;
    const size_t pieces = std::clamp<size_t>(data.size() / kMinPiece, 1, kInFlight);
    const size_t per_piece = (blocks + pieces - 1) / pieces * kBlock;
    if (pieces > 1 && !writers_) writers_ = std::make_unique<WorkerPool>(kInFlight - 1);
    std::vector<std::future<void>> others;
    for (size_t at = per_piece; at < data.size(); at += per_piece) {
      const auto piece = data.subspan(at, std::min(per_piece, data.size() - at));
      const int64_t offset = offset_ + static_cast<int64_t>(at);
      others.push_back(writers_->Submit([this, piece, offset] { PwriteAt(piece, offset); }));
    }
    std::exception_ptr first_error;
    try {
      PwriteAt(data.first(std::min(per_piece, data.size())), offset_);
    } catch (...) {
      first_error = std::current_exception();
    }
    for (std::future<void>& f : others) {
      try {
        f.get();
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
    }
    if (first_error) std::rethrow_exception(first_error);
    Advance(data.size());
  }

  // Waits for the oldest queued write. When it failed, waits for the
  // others too, so that none is left reading a buffer the caller frees.
  void SettleFront() {
    std::future<void> oldest = std::move(queued_.front());
    queued_.pop_front();
    try {
      oldest.get();
    } catch (...) {
      for (std::future<void>& f : queued_) f.wait();
      queued_.clear();
      throw;
    }
  }

  void PwriteAt(std::span<const char> data, int64_t offset) const {
    while (!data.empty()) {
      const ssize_t n = ::pwrite(fd_, data.data(), data.size(), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        Fail(fmt::format("write of {} bytes at offset {} failed", data.size(), offset), path_);
      offset += n;
      data = data.subspan(static_cast<size_t>(n));
    }
  }

  // All of `iov` at `offset`, resuming after a short write.
  void PwritevAt(std::vector<iovec>& iov, int64_t offset) const {
    size_t first = 0;
    while (first < iov.size()) {
      const ssize_t n =
          ::pwritev(fd_, iov.data() + first, static_cast<int>(iov.size() - first), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        size_t left = 0;
        for (size_t i = first; i < iov.size(); ++i) left += iov[i].iov_len;
        Fail(fmt::format("write of {} bytes at offset {} failed", left, offset), path_);
      }
      offset += n;
      for (auto left = static_cast<size_t>(n); left > 0 && first < iov.size();) {
        const size_t take = std::min(left, iov[first].iov_len);
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
        iov[first].iov_len -= take;
        left -= take;
        if (iov[first].iov_len == 0) ++first;
      }
    }
  }

  // Writes the whole blocks of the bounce buffer; `last` pads the tail with
  // zeros to a block (Finish truncates them away) and keeps the true size.
  void FlushBounce(bool last) {
    size_t n = pending_ / kBlock * kBlock;
    const size_t tail = pending_ - n;
    if (last && tail > 0) {
      std::memset(bounce_.get() + pending_, 0, kBlock - tail);
      n += kBlock;
    }
    const int64_t true_size = size_ + static_cast<int64_t>(pending_);
    PwriteAll(std::span<const char>(bounce_.get(), n));
    if (last) {
      size_ = true_size;
      pending_ = 0;
      return;
    }
    std::memmove(bounce_.get(), bounce_.get() + n, tail);
    pending_ = tail;
  }

  std::string path_;
  const bool over_;
  int fd_ = -1;
  bool direct_ = false;
  int64_t offset_ = 0, started_ = 0;
  int64_t size_ = 0;  // bytes of the file, padding excluded
  std::unique_ptr<char, FreeDeleter> bounce_;
  size_t pending_ = 0;
  bool finished_ = false;
  // The other pieces' writers, started with the first run that has more
  // than one piece. Every PwriteInFlight waits for its pieces, so none is
  // in flight when the sink closes its file.
  std::unique_ptr<WorkerPool> writers_;
  std::deque<std::future<void>> queued_;  // Queue's writes, oldest first
  std::unique_ptr<WorkerPool> queue_writers_;
};

}  // namespace

std::unique_ptr<FileReader> OpenFileReader(std::string path) {
  return std::make_unique<PosixFileReader>(std::move(path));
}

std::unique_ptr<Sink> CreateSink(std::string path, bool over) {
  return std::make_unique<PosixSink>(std::move(path), over);
}

}  // namespace fmstack::ckpt::posix
