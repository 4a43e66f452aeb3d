#include "gpt/product_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace fmstack::gpt {
namespace {

using Order = ProductOrder;

// Runs `calls` calls of one shape, each taking the time `cost` gives its order.
std::vector<Order> Play(ProductOrderTuner& t, int calls, double side_by_side, double in_turn,
                        int64_t OC = 384) {
  std::vector<Order> seen;
  for (int i = 0; i < calls; ++i) {
    const Order o = t.Next(1024, 384, OC);
    seen.push_back(o);
    t.Record(1024, 384, OC, o, o == Order::kInTurn ? in_turn : side_by_side);
  }
  return seen;
}

TEST(ProductOrder, AlternatesUntilBothHaveTheirTrialsThenKeepsTheFaster) {
  ProductOrderTuner t;
  EXPECT_EQ(t.Summary(), "");
  const std::vector<Order> seen = Play(t, 10, 2.0, 1.0);
  const std::vector<Order> want = {
      Order::kSideBySide, Order::kInTurn, Order::kSideBySide, Order::kInTurn, Order::kSideBySide,
      Order::kInTurn,     Order::kInTurn, Order::kInTurn,     Order::kInTurn, Order::kInTurn};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(t.Summary(), "in turn for 1 of 1 shapes");

  ProductOrderTuner u;
  const std::vector<Order> other = Play(u, 8, 1.0, 2.0);
  EXPECT_EQ(other.back(), Order::kSideBySide);
  EXPECT_EQ(u.Summary(), "in turn for 0 of 1 shapes");
}

// One slow call (a noisy neighbour, a first touch) does not decide: the
// median of three does.
TEST(ProductOrder, OneOutlierDoesNotDecide) {
  ProductOrderTuner t;
  const double side[] = {9.0, 1.0, 1.0};  // the first call was slow
  const double turn[] = {1.5, 1.5, 1.5};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(t.Next(64, 8, 8), Order::kSideBySide);
    t.Record(64, 8, 8, Order::kSideBySide, side[i]);
    ASSERT_EQ(t.Next(64, 8, 8), Order::kInTurn);
    t.Record(64, 8, 8, Order::kInTurn, turn[i]);
  }
  EXPECT_EQ(t.Next(64, 8, 8), Order::kSideBySide);
}

TEST(ProductOrder, EachShapeIsTimedOnItsOwn) {
  ProductOrderTuner t;
  Play(t, 6, 2.0, 1.0, 384);   // settled: in turn
  Play(t, 3, 1.0, 2.0, 4096);  // still timing
  EXPECT_EQ(t.Next(1024, 384, 384), Order::kInTurn);
  EXPECT_EQ(t.Next(1024, 384, 4096), Order::kInTurn);  // its 2nd in-turn trial
  EXPECT_EQ(t.Summary(), "in turn for 1 of 2 shapes (1 still timing)");
  Play(t, 3, 1.0, 2.0, 4096);
  EXPECT_EQ(t.Next(1024, 384, 4096), Order::kSideBySide);
}

}  // namespace
}  // namespace fmstack::gpt
