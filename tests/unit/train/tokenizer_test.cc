#include "train/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace fmstack::train {
namespace {

const char* kText =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n"
    "And God said, Let there be light: and there was light. 1611 and 42.\n";

TEST(Tokenizer, SplitKeepsOneLeadingSpaceWithTheWord) {
  const auto chunks = BpeTokenizer::Split("the earth,  was 1611!\n\nAnd");
  const std::vector<std::string_view> expected = {"the",   " earth", ",",    " ",  " was",
                                                  " 1611", "!",      "\n\n", "And"};
  EXPECT_EQ(chunks, expected);
}

TEST(Tokenizer, RoundTripsAnyBytes) {
  const BpeTokenizer tok = BpeTokenizer::Train(kText, 300);
  EXPECT_LE(tok.vocab_size(), 300);  // stops early once no pair occurs twice
  std::string weird = "caf\xc3\xa9 \x01\xff\n\n  tabs\tand the earth";
  weird.push_back('\0');
  for (const std::string& s : {std::string(kText), weird, std::string()}) {
    EXPECT_EQ(tok.Decode(tok.Encode(s)), s);
  }
}

TEST(Tokenizer, MergesCompressFrequentWords) {
  const BpeTokenizer tok = BpeTokenizer::Train(kText, 320);
  EXPECT_LT(tok.Encode(kText).size(), std::string(kText).size() * 6 / 10);
  EXPECT_EQ(tok.Encode(" the").size(), 1u);  // the commonest word is one token
}

TEST(Tokenizer, TrainingIsDeterministicAndSavesExactly) {
  const BpeTokenizer a = BpeTokenizer::Train(kText, 290);
  const BpeTokenizer b = BpeTokenizer::Train(kText, 290);
  const std::string path = ::testing::TempDir() + "/tok.bpe";
  a.Save(path);
  const BpeTokenizer c = BpeTokenizer::Load(path);
  ASSERT_EQ(c.vocab_size(), a.vocab_size());
  for (int32_t t = 0; t < a.vocab_size(); ++t) {
    EXPECT_EQ(a.Piece(t), b.Piece(t));
    EXPECT_EQ(a.Piece(t), c.Piece(t));
  }
}

TEST(Tokenizer, LoadNamesFileAndLineOfABadMerge) {
  const std::string path = ::testing::TempDir() + "/bad.bpe";
  std::ofstream(path) << "fmstack-bpe 1\nvocab 258\nmerges 2\n104 101\n999 1\n";
  try {
    BpeTokenizer::Load(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fmstack::train
