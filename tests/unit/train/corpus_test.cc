#include "train/corpus.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace fmstack::train {
namespace {

// The Debian package bible-kjv is part of scripts/bootstrap.sh's install:
// the whole text comes back one verse per line, references stripped.
TEST(KjvCorpus, IsTheWholeBibleOneVersePerLine) {
  const std::string text = ReadKjvCorpus();
  EXPECT_TRUE(text.starts_with("In the beginning God created the heaven and the earth.\n"))
      << text.substr(0, 200);
  EXPECT_GT(text.size(), 4000000u);
  // 31102 verses in the King James Version (bible-kjv may join a few).
  const auto lines = std::count(text.begin(), text.end(), '\n');
  EXPECT_GT(lines, 30000);
  EXPECT_LE(lines, 31102);
  EXPECT_NE(text.find("Amen.\n", text.size() - 200), std::string::npos)
      << text.substr(text.size() - 200);
}

}  // namespace
}  // namespace fmstack::train
