// metrics: a finished run as a page to look at. `fmstack report RUN --html
// FILE` writes one self-contained HTML page (inline SVG, no scripts, nothing
// fetched) with the loss curve and tokens/s by step, the goodput breakdown,
// the fault timeline and the incidents, plus each chart as its own SVG file
// beside it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "metrics/goodput.h"

namespace fmstack::metrics {

// One optimizer step as the group's rank 0 reported it (the newest report
// wins when a restart trained the step again).
struct StepPoint {
  int64_t step = 0;
  double loss = 0, tokens_per_second = 0;
};

// The step reports in RUN_DIR/logs/rank*.log ("@fmstack {"ev":"step",...}").
std::vector<StepPoint> ReadStepPoints(const std::string& run_dir);

struct Chart {
  std::string name;  // file stem suffix: "loss", "tokens", "goodput", "timeline"
  std::string svg;
};

// The charts of a run: loss and tokens/s by step (incidents marked at their
// step), goodput by bucket, and incidents on the wall-clock axis.
std::vector<Chart> RunCharts(const std::vector<StepPoint>& steps, const Ledger& ledger);

// The page: title, summary, the charts inline, the incidents table, and the
// node events (RUN_DIR/nodes/events.jsonl) when there are any.
std::string RunHtml(const std::string& title, const std::vector<Chart>& charts,
                    const Ledger& ledger, const std::vector<std::string>& node_events);

}  // namespace fmstack::metrics
