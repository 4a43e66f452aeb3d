// The timeline plot: trained work against wall time (a fault-free job runs
// along the diagonal; every rollback is a drop), net goodput per time bin,
// and one tick per fault coloured by what failed.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/faults.h"
#include "sim/report.h"

namespace fmstack::sim {
namespace {

constexpr double kWidth = 960, kLeft = 70, kRight = 20, kTop = 40;
constexpr double kPlotH = 260, kGap = 50, kBarsH = 110, kTicksH = 24;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

const char* CauseColor(const Scenario& s, int cause) {
  if (cause == kPlannedCause) return "#2ca02c";
  const std::string& c = s.causes[static_cast<size_t>(cause)].component;
  if (c == "gpu" || c == "hbm") return "#d62728";
  if (c == "software") return "#1f77b4";
  if (c == "switch" || c == "nic") return "#ff7f0e";
  return "#7f7f7f";
}

// Work at time t on a piecewise-linear timeline with instantaneous drops.
double WorkAt(const std::vector<TimelinePoint>& p, double t) {
  auto it = std::upper_bound(p.begin(), p.end(), t,
                             [](double x, const TimelinePoint& q) { return x < q.time; });
  if (it == p.begin()) return 0;
  const TimelinePoint& a = *(it - 1);
  if (it == p.end() || it->time <= a.time) return a.work;
  const TimelinePoint& b = *it;
  // Between two events the job either trains at a constant rate or stands still.
  return a.work + (b.work - a.work) * (t - a.time) / (b.time - a.time);
}

}  // namespace

std::string TimelineSvg(const Scenario& s, const std::vector<PolicyOutcome>& outcomes,
                        const std::string& title) {
  double wall = 1;
  for (const PolicyOutcome& o : outcomes) wall = std::max(wall, o.first.wall);
  const double days = wall / 86400;
  const double plot_w = kWidth - kLeft - kRight;
  const double height = kTop + kPlotH + kGap + kBarsH + kGap + kTicksH + 40;
  auto x = [&](double t) { return kLeft + plot_w * t / wall; };
  auto y = [&](double work) { return kTop + kPlotH * (1 - work / wall); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n",
      kWidth, height, kLeft, Escape(title));
  // Axes and grid.
  const int ticks = 6;
  for (int i = 0; i <= ticks; ++i) {
    const double t = wall * i / ticks;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:.1f} d</text>\n",
        x(t), kTop, kTop + kPlotH, kTop + kPlotH + 15, t / 86400);
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:.1f} d</text>\n",
        kLeft, y(t), kLeft + plot_w, kLeft - 6, y(t) + 4, t / 86400);
  }
  svg += fmt::format(
      "<text x=\"14\" y=\"{:.0f}\" transform=\"rotate(-90 14 {:.0f})\" text-anchor=\"middle\">"
      "trained (fault-free days)</text>\n",
      kTop + kPlotH / 2, kTop + kPlotH / 2);
  svg += fmt::format(
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\" stroke-dasharray=\"5,4\"/>"
      "<text x=\"{}\" y=\"{}\" fill=\"#999\">no faults</text>\n",
      x(0), y(0), x(wall), y(wall), x(wall) - 70, y(wall) + 14);
  // Work over time, one polyline per policy (points closer than a pixel merged).
  for (size_t k = 0; k < outcomes.size(); ++k) {
    const std::vector<TimelinePoint>& p = outcomes[k].first.timeline;
    std::string pts;
    double last_x = -1, last_y = -1;
    for (const TimelinePoint& q : p) {
      const double px = x(q.time), py = y(q.work);
      if (std::abs(px - last_x) < 0.5 && std::abs(py - last_y) < 0.5) continue;
      pts += fmt::format("{:.1f},{:.1f} ", px, py);
      last_x = px;
      last_y = py;
    }
    const char* color = kColors[k % std::size(kColors)];
    svg += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", color, pts);
    svg += fmt::format(
        "<rect x=\"{0}\" y=\"{1}\" width=\"12\" height=\"3\" fill=\"{2}\"/><text x=\"{3}\" "
        "y=\"{4}\">{5}: ETTR {6:.1f}%</text>\n",
        kLeft + 10, kTop + 12 + 16 * static_cast<double>(k), color, kLeft + 28,
        kTop + 17 + 16 * static_cast<double>(k), Escape(outcomes[k].policy),
        100 * outcomes[k].first.ettr());
  }
  // Net goodput per bin: trained work gained / bin length.
  const double bars_top = kTop + kPlotH + kGap;
  const int bins = std::clamp(static_cast<int>(std::ceil(days * 4)), 10, 200);
  const double bin = wall / bins;
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\">net goodput per {:.1f} h (rollbacks count against it)</text>\n",
      kLeft, bars_top - 8, bin / 3600);
  for (int g = 0; g <= 4; ++g) {
    const double yy = bars_top + kBarsH * (1 - g / 4.0);
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}%</text>\n",
        kLeft, yy, kLeft + plot_w, kLeft - 6, yy + 4, g * 25);
  }
  for (size_t k = 0; k < outcomes.size(); ++k) {
    const std::vector<TimelinePoint>& p = outcomes[k].first.timeline;
    std::string pts;
    for (int i = 0; i < bins; ++i) {
      const double t0 = bin * i, t1 = std::min(wall, t0 + bin);
      const double g = std::clamp((WorkAt(p, t1) - WorkAt(p, t0)) / bin, 0.0, 1.0);
      const double yy = bars_top + kBarsH * (1 - g);
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(t0), yy, x(t1), yy);
    }
    svg +=
        fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" points=\"{}\"/>\n",
                    kColors[k % std::size(kColors)], pts);
  }
  // Fault ticks (first policy's run; every policy sees the same faults).
  const double ticks_top = bars_top + kBarsH + kGap;
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\">faults on job nodes: <tspan fill=\"#d62728\">GPU/HBM</tspan> "
      "<tspan fill=\"#1f77b4\">software</tspan> <tspan fill=\"#ff7f0e\">network</tspan> "
      "<tspan fill=\"#7f7f7f\">host</tspan> <tspan fill=\"#2ca02c\">planned</tspan></text>\n",
      kLeft, ticks_top - 6);
  if (!outcomes.empty()) {
    for (const FaultMark& m : outcomes.front().first.marks) {
      svg += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"{3}\"/>\n", x(m.time),
          ticks_top, ticks_top + kTicksH, CauseColor(s, m.cause));
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace fmstack::sim
