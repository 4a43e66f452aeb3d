#include "util/core_round_trip.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace fmstack {
namespace {

constexpr int kMaxTrips = 10'000'000;  // the ball's numbers stay within int

bool Pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0;
}

}  // namespace

double CoreRoundTripNs(int trips) {
  cpu_set_t allowed;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  if (cpus.size() < 2 || trips < 1 || trips > kMaxTrips) return 0;
  // The ball goes 1, 2, 3, ...: odd numbers from here, even ones back. -1
  // stops the partner: a pin refused, or the deadline passed.
  constexpr int kStop = -1;
  constexpr auto kDeadline = std::chrono::seconds(2);
  std::atomic<int> ball{0};
  std::atomic<int> partner_pinned{0};  // 1 pinned, -1 refused
  std::thread partner([&] {
    partner_pinned = Pin(cpus[1]) ? 1 : -1;
    for (int i = 0; i < trips; ++i) {
      int b = 0;
      while ((b = ball.load(std::memory_order_acquire)) != 2 * i + 1 && b != kStop) {
      }
      if (b == kStop) return;
      ball.store(2 * i + 2, std::memory_order_release);
    }
  });
  const bool pinned = Pin(cpus[0]);
  while (partner_pinned.load() == 0) std::this_thread::yield();
  double ns = 0;
  if (pinned && partner_pinned.load() > 0) {
    const auto start = std::chrono::steady_clock::now();
    const auto late = [&] { return std::chrono::steady_clock::now() - start > kDeadline; };
    bool overran = false;
    for (int i = 0; i < trips && !overran; ++i) {
      ball.store(2 * i + 1, std::memory_order_release);
      // The clock only now and then, so as not to time it instead.
      for (uint32_t spins = 1; ball.load(std::memory_order_acquire) != 2 * i + 2; ++spins) {
        if (spins % 65536 == 0 && late()) {
          overran = true;
          break;
        }
      }
      if (i % 1024 == 0 && late()) overran = true;
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    if (!overran) ns = took.count() / trips;
  }
  ball = kStop;  // a partner past its last trip has already returned
  partner.join();
  ::sched_setaffinity(0, sizeof allowed, &allowed);
  return ns;
}

}  // namespace fmstack
