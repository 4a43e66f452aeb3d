// gpt: the order in which a linear layer's backward runs its two products,
// chosen per shape by timing the trainer's own calls.
//
// MatmulBackward computes dinp = dout W and dweight += dout^T inp: two
// independent products of the same FLOPs. On two threads they can run side
// by side, one single-threaded product per core, or in turn, each split over
// both cores by OpenBLAS. Which is faster depends on the CPU and the shape:
// side by side made a gpt-mini step 2.3% faster on an AMD EPYC (Zen 1) VM;
// in turn ran those products 3-9% faster on an Intel Xeon (AVX-512) VM
// (docs/trainer.md). Both orders give the same bits, so the choice
// costs nothing in reproducibility: the first calls of each shape alternate
// the two orders, and once each has kTrials timings the one with the lower
// median is kept.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpt/cpu_kernels.h"

namespace fmstack::gpt {

using cpu::ProductOrder;

class ProductOrderTuner {
 public:
  static constexpr int kTrials = 3;  // timed calls per order and shape

  // The order for the next call of the shape (N rows, C inputs, OC outputs).
  ProductOrder Next(int64_t N, int64_t C, int64_t OC) const;
  // One call's time, for the order Next gave.
  void Record(int64_t N, int64_t C, int64_t OC, ProductOrder order, double seconds);
  // "in turn for 4 of 5 shapes (2 still timing)", for logs and benches;
  // "" before any call.
  std::string Summary() const;

 private:
  struct Timings {
    std::vector<double> side_by_side, in_turn;
  };
  static ProductOrder Decide(const Timings& t);
  std::map<std::array<int64_t, 3>, Timings> shapes_;
};

}  // namespace fmstack::gpt
