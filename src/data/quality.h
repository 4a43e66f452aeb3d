// data: document quality rules in the Gopher/C4 family (Rae et al. 2021,
// "Scaling Language Models", appendix A; Raffel et al. 2020, C4), with the
// character rules the Swallow corpus adds for Japanese (Okazaki et al.
// 2024: at least 400 characters, hiragana at least 20% of the text).
//
// Word rules apply to languages written with spaces; Japanese, Chinese and
// Korean text ("cjk" below) is judged by its characters instead. Every
// threshold is a key of the pipeline's quality stage (docs/data.md); a
// negative value turns a rule off. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fmstack::data {

struct QualityOptions {
  // Every language.
  int64_t min_chars = 200;
  int64_t max_chars = 1'000'000;
  double max_duplicate_lines = 0.30;       // fraction of lines that repeat an earlier line
  double max_duplicate_line_chars = 0.20;  // fraction of characters in such lines
  double max_top_2gram_chars = 0.20;       // the most frequent word (or char) 2-gram's share
  double max_bullet_lines = 0.90;          // lines starting with a bullet
  double max_ellipsis_lines = 0.30;        // lines ending with "..." or "…"
  double max_digit_chars = 0.30;           // digits among non-space characters
  // Languages written with spaces.
  int64_t min_words = 50;
  int64_t max_words = 100'000;
  double min_mean_word_length = 3;
  double max_mean_word_length = 10;
  double max_symbol_words = 0.10;  // "#" and ellipses per word
  double min_alpha_words = 0.80;   // words with at least one letter
  int64_t min_stop_words = 2;      // English only: the, be, to, of, and, that, have, with
  // Japanese.
  int64_t min_cjk_chars = 400;
  double min_hiragana = 0.20;  // hiragana among the characters (Japanese)
};

// The statistics the rules read (for tests and for the report's samples).
struct TextStats {
  int64_t chars = 0, words = 0, lines = 0;
  double mean_word_length = 0, symbol_words = 0, alpha_words = 0, duplicate_lines = 0,
         duplicate_line_chars = 0, top_2gram_chars = 0, bullet_lines = 0, ellipsis_lines = 0,
         digit_chars = 0, hiragana = 0;
  int64_t stop_words = 0;
};

bool IsCjkLanguage(std::string_view lang);
TextStats MeasureText(std::string_view text, bool cjk);

// nullopt when the document passes; else the rule it failed, as
// "rule-name" (the report's reason), with the value in `detail`.
std::optional<std::string> FailedRule(const QualityOptions& o, std::string_view text,
                                      std::string_view lang, std::string* detail = nullptr);

}  // namespace fmstack::data
