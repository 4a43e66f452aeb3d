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
constexpr double kPlotH = 260, kGap = 64, kBarsH = 110, kTicksH = 24;
// Okabe & Ito's colour-blind-safe palette: policies take blue, orange and
// bluish green; fault causes take the other hues, so no colour means two things.
struct Style {
  const char* color;
  const char* dash;  // overlapping policies stay visible by pattern and width
  double width;
};
constexpr Style kPolicyStyles[] = {{"#0072B2", "", 3.0},
                                   {"#E69F00", "7,4", 2.0},
                                   {"#009E73", "2,3", 2.0},
                                   {"#000000", "10,3,2,3", 1.5}};
constexpr const char *kGpuColor = "#D55E00", *kSoftwareColor = "#CC79A7",
                     *kNetworkColor = "#56B4E9", *kHostColor = "#7F7F7F",
                     *kPlannedColor = "#332288";

// A round step (1, 2 or 5 x 10^k) giving about `target` intervals over `span`.
double NiceStep(double span, int target) {
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

std::string DayLabel(double days, double step) {
  return step >= 1 ? fmt::format("{:.0f}", days)
                   : fmt::format("{:.{}f}", days, step >= 0.1 ? 1 : 2);
}

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
  if (cause == kPlannedCause) return kPlannedColor;
  const std::string& c = s.causes[static_cast<size_t>(cause)].component;
  if (c == "gpu" || c == "hbm") return kGpuColor;
  if (c == "software") return kSoftwareColor;
  if (c == "switch" || c == "nic") return kNetworkColor;
  return kHostColor;
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
  // Axes and grid, ticks at round numbers of days.
  const double step = NiceStep(days, 6);
  for (double d = 0; d <= days + 1e-9; d += step) {
    const double t = d * 86400;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x(t), kTop, kTop + kPlotH, kTop + kPlotH + 15, DayLabel(d, step));
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, y(t), kLeft + plot_w, kLeft - 6, y(t) + 4, DayLabel(d, step));
  }
  svg += fmt::format(
      "<text x=\"14\" y=\"{:.0f}\" transform=\"rotate(-90 14 {:.0f})\" text-anchor=\"middle\">"
      "trained (fault-free days)</text>\n",
      kTop + kPlotH / 2, kTop + kPlotH / 2);
  svg += fmt::format(
      "<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">wall time (days)</text>\n",
      kLeft + plot_w / 2, kTop + kPlotH + 32);
  // The fault-free diagonal, labelled above its middle, where no run can be
  // (no run trains faster than fault-free).
  svg += fmt::format(
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\" stroke-dasharray=\"5,4\"/>"
      "<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#777\" text-anchor=\"end\">no faults</text>\n",
      x(0), y(0), x(wall), y(wall), x(wall / 2) - 8, y(wall / 2) - 8);
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
    const Style& st = kPolicyStyles[k % std::size(kPolicyStyles)];
    svg += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-dasharray=\"{}\" "
        "points=\"{}\"/>\n",
        st.color, st.width, st.dash, pts);
    const double ly = kTop + 14 + 16 * static_cast<double>(k);
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"{4}\" stroke-dasharray=\"{5}\"/><text x=\"{6}\" y=\"{7:.1f}\">{8}: ETTR "
        "{9:.1f}%</text>\n",
        kLeft + 10, ly - 4, kLeft + 34, st.color, st.width, st.dash, kLeft + 40, ly,
        Escape(outcomes[k].policy), 100 * outcomes[k].first.ettr());
  }
  // Net goodput per bin: trained work gained / bin length.
  const double bars_top = kTop + kPlotH + kGap;
  const int bins = std::clamp(static_cast<int>(std::ceil(days * 4)), 10, 200);
  const double bin = wall / bins;
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\">net goodput (%) per {:.1f} h of the same wall time (rollbacks "
      "count against it)</text>\n",
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
    const Style& st = kPolicyStyles[k % std::size(kPolicyStyles)];
    svg += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-dasharray=\"{}\" "
        "points=\"{}\"/>\n",
        st.color, std::max(1.0, st.width - 1), st.dash, pts);
  }
  // Fault ticks (first policy's run; every policy sees the same faults).
  const double ticks_top = bars_top + kBarsH + kGap;
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\">faults on job nodes: <tspan fill=\"{}\">GPU/HBM</tspan> "
      "<tspan fill=\"{}\">software</tspan> <tspan fill=\"{}\">network</tspan> "
      "<tspan fill=\"{}\">host</tspan> <tspan fill=\"{}\">planned</tspan></text>\n",
      kLeft, ticks_top - 6, kGpuColor, kSoftwareColor, kNetworkColor, kHostColor, kPlannedColor);
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
