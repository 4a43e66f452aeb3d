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
