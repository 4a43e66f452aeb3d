#include "data/quality.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "data/utf8.h"

namespace fmstack::data {
namespace {

// Code points of UTF-8 text (invalid bytes as themselves; the pipeline
// refuses invalid UTF-8 before this runs).
std::vector<char32_t> CodePoints(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(NextCodePoint(s, i));
  return out;
}

bool Space(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x3000;
}
bool Letter(char32_t c) {
  return (c < 0x80 && std::isalpha(static_cast<int>(c))) || (c >= 0xc0 && !Space(c));
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool Bullet(std::string_view line) {
  static constexpr std::array<std::string_view, 6> kBullets = {"*",      "-",      "\u2022",
                                                               "\u25cf", "\u30fb", "\u2023"};
  return std::any_of(kBullets.begin(), kBullets.end(),
                     [&](std::string_view b) { return line.starts_with(b); });
}

bool Ellipsis(std::string_view line) {
  return line.ends_with("...") || line.ends_with("\u2026");
}

// The most frequent 2-gram's share of the characters: of characters (CJK),
// or of words (each weighing its bytes).
double TopCharTwoGram(const std::vector<char32_t>& chars) {
  if (chars.size() < 2) return 0;
  std::unordered_map<uint64_t, int64_t> counts;
  int64_t best = 0;
  for (size_t i = 0; i + 1 < chars.size(); ++i)
    best = std::max(best, ++counts[(uint64_t{chars[i]} << 32) | chars[i + 1]]);
  return static_cast<double>(2 * best) / static_cast<double>(chars.size());
}

double TopWordTwoGram(const std::vector<std::string_view>& words, int64_t word_chars) {
  if (words.size() < 2 || word_chars == 0) return 0;
  std::unordered_map<std::string, int64_t> counts;
  int64_t best = 0;
  std::string key;
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    key.assign(words[i]);
    key.push_back('\x1f');
    key.append(words[i + 1]);
    const int64_t n = ++counts[key];
    best = std::max(best, n * static_cast<int64_t>(words[i].size() + words[i + 1].size()));
  }
  return static_cast<double>(best) / static_cast<double>(word_chars);
}

}  // namespace

bool IsCjkLanguage(std::string_view lang) {
  return lang == "ja" || lang == "zh" || lang == "ko";
}

TextStats MeasureText(std::string_view text, bool cjk) {
  TextStats s;
  const std::vector<char32_t> cps = CodePoints(text);
  int64_t non_space = 0, digits = 0, hiragana = 0;
  for (const char32_t c : cps) {
    if (Space(c)) continue;
    ++non_space;
    if (c >= '0' && c <= '9') ++digits;
    if (c >= 0x3040 && c <= 0x309f) ++hiragana;
  }
  s.chars = static_cast<int64_t>(cps.size());
  s.digit_chars = non_space ? static_cast<double>(digits) / static_cast<double>(non_space) : 0;
  s.hiragana = non_space ? static_cast<double>(hiragana) / static_cast<double>(non_space) : 0;

  const std::vector<std::string_view> lines = Split(text, '\n');
  s.lines = static_cast<int64_t>(lines.size());
  std::unordered_set<std::string_view> seen;
  int64_t dup = 0, dup_chars = 0, bullets = 0, ellipses = 0;
  for (const std::string_view l : lines) {
    if (!seen.insert(l).second) ++dup, dup_chars += static_cast<int64_t>(l.size());
    bullets += Bullet(l);
    ellipses += Ellipsis(l);
  }
  if (s.lines > 0) {
    s.duplicate_lines = static_cast<double>(dup) / static_cast<double>(s.lines);
    s.bullet_lines = static_cast<double>(bullets) / static_cast<double>(s.lines);
    s.ellipsis_lines = static_cast<double>(ellipses) / static_cast<double>(s.lines);
  }
  if (!text.empty())
    s.duplicate_line_chars = static_cast<double>(dup_chars) / static_cast<double>(text.size());

  if (cjk) {
    std::vector<char32_t> chars;
    for (const char32_t c : cps)
      if (!Space(c)) chars.push_back(c);
    s.top_2gram_chars = TopCharTwoGram(chars);
    return s;
  }
  std::vector<std::string_view> words;
  for (const std::string_view l : lines)
    for (const std::string_view w : Split(l, ' ')) words.push_back(w);
  s.words = static_cast<int64_t>(words.size());
  static const std::unordered_set<std::string_view> kStop = {"the", "be",   "to",   "of",
                                                             "and", "that", "have", "with"};
  int64_t letters = 0, symbols = 0, alpha = 0, word_chars = 0;
  for (const std::string_view w : words) {
    word_chars += static_cast<int64_t>(w.size());
    symbols += w.find('#') != std::string_view::npos;
    symbols +=
        w.find("...") != std::string_view::npos || w.find("\u2026") != std::string_view::npos;
    const bool has_letter = std::any_of(
        w.begin(), w.end(), [](char c) { return Letter(static_cast<unsigned char>(c)); });
    alpha += has_letter;
    std::string lower(w);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    s.stop_words += kStop.contains(lower);
    letters += static_cast<int64_t>(CodePoints(w).size());
  }
  if (s.words > 0) {
    s.mean_word_length = static_cast<double>(letters) / static_cast<double>(s.words);
    s.symbol_words = static_cast<double>(symbols) / static_cast<double>(s.words);
    s.alpha_words = static_cast<double>(alpha) / static_cast<double>(s.words);
  }
  s.top_2gram_chars = TopWordTwoGram(words, word_chars);
  return s;
}

std::optional<std::string> FailedRule(const QualityOptions& o, std::string_view text,
                                      std::string_view lang, std::string* detail) {
  const bool cjk = IsCjkLanguage(lang);
  const TextStats s = MeasureText(text, cjk);
  std::optional<std::string> failed;
  auto below = [&](const char* rule, double value, double limit) {
    if (failed || limit < 0 || value >= limit) return;
    failed = rule;
    if (detail) *detail = fmt::format("{:.4g} < {:.4g}", value, limit);
  };
  auto above = [&](const char* rule, double value, double limit) {
    if (failed || limit < 0 || value <= limit) return;
    failed = rule;
    if (detail) *detail = fmt::format("{:.4g} > {:.4g}", value, limit);
  };
  below("min_chars", static_cast<double>(s.chars), static_cast<double>(o.min_chars));
  above("max_chars", static_cast<double>(s.chars), static_cast<double>(o.max_chars));
  above("max_duplicate_lines", s.duplicate_lines, o.max_duplicate_lines);
  above("max_duplicate_line_chars", s.duplicate_line_chars, o.max_duplicate_line_chars);
  above("max_top_2gram_chars", s.top_2gram_chars, o.max_top_2gram_chars);
  above("max_bullet_lines", s.bullet_lines, o.max_bullet_lines);
  above("max_ellipsis_lines", s.ellipsis_lines, o.max_ellipsis_lines);
  above("max_digit_chars", s.digit_chars, o.max_digit_chars);
  if (cjk) {
    below("min_cjk_chars", static_cast<double>(s.chars), static_cast<double>(o.min_cjk_chars));
    if (lang == "ja") below("min_hiragana", s.hiragana, o.min_hiragana);
    return failed;
  }
  below("min_words", static_cast<double>(s.words), static_cast<double>(o.min_words));
  above("max_words", static_cast<double>(s.words), static_cast<double>(o.max_words));
  below("min_mean_word_length", s.mean_word_length, o.min_mean_word_length);
  above("max_mean_word_length", s.mean_word_length, o.max_mean_word_length);
  above("max_symbol_words", s.symbol_words, o.max_symbol_words);
  below("min_alpha_words", s.alpha_words, o.min_alpha_words);
  if (lang == "en")
    below("min_stop_words", static_cast<double>(s.stop_words),
          static_cast<double>(o.min_stop_words));
  return failed;
}

}  // namespace fmstack::data
