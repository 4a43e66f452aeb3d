#include "util/dir_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "util/error.h"

namespace fmstack {

DirLock::DirLock(const std::string& dir, const std::string& name, const std::string& what) {
  const std::string path = dir + "/" + name;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot open the lock: {}", path, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char buf[32] = {};
    (void)!::pread(fd_, buf, sizeof buf - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (e == EWOULDBLOCK) {
      throw Error(
          fmt::format("{} is in use by another {} (pid {}); wait for it to end or use "
                      "another directory",
                      dir, what, std::string(buf).empty() ? "unknown" : std::string(buf)));
    }
    throw Error(fmt::format("{}: flock: {}", path, std::strerror(e)));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; only the message of a second run is poorer.
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace fmstack
