#include "metrics/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace fmstack::metrics {
namespace {

constexpr double kW = 720, kH = 260, kLeft = 64, kRight = 16, kTop = 28, kBottom = 40;
constexpr size_t kMaxLogBytes = size_t{1} << 30;  // a rank's log read for the report, at most

std::string Esc(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Round axis ticks: 1, 2 or 5 x 10^k, about `n` of them.
std::vector<double> Ticks(double lo, double hi, int n) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5   ? mag
                      : raw / mag < 3.5 ? 2 * mag
                      : raw / mag < 7.5 ? 5 * mag
                                        : 10 * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) t.push_back(v);
  return t;
}

std::string Num(double v) {
  if (std::abs(v) >= 1e3 && std::abs(v) < 1e7) return fmt::format("{:.0f}", v);
  if (v != 0 && (std::abs(v) >= 1e7 || std::abs(v) < 1e-2)) return fmt::format("{:.2g}", v);
  return fmt::format("{:.4g}", v);
}

struct Axes {
  double x0, x1, y0, y1;
  double X(double x) const { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); }
  double Y(double y) const { return kH - kBottom - (y - y0) / (y1 - y0) * (kH - kTop - kBottom); }
};

std::string Frame(const std::string& title, const std::string& xlabel, const Axes& a,
                  bool y_ticks = true) {
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" )"
      R"(font-family="sans-serif" font-size="11">)"
      "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      R"(<text x="{}" y="16" font-size="13" font-weight="bold">{}</text>)"
      "\n",
      kW, kH, kW, kH, kLeft, Esc(title));
  for (const double t : y_ticks ? Ticks(a.y0, a.y1, 5) : std::vector<double>{}) {
    s += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/>)"
                     R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end">{}</text>)"
                     "\n",
                     kLeft, kW - kRight, a.Y(t), a.Y(t), kLeft - 4, a.Y(t) + 4, Num(t));
  }
  for (const double t : Ticks(a.x0, a.x1, 8)) {
    s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)"
                     "\n",
                     a.X(t), kH - kBottom + 14, Num(t));
  }
  s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">{}</text>)"
                   "\n",
                   (kLeft + kW - kRight) / 2, kH - 8, Esc(xlabel));
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>)"
                   "\n",
                   kLeft, kTop, kW - kLeft - kRight, kH - kTop - kBottom);
  return s;
}

// A line over steps, with each incident's step marked in red.
std::string StepChart(const std::string& title, const std::vector<StepPoint>& steps,
                      double StepPoint::*field, const Ledger& ledger) {
  double lo = 1e300, hi = -1e300;
  for (const StepPoint& p : steps) {
    if (!std::isfinite(p.*field)) continue;
    lo = std::min(lo, p.*field);
    hi = std::max(hi, p.*field);
  }
  if (lo > hi) lo = 0, hi = 1;
  const double pad = (hi - lo) * 0.05 + 1e-9;
  const Axes a{steps.empty() ? 0.0 : static_cast<double>(steps.front().step),
               steps.empty()
                   ? 1.0
                   : static_cast<double>(std::max(steps.back().step, steps.front().step + 1)),
               lo - pad, hi + pad};
  std::string s = Frame(title, "step", a);
  for (const Incident& i : ledger.incidents()) {
    const double at = static_cast<double>(i.step);
    if (at < a.x0 || at > a.x1) continue;
    s += fmt::format(
        R"(<line class="incident" x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#c33" stroke-dasharray="3,2"><title>{3}</title></line>)"
        "\n",
        a.X(static_cast<double>(i.step)), kTop, kH - kBottom,
        Esc(i.kind + " at step " + std::to_string(i.step)));
  }
  std::string path;
  for (const StepPoint& p : steps) {
    if (!std::isfinite(p.*field)) continue;
    path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L",
                        a.X(static_cast<double>(p.step)), a.Y(p.*field));
  }
  s += fmt::format(R"(<path d="{}" fill="none" stroke="#1f6fb2" stroke-width="1.5"/>)"
                   "\n",
                   path);
  return s + "</svg>\n";
}

const std::map<std::string, std::string>& BucketColors() {
  static const std::map<std::string, std::string> c = {
      {"productive", "#2e8b57"}, {"lost", "#c33"},       {"checkpoint", "#e0a030"},
      {"detection", "#8e44ad"},  {"restart", "#d35400"}, {"restore", "#f39c12"},
      {"backoff", "#7f8c8d"},    {"other", "#bbb"}};
  return c;
}

std::string GoodputChart(const Ledger& ledger) {
  // Buckets may overlap the wall time (training that went on while a fault
  // was being detected is also booked as lost): the bar spans their sum.
  double sum = 0;
  for (const std::string& b : Ledger::Buckets()) sum += ledger.Get(b);
  const double total = std::max({1e-9, ledger.wall(), sum});
  std::string s = fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="120" viewBox="0 0 {} 120" )"
      R"(font-family="sans-serif" font-size="11">)"
      "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      R"(<text x="{}" y="16" font-size="13" font-weight="bold">Where the wall time went ({:.1f} s, {:.1f}% productive)</text>)"
      "\n",
      kW, kW, kLeft, ledger.wall(), 100 * ledger.Goodput());
  double x = kLeft;
  const double width = kW - kLeft - kRight;
  double lx = kLeft, ly = 72;
  for (const std::string& b : Ledger::Buckets()) {
    const double share = ledger.Get(b) / total;
    const auto color = BucketColors().contains(b) ? BucketColors().at(b) : std::string("#999");
    if (share > 0) {
      s += fmt::format(
          R"(<rect class="bucket" x="{:.1f}" y="28" width="{:.1f}" height="30" fill="{}"><title>{}: {:.2f} s ({:.1f}%)</title></rect>)"
          "\n",
          x, share * width, color, b, ledger.Get(b),
          100 * ledger.Get(b) / std::max(1e-9, ledger.wall()));
      x += share * width;
    }
    const std::string label =
        fmt::format("{} {:.1f}%", b, 100 * ledger.Get(b) / std::max(1e-9, ledger.wall()));
    const double item = 20 + 6.5 * static_cast<double>(label.size());
    if (lx + item > kW - kRight) {
      lx = kLeft;
      ly += 18;
    }
    s += fmt::format(
        R"(<rect x="{:.1f}" y="{:.1f}" width="10" height="10" fill="{}"/><text x="{:.1f}" y="{:.1f}">{}</text>)"
        "\n",
        lx, ly, color, lx + 14, ly + 9, label);
    lx += item;
  }
  return s + "</svg>\n";
}

std::string TimelineChart(const Ledger& ledger) {
  const Axes a{0, std::max(1e-9, ledger.wall()), 0, 1};
  std::string s =
      Frame("Faults on the wall clock (detection, then recovery)", "seconds since start", a);
  int row = 0;
  for (const Incident& i : ledger.incidents()) {
    const double y = kTop + 8 + (row++ % 6) * 28;
    const double detect = std::max(0.0, i.detect_seconds);
    const double recover = std::max(0.0, i.recovery_seconds);
    const double x0 = a.X(std::max(0.0, i.at - detect)), xd = a.X(i.at),
                 xr = a.X(std::min(a.x1, i.at + recover));
    s += fmt::format(R"(<g class="incident"><title>{}</title>)"
                     R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="10" fill="#8e44ad"/>)"
                     R"(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="10" fill="#d35400"/>)"
                     R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="#c33"/>)"
                     R"(<text x="{:.1f}" y="{:.1f}">{}</text></g>)"
                     "\n",
                     Esc(fmt::format("{} (rank {}, step {}): {} -- {}", i.kind, i.rank, i.step,
                                     i.what, i.decision)),
                     x0, y, std::max(1.0, xd - x0), xd, y, std::max(1.0, xr - xd), xd, y + 5,
                     xr + 4, y + 9, Esc(i.kind));
  }
  if (ledger.incidents().empty())
    s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" fill="#2e8b57">no faults</text>)"
                     "\n",
                     kLeft + 10, kTop + 20);
  return s + "</svg>\n";
}

}  // namespace

std::vector<StepPoint> ReadStepPoints(const std::string& run_dir) {
  std::map<int64_t, StepPoint> by_step;
  std::error_code ec;
  std::vector<std::filesystem::path> logs;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/logs", ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("rank") && name.ends_with(".log")) logs.push_back(e.path());
  }
  std::sort(logs.begin(), logs.end());
  for (const auto& path : logs) {
    if (std::filesystem::file_size(path, ec) > kMaxLogBytes) continue;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.starts_with("@fmstack {\"")) continue;
      const nlohmann::json e = nlohmann::json::parse(line.substr(9), nullptr, false);
      if (!e.is_object() || e.value("ev", "") != "step") continue;
      StepPoint p;
      p.step = e.value("step", int64_t{0});
      p.loss = e.value("loss", std::nan(""));
      const double step_s = e.value("step_s", 0.0);
      p.tokens_per_second = step_s > 0 ? e.value("tokens", 0.0) / step_s : std::nan("");
      by_step[p.step] = p;  // a step trained again: its newest report
    }
  }
  std::vector<StepPoint> out;
  for (const auto& [step, p] : by_step) out.push_back(p);
  return out;
}

std::vector<Chart> RunCharts(const std::vector<StepPoint>& steps, const Ledger& ledger) {
  return {{"loss", StepChart("Training loss by step", steps, &StepPoint::loss, ledger)},
          {"tokens",
           StepChart("Tokens per second by step", steps, &StepPoint::tokens_per_second, ledger)},
          {"goodput", GoodputChart(ledger)},
          {"timeline", TimelineChart(ledger)}};
}

std::string RunHtml(const std::string& title, const std::vector<Chart>& charts,
                    const Ledger& ledger, const std::vector<std::string>& node_events) {
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{0}</title>\n"
      "<style>body{{font-family:sans-serif;max-width:760px;margin:2em auto;color:#222}}"
      "table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:3px "
      "6px;"
      "text-align:left}}svg{{display:block;margin:1em 0}}</style></head><body>\n"
      "<h1>{0}</h1>\n<p>{1:.1f} s of wall time, {2:.1f}% productive, {3} fault(s).</p>\n",
      Esc(title), ledger.wall(), 100 * ledger.Goodput(), ledger.incidents().size());
  for (const Chart& c : charts) h += c.svg;
  h += "<h2>Incidents</h2>\n";
  if (ledger.incidents().empty()) {
    h += "<p>none</p>\n";
  } else {
    h += "<table><tr><th>#</th><th>fault</th><th>rank</th><th>step</th><th>detected in</th>"
         "<th>recovered in</th><th>steps lost</th><th>what</th><th>decision</th></tr>\n";
    int n = 0;
    for (const Incident& i : ledger.incidents()) {
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{}</td></tr>\n",
          ++n, Esc(i.kind), i.rank, i.step,
          i.detect_seconds >= 0 ? fmt::format("{:.2f} s", i.detect_seconds) : "-",
          i.recovery_seconds >= 0 ? fmt::format("{:.2f} s", i.recovery_seconds) : "-", i.lost_steps,
          Esc(i.what), Esc(i.decision));
    }
    h += "</table>\n";
  }
  if (!node_events.empty()) {
    h += "<h2>Node events</h2>\n<table><tr><th>node</th><th>action</th><th>by</th><th>reason</th>"
         "<th>state after</th></tr>\n";
    for (const std::string& line : node_events) {
      const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
      if (!e.is_object()) continue;
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                       Esc(e.value("node", "")), Esc(e.value("action", "")), Esc(e.value("by", "")),
                       Esc(e.value("reason", "")), Esc(e.value("state", "")));
    }
    h += "</table>\n";
  }
  return h + "</body></html>\n";
}

}  // namespace fmstack::metrics
