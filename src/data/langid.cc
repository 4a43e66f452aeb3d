#include "data/langid.h"

#include <fmt/format.h>
#include <textcat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "data/html_text.h"
#include "data/utf8.h"
#include "util/error.h"
#include "util/strict_table.h"

namespace fmstack::data {

namespace {

enum class Script { kLatin, kCyrillic, kArabic, kOther };

// The script of the candidates the n-gram classifier tells apart.
Script ScriptOf(const std::string& lang) {
  static const char* kCyrillic[] = {"ru", "uk", "bg", "sr", "mk", "be", "kk"};
  static const char* kArabic[] = {"ar", "fa", "ur", "ps"};
  static const char* kOther[] = {"ja", "zh", "ko", "el", "he", "th", "hi"};
  for (const char* l : kCyrillic)
    if (lang == l) return Script::kCyrillic;
  for (const char* l : kArabic)
    if (lang == l) return Script::kArabic;
  for (const char* l : kOther)
    if (lang == l) return Script::kOther;
  return Script::kLatin;
}

struct Letters {
  int64_t latin = 0, kana = 0, han = 0, hangul = 0, cyrillic = 0, greek = 0, arabic = 0, hebrew = 0,
          thai = 0, devanagari = 0;
  int64_t all() const {
    return latin + kana + han + hangul + cyrillic + greek + arabic + hebrew + thai + devanagari;
  }
};

Letters CountLetters(std::string_view s) {
  Letters n;
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = NextCodePoint(s, i);
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= 0xc0 && cp <= 0x24f)) {
      ++n.latin;
    } else if (cp >= 0x3040 && cp <= 0x30ff) {
      ++n.kana;
    } else if ((cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf)) {
      ++n.han;
    } else if ((cp >= 0xac00 && cp <= 0xd7af) || (cp >= 0x1100 && cp <= 0x11ff)) {
      ++n.hangul;
    } else if (cp >= 0x400 && cp <= 0x4ff) {
      ++n.cyrillic;
    } else if (cp >= 0x370 && cp <= 0x3ff) {
      ++n.greek;
    } else if (cp >= 0x600 && cp <= 0x6ff) {
      ++n.arabic;
    } else if (cp >= 0x590 && cp <= 0x5ff) {
      ++n.hebrew;
    } else if (cp >= 0xe00 && cp <= 0xe7f) {
      ++n.thai;
    } else if (cp >= 0x900 && cp <= 0x97f) {
      ++n.devanagari;
    }
  }
  return n;
}

}  // namespace

struct LanguageId::Handle {
  void* tc = nullptr;
  candidate_t* out = nullptr;
  ~Handle() {
    if (out != nullptr) textcat_ReleaseClassifyFullOutput(tc, out);
    if (tc != nullptr) textcat_Done(tc);
  }
};

const std::vector<std::string> kWebLanguages = {
    "en", "ja", "de", "fr", "es", "it", "pt", "ru", "zh", "ko", "nl", "pl", "sv", "tr", "ar", "fa",
    "cs", "vi", "id", "uk", "el", "hu", "ro", "da", "fi", "nb", "he", "th", "hi", "bg", "sk", "ca"};

namespace {

// A classifier over the fingerprints of `langs` (a list of its own, in a
// temporary file: libexttextcat reads its list from a file only).
void* LoadFingerprints(const std::string& listed, const std::string& conf,
                       const std::vector<std::string>& langs) {
  std::string kept;
  std::vector<std::string> found;
  ForEachLine(listed, [&](std::string_view line) {
    if (line.empty() || line[0] == '#') return;
    const std::string lang = PrimaryLanguage(line.substr(0, line.find_first_of(". \t")));
    if (std::count(langs.begin(), langs.end(), lang) == 0) return;
    kept.append(line).push_back('\n');
    found.push_back(lang);
  });
  for (const std::string& c : langs) {
    if (std::count(found.begin(), found.end(), c) == 0)
      throw Error(fmt::format("language id: no fingerprint for \"{}\" in {}", c, conf));
  }
  char path[] = "/tmp/fmstack-langid-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw Error(fmt::format("language id: mkstemp: {}", std::strerror(errno)));
  const bool written = ::write(fd, kept.data(), kept.size()) == static_cast<ssize_t>(kept.size());
  ::close(fd);
  const std::string dir = conf.substr(0, conf.rfind('/') + 1);
  void* tc = written ? special_textcat_Init(path, dir.c_str()) : nullptr;
  ::unlink(path);
  if (tc == nullptr)
    throw Error(fmt::format("language id: cannot load the fingerprints listed in {}", conf));
  textcat_SetProperty(tc, TCPROP_MINIMUM_DOCUMENT_SIZE, 25);
  return tc;
}

}  // namespace

LanguageId::LanguageId(const std::vector<std::string>& candidates, size_t sample_bytes,
                       const std::string& conf)
    : candidates_(candidates), sample_bytes_(sample_bytes) {
  std::string listed;
  try {
    listed = ReadTextFile(conf);
  } catch (const Error&) {
    throw Error(
        fmt::format("language id: cannot read {} (Debian package libexttextcat-data)", conf));
  }
  std::vector<std::string> by[3];
  std::vector<std::string> other;
  for (const std::string& c : candidates) {
    const Script s = ScriptOf(c);
    if (s == Script::kOther) {
      other.push_back(c);
    } else {
      by[static_cast<int>(s)].push_back(c);
    }
  }
  // The scripts that name their language have fingerprints too: a
  // candidate that has none is a typo either way.
  if (!other.empty()) {
    void* check = LoadFingerprints(listed, conf, other);
    textcat_Done(check);
  }
  std::unique_ptr<Handle>* handles[3] = {&latin_, &cyrillic_, &arabic_};
  for (int k = 0; k < 3; ++k) {
    if (by[k].empty()) continue;
    *handles[k] = std::make_unique<Handle>();
    (*handles[k])->tc = LoadFingerprints(listed, conf, by[k]);
    (*handles[k])->out = textcat_GetClassifyFullOutput((*handles[k])->tc);
  }
}

LanguageId::~LanguageId() = default;
LanguageId::LanguageId(LanguageId&&) noexcept = default;
LanguageId& LanguageId::operator=(LanguageId&&) noexcept = default;

LanguageGuess LanguageId::Classify(std::string_view text) {
  size_t n = std::min(text.size(), sample_bytes_);
  // Back to the start of a code point: never a cut sequence.
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xc0) == 0x80) --n;
  const std::string_view sample = text.substr(0, n);
  const Letters l = CountLetters(sample);
  if (l.all() < 25) return {"", "short"};
  auto named = [&](const char* lang) -> LanguageGuess {
    if (std::count(candidates_.begin(), candidates_.end(), lang) == 0) return {"", "unknown"};
    return {lang, ""};
  };
  const double all = static_cast<double>(l.all());
  const int64_t cjk = l.kana + l.han;
  if (static_cast<double>(cjk) >= 0.1 * all && l.kana * 20 >= cjk) return named("ja");
  if (static_cast<double>(l.hangul) >= 0.1 * all) return named("ko");
  if (static_cast<double>(cjk) >= 0.1 * all) return named("zh");
  const std::pair<int64_t, const char*> named_scripts[] = {
      {l.greek, "el"}, {l.hebrew, "he"}, {l.thai, "th"}, {l.devanagari, "hi"}};
  for (const auto& [count, lang] : named_scripts)
    if (static_cast<double>(count) >= 0.3 * all) return named(lang);
  Handle* h = l.cyrillic >= l.latin && l.cyrillic >= l.arabic ? cyrillic_.get()
              : l.arabic >= l.latin                           ? arabic_.get()
                                                              : latin_.get();
  if (h == nullptr) return {"", "unknown"};
  const int found = textcat_ClassifyFull(h->tc, sample.data(), sample.size(), h->out);
  if (found == TEXTCAT_RESULT_SHORT) return {"", "short"};
  if (found <= 0) return {"", "unknown"};
  LanguageGuess g;
  g.lang = PrimaryLanguage(h->out[0].name);  // "en--utf8" -> "en"
  if (found > 1) g.why = fmt::format("or {}", PrimaryLanguage(h->out[1].name));
  return g;
}

}  // namespace fmstack::data
