// data: the main text of an HTML page, by an HTML5 parser (Google's gumbo,
// Debian libgumbo), as the corpus pipelines of Swallow and FineWeb take it
// before any text rule runs.
//
// What is kept: text under <body>, one line per block element (p, div, li,
// h1-h6, pre, tr, ...), cells of a row separated by a tab. What is dropped
// as boilerplate: script, style, noscript, template, svg, math, iframe,
// object, form controls, and the page chrome: nav, header, footer, aside,
// and any element whose role is navigation, banner, contentinfo or search.
// The page's declared language is <html lang> (or xml:lang), lowercased,
// its region dropped ("ja-JP" -> "ja").
//
// Malformed HTML is parsed as a browser would (the HTML5 algorithm never
// fails); the walk is iterative. gumbo's time grows with the square of the
// nesting depth (10,000 nested <span>s: 1.5 s; 2,000: 0.07 s), so a page
// nested deeper than kMaxHtmlDepth, by a scan of its tags before parsing,
// is refused rather than parsed. Thread-safe: no shared state.
#pragma once

#include <string>
#include <string_view>

namespace fmstack::data {

inline constexpr size_t kMaxHtmlDepth = 2000;

struct HtmlText {
  bool too_deep = false;      // refused: nested deeper than kMaxHtmlDepth
  std::string text;           // lines of block text, no blank runs
  std::string declared_lang;  // "" when the page declares none
  std::string title;
};

HtmlText ExtractHtmlText(std::string_view html);

// The deepest nesting of elements the tags of `html` open, counting
// neither void elements nor those whose end tag HTML lets a page omit
// (p, li, td, ...): an upper bound of the parser's depth in practice.
size_t TagDepth(std::string_view html);

// The primary subtag of a language tag, lowercased: "ja-JP" -> "ja",
// "EN_us" -> "en"; "" for an empty or non-alphabetic tag.
std::string PrimaryLanguage(std::string_view tag);

}  // namespace fmstack::data
