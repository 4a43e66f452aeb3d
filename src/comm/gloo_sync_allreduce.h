// comm: small float allreduces on a second Gloo mesh whose pairs are in
// Gloo's synchronous mode, with Gloo's ring (up to 4 ranks) or its
// halving-doubling. Synchronous pairs read in the calling thread instead of
// handing every message through Gloo's event-loop thread, which on loopback
// cut a 1 KiB allreduce of 2 ranks from 250 us (bcube) to 49 us (15 us
// busy-polling). They also write before they read: two ranks sending each
// other more than their sockets buffer deadlock until the write times out
// (a 64 MiB burn-in allreduce did), so only messages up to
// GlooOptions::sync_allreduce_max_bytes come here. Synchronous pairs cannot
// serve unbound buffers, so every other collective keeps the first mesh.
#pragma once

#include <gloo/transport/tcp/device.h>

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "comm/tcp_store.h"

namespace gloo {
class Algorithm;
}
namespace gloo::rendezvous {
class Context;
}

namespace fmstack::comm {

class GlooSyncAllreduce {
 public:
  // Collective: connects the mesh through `store` under `prefix`; the
  // sockets it opened are appended to `sockets` (shut down by an abort).
  GlooSyncAllreduce(TcpStore& store, const std::string& prefix, int rank, int size,
                    std::shared_ptr<gloo::transport::Device> device,
                    std::chrono::milliseconds timeout, bool busy_poll, std::vector<int>& sockets);
  ~GlooSyncAllreduce();
  GlooSyncAllreduce(const GlooSyncAllreduce&) = delete;
  GlooSyncAllreduce& operator=(const GlooSyncAllreduce&) = delete;

  // In place sum of `count` floats over the group. Throws Gloo's exception
  // on a transport failure or timeout.
  void Sum(float* data, size_t count);

 private:
  // Gloo binds an algorithm to one buffer, and building one claims slots
  // that every rank must claim in the same order. So each size gets a
  // staging buffer and its algorithm, kept for reuse: every rank sees the
  // same sizes in the same order, so every rank's cache hits and evicts
  // alike.
  struct Plan {
    size_t count = 0;
    std::vector<float> staging;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };
  Plan& PlanFor(size_t count);

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::list<Plan> plans_;  // most recently used first
};

}  // namespace fmstack::comm
