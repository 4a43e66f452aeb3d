#include "sim/event_queue.h"

#include <gtest/gtest.h>

namespace fmstack::sim {
namespace {

TEST(EventQueue, TimeOrderThenScheduleOrder) {
  EventQueue<int> q;
  q.At(5, 1);
  q.At(2, 2);
  q.At(5, 3);
  q.At(2, 4);
  std::vector<int> order;
  std::vector<double> times;
  while (!q.empty()) {
    const auto e = q.Pop();
    order.push_back(e.payload);
    times.push_back(q.now());
  }
  EXPECT_EQ(order, (std::vector<int>{2, 4, 1, 3}));
  EXPECT_EQ(times, (std::vector<double>{2, 2, 5, 5}));
}

TEST(EventQueue, RefusesThePast) {
  EventQueue<int> q;
  q.At(3, 0);
  q.Pop();
  EXPECT_THROW(q.At(1, 0), std::logic_error);
  q.After(1, 7);
  EXPECT_EQ(q.Pop().time, 4);
}

}  // namespace
}  // namespace fmstack::sim
