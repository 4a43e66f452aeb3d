// ckpt: the POSIX directory tier: one directory per step under the tier's
// root, COMMITTED written last. A retired step's shard files are kept in
// <root>/.recycle for the next save to write over (see Recycle below).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/posix_io.h"
#include "ckpt/tier.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

namespace fs = std::filesystem;
using posix::Fail;
using posix::FsyncDir;

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
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  const std::string& name() const override { return name_; }

  void Claim(const TierOwner& owner, bool lock) override {
    const std::string path = root_ + "/OWNER";
    // Written whole under another name, then linked: a reader sees all of
    // it or none, and of two jobs claiming at once one wins.
    const nlohmann::json record = {{"id", owner.id}, {"job", owner.describe}, {"pid", ::getpid()}};
    const std::string tmp = fmt::format("{}.{}", path, ::getpid());
    {
      AtomicFileWriter w(tmp);
      const std::string text = record.dump() + "\n";
      w.Write(text.data(), text.size());
      w.Commit();
    }
    const bool linked = ::link(tmp.c_str(), path.c_str()) == 0;
    const int link_errno = errno;
    ::unlink(tmp.c_str());
    if (linked) FsyncDir(root_);
    if (!linked && link_errno != EEXIST) Fail("cannot create", path);
    const std::string mine = ReadOwner(path);
    const nlohmann::json theirs = nlohmann::json::parse(mine, nullptr, false);
    if (theirs.is_discarded() || !theirs.is_object() || !theirs["id"].is_string())
      throw Error(
          fmt::format("{}: not an owner record (expected fmstack's JSON with an \"id\"); "
                      "remove it to give the directory to {}",
                      path, owner.describe));
    if (theirs["id"].get<std::string>() != owner.id)
      throw Error(fmt::format(
          "{} is the checkpoint directory of {}; this job is {}: two jobs in one checkpoint "
          "directory overwrite each other's steps. Point the checkpoint at another directory, or "
          "remove {} to give this one (and its checkpoints) to this job",
          root_, theirs.value("job", std::string("another job")), owner.describe, path));
    if (!lock || lock_fd_ >= 0) return;
    const std::string lock_path = root_ + "/.lock";
    lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock_fd_ < 0) Fail("cannot open", lock_path);
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      char pid[32] = {};
      (void)!::pread(lock_fd_, pid, sizeof pid - 1, 0);
      ::close(lock_fd_);
      lock_fd_ = -1;
      // Another handle of this process (a loader beside its saver) is this
      // process's own business; only other processes are kept out.
      if (std::to_string(::getpid()) == pid) return;
      throw Error(
          fmt::format("{} is being written by another process of {} (pid {}): two "
                      "writers would interleave their steps",
                      root_, owner.describe, pid[0] != 0 ? pid : "unknown"));
    }
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) < 0) {
      // The lock holds without the pid; only a second writer's message is poorer.
    }
  }
  std::string Where(int64_t step, const std::string& file) const override {
    return file.empty() ? Dir(step) : Dir(step) + "/" + file;
  }

  std::unique_ptr<Sink> Create(int64_t step, const std::string& file) override {
    MakeDir(step);
    const std::string path = Where(step, file);
    return posix::CreateSink(path, TakeRecycled(file, path));
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
    // Opened for each read and closed after it: no caller reads a posix
    // tier this way in a loop (the engine and restore use OpenReader), and
    // a cached descriptor would hold a removed shard's disk space.
    posix::OpenFileReader(Where(step, file))->Read(offset, out);
  }

  std::unique_ptr<FileReader> OpenReader(int64_t step, const std::string& file) override {
    return posix::OpenFileReader(Where(step, file));
  }

  bool local_reads() const override { return true; }

  void Remove(int64_t step) override {
    // A step directory with a file the engine did not write is not ours
    // (another program's, or a user's directory that happens to be named
    // so): it is left alone, and the caller says so.
    if (DIR* d = ::opendir(Dir(step).c_str())) {
      std::string foreign;
      while (const dirent* e = ::readdir(d)) {
        const std::string_view n = e->d_name;
        if (n != "." && n != ".." && !IsEngineFileName(n)) foreign = n;
      }
      ::closedir(d);
      if (!foreign.empty())
        throw ForeignStep(fmt::format("{}: holds '{}', which fmstack did not write: left alone",
                                      Dir(step), foreign));
    }
    const std::string marker = Where(step, kCommittedName);
    bool uncommitted = ::unlink(marker.c_str()) == 0;
    if (uncommitted) {
      FsyncDir(Dir(step));
    } else {
      uncommitted = errno == ENOENT;
    }
    // Only a step that can no longer be taken for committed, even after a
    // crash, gives its files to be written over.
    if (uncommitted) Recycle(step);
    std::error_code ec;
    fs::remove_all(Dir(step), ec);
    if (ec) throw Error(fmt::format("{}: cannot remove: {}", Dir(step), ec.message()));
    FsyncDir(root_);
  }

  std::string Quarantine(int64_t step) override {
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

  Retired RetiredFiles() override {
    Retired r{.where = RecycleDir()};
    for (const std::string& name : RankFilesIn(r.where)) {
      struct stat st {};
      if (::lstat((r.where + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      ++r.files;
      r.bytes += static_cast<int64_t>(st.st_size);
    }
    return r;
  }

  void DropCache(int64_t step, const std::string& file) override {
    const int fd = ::open(Where(step, file).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }

 private:
  std::string Dir(int64_t step) const { return root_ + "/" + StepDirName(step); }
  std::string RecycleDir() const { return root_ + "/.recycle"; }

  // Moves the shard files of a step that is being removed to .recycle, one
  // per name, for the next save of that name to write over (Create), as
  // databases recycle their log files. On the Zen 5 VM's ext4 (mounted
  // with online discard) a 4 GB shard written into a fresh file ran at
  // 1.40-1.74 GB/s, over an existing file at 2.30-3.24, and deleting one
  // took 1.38 s of trim (docs/ckpt.md). The disk holds one retired step
  // more between saves; a save never needs more than before.
  //
  // A file that anyone still has open (a reader in this process or in
  // another) is deleted instead: its reader would otherwise read the next
  // save's bytes. The kernel grants a write lease only to the sole holder
  // of a file, and the lease is held across the rename. Where leases are
  // refused (NFS, a file of another user) or a name is already in
  // .recycle, the file goes with its directory, as before. Failures here
  // only cost the reuse.
  void Recycle(int64_t step) {
    const std::string dir = Dir(step), bin = RecycleDir();
    if (::mkdir(bin.c_str(), 0755) != 0 && errno != EEXIST) return;
    for (const std::string& name : RankFilesIn(dir)) {
      const std::string from = dir + "/" + name;
      // O_NONBLOCK: an open never waits for another holder's lease.
      const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
      if (fd < 0) continue;
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
        ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, (bin + "/" + name).c_str(), RENAME_NOREPLACE);
        ::fcntl(fd, F_SETLEASE, F_UNLCK);
      }
      ::close(fd);
    }
  }

  // The names in `dir` that RankFileName gives; none when it is missing.
  static std::vector<std::string> RankFilesIn(const std::string& dir) {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d))
        if (IsRankFileName(e->d_name)) names.emplace_back(e->d_name);
      ::closedir(d);
    }
    return names;
  }

  // Moves a retired shard named `file` from .recycle to `path` when there
  // is one and `path` does not exist yet.
  bool TakeRecycled(const std::string& file, const std::string& path) const {
    if (!IsRankFileName(file)) return false;
    const std::string from = RecycleDir() + "/" + file;
    return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0;
  }

  void MakeDir(int64_t step) {
    const std::string dir = Dir(step);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) Fail("cannot create", dir);
  }

  // The owner record, at most 64 KiB of it (a larger one is not ours).
  static std::string ReadOwner(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) Fail("cannot open", path);
    std::string text(65536, '\0');
    const ssize_t n = ::read(fd, text.data(), text.size());
    ::close(fd);
    if (n < 0) Fail("cannot read", path);
    text.resize(static_cast<size_t>(n));
    return text;
  }

  std::string name_, root_;
  int lock_fd_ = -1;  // Claim with lock: held for the tier's lifetime
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
