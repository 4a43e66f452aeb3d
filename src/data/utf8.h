// data: walking text: line by line, and UTF-8 one code point at a time for
// the stages that count characters (quality rules, scripts, n-grams). A byte that cannot start a
// sequence, or a sequence cut by the end of the text, stands for itself:
// the pipeline checks validity once (FirstInvalidUtf8), before these run.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>

namespace fmstack::data {

// fn(line) for each line of `text`, without its '\n'; a last line without
// one counts, an empty text has none.
template <class Fn>
void ForEachLine(std::string_view text, Fn&& fn) {
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    fn(text.substr(start, end - start));
    start = end + 1;
  }
}

// Bytes of the sequence that `lead` starts (1 for a byte that starts none).
inline size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xe0) == 0xc0) return 2;
  if ((lead & 0xf0) == 0xe0) return 3;
  if ((lead & 0xf8) == 0xf0) return 4;
  return 1;
}

// The code point at byte `i`, advancing `i` past it. REQUIRES: i < s.size().
inline char32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len = Utf8Length(c);
  if (i + len > s.size()) len = 1;
  char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  i += len;
  return cp;
}

}  // namespace fmstack::data
