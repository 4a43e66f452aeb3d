#include "data/normalize.h"

#include <fmt/format.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>

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

size_t Count(std::string_view text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

bool HasKana(std::string_view text) {
  // U+3041..U+30FF: E3 81 81 .. E3 83 BF in UTF-8.
  for (size_t i = 0; i + 2 < text.size(); ++i) {
    const auto a = static_cast<unsigned char>(text[i]), b = static_cast<unsigned char>(text[i + 1]);
    if (a == 0xe3 && (b == 0x81 || b == 0x82 || b == 0x83)) return true;
  }
  return false;
}

}  // namespace

std::string StripFooter(std::string_view text, const std::vector<std::string>& phrases,
                        int last_lines) {
  // Line starts, from the end: the lines that may be footer.
  std::vector<size_t> starts;
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  for (size_t at = end; starts.size() < static_cast<size_t>(last_lines);) {
    const size_t nl = at == 0 ? std::string_view::npos : text.rfind('\n', at - 1);
    starts.push_back(nl == std::string_view::npos ? 0 : nl + 1);
    if (nl == std::string_view::npos) break;
    at = nl;
  }
  if (starts.empty()) return std::string(text);
  const size_t tail = starts.back();
  std::string out(text.substr(0, tail));
  for (size_t k = starts.size(); k-- > 0;) {
    const size_t from = starts[k];
    const size_t to = k == 0 ? text.size() : starts[k - 1];
    const std::string_view line = text.substr(from, to - from);
    const bool footer = std::any_of(phrases.begin(), phrases.end(), [&](const std::string& p) {
      return line.find(p) != std::string_view::npos;
    });
    if (!footer) out.append(line);
  }
  return out;
}

std::string UnifyJapanesePunctuation(std::string_view text) {
  std::string out(text);
  if (!HasKana(text)) return out;
  const std::pair<std::string_view, std::string_view> pairs[] = {{"\u3001", "\uff0c"},   // 、 ，
                                                                 {"\u3002", "\uff0e"}};  // 。 ．
  for (const auto& [japanese, western] : pairs) {
    const size_t j = Count(out, japanese), w = Count(out, western);
    if (j == 0 || w == 0) continue;
    if (j >= w) {
      ReplaceAll(out, western, japanese);
    } else {
      ReplaceAll(out, japanese, western);
    }
  }
  return out;
}

std::string Normalize(std::string_view text) {
  const std::string nfkc = Nfkc(UnifyJapanesePunctuation(text));
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
