// metrics: a small registry of Prometheus series - counters, gauges and
// histograms with labels - rendered in the text exposition format 0.0.4.
// Thread-safe; one per process that exports (the supervisor), never global.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fmstack::metrics {

// Label pairs of one series, as given (order kept).
using Labels = std::vector<std::pair<std::string, std::string>>;

class Registry {
 public:
  // Declares a family before any sample of it. Throws Error on a name that
  // is not a Prometheus metric name or one declared twice; histogram bounds
  // must increase (+Inf is implied).
  void Counter(const std::string& name, const std::string& help);
  void Gauge(const std::string& name, const std::string& help);
  void Histogram(const std::string& name, const std::string& help, std::vector<double> bounds);

  // Counters only grow: a negative delta throws Error.
  void Add(const std::string& name, const Labels& labels, double delta = 1);
  void Set(const std::string& name, const Labels& labels, double value);
  void Observe(const std::string& name, const Labels& labels, double value);
  // Removes every series of a family (a gauge whose label values went away).
  void Clear(const std::string& name);

  // text/plain; version=0.0.4: HELP and TYPE per family, then its series.
  std::string Exposition() const;
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    double value = 0;              // counter, gauge; histogram: sum
    std::vector<uint64_t> counts;  // histogram: per bound, then +Inf (not cumulative)
  };
  struct Family {
    Type type = Type::kGauge;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // by rendered label set
  };
  void Declare(const std::string& name, Type type, const std::string& help,
               std::vector<double> bounds);
  Series& At(const std::string& name, const Labels& labels, Type type);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// {a="x",b="y"} with values escaped as the format says; "" for no labels.
std::string RenderLabels(const Labels& labels);
// A sample value: integers exactly, others in the shortest form that reads back exactly, NaN,
// +Inf, -Inf.
std::string RenderValue(double v);

}  // namespace fmstack::metrics
