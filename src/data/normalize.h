// data: text normalization, as the Swallow corpus applies it before its
// quality rules and deduplication. First, in Japanese text (any kana), each
// pair of commas (、 and ，) and of full stops (。 and ．) is made one per
// document: the form the document uses more replaces the other, before
// NFKC would turn the full-width Western forms into ASCII. Then Unicode
// NFKC (ICU), so that full-width
// Latin letters and digits, half-width katakana and compatibility forms
// compare equal to their plain forms; then white space: control characters
// other than newline and tab removed, runs of spaces and tabs inside a line
// made one space, lines trimmed, runs of blank lines made one.
//
// Thread-safe (ICU's normalizer instance is immutable and shared).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fmstack::data {

// The byte offset of the first invalid UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or nullopt.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// Swallow's footer removal: of the last `last_lines` lines, those that
// contain one of `phrases` ("無断転載を禁ず", "All rights reserved", ...)
// are dropped. The text's other lines are kept as they are.
std::string StripFooter(std::string_view text, const std::vector<std::string>& phrases,
                        int last_lines);

// The per-document punctuation rule above, alone.
std::string UnifyJapanesePunctuation(std::string_view text);

// Punctuation, NFKC, then white space as above. Throws Error when ICU fails (it does not
// on valid UTF-8); invalid UTF-8 must be refused before.
std::string Normalize(std::string_view text);

}  // namespace fmstack::data
