#include "gpt/product_order.h"

#include <fmt/format.h>

#include <algorithm>

namespace fmstack::gpt {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

ProductOrder ProductOrderTuner::Decide(const Timings& t) {
  const auto side = t.side_by_side.size(), turn = t.in_turn.size();
  if (side < kTrials || turn < kTrials) {
    // Alternate, side by side first, until both have their trials.
    return side <= turn && side < kTrials ? ProductOrder::kSideBySide : ProductOrder::kInTurn;
  }
  return Median(t.in_turn) < Median(t.side_by_side) ? ProductOrder::kInTurn
                                                    : ProductOrder::kSideBySide;
}

ProductOrder ProductOrderTuner::Next(int64_t N, int64_t C, int64_t OC) const {
  const auto it = shapes_.find({N, C, OC});
  return it == shapes_.end() ? ProductOrder::kSideBySide : Decide(it->second);
}

void ProductOrderTuner::Record(int64_t N, int64_t C, int64_t OC, ProductOrder order,
                               double seconds) {
  Timings& t = shapes_[{N, C, OC}];
  std::vector<double>& v = order == ProductOrder::kInTurn ? t.in_turn : t.side_by_side;
  if (static_cast<int>(v.size()) < kTrials) v.push_back(seconds);
}

std::string ProductOrderTuner::Summary() const {
  if (shapes_.empty()) return {};
  int in_turn = 0, timing = 0;
  for (const auto& [shape, t] : shapes_) {
    if (static_cast<int>(std::min(t.side_by_side.size(), t.in_turn.size())) < kTrials) {
      ++timing;
    } else if (Decide(t) == ProductOrder::kInTurn) {
      ++in_turn;
    }
  }
  std::string s = fmt::format("in turn for {} of {} shapes", in_turn, shapes_.size());
  if (timing > 0) s += fmt::format(" ({} still timing)", timing);
  return s;
}

}  // namespace fmstack::gpt
