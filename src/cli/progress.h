// cli: the live progress line. On a terminal one line is rewritten in place;
// in a log, the first line of each 5% of the run becomes a plain line (at
// most 21 lines however often Show is called). Show may be called from
// several threads at once.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/supervisor.h"

namespace fmstack::cli {

class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(2) == 1) {}
  void Show(int64_t step, int64_t total, const std::string& line) const {
    if (tty_) {
      std::cerr << "\r\033[K" << line << std::flush;
      return;
    }
    const int64_t bucket = total > 0 ? std::clamp<int64_t>(step * 20 / total, 0, 20) : 20;
    int64_t last = last_bucket_.load();
    while (bucket > last) {
      if (last_bucket_.compare_exchange_weak(last, bucket)) {
        std::cerr << line << "\n";
        return;
      }
    }
  }
  // A line that stays, above the progress line.
  void Note(const std::string& line) const {
    std::cerr << (tty_ ? "\r\033[K" : "") << line << "\n";
  }

 private:
  bool tty_;
  mutable std::atomic<int64_t> last_bucket_{-1};  // the newest 5% printed (not a terminal)
};

// A worker under `fmstack run` (FMSTACK_RUN=1) reports progress as one
// event line on stdout, which the supervisor hands to its caller.
inline void EmitEvent(const nlohmann::json& event) {
  std::cout << runtime::kEventPrefix << event.dump() << std::endl;
}

}  // namespace fmstack::cli
