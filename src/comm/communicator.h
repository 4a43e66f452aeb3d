// comm: collectives across the ranks of a job. A Communicator is one group of
// ranks with one generation number; after a failure the survivors throw it
// away and build a new one (new membership, new generation) through the same
// store, without restarting their processes.
//
// Ranks are numbered node-major (rank = node * procs_per_node + local_rank),
// so that the shards of one node are contiguous and hierarchical algorithms
// can move a node's data as one block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/error.h"

namespace fmstack::comm {

enum class DType : uint8_t { kF32, kBf16 };
enum class ReduceOp : uint8_t { kSum, kAvg };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);

// bfloat16 as its 16 raw bits; conversions round to nearest even.
struct Bf16 {
  uint16_t bits = 0;
};
Bf16 ToBf16(float f);
float FromBf16(Bf16 b);

// An untyped buffer of `count` elements of `dtype`.
struct View {
  std::byte* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kF32;

  View() = default;
  View(std::byte* d, size_t n, DType t) : data(d), count(n), dtype(t) {}
  View(std::span<float> s)  // NOLINT: implicit by design, like std::span
      : data(reinterpret_cast<std::byte*>(s.data())), count(s.size()), dtype(DType::kF32) {}
  View(std::span<Bf16> s)  // NOLINT
      : data(reinterpret_cast<std::byte*>(s.data())), count(s.size()), dtype(DType::kBf16) {}

  size_t bytes() const { return count * DTypeSize(dtype); }
  View Sub(size_t offset, size_t n) const {
    return View(data + offset * DTypeSize(dtype), n, dtype);
  }
};

// Element range [begin, begin + count).
struct Range {
  size_t begin = 0;
  size_t count = 0;
  size_t end() const { return begin + count; }
};

// Shard i of n elements split over `parts`: the first n % parts shards get one
// element more, so sizes differ by at most one and every element has an owner.
Range ShardOf(size_t n, int parts, int i);

// All-to-all's input kept apart from its output: `in` itself, or, in place
// (`out` is `in`), a copy of it in `scratch`, so that no block is read after
// this rank has overwritten it.
View AllToAllSource(View in, View out, std::vector<std::byte>& scratch);

// A collective failed: a peer died or hung, the group was aborted, or the
// arguments were inconsistent. failed_rank() is the rank to blame (-1 when it
// is not known, e.g. a timeout with every peer alive).
class CommError : public Error {
 public:
  CommError(const std::string& message, int failed_rank)
      : Error(message), failed_rank_(failed_rank) {}
  int failed_rank() const { return failed_rank_; }

 private:
  int failed_rank_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "shm", "hierarchical": what carries the bytes.
  virtual std::string name() const = 0;

  // In place: every rank ends with the elementwise sum (or mean).
  virtual void AllReduce(View buf, ReduceOp op) = 0;
  // `in` holds n elements on every rank; `out` gets this rank's reduced
  // shard ShardOf(n, size, rank) and must have exactly that many elements.
  virtual void ReduceScatter(View in, View out, ReduceOp op) = 0;
  // `in` is this rank's shard ShardOf(out.count, size, rank); every rank's
  // `out` gets all shards in rank order.
  virtual void AllGather(View in, View out) = 0;
  virtual void Broadcast(View buf, int root) = 0;
  // `in` and `out` hold size equal blocks; block j of `in` goes to rank j,
  // and block j of `out` comes from rank j. `out` may be `in` itself (no
  // other overlap).
  virtual void AllToAll(View in, View out) = 0;
  virtual void Barrier() = 0;
  // Point to point, for peer replicas: sends `send` to rank `to` and receives
  // `recv` from rank `from` (-1: none; the peer's sizes must match). Every
  // rank of the group calls it once per round, with its own pair or none,
  // so a permutation of sends completes without deadlock.
  virtual void SendRecv(View send, int to, View recv, int from) = 0;

  // Thread-safe. Makes pending calls fail as soon as their transport notices
  // and every later call fail at once with `reason`, and tells the peers.
  virtual void Abort(const std::string& reason) = 0;
};

// A communicator between nodes whose rings also take one contiguous range
// per rank, of any size: the hierarchical communicator moves a node's block
// of shards as one.
class RangeCommunicator : public Communicator {
 public:
  // Gathers variable-sized blocks: rank r contributes `in` = ranges[r] of out.
  virtual void AllGatherRanges(View in, View out, const std::vector<Range>& ranges) = 0;
  // Reduce-scatter where rank r owns ranges[r] of `buf` (in place).
  virtual void ReduceScatterRanges(View buf, const std::vector<Range>& ranges, ReduceOp op) = 0;
};

}  // namespace fmstack::comm
