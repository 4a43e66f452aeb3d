// util: one process per directory. DirLock holds an exclusive flock on
// DIR/<name> for its lifetime and records its pid there; a second holder
// gets an error naming the first one's pid. The kernel drops the lock when
// the process dies, so a crashed run never leaves a stale lock.
#pragma once

#include <string>

namespace fmstack {

class DirLock {
 public:
  // Throws Error naming the directory and the holder's pid when it is taken.
  DirLock(const std::string& dir, const std::string& name, const std::string& what);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace fmstack
