// cli: the live progress line. On a terminal one line is rewritten in place;
// in a log, every ~5% of the run becomes a plain line.
#pragma once

#include <unistd.h>

#include <algorithm>
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
    } else if (step == total || step % std::max<int64_t>(1, total / 20) == 0) {
      std::cerr << line << "\n";
    }
  }
  // A line that stays, above the progress line.
  void Note(const std::string& line) const {
    std::cerr << (tty_ ? "\r\033[K" : "") << line << "\n";
  }

 private:
  bool tty_;
};

// A worker under `fmstack run` (FMSTACK_RUN=1) reports progress as one
// event line on stdout, which the supervisor hands to its caller.
inline void EmitEvent(const nlohmann::json& event) {
  std::cout << runtime::kEventPrefix << event.dump() << std::endl;
}

}  // namespace fmstack::cli
