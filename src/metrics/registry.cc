#include "metrics/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace fmstack::metrics {
namespace {

bool ValidName(const std::string& n, bool label) {
  if (n.empty() || n.size() > 200) return false;
  auto first = [&](char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (!label && c == ':');
  };
  if (!first(n[0])) return false;
  return std::all_of(n.begin(), n.end(), [&](char c) {
    return first(c) || std::isdigit(static_cast<unsigned char>(c));
  });
}

std::string Escape(const std::string& v, bool help) {
  std::string out;
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && !help) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// The label set with one more pair (a histogram's le).
std::string WithLe(const std::string& rendered, const std::string& le) {
  const std::string pair = fmt::format("le=\"{}\"", le);
  if (rendered.empty()) return "{" + pair + "}";
  return rendered.substr(0, rendered.size() - 1) + "," + pair + "}";
}

}  // namespace

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!ValidName(labels[i].first, /*label=*/true) || labels[i].first == "le")
      throw Error(fmt::format("metrics: \"{}\" is not a label name", labels[i].first));
    out += fmt::format("{}{}=\"{}\"", i == 0 ? "" : ",", labels[i].first,
                       Escape(labels[i].second, false));
  }
  return out + "}";
}

std::string RenderValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);  // the shortest text that reads back as v
}

void Registry::Declare(const std::string& name, Type type, const std::string& help,
                       std::vector<double> bounds) {
  if (!ValidName(name, /*label=*/false))
    throw Error(fmt::format("metrics: \"{}\" is not a metric name", name));
  if (!std::is_sorted(bounds.begin(), bounds.end()) ||
      std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end() ||
      std::any_of(bounds.begin(), bounds.end(), [](double b) { return !std::isfinite(b); }))
    throw Error(fmt::format("metrics: {}: histogram bounds must be finite and increasing", name));
  const std::lock_guard lock(mu_);
  if (!families_.try_emplace(name, Family{type, help, std::move(bounds), {}}).second)
    throw Error(fmt::format("metrics: {} declared twice", name));
}

void Registry::Counter(const std::string& name, const std::string& help) {
  Declare(name, Type::kCounter, help, {});
}
void Registry::Gauge(const std::string& name, const std::string& help) {
  Declare(name, Type::kGauge, help, {});
}
void Registry::Histogram(const std::string& name, const std::string& help,
                         std::vector<double> bounds) {
  Declare(name, Type::kHistogram, help, std::move(bounds));
}

Registry::Series& Registry::At(const std::string& name, const Labels& labels, Type type) {
  const auto it = families_.find(name);
  if (it == families_.end() || it->second.type != type)
    throw Error(fmt::format("metrics: {} is not a declared {}", name,
                            type == Type::kCounter ? "counter"
                            : type == Type::kGauge ? "gauge"
                                                   : "histogram"));
  Series& s = it->second.series[RenderLabels(labels)];
  if (type == Type::kHistogram && s.counts.empty())
    s.counts.assign(it->second.bounds.size() + 1, 0);
  return s;
}

void Registry::Add(const std::string& name, const Labels& labels, double delta) {
  if (!(delta >= 0)) throw Error(fmt::format("metrics: counter {} cannot go down", name));
  const std::lock_guard lock(mu_);
  At(name, labels, Type::kCounter).value += delta;
}

void Registry::Set(const std::string& name, const Labels& labels, double value) {
  const std::lock_guard lock(mu_);
  At(name, labels, Type::kGauge).value = value;
}

void Registry::Observe(const std::string& name, const Labels& labels, double value) {
  const std::lock_guard lock(mu_);
  Series& s = At(name, labels, Type::kHistogram);
  const std::vector<double>& bounds = families_.at(name).bounds;
  const auto k = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  ++s.counts[static_cast<size_t>(k)];
  s.value += value;
}

void Registry::Clear(const std::string& name) {
  const std::lock_guard lock(mu_);
  if (const auto it = families_.find(name); it != families_.end()) it->second.series.clear();
}

std::string Registry::Exposition() const {
  const std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, Escape(f.help, true), name, type);
    for (const auto& [labels, s] : f.series) {
      if (f.type != Type::kHistogram) {
        out += fmt::format("{}{} {}\n", name, labels, RenderValue(s.value));
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t k = 0; k < s.counts.size(); ++k) {
        cumulative += s.counts[k];
        const std::string le = k < f.bounds.size() ? RenderValue(f.bounds[k]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", name, WithLe(labels, le), cumulative);
      }
      out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, labels, RenderValue(s.value), name,
                         labels, cumulative);
    }
  }
  return out;
}

}  // namespace fmstack::metrics
