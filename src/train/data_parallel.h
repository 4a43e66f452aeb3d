// train: data parallelism over a comm::Communicator. Gradients are reduced in
// buckets of whole GradReadyGroups, launched on a communication thread as
// soon as the backward pass finishes a bucket, so that reducing the last
// layers overlaps computing the first ones (as PyTorch DDP does).
//
//   DDP    every rank keeps everything; buckets are all-reduced.
//   ZeRO-1 optimizer state sharded: rank r owns shard r of every bucket;
//          buckets are reduce-scattered after the last micro-batch, AdamW
//          runs on the shard, and the updated parameters are all-gathered.
//   ZeRO-2 as ZeRO-1, and gradients sharded too: every micro-batch's
//          gradients are reduce-scattered and summed into the shard, so only
//          the shard persists across micro-batches.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "gpt/layout.h"
#include "train/optimizer.h"
#include "util/huge_pages.h"

namespace fmstack::train {

enum class DpMode { kDdp, kZero1, kZero2 };
// "ddp", "zero1", "zero2"; throws Error listing the choices.
DpMode ParseDpMode(const std::string& s);
const char* DpModeName(DpMode m);

struct DpConfig {
  DpMode mode = DpMode::kDdp;
  size_t bucket_bytes = 4 << 20;
  bool overlap = true;  // false: reduce every bucket after the backward pass
};

// Seconds spent on communication in the last step.
struct CommTimes {
  double busy = 0;     // the communication thread working (overlapped or not)
  double exposed = 0;  // the training thread waiting for it
};

class DataParallel {
 public:
  DataParallel(comm::Communicator& comm, const gpt::ParamLayout& layout, const OptimConfig& optim,
               DpConfig config);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The hook for Model::Backward of one micro-batch (may be empty).
  std::function<void(int)> BackwardHook(std::span<float> grads, bool last_micro);
  // After each micro-batch's Backward: waits for its reductions. ZeRO-2 then
  // zeroes `grads`, which is only scratch for one micro-batch.
  void AfterBackward(std::span<float> grads, bool last_micro);
  // Clips by the global norm and applies AdamW; every rank ends with the same
  // params. `full` is the replicated optimizer (DDP only). Returns the norm.
  double Step(std::span<float> params, std::span<float> grads, AdamW* full, int64_t step,
              double lr);
  // ZeRO: every rank's owned parameter spans, as they are in its `params`,
  // gathered into every rank's `params` (collective; bytes are copied, so
  // the result is exact). No-op under DDP.
  void GatherParams(std::span<float> params);
  // Sum of a scalar over ranks.
  double SumAcrossRanks(double x);
  // Every rank's x, in rank order.
  std::vector<double> AllValues(double x);
  // Every rank's words, rank-major (collective; bit-exact: gathered, not reduced).
  std::vector<uint64_t> AllWords(std::span<const uint64_t> mine);

  bool sharded() const { return config_.mode != DpMode::kDdp; }
  // ZeRO: the flat parameter ranges whose moments this rank owns, and where
  // they sit in the shard vectors (the checkpoint saves them as they are).
  struct OwnedSpan {
    size_t flat = 0, shard = 0, count = 0;
  };
  std::vector<OwnedSpan> OwnedSpans() const;
  // The flat ranges OwnedSpans() gives on `rank` of a group of `world`
  // ranks, without one: where a rank's shard lies in another world size.
  static std::vector<comm::Range> OwnedRangesOf(const gpt::ParamLayout& layout,
                                                const DpConfig& config, int world, int rank);
  std::span<float> shard_m() { return shard_m_; }
  std::span<float> shard_v() { return shard_v_; }

  CommTimes TakeTimes();
  comm::Communicator& comm() { return comm_; }

 private:
  struct Bucket {
    std::vector<comm::Range> ranges;  // flat parameter ranges, packed in order
    int last_group = 0;               // the bucket is ready when this group is
    size_t count = 0;                 // packed elements
    comm::Range shard;                // this rank's part of the packed bucket
    size_t shard_offset = 0;          // where that part starts in the shard vectors
    HugeFloats packed;                // a bucket is megabytes, filled every step
  };

  static std::vector<Bucket> MakeBuckets(const gpt::ParamLayout& layout, size_t bucket_bytes);
  void Enqueue(std::function<void()> task);
  void Drain();
  void Worker();
  void Launch(Bucket& b, std::span<float> grads);
  // The owned spans of `params` into shard_params_, and every rank's
  // shard_params_ back into `params`.
  void LoadShard(std::span<const float> params);
  void GatherShards(std::span<float> params);
  // fn(flat offset, packed offset, count) over the part [lo, hi) of a bucket.
  template <typename Fn>
  static void ForEachSpan(const Bucket& b, size_t lo, size_t hi, Fn&& fn);

  comm::Communicator& comm_;
  OptimConfig optim_;
  DpConfig config_;
  std::vector<Bucket> buckets_;
  HugeFloats shard_grads_, shard_params_, shard_m_, shard_v_;
  std::vector<uint8_t> shard_decay_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  int running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  double busy_ = 0, exposed_ = 0;
  std::thread thread_;
};

}  // namespace fmstack::train
