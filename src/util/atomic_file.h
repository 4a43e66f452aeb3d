// util: write a file so that a crash leaves either the old file or the whole
// new one: write to `path.tmp`, fsync, rename over `path`.
#pragma once

#include <string>

namespace fmstack {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // throws Error naming path.tmp
  ~AtomicFileWriter();                          // not committed: removes the temp file
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void Write(const void* data, size_t n);
  // fsync, close, rename: the commit point.
  void Commit();

 private:
  [[noreturn]] void Fail(const char* what);
  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace fmstack
