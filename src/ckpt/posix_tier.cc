// ckpt: the POSIX directory tier. Data goes through large sequential pwrites,
// with O_DIRECT where the file system takes it. Without it, writeback of
// each window is started at once (sync_file_range) so that the disk is busy
// from the first window and the final fdatasync finds little left to do.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/tier.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/worker_pool.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kWindow = 32 << 20;

[[noreturn]] void Fail(const std::string& what, const std::string& path) {
  throw Error(fmt::format("{}: {}: {}", path, what, std::strerror(errno)));
}

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
  size_t direct_alignment() const override { return direct_ ? kDirectBlock : 0; }

 private:
  static constexpr size_t kDirectBlock = 4096;
  const std::string path_;
  const int fd_;
  const int direct_fd_;  // -1 where the file system refuses O_DIRECT
  bool direct_ = direct_fd_ >= 0;
};

void FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) Fail("cannot open directory to fsync it", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) Fail("fsync of directory failed", dir);
}

// Writes with O_DIRECT where the file system allows it: the disk DMAs
// straight from the staging pool, so no page-cache copy competes with
// training for memory bandwidth and CPU (measured here: dd oflag=direct 750-850
// MB/s against 390-470 MB/s buffered). Aligned runs go straight out; anything
// unaligned (the header string, a short last slot, drained chunks) goes
// through an aligned bounce buffer; Finish pads the last block and truncates.
class PosixSink final : public Sink {
 public:
  explicit PosixSink(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_DIRECT,
                 0644);
    direct_ = fd_ >= 0;
    if (fd_ < 0 && errno == EINVAL) {  // tmpfs and some others refuse O_DIRECT
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
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

  // Whole blocks from an aligned buffer go out as one pwrite on a writer
  // of their own, kQueueWriters of them at once, and one more waits its
  // turn: the disk always has writes to do. Anything else is written at
  // once, after the queued writes.
  size_t Queue(std::span<const char> data) override {
    const bool whole = direct_ && pending_ == 0 && !data.empty() && data.size() % kBlock == 0 &&
                       reinterpret_cast<uintptr_t>(data.data()) % kBlock == 0;
    if (!whole) {
      const size_t done = Drain();
      Write(data);
      return done + 1;
    }
    if (!queue_writers_) queue_writers_ = std::make_unique<WorkerPool>(kQueueWriters);
    const int64_t offset = offset_;
    queued_.push_back(queue_writers_->Submit([this, data, offset] { PwriteAt(data, offset); }));
    Advance(data.size());
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
    if (size_ != offset_ && ::ftruncate(fd_, size_) != 0) Fail("ftruncate failed", path_);
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

class PosixTier final : public Tier {
 public:
  PosixTier(std::string name, std::string root) : name_(std::move(name)), root_(std::move(root)) {
    std::error_code ec;
    fs::create_directories(root_, ec);
    if (ec)
      throw Error(
          fmt::format("{}: cannot create the {} tier's directory: {}", root_, name_, ec.message()));
  }
  ~PosixTier() override {
    for (const auto& [path, fd] : readers_) ::close(fd);
  }

  const std::string& name() const override { return name_; }
  std::string Where(int64_t step, const std::string& file) const override {
    return file.empty() ? Dir(step) : Dir(step) + "/" + file;
  }

  std::unique_ptr<Sink> Create(int64_t step, const std::string& file) override {
    MakeDir(step);
    CloseReaders(Where(step, file));
    return std::make_unique<PosixSink>(Where(step, file));
  }

  void PutSmall(int64_t step, const std::string& file, const std::string& text) override {
    MakeDir(step);
    AtomicFileWriter w(Where(step, file));
    w.Write(text.data(), text.size());
    w.Commit();
  }

  void Commit(int64_t step) override {
    FsyncDir(Dir(step));
    PutSmall(step, kCommittedName, fmt::format("{}\n", step));
    FsyncDir(Dir(step));
    // `latest` is for people and scripts; restore trusts COMMITTED only.
    const std::string tmp = root_ + "/latest.tmp";
    ::unlink(tmp.c_str());
    if (::symlink(StepDirName(step).c_str(), tmp.c_str()) == 0) {
      if (::rename(tmp.c_str(), (root_ + "/latest").c_str()) != 0) ::unlink(tmp.c_str());
    }
    FsyncDir(root_);
  }

  std::vector<StepListing> List() override {
    std::vector<StepListing> out;
    DIR* d = ::opendir(root_.c_str());
    if (d == nullptr) Fail("cannot list", root_);
    while (const dirent* e = ::readdir(d)) {
      const std::optional<int64_t> step = ParseStepDirName(e->d_name);
      if (!step) continue;
      struct stat st {};
      const bool committed = ::stat(Where(*step, kCommittedName).c_str(), &st) == 0;
      out.push_back({*step, committed});
    }
    ::closedir(d);
    std::sort(out.begin(), out.end(),
              [](const StepListing& a, const StepListing& b) { return a.step < b.step; });
    return out;
  }

  std::optional<std::string> ReadSmall(int64_t step, const std::string& file) override {
    const std::string path = Where(step, file);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      if (errno == ENOENT) return std::nullopt;
      Fail("cannot open", path);
    }
    std::string text;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    ::close(fd);
    if (n < 0) Fail("read failed", path);
    return text;
  }

  std::optional<int64_t> Size(int64_t step, const std::string& file) override {
    struct stat st {};
    if (::stat(Where(step, file).c_str(), &st) != 0) return std::nullopt;
    return static_cast<int64_t>(st.st_size);
  }

  void Read(int64_t step, const std::string& file, int64_t offset, std::span<char> out) override {
    const std::string path = Where(step, file);
    ReadExactly(Reader(path), path, offset, out);
  }

  std::unique_ptr<FileReader> OpenReader(int64_t step, const std::string& file) override {
    return std::make_unique<PosixFileReader>(Where(step, file));
  }

  bool local_reads() const override { return true; }

  void Remove(int64_t step) override {
    CloseReaders(Dir(step));
    const std::string marker = Where(step, kCommittedName);
    if (::unlink(marker.c_str()) == 0) FsyncDir(Dir(step));
    std::error_code ec;
    fs::remove_all(Dir(step), ec);
    if (ec) throw Error(fmt::format("{}: cannot remove: {}", Dir(step), ec.message()));
    FsyncDir(root_);
  }

  std::string Quarantine(int64_t step) override {
    CloseReaders(Dir(step));
    const std::string dir = root_ + "/quarantine";
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string to =
        fmt::format("{}/{}.{}", dir, StepDirName(step), static_cast<int64_t>(::time(nullptr)));
    if (::rename(Dir(step).c_str(), to.c_str()) != 0)
      throw Error(fmt::format("{}: cannot move to {}: {}", Dir(step), to, std::strerror(errno)));
    FsyncDir(root_);
    return to;
  }

  void DropCache(int64_t step, const std::string& file) override {
    CloseReaders(Where(step, file));
    const int fd = ::open(Where(step, file).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }

 private:
  std::string Dir(int64_t step) const { return root_ + "/" + StepDirName(step); }

  void MakeDir(int64_t step) {
    const std::string dir = Dir(step);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) Fail("cannot create", dir);
  }

  int Reader(const std::string& path) {
    const std::lock_guard lock(mu_);
    if (const auto it = readers_.find(path); it != readers_.end()) return it->second;
    const int fd = OpenForReading(path);
    readers_[path] = fd;
    return fd;
  }

  void CloseReaders(const std::string& prefix) {
    const std::lock_guard lock(mu_);
    for (auto it = readers_.begin(); it != readers_.end();) {
      if (it->first.rfind(prefix, 0) == 0) {
        ::close(it->second);
        it = readers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::string name_, root_;
  std::mutex mu_;
  std::map<std::string, int> readers_;  // open files for Read, by path
};

}  // namespace

std::unique_ptr<FileReader> Tier::OpenReader(int64_t step, const std::string& file) {
  class ViaTier final : public FileReader {
   public:
    ViaTier(Tier& tier, int64_t step, std::string file)
        : tier_(tier), step_(step), file_(std::move(file)) {}
    void Read(int64_t offset, std::span<char> out) override {
      tier_.Read(step_, file_, offset, out);
    }

   private:
    Tier& tier_;
    const int64_t step_;
    const std::string file_;
  };
  return std::make_unique<ViaTier>(*this, step, file);
}

std::unique_ptr<Tier> MakePosixTier(std::string name, std::string root) {
  return std::make_unique<PosixTier>(std::move(name), std::move(root));
}

CheckpointDir OpenCheckpointDir(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(path).lexically_normal();
  if (!fs::is_directory(p)) {
    throw Error(
        fmt::format("{}: not a checkpoint directory (expected a run's ckpt/ directory or "
                    "one of its step-NNNNNNNN directories)",
                    path));
  }
  const std::string name = (p.has_filename() ? p : p.parent_path()).filename().string();
  if (name.starts_with("step-") && name.size() > 5 &&
      name.find_first_not_of("0123456789", 5) == std::string::npos && name.size() <= 5 + 18) {
    return {MakePosixTier("dir", (p.has_filename() ? p : p.parent_path()).parent_path().string()),
            std::stoll(name.substr(5))};
  }
  return {MakePosixTier("dir", p.string()), std::nullopt};
}

}  // namespace fmstack::ckpt
