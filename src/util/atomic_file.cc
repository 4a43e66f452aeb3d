#include "util/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace fmstack {

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) Fail("cannot create");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::Write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) Fail("write failed");
    p += w, n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::Commit() {
  if (::fsync(fd_) != 0) Fail("fsync failed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    Fail("close failed");
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) Fail("rename failed");
  // The rename itself is durable only once the directory is: what is
  // written after this commit must not survive a crash that loses it.
  const std::string dir = path_.find('/') == std::string::npos
                              ? std::string(".")
                              : path_.substr(0, std::max<size_t>(path_.rfind('/'), 1));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const int err = errno;
    if (dfd >= 0) ::close(dfd);
    throw Error(
        fmt::format("{}: fsync of the directory after the rename: {}", dir, std::strerror(err)));
  }
  ::close(dfd);
}

void AtomicFileWriter::Fail(const char* what) {
  throw Error(fmt::format("{}: {}: {}", tmp_, what, std::strerror(errno)));
}

}  // namespace fmstack
