#include "util/strict_table.h"

#include <gtest/gtest.h>

namespace fmstack {
namespace {

TEST(StrictTable, TypedGettersAndUnknownKeys) {
  const toml::table doc =
      ParseTomlText("a = 1\nb = 2.5\nc = \"x\"\nd = true\ne = \"3GB\"\nf = 2e12\n", "t.toml");
  StrictTable t(doc, "t.toml", "");
  EXPECT_EQ(t.Int("a"), 1);
  EXPECT_EQ(t.Number("b"), 2.5);
  EXPECT_EQ(t.String("c"), "x");
  EXPECT_EQ(t.Bool("d"), true);
  EXPECT_EQ(t.Bytes("e"), 3e9);
  EXPECT_EQ(t.Int("f"), 2'000'000'000'000);  // a whole float is an integer
  EXPECT_FALSE(t.Int("missing").has_value());
  EXPECT_NO_THROW(t.Finish());
}

TEST(StrictTable, UnknownKeyNamesLineAndSuggests) {
  const toml::table doc = ParseTomlText("[x]\nnodes = 2\nnode = 3\n", "t.toml");
  StrictTable root(doc, "t.toml", "");
  std::optional<StrictTable> x = root.Table("x");
  x->Int("nodes");
  try {
    x->Finish();
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.pos().line, 3);
    EXPECT_EQ(e.key(), "x.node");
    EXPECT_NE(std::string(e.what()).find("did you mean 'nodes'?"), std::string::npos);
  }
}

TEST(StrictTable, IntegerRejectsFractionsAndStrings) {
  const toml::table doc = ParseTomlText("a = 1.5\nb = \"2\"\n", "t.toml");
  StrictTable t(doc, "t.toml", "");
  EXPECT_THROW(t.Int("a"), SpecError);
  EXPECT_THROW(t.Int("b"), SpecError);
}

TEST(StrictTable, ABareDurationOrBandwidthIsRefusedWithAnExample) {
  const toml::table doc = ParseTomlText(
      "mtbf = 1270\nzero = 0\nwith_unit = \"1270h\"\nnet = 400\nbytes = 800\ntokens = 15e12\n",
      "t.toml");
  StrictTable t(doc, "t.toml", "");
  try {
    t.Seconds("mtbf");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.key(), "mtbf");
    EXPECT_NE(std::string(e.what()).find("a bare number 1270 has no unit; write the duration "
                                         "with one, e.g. \"1270h\" or \"1270s\""),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(t.Seconds("zero"), 0);
  EXPECT_EQ(t.Seconds("with_unit"), 1270 * 3600.0);
  EXPECT_THROW(t.Bandwidth("net"), SpecError);
  EXPECT_EQ(t.Bytes("bytes"), 800);     // a size's bare number is bytes (docs/specs.md)
  EXPECT_EQ(t.Count("tokens"), 15e12);  // a count has no unit
}

TEST(StrictTable, SyntaxErrorHasPosition) {
  try {
    ParseTomlText("a = 1\nb = = 2\n", "t.toml");
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.pos().line, 2);
  }
}

}  // namespace
}  // namespace fmstack
