// ckpt: a storage tier holds checkpoint directories (or object prefixes) and
// knows how to make each one durable. Two implementations: a POSIX directory
// (node-local NVMe or a shared file system such as Lustre) and an S3 bucket
// prefix. The engine only writes files sequentially, reads byte ranges, and
// commits a step by writing its COMMITTED marker last.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "util/error.h"

namespace fmstack::ckpt {

// A file being written front to back. Finish() returns once the bytes are
// durable (fdatasync; multipart upload completed). Destroying an unfinished
// sink discards it (removes the file, aborts the upload).
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void Write(std::span<const char> data) = 0;
  virtual void Finish() = 0;

  // Writes `data` after everything before it, and may return while it is
  // still being written, so that the disk is never idle between two
  // buffers. Returns how many of the buffers handed to Queue, oldest first,
  // are done with now (this one may be among them); the others must stay
  // valid and unchanged until a later Queue or Drain reports them. When a
  // queued write fails, the call that would report it throws, and by then
  // no queued write is in flight: every buffer is free. By default: Write.
  virtual size_t Queue(std::span<const char> data) {
    Write(data);
    return 1;
  }
  // Queue for one buffer in parts: consecutive bytes of the file, each part
  // from its own memory, written as one request where the sink can (the
  // POSIX sink: one pwritev, every part whole aligned blocks). All the
  // parts count as one buffer in what Queue and Drain return.
  virtual size_t QueueV(std::span<const std::span<const char>> parts) {
    const size_t done = Drain();
    for (const std::span<const char> part : parts) Write(part);
    return done + 1;
  }
  // Waits for every queued write; returns how many buffers that frees.
  // Finish drains too, but the caller wants its buffers back first.
  virtual size_t Drain() { return 0; }
};

// One reader of one file. The kernel keeps read-ahead state per open file:
// four threads going through four regions of a file in order, on one
// shared descriptor, look to it like one reader jumping about; with a
// descriptor each, each looks sequential. A cold 1 GB restore on four
// threads took 0.80-1.25 s the first way, 0.69-0.98 s the second (dd on
// the same file 0.70-1.04 s).
class FileReader {
 public:
  virtual ~FileReader() = default;
  // Reads exactly out.size() bytes at `offset`, as Tier::Read does.
  virtual void Read(int64_t offset, std::span<char> out) = 0;
  // Reads consecutive bytes from `offset` into each part in turn: one
  // request where the reader can (a direct reader, every part aligned),
  // so that a read split between tensors and a buffer stays one large read.
  virtual void ReadV(int64_t offset, std::span<const std::span<char>> parts) {
    for (const std::span<char> part : parts) {
      Read(offset, part);
      offset += static_cast<int64_t>(part.size());
    }
  }
  // Nonzero when a read whose offset, length and buffer are multiples of
  // it bypasses the page cache (O_DIRECT): such a reader wants few large
  // reads into aligned memory, not many small ones.
  virtual size_t direct_alignment() const { return 0; }
};

struct StepListing {
  int64_t step = 0;
  bool committed = false;
};

// Tier::Remove of a step directory holding files the engine did not write.
class ForeignStep : public Error {
 public:
  using Error::Error;
};

// Who writes a tier: one job. `id` is what makes two writers the same job
// (`fmstack run`: the run directory); `describe` names it in errors.
struct TierOwner {
  std::string id;
  std::string describe;
};

class Tier {
 public:
  virtual ~Tier() = default;
  // Claims the tier for `owner` before anything is written: a tier another
  // job claimed is refused (an Error naming both jobs), and with `lock` this
  // process holds it for its lifetime, so that a second writer of the same
  // job (two processes saving into one directory) is refused too. A no-op
  // where the store cannot say (object stores).
  virtual void Claim(const TierOwner& /*owner*/, bool /*lock*/) {}
  // "local", "shared", "object": what the logs and `ckpt ls` call it.
  virtual const std::string& name() const = 0;
  // Path or URL of a file of a step, for messages: "/nvme/job/step-00000100/manifest.json".
  virtual std::string Where(int64_t step, const std::string& file) const = 0;

  virtual std::unique_ptr<Sink> Create(int64_t step, const std::string& file) = 0;
  // Writes a small file durably and atomically (temp + rename, or one PUT).
  virtual void PutSmall(int64_t step, const std::string& file, const std::string& text) = 0;
  // Makes the step's directory durable, then writes COMMITTED: the commit point.
  virtual void Commit(int64_t step) = 0;

  // Every step directory, committed or not, oldest first.
  virtual std::vector<StepListing> List() = 0;
  virtual std::optional<std::string> ReadSmall(int64_t step, const std::string& file) = 0;
  // Bytes of a file, or nullopt when it does not exist.
  virtual std::optional<int64_t> Size(int64_t step, const std::string& file) = 0;
  // Reads exactly out.size() bytes at `offset`; throws Error naming the file
  // and what it got when the file is shorter.
  virtual void Read(int64_t step, const std::string& file, int64_t offset, std::span<char> out) = 0;
  // A reader of its own for one file, for a thread that reads a region of it
  // in order; by default, Read by another name.
  virtual std::unique_ptr<FileReader> OpenReader(int64_t step, const std::string& file);
  // True for files on this machine: restore then reads several chunks at
  // once in small pieces. An object store wants few large ranged reads,
  // overlapped with the work, instead.
  virtual bool local_reads() const { return false; }
  // Removes COMMITTED first, so that a crash halfway leaves an uncommitted
  // directory (collected on the next start), never a committed partial one.
  virtual void Remove(int64_t step) = 0;
  // Moves a copy that failed verification out of the way, keeping its bytes
  // for a post-mortem; returns where it went, or "" when the tier cannot
  // move it (object stores: it stays, and is overwritten if the run saves
  // that step again).
  virtual std::string Quarantine(int64_t /*step*/) { return ""; }
  // Thread-safe: makes the tier's I/O in flight give up soon (a hung object
  // store at exit); a no-op where I/O cannot hang.
  virtual void Cancel() {}
  // Drops a file from the page cache (cold-restore measurements); a no-op
  // where there is none.
  virtual void DropCache(int64_t /*step*/, const std::string& /*file*/) {}
  // Files of removed steps that the tier keeps for the next save to write
  // over (the POSIX tier's retired shards); none where it keeps none.
  struct Retired {
    int64_t files = 0, bytes = 0;
    std::string where;
  };
  virtual Retired RetiredFiles() { return {}; }
};

// A tier in a directory: `root` is created if missing.
std::unique_ptr<Tier> MakePosixTier(std::string name, std::string root);

// A checkpoint a user names by path: a tier root (holding step-* directories,
// e.g. runs/<job>/ckpt) or one step directory in it (…/ckpt/step-00000120).
// Throws Error naming the path when it is neither.
struct CheckpointDir {
  std::unique_ptr<Tier> tier;
  std::optional<int64_t> step;  // set when the path named one step
};
CheckpointDir OpenCheckpointDir(const std::string& path);

struct S3Config {
  std::string endpoint;  // "http://127.0.0.1:9000" or "https://s3.us-east-1.amazonaws.com"
  std::string bucket;
  std::string prefix;  // key prefix, e.g. "jobs/gpt-mini"
  std::string region = "us-east-1";
  std::string access_key, secret_key;
  int64_t part_bytes = 16 << 20;  // multipart part size (S3 needs >= 5 MiB but the last)
  int max_attempts = 5;           // per request, with exponential backoff on 5xx / network
  double backoff_seconds = 0.2;
  double connect_timeout_seconds = 10;
  double request_timeout_seconds = 120;  // one request, transfer included
  double stall_seconds = 30;             // a transfer below 1 KiB/s this long is dropped
};
// Reads AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_DEFAULT_REGION when
// the config leaves them empty.
std::unique_ptr<Tier> MakeS3Tier(std::string name, S3Config config);

}  // namespace fmstack::ckpt
