// ckpt: which copy of which checkpoint a restore reads. A pure rule over what
// the tiers list, kept apart from the I/O so that `fmstack sim` plays out
// exactly the choice the real restore makes. Which steps are eligible at all
// (e.g. none after a silent corruption) is the caller's policy: it filters
// the copies, or sets valid = false, before asking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace fmstack::ckpt {

// One copy of one checkpoint on one tier.
struct CheckpointCopy {
  int64_t step = 0;
  int tier = 0;            // 0 = fastest (node-local), increasing = slower
  bool committed = false;  // its COMMITTED marker exists
  bool valid = true;       // checksums verified (runtime) / taken before the fault (silent)
  bool reachable = true;   // the tier survived the fault (a replaced node's disk did not)
};

// The newest step with a committed, valid, reachable copy, read from the
// fastest tier that holds it. nullopt: start over.
inline std::optional<size_t> ChooseRestore(std::span<const CheckpointCopy> copies) {
  std::optional<size_t> best;
  for (size_t i = 0; i < copies.size(); ++i) {
    const CheckpointCopy& c = copies[i];
    if (!c.committed || !c.valid || !c.reachable) continue;
    if (!best || c.step > copies[*best].step ||
        (c.step == copies[*best].step && c.tier < copies[*best].tier)) {
      best = i;
    }
  }
  return best;
}

}  // namespace fmstack::ckpt
