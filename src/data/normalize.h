// data: text normalization, as the Swallow corpus applies it before its
// quality rules and deduplication: Unicode NFKC (ICU), so that full-width
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

namespace fmstack::data {

// The byte offset of the first invalid UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or nullopt.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// NFKC, then white space as above. Throws Error when ICU fails (it does not
// on valid UTF-8); invalid UTF-8 must be refused before.
std::string Normalize(std::string_view text);

}  // namespace fmstack::data
