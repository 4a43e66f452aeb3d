#include "data/work_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "data/shard_stages.h"
#include "util/atomic_file.h"

namespace fmstack::data {
namespace {

namespace fs = std::filesystem;

void SyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(fmt::format("{}: fsync: {}", path, std::strerror(err)));
}

}  // namespace

WorkDir::WorkDir(const PipelineSpec& spec) : out(spec.out), work(spec.out + "/work") {}

std::string WorkDir::ShardA(int shard) const {
  return fmt::format("{}/a/shard-{:06}", work, shard);
}
std::string WorkDir::PartB(int part) const {
  return fmt::format("{}/b/part-{:04}", work, part);
}
std::string WorkDir::Removed() const {
  return work + "/removed.bin";
}
std::string WorkDir::StatsD(int shard) const {
  return fmt::format("{}/d/shard-{:06}.json", work, shard);
}
std::string WorkDir::OutShard(int shard) const {
  return fmt::format("{}/shard-{:06}.jsonl", out, shard);
}
std::string WorkDir::Logs() const {
  return work + "/logs";
}

bool WorkDir::Committed(char phase, int item) const {
  std::error_code ec;
  switch (phase) {
    case 'a':
      return fs::exists(ShardA(item) + "/stats.json", ec);
    case 'b':
      return fs::exists(PartB(item) + "/stats.json", ec);
    case 'c':
      return fs::exists(Removed(), ec);
    case 'd':
      return fs::exists(StatsD(item), ec);
    default:
      return false;
  }
}

int PhaseItems(const PipelineSpec& spec, char phase) {
  if (phase == 'b') return spec.partitions;
  if (phase == 'c') return 1;
  return static_cast<int>(spec.inputs.size());
}

DirCommit::DirCommit(std::string dir)
    : dir_(std::move(dir)), tmp_(fmt::format("{}.tmp.{}", dir_, ::getpid())) {
  std::error_code ec;
  fs::remove_all(tmp_, ec);
  fs::create_directories(tmp_, ec);
  if (ec) throw Error(fmt::format("{}: cannot create: {}", tmp_, ec.message()));
}

DirCommit::~DirCommit() {
  if (done_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void DirCommit::Write(const std::string& name, const void* data, size_t bytes) {
  AtomicFileWriter file(tmp_ + "/" + name);
  file.Write(data, bytes);
  file.Commit();
}

void DirCommit::Commit() {
  // Each file and the temporary directory's entries are durable already
  // (AtomicFileWriter); the rename and its parent are what is left.
  std::error_code ec;
  fs::remove_all(dir_, ec);  // an uncommitted leftover of an older attempt
  if (::rename(tmp_.c_str(), dir_.c_str()) != 0)
    throw Error(
        fmt::format("{}: cannot commit (rename from {}): {}", dir_, tmp_, std::strerror(errno)));
  done_ = true;
  SyncPath(fs::path(dir_).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

void RemoveTemporaries(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::recursive_directory_iterator(root, ec)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) doomed.push_back(e.path());
  }
  for (const fs::path& p : doomed) fs::remove_all(p, ec);
}

std::string ReadWholeFile(const std::string& path, int64_t max_bytes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw Error(fmt::format("{}: cannot read: {}", path, ec.message()));
  if (static_cast<int64_t>(size) > max_bytes)
    throw Error(fmt::format("{}: {} bytes, more than the {} expected", path, size, max_bytes));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != size) throw Error(fmt::format("{}: short read ({} of {} bytes)", path, done, size));
  return out;
}

}  // namespace fmstack::data
