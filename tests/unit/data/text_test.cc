#include <gtest/gtest.h>

#include "data/langid.h"
#include "data/normalize.h"
#include "data/quality.h"
#include "util/error.h"

namespace fmstack::data {
namespace {

TEST(Normalize, NfkcAndWhiteSpace) {
  // Full-width Latin and digits, half-width katakana, a compatibility ligature.
  EXPECT_EQ(Normalize("ＡＢＣ１２３ ｶﾀｶﾅ ﬁ"), "ABC123 カタカナ fi\n");
  EXPECT_EQ(Normalize("  a \t b  \n\n\n\nc\x01\n  \n"), "a b\n\nc\n");
  EXPECT_EQ(Normalize(""), "");
}

TEST(Normalize, JapanesePunctuationIsOneFormPerDocument) {
  // Mostly 、。: the Western forms become Japanese ones (NFKC would have made them ASCII).
  EXPECT_EQ(Normalize("これは、例です。それは，別です．あれも、そう。"),
            "これは、例です。それは、別です。あれも、そう。\n");
  // Mostly ，．: the Japanese forms become those, which NFKC makes ASCII.
  EXPECT_EQ(UnifyJapanesePunctuation("これは，例です．それは、別です．あれも，そう．"),
            "これは，例です．それは，別です．あれも，そう．");
  // Text without kana is left alone.
  EXPECT_EQ(UnifyJapanesePunctuation("１，２．"), "１，２．");
}

TEST(Normalize, FooterLinesGoFromTheEndOnly) {
  const std::vector<std::string> phrases = {"無断転載を禁ず", "All rights reserved"};
  EXPECT_EQ(StripFooter("本文です。\n無断転載を禁ず。\n続きです。\n(c) 2024 例 無断転載を禁ず\n",
                        phrases, 2),
            "本文です。\n無断転載を禁ず。\n続きです。\n");
  EXPECT_EQ(StripFooter("text\nAll rights reserved.", phrases, 5), "text\n");
  EXPECT_EQ(StripFooter("All rights reserved\n", phrases, 5), "");
  EXPECT_EQ(StripFooter("", phrases, 5), "");
  EXPECT_EQ(StripFooter("no footer\n", phrases, 5), "no footer\n");
}

TEST(Normalize, InvalidUtf8IsFound) {
  EXPECT_FALSE(FirstInvalidUtf8("plain ascii and 日本語"));
  EXPECT_EQ(FirstInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(FirstInvalidUtf8("a\xc0\xaf"), 1u);          // overlong "/"
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0u);       // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("x\xf4\x90\x80\x80"), 1u);  // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xe3\x81"), 0u);           // cut short
}

TEST(LanguageId, ClassifiesRealSentences) {
  LanguageId id;
  EXPECT_EQ(id.Classify("The quick brown fox jumps over the lazy dog while the farmer watches "
                        "from the porch and the children play in the field behind the barn.")
                .lang,
            "en");
  EXPECT_EQ(id.Classify("これは日本語の文章です。今日は天気が良いので、公園に散歩に行きました。"
                        "桜の花がとても綺麗に咲いていて、多くの人が写真を撮っていました。")
                .lang,
            "ja");
  EXPECT_EQ(id.Classify("Der schnelle braune Fuchs springt über den faulen Hund, während der "
                        "Bauer von der Veranda aus zusieht und die Kinder auf dem Feld spielen.")
                .lang,
            "de");
  EXPECT_EQ(id.Classify("ok").why, "short");
  EXPECT_THROW(LanguageId(kWebLanguages, 4096, "/nonexistent/fpdb.conf"), Error);
  EXPECT_THROW(LanguageId({"en", "xx"}), Error);
}

std::string Words(int n, const std::string& word) {
  std::string s;
  for (int i = 0; i < n; ++i) s += word + (i % 10 == 9 ? "\n" : " ");
  return s;
}

TEST(Quality, GopherRulesNameTheRuleAndValue) {
  QualityOptions o;
  std::string good;
  const char* sentences[] = {"The committee reviewed the proposal with great care and interest.",
                             "Several members asked questions about the budget and the schedule.",
                             "After a long discussion they agreed to meet again next month.",
                             "The chair thanked everyone for their patience and their ideas.",
                             "Minutes of the meeting will be shared with all the participants."};
  for (int i = 0; i < 5; ++i) good += std::string(sentences[i]) + "\n";
  EXPECT_EQ(FailedRule(o, good, "en"), std::nullopt);
  std::string detail;
  EXPECT_EQ(FailedRule(o, "Too short.", "en", &detail), "min_chars");
  EXPECT_EQ(detail, "10 < 200");
  EXPECT_EQ(FailedRule(o, good + good + good, "en"), "max_duplicate_lines");
  EXPECT_EQ(FailedRule(o, Words(80, "#tag"), "en"), "max_duplicate_lines");
  o.max_duplicate_lines = -1, o.max_duplicate_line_chars = -1;  // off
  EXPECT_EQ(FailedRule(o, Words(80, "#tag"), "en"), "max_top_2gram_chars");
  o.max_top_2gram_chars = -1;
  EXPECT_EQ(FailedRule(o, Words(80, "#tag"), "en"), "max_symbol_words");
  EXPECT_EQ(FailedRule(QualityOptions{}, std::string(300, '7'), "en"), "max_digit_chars");
}

TEST(Quality, JapaneseIsJudgedByCharacters) {
  QualityOptions o;
  std::string ja;
  for (int i = 0; i < 30; ++i)
    ja += "今日は天気が良いので公園に散歩に行きました。第" + std::to_string(i) + "話\n";
  EXPECT_EQ(FailedRule(o, ja, "ja"), std::nullopt);
  std::string katakana;
  for (int i = 0; i < 40; ++i) katakana += "コンピュータシステム" + std::to_string(i) + "\n";
  EXPECT_EQ(FailedRule(o, katakana, "ja"), "min_hiragana");
  EXPECT_EQ(FailedRule(o, "短い文章です。", "ja"), "min_chars");
}

}  // namespace
}  // namespace fmstack::data
