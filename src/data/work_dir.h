// data: the pipeline's work directory: where each phase's items live and
// how they are committed. Private to data/.
//
// A committed item is a directory renamed into place after every file in
// it was written and fsynced (CommitDir), or a single file written through
// AtomicFileWriter. A killed worker leaves at most a "*.tmp.PID" directory,
// which RemoveTemporaries deletes before the next attempt.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data/pipeline_spec.h"
#include "util/error.h"

namespace fmstack::data {

struct WorkDir {
  std::string out, work;
  explicit WorkDir(const PipelineSpec& spec);

  std::string ShardA(int shard) const;    // work/a/shard-NNNNNN
  std::string PartB(int part) const;      // work/b/part-NNNN
  std::string Removed() const;            // work/removed.bin
  std::string StatsD(int shard) const;    // work/d/shard-NNNNNN.json (the commit marker)
  std::string OutShard(int shard) const;  // out/shard-NNNNNN.jsonl
  std::string Logs() const;               // work/logs
  bool Committed(char phase, int item) const;
};

// Items of a phase: input shards (a, d) or key partitions (b).
int PhaseItems(const PipelineSpec& spec, char phase);

// Writes files into DIR.tmp.PID (each through AtomicFileWriter), then renames
// it to DIR: the commit point.
class DirCommit {
 public:
  explicit DirCommit(std::string dir);
  ~DirCommit();  // not committed: removes the temporary directory
  DirCommit(const DirCommit&) = delete;
  DirCommit& operator=(const DirCommit&) = delete;

  void Write(const std::string& name, const void* data, size_t bytes);
  void Write(const std::string& name, const std::string& text) {
    Write(name, text.data(), text.size());
  }
  void Commit();

 private:
  std::string dir_, tmp_;
  bool done_ = false;
};

void RemoveTemporaries(const std::string& root);

// Fixed-size records from a file written by DirCommit::Write; throws Error
// naming the file when its size is not a whole number of records.
std::string ReadWholeFile(const std::string& path, int64_t max_bytes);

template <class T>
std::vector<T> ReadRecords(const std::string& path) {
  const std::string bytes = ReadWholeFile(path, int64_t{1} << 36);
  if (bytes.size() % sizeof(T) != 0) {
    throw Error(fmt::format("{}: {} bytes is not a whole number of {}-byte records", path,
                            bytes.size(), sizeof(T)));
  }
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

template <class T>
void WriteRecords(DirCommit& dir, const std::string& name, const std::vector<T>& records) {
  dir.Write(name, records.data(), records.size() * sizeof(T));
}

}  // namespace fmstack::data
