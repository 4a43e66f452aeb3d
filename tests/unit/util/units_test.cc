#include "util/units.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "util/error.h"

namespace fmstack::units {
namespace {

TEST(Units, ParseBytes) {
  EXPECT_DOUBLE_EQ(ParseBytes("15TB"), 15e12);
  EXPECT_DOUBLE_EQ(ParseBytes("420 GB"), 420e9);
  EXPECT_DOUBLE_EQ(ParseBytes("1.5TiB"), 1.5 * kTiB);
  EXPECT_DOUBLE_EQ(ParseBytes("800"), 800);
  EXPECT_THROW(ParseBytes("lots"), std::invalid_argument);
  EXPECT_THROW(ParseBytes("3 parsecs"), std::invalid_argument);
  // One grammar: short or spelled out, any case.
  EXPECT_DOUBLE_EQ(ParseBytes("15T"), 15e12);
  EXPECT_DOUBLE_EQ(ParseBytes("2 bytes"), 2);
  EXPECT_DOUBLE_EQ(ParseSeconds("30 minutes"), 1800);
  EXPECT_DOUBLE_EQ(ParseSeconds("20 hours"), 72000);
  EXPECT_DOUBLE_EQ(ParseSeconds("1 Week"), 7 * 86400);
  EXPECT_DOUBLE_EQ(ParseSeconds("5 secs"), 5);
}

TEST(Units, ParseSecondsAndBandwidth) {
  EXPECT_DOUBLE_EQ(ParseSeconds("15m"), 900);
  EXPECT_DOUBLE_EQ(ParseSeconds("150min"), 9000);
  EXPECT_DOUBLE_EQ(ParseSeconds("2.5h"), 9000);
  EXPECT_DOUBLE_EQ(ParseSeconds("54d"), 54 * kDay);
  EXPECT_DOUBLE_EQ(ParseBandwidth("3200Gbps"), 400e9);
  EXPECT_DOUBLE_EQ(ParseBandwidth("3GB/s"), 3e9);
  EXPECT_DOUBLE_EQ(ParseBandwidth("28.8Tbps"), 3.6e12);
}

TEST(Units, ParseCountTakesDecimalSuffixes) {
  EXPECT_DOUBLE_EQ(ParseCount("15T"), 15e12);
  EXPECT_DOUBLE_EQ(ParseCount("2.5B"), 2.5e9);
  EXPECT_DOUBLE_EQ(ParseCount("800 M"), 800e6);
  EXPECT_DOUBLE_EQ(ParseCount("15T tokens"), 15e12);
  EXPECT_DOUBLE_EQ(ParseCount("1e9"), 1e9);
  EXPECT_THROW(ParseCount("15TB"), std::invalid_argument);  // a size, not a count
  EXPECT_THROW(ParseCount("many"), std::invalid_argument);
}

TEST(Units, Format) {
  EXPECT_EQ(FormatBytes(1.26e12), "1.26 TB");
  EXPECT_EQ(FormatBytes(420e9), "420 GB");
  EXPECT_EQ(FormatSeconds(900), "15.0 min");
  EXPECT_EQ(FormatSeconds(6.8 * kDay), "6.80 days");
  EXPECT_EQ(FormatCount(12288), "12,288");
  EXPECT_EQ(FormatCount(70.55e9), "70.5B");
  EXPECT_EQ(FormatUsd(236000), "$236,000");
  // One notation for FLOP counts and one for rates, wherever they print.
  EXPECT_EQ(FormatFlop(5.88e23), "5.88e23");
  EXPECT_EQ(FormatFlop(7.39e7), "7.39e7");
  EXPECT_EQ(FormatFlop(1.5e-5), "1.5e-5");
  EXPECT_EQ(FormatFlopRate(989.5e12), "989.5 TFLOP/s");
  EXPECT_EQ(FormatFlopRate(19.5e12), "19.5 TFLOP/s");
  EXPECT_EQ(FormatFlopRate(189e9), "189 GFLOP/s");
}

TEST(Units, DurationsTakeEveryCommonSpelling) {
  for (const char* text : {"30 minutes", "30mins", "30 min", "30m", "0.5 hours", "1800s"})
    EXPECT_DOUBLE_EQ(ParseSeconds(text), 1800) << text;
  EXPECT_DOUBLE_EQ(ParseBytes("15T"), 15e12);
  EXPECT_THROW(ParseSeconds("30 fortnights"), std::invalid_argument);
}

TEST(DidYouMean, SuggestsCloseNamesOnly) {
  const std::vector<std::string> keys = {"tp", "pp", "zero_stage", "train"};
  EXPECT_EQ(ClosestMatch("zero_stgae", keys), "zero_stage");
  EXPECT_EQ(ClosestMatch("trian", keys), "train");
  EXPECT_FALSE(ClosestMatch("optimizer", keys).has_value());
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("ab", "ba"), 1u);
}

}  // namespace
}  // namespace fmstack::units
