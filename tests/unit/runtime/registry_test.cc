// The Prometheus registry: the exact text format 0.0.4, and what it refuses.
#include "metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fmstack::metrics {
namespace {

TEST(Registry, RendersCountersGaugesAndCumulativeHistograms) {
  Registry r;
  r.Counter("fmstack_incidents_total", "faults by kind");
  r.Gauge("fmstack_loss", "loss\nof the step");
  r.Histogram("fmstack_step_seconds", "step time", {0.1, 1});
  r.Add("fmstack_incidents_total", {{"kind", "crash"}});
  r.Add("fmstack_incidents_total", {{"kind", "crash"}}, 2);
  r.Set("fmstack_loss", {}, 2.5);
  for (const double s : {0.05, 0.5, 0.7, 3.0}) r.Observe("fmstack_step_seconds", {}, s);
  EXPECT_EQ(r.Exposition(),
            "# HELP fmstack_incidents_total faults by kind\n"
            "# TYPE fmstack_incidents_total counter\n"
            "fmstack_incidents_total{kind=\"crash\"} 3\n"
            "# HELP fmstack_loss loss\\nof the step\n"
            "# TYPE fmstack_loss gauge\n"
            "fmstack_loss 2.5\n"
            "# HELP fmstack_step_seconds step time\n"
            "# TYPE fmstack_step_seconds histogram\n"
            "fmstack_step_seconds_bucket{le=\"0.1\"} 1\n"
            "fmstack_step_seconds_bucket{le=\"1\"} 3\n"
            "fmstack_step_seconds_bucket{le=\"+Inf\"} 4\n"
            "fmstack_step_seconds_sum 4.25\n"
            "fmstack_step_seconds_count 4\n");
}

TEST(Registry, EscapesLabelValuesAndKeepsLabelsOnHistogramLines) {
  Registry r;
  r.Histogram("h", "", {1});
  r.Observe("h", {{"kind", "a\"b\\c\nd"}}, 0.5);
  const std::string text = r.Exposition();
  EXPECT_NE(text.find("h_bucket{kind=\"a\\\"b\\\\c\\nd\",le=\"1\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("h_sum{kind=\"a\\\"b\\\\c\\nd\"} 0.5"), std::string::npos) << text;
}

TEST(Registry, RefusesBadNamesDownwardCountersAndUndeclaredSeries) {
  Registry r;
  EXPECT_THROW(r.Gauge("9lives", ""), std::exception);
  EXPECT_THROW(r.Gauge("has space", ""), std::exception);
  EXPECT_THROW(r.Histogram("h", "", {1, 1}), std::exception);
  r.Counter("c", "");
  EXPECT_THROW(r.Counter("c", ""), std::exception);
  EXPECT_THROW(r.Add("c", {}, -1), std::exception);
  EXPECT_THROW(r.Set("c", {}, 1), std::exception);  // not a gauge
  EXPECT_THROW(r.Set("nope", {}, 1), std::exception);
  EXPECT_THROW(r.Add("c", {{"bad-label", "x"}}), std::exception);
  EXPECT_THROW(r.Add("c", {{"le", "x"}}), std::exception);
}

TEST(Registry, ValuesReadBack) {
  EXPECT_EQ(RenderValue(3), "3");
  EXPECT_EQ(RenderValue(0.1), "0.1");
  EXPECT_EQ(RenderValue(std::nan("")), "NaN");
  EXPECT_EQ(RenderValue(-INFINITY), "-Inf");
  EXPECT_EQ(std::stod(RenderValue(1.0 / 3)), 1.0 / 3);
}

}  // namespace
}  // namespace fmstack::metrics
