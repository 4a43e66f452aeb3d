// sim: the discrete-event core. Events are (time, sequence) ordered, so two
// events at the same simulated time come out in the order they were
// scheduled and a run is a pure function of its inputs and seed. The payload
// is a small value type chosen by the caller, not a callback, so the queue
// stays a flat heap that copies cheaply at a million pending events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <vector>

namespace fmstack::sim {

template <typename Payload>
class EventQueue {
 public:
  struct Event {
    double time = 0;  // simulated seconds
    uint64_t seq = 0;
    Payload payload{};
  };

  double now() const { return now_; }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  // The earliest pending event's time; REQUIRES: !empty().
  double next_time() const { return heap_.top().time; }

  // Schedules `payload` at absolute time `at` (never before now).
  void At(double at, const Payload& payload) {
    if (at < now_) throw std::logic_error("sim: an event was scheduled in the past");
    heap_.push(Event{at, next_seq_++, payload});
  }
  void After(double delay, const Payload& payload) { At(now_ + delay, payload); }

  // Removes the earliest event and advances the clock to it.
  Event Pop() {
    Event e = heap_.top();
    heap_.pop();
    now_ = e.time;
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  double now_ = 0;
  uint64_t next_seq_ = 0;
};

}  // namespace fmstack::sim
