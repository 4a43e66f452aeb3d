#include "train/data_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace fmstack::train {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

DpMode ParseDpMode(const std::string& s) {
  if (s == "ddp") return DpMode::kDdp;
  if (s == "zero1") return DpMode::kZero1;
  if (s == "zero2") return DpMode::kZero2;
  throw Error(fmt::format("data-parallel mode '{}': expected \"ddp\", \"zero1\" or \"zero2\"", s));
}

const char* DpModeName(DpMode m) {
  switch (m) {
    case DpMode::kDdp:
      return "ddp";
    case DpMode::kZero1:
      return "zero1";
    case DpMode::kZero2:
      return "zero2";
  }
  return "?";
}

std::vector<DataParallel::Bucket> DataParallel::MakeBuckets(const gpt::ParamLayout& layout,
                                                            size_t bucket_bytes) {
  // Whole groups per bucket, in the order backward finishes them.
  std::vector<Bucket> buckets;
  const auto groups = layout.GradReadyGroups();
  for (size_t g = 0; g < groups.size(); ++g) {
    if (buckets.empty() || buckets.back().count * sizeof(float) >= bucket_bytes) {
      buckets.emplace_back();
    }
    Bucket& b = buckets.back();
    for (const gpt::TensorInfo& t : groups[g]) {
      b.ranges.push_back({static_cast<size_t>(t.offset), static_cast<size_t>(t.size())});
      b.count += static_cast<size_t>(t.size());
    }
    b.last_group = static_cast<int>(g);
  }
  return buckets;
}

std::vector<comm::Range> DataParallel::OwnedRangesOf(const gpt::ParamLayout& layout,
                                                     const DpConfig& config, int world, int rank) {
  std::vector<comm::Range> out;
  for (const Bucket& b : MakeBuckets(layout, config.bucket_bytes)) {
    const comm::Range shard = comm::ShardOf(b.count, world, rank);
    ForEachSpan(b, shard.begin, shard.end(), [&](size_t flat, size_t, size_t n) {
      out.push_back({flat, n});
    });
  }
  return out;
}

DataParallel::DataParallel(comm::Communicator& comm, const gpt::ParamLayout& layout,
                           const OptimConfig& optim, DpConfig config)
    : comm_(comm), optim_(optim), config_(config) {
  buckets_ = MakeBuckets(layout, config_.bucket_bytes);
  const std::vector<uint8_t> decay = DecayMask(layout);
  size_t shard_total = 0;
  for (Bucket& b : buckets_) {
    b.packed.resize(b.count);
    b.shard = comm::ShardOf(b.count, comm_.size(), comm_.rank());
    b.shard_offset = shard_total;
    shard_total += b.shard.count;
  }
  if (sharded()) {
    shard_grads_.assign(shard_total, 0.0f);
    shard_params_.assign(shard_total, 0.0f);
    shard_m_.assign(shard_total, 0.0f);
    shard_v_.assign(shard_total, 0.0f);
    shard_decay_.resize(shard_total);
    for (const Bucket& b : buckets_) {
      ForEachSpan(b, b.shard.begin, b.shard.end(), [&](size_t flat, size_t packed, size_t n) {
        std::copy_n(decay.begin() + flat, n,
                    shard_decay_.begin() + b.shard_offset + (packed - b.shard.begin));
      });
    }
  }
  if (config_.overlap) thread_ = std::thread([this] { Worker(); });
}

DataParallel::~DataParallel() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

template <typename Fn>
void DataParallel::ForEachSpan(const Bucket& b, size_t lo, size_t hi, Fn&& fn) {
  size_t packed = 0;
  for (const comm::Range& r : b.ranges) {
    const size_t a = std::max(lo, packed), e = std::min(hi, packed + r.count);
    if (a < e) fn(r.begin + (a - packed), a, e - a);
    packed += r.count;
    if (packed >= hi) break;
  }
}

// ------------------------------------------------- communication thread ---

void DataParallel::Worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    try {
      task();
    } catch (...) {
      lock.lock();
      if (!error_) error_ = std::current_exception();
      lock.unlock();
    }
    const double s = Since(start);
    lock.lock();
    busy_ += s;
    --running_;
    cv_.notify_all();
  }
}

void DataParallel::Enqueue(std::function<void()> task) {
  if (!config_.overlap) {
    const auto start = std::chrono::steady_clock::now();
    task();
    busy_ += Since(start);
    exposed_ += Since(start);
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (error_) return;  // the group is broken; Drain reports it
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void DataParallel::Drain() {
  if (!config_.overlap) return;
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  exposed_ += Since(start);
  if (error_) std::rethrow_exception(error_);
}

CommTimes DataParallel::TakeTimes() {
  std::lock_guard lock(mu_);
  const CommTimes t{busy_, exposed_};
  busy_ = exposed_ = 0;
  return t;
}

// ------------------------------------------------------------ gradients ---

void DataParallel::Launch(Bucket& b, std::span<float> grads) {
  ForEachSpan(b, 0, b.count, [&](size_t flat, size_t packed, size_t n) {
    std::memcpy(b.packed.data() + packed, grads.data() + flat, n * sizeof(float));
  });
  Bucket* bucket = &b;
  if (config_.mode == DpMode::kDdp) {
    Enqueue([this, bucket] {
      comm_.AllReduce(std::span<float>(bucket->packed), comm::ReduceOp::kSum);
    });
    return;
  }
  const bool accumulate = config_.mode == DpMode::kZero2;
  Enqueue([this, bucket, accumulate] {
    std::span<float> mine(shard_grads_.data() + bucket->shard_offset, bucket->shard.count);
    if (!accumulate) {
      comm_.ReduceScatter(std::span<float>(bucket->packed), mine, comm::ReduceOp::kSum);
      return;
    }
    // The reduced shard lands in the packed buffer's own shard position,
    // which is free scratch by then, and is added to the running sum.
    std::span<float> part(bucket->packed.data() + bucket->shard.begin, bucket->shard.count);
    comm_.ReduceScatter(std::span<float>(bucket->packed), part, comm::ReduceOp::kSum);
    for (size_t i = 0; i < part.size(); ++i) mine[i] += part[i];
  });
}

std::function<void(int)> DataParallel::BackwardHook(std::span<float> grads, bool last_micro) {
  if (!last_micro && config_.mode != DpMode::kZero2) return {};  // accumulate locally
  return [this, grads](int group) {
    // A reduction that failed (a peer lost, the group aborted for a
    // recovery) ends the backward pass here, not after it: the rest of it
    // would be computed for nothing while the peers wait.
    {
      const std::lock_guard lock(mu_);
      if (error_) std::rethrow_exception(error_);
    }
    for (Bucket& b : buckets_) {
      if (b.last_group == group) Launch(b, grads);
    }
  };
}

void DataParallel::AfterBackward(std::span<float> grads, bool last_micro) {
  if (!last_micro && config_.mode != DpMode::kZero2) return;
  Drain();
  if (config_.mode == DpMode::kDdp) {
    for (const Bucket& b : buckets_) {
      ForEachSpan(b, 0, b.count, [&](size_t flat, size_t packed, size_t n) {
        std::memcpy(grads.data() + flat, b.packed.data() + packed, n * sizeof(float));
      });
    }
  } else if (config_.mode == DpMode::kZero2) {
    std::fill(grads.begin(), grads.end(), 0.0f);
  }
}

namespace {

// Two floats carry a double: the high part and the rounding error.
std::array<float, 2> Split(double x) {
  const auto hi = static_cast<float>(x);
  return {hi, static_cast<float>(x - hi)};
}

}  // namespace

double DataParallel::SumAcrossRanks(double x) {
  std::array<float, 2> v = Split(x);
  comm_.AllReduce(std::span<float>(v), comm::ReduceOp::kSum);
  return static_cast<double>(v[0]) + v[1];
}

std::vector<double> DataParallel::AllValues(double x) {
  std::array<float, 2> mine = Split(x);
  std::vector<float> all(2 * static_cast<size_t>(comm_.size()));
  comm_.AllGather(std::span<float>(mine), std::span<float>(all));
  std::vector<double> out;
  for (size_t r = 0; r < all.size(); r += 2)
    out.push_back(static_cast<double>(all[r]) + all[r + 1]);
  return out;
}

std::vector<uint64_t> DataParallel::AllWords(std::span<const uint64_t> mine) {
  // Carried as floats (two per word) through AllGather, which copies bytes.
  std::vector<float> in(2 * mine.size());
  std::memcpy(in.data(), mine.data(), mine.size_bytes());
  std::vector<float> all(in.size() * static_cast<size_t>(comm_.size()));
  comm_.AllGather(std::span<float>(in), std::span<float>(all));
  std::vector<uint64_t> out(mine.size() * static_cast<size_t>(comm_.size()));
  std::memcpy(out.data(), all.data(), out.size() * sizeof(uint64_t));
  return out;
}

// ------------------------------------------------------------ optimizer ---

double DataParallel::Step(std::span<float> params, std::span<float> grads, AdamW* full,
                          int64_t step, double lr) {
  if (!sharded()) {
    const double norm = GlobalNorm(grads);
    full->Update(params, grads, step, lr, ClipScale(norm, optim_.grad_clip));
    return norm;
  }
  const double local = GlobalNorm(shard_grads_);
  const auto start = std::chrono::steady_clock::now();
  const double norm = std::sqrt(SumAcrossRanks(local * local));
  LoadShard(params);
  AdamWKernel(optim_, shard_params_.data(), shard_grads_.data(), shard_m_.data(), shard_v_.data(),
              shard_decay_.data(), static_cast<int64_t>(shard_params_.size()), step, lr,
              ClipScale(norm, optim_.grad_clip));
  GatherShards(params);
  std::fill(shard_grads_.begin(), shard_grads_.end(), 0.0f);
  const double s = Since(start);
  busy_ += s;
  exposed_ += s;
  return norm;
}

void DataParallel::GatherShards(std::span<float> params) {
  for (Bucket& b : buckets_) {
    std::span<float> mine(shard_params_.data() + b.shard_offset, b.shard.count);
    comm_.AllGather(mine, std::span<float>(b.packed));
    ForEachSpan(b, 0, b.count, [&](size_t flat, size_t packed, size_t n) {
      std::memcpy(params.data() + flat, b.packed.data() + packed, n * sizeof(float));
    });
  }
}

void DataParallel::LoadShard(std::span<const float> params) {
  for (const Bucket& b : buckets_) {
    ForEachSpan(b, b.shard.begin, b.shard.end(), [&](size_t flat, size_t packed, size_t n) {
      std::memcpy(shard_params_.data() + b.shard_offset + (packed - b.shard.begin),
                  params.data() + flat, n * sizeof(float));
    });
  }
}

void DataParallel::GatherParams(std::span<float> params) {
  if (!sharded()) return;
  LoadShard(params);
  GatherShards(params);
}

std::vector<DataParallel::OwnedSpan> DataParallel::OwnedSpans() const {
  std::vector<OwnedSpan> out;
  for (const Bucket& b : buckets_) {
    ForEachSpan(b, b.shard.begin, b.shard.end(), [&](size_t flat, size_t packed, size_t n) {
      out.push_back({flat, b.shard_offset + (packed - b.shard.begin), n});
    });
  }
  return out;
}

}  // namespace fmstack::train
