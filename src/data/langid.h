// data: language identification by character n-gram profiles (Cavnar and
// Trenkle's TextCat, Debian libexttextcat: fingerprints of about 150
// languages in /usr/share/libexttextcat).
//
// Script first, as CLD does: the letters of the first `sample_bytes` of the
// text (cut at a code point boundary) are counted by Unicode script. Kana
// among the CJK ideographs make Japanese, Hangul Korean, ideographs alone
// Chinese; Greek, Hebrew, Thai and Devanagari name their language. Only
// Latin, Cyrillic and Arabic text goes to the n-gram classifier, which
// then weighs the fingerprints of that script's `candidates` alone: over
// every fingerprint, plain English prose is often called Scots, and
// TextCat's byte n-grams cannot tell Japanese from noise when commands and
// paths are mixed in (4 of 5 Debian Reference chapters: "unknown").
// The default candidates are the 32 languages with the most web pages
// (kWebLanguages); a text with fewer than 25 bytes of letters is "short".
//
// Not thread-safe (libexttextcat's handle keeps its result buffer): one
// LanguageId per thread. Lifetime: owns the handle; movable, not copyable.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fmstack::data {

// en ja de fr es it pt ru zh ko nl pl sv tr ar fa cs vi id uk el hu ro da fi
// nb he th hi bg sk ca
extern const std::vector<std::string> kWebLanguages;

struct LanguageGuess {
  std::string lang;  // primary subtag ("ja", "en"); "" when undecided
  std::string why;   // "short", "unknown", or the runner-up when ambiguous
};

class LanguageId {
 public:
  // Loads the fingerprints listed in `conf` (libexttextcat's fpdb.conf);
  // throws Error naming the file when it cannot.
  // Throws Error naming a candidate that has no fingerprint.
  explicit LanguageId(const std::vector<std::string>& candidates = kWebLanguages,
                      size_t sample_bytes = 4096,
                      const std::string& conf = "/usr/share/libexttextcat/fpdb.conf");
  ~LanguageId();
  LanguageId(LanguageId&&) noexcept;
  LanguageId& operator=(LanguageId&&) noexcept;

  LanguageGuess Classify(std::string_view text);

 private:
  struct Handle;
  std::unique_ptr<Handle> latin_, cyrillic_, arabic_;
  std::vector<std::string> candidates_;
  size_t sample_bytes_;
};

}  // namespace fmstack::data
