// sim: measured collective bandwidth instead of the analytic model. Reads
// nccl-tests output (`all_reduce_perf ... > ar.txt`; the op is named by the
// caller) or `fmstack bench comm --markdown` (the op from each table's
// title, the across-nodes busbw column). busbw is interpolated log-linearly
// in size and clamped at the measured ends; by nccl-tests' definition it
// carries over to other rank counts, which is what makes it the unit to keep.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/collectives.h"

namespace fmstack::sim {

class MeasuredBusbw {
 public:
  // Throws Error naming the file (and line) when it holds no usable rows.
  static MeasuredBusbw Load(const std::string& path, std::optional<Collective> op);

  bool Has(Collective c) const { return curves_.count(c) > 0; }
  double Busbw(Collective c, double bytes) const;  // bytes/s; REQUIRES: Has(c)
  double Time(Collective c, double bytes, int ranks) const;
  // "allreduce 6 sizes 1 MiB..256 MiB" per collective, for the report.
  std::string Describe() const;

 private:
  std::map<Collective, std::vector<std::pair<double, double>>> curves_;  // size -> busbw
};

// "allreduce", "all_reduce", "allgather", "reduce_scatter", "alltoall", "broadcast".
std::optional<Collective> ParseCollective(std::string name);

}  // namespace fmstack::sim
