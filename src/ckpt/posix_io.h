// ckpt: the POSIX tier's files, for posix_tier.cc. A sink writes a shard with
// large sequential pwrites (O_DIRECT where the file system takes it), a
// reader reads one back (O_DIRECT for whole aligned blocks). Internal to ckpt/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ckpt/tier.h"

namespace fmstack::ckpt::posix {

// Throws Error "<path>: <what>: <strerror(errno)>".
[[noreturn]] void Fail(const std::string& what, const std::string& path);

void FsyncDir(const std::string& dir);

std::unique_ptr<FileReader> OpenFileReader(std::string path);

// A sink that writes `path` from its first byte. `over`: the file holds a
// retired shard whose blocks the new one writes over (no O_TRUNC: the
// blocks stay allocated); Finish() truncates it to what was written.
// Without `over` the file is created or truncated.
std::unique_ptr<Sink> CreateSink(std::string path, bool over);

}  // namespace fmstack::ckpt::posix
