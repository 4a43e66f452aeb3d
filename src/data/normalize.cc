#include "data/normalize.h"

#include <fmt/format.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "util/error.h"

namespace fmstack::data {

std::optional<size_t> FirstInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::nullopt;
}

namespace {

std::string Nfkc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  if (U_FAILURE(status)) throw Error(fmt::format("ICU NFKC: {}", u_errorName(status)));
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  const icu::UnicodeString out = nfkc->normalize(in, status);
  if (U_FAILURE(status)) throw Error(fmt::format("ICU NFKC: {}", u_errorName(status)));
  std::string utf8;
  out.toUTF8String(utf8);
  return utf8;
}

}  // namespace

std::string Normalize(std::string_view text) {
  const std::string nfkc = Nfkc(text);
  std::string out;
  out.reserve(nfkc.size());
  std::string line;
  bool blank_run = true;  // no blank line at the start
  auto flush = [&] {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (line.empty()) {
      if (!blank_run) out.push_back('\n');
      blank_run = true;
    } else {
      out += line;
      out.push_back('\n');
      blank_run = false;
    }
    line.clear();
  };
  for (const char ch : nfkc) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      flush();
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
      if (!line.empty() && line.back() != ' ') line.push_back(' ');
    } else if (c < 0x20 || c == 0x7f) {
      continue;  // other control characters
    } else {
      line.push_back(ch);
    }
  }
  flush();
  while (!out.empty() && out.back() == '\n' && out.size() >= 2 && out[out.size() - 2] == '\n')
    out.pop_back();
  return out;
}

}  // namespace fmstack::data
