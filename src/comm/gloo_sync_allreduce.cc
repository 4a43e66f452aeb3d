#include "comm/gloo_sync_allreduce.h"

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <set>

#include "comm/open_sockets.h"

namespace fmstack::comm {
namespace {

// Plans kept at most: the sizes in flight in one training step plus a few
// (each at most GlooOptions::sync_allreduce_max_bytes of staging).
constexpr size_t kMaxPlans = 16;

// Gloo's ring beats halving-doubling on small messages for a few ranks (2
// ranks on loopback, synchronous pairs, 1 KiB: 49 vs 123 us, 15 vs 28 us
// busy-polling); its 2 (n - 1) hops outgrow halving-doubling's 2 log2 n
// beyond a few ranks.
constexpr int kRingMaxRanks = 4;

}  // namespace

GlooSyncAllreduce::GlooSyncAllreduce(TcpStore& store, const std::string& prefix, int rank, int size,
                                     std::shared_ptr<gloo::transport::Device> device,
                                     std::chrono::milliseconds timeout, bool busy_poll,
                                     std::vector<int>& sockets) {
  context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context_->setTimeout(timeout);
  gloo::rendezvous::PrefixStore prefixed(prefix, store);
  const std::set<int> before = OpenSockets();
  context_->connectFullMesh(prefixed, device);
  std::ranges::set_difference(OpenSockets(), before, std::back_inserter(sockets));
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) context_->getPair(peer)->setSync(true, busy_poll);
  }
}

GlooSyncAllreduce::~GlooSyncAllreduce() = default;

GlooSyncAllreduce::Plan& GlooSyncAllreduce::PlanFor(size_t count) {
  const auto hit = std::ranges::find(plans_, count, &Plan::count);
  if (hit != plans_.end()) {
    plans_.splice(plans_.begin(), plans_, hit);
    return plans_.front();
  }
  if (plans_.size() >= kMaxPlans) plans_.pop_back();
  Plan& plan = plans_.emplace_front();
  plan.count = count;
  plan.staging.resize(count);
  const std::vector<float*> buffers{plan.staging.data()};
  if (context_->size <= kRingMaxRanks) {
    plan.algorithm =
        std::make_unique<gloo::AllreduceRing<float>>(context_, buffers, static_cast<int>(count));
  } else {
    plan.algorithm = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(
        context_, buffers, static_cast<int>(count));
  }
  return plan;
}

void GlooSyncAllreduce::Sum(float* data, size_t count) {
  Plan& plan = PlanFor(count);
  std::memcpy(plan.staging.data(), data, count * sizeof(float));
  plan.algorithm->run();
  std::memcpy(data, plan.staging.data(), count * sizeof(float));
}

}  // namespace fmstack::comm
