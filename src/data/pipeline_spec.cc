#include "data/pipeline_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "data/langid.h"
#include "data/utf8.h"
#include "util/strict_table.h"

namespace fmstack::data {
namespace {

namespace fs = std::filesystem;

// Typical footer lines: Japanese "reproduction prohibited" notices, as
// Swallow-NORM removes them, and their English counterpart.
const std::vector<std::string> kFooterPhrases = {
    "\u7121\u65ad\u8ee2\u8f09\u3092\u7981\u305a",  // 無断転載を禁ず
    "\u7121\u65ad\u8ee2\u8f09\u7981\u6b62",        // 無断転載禁止
    "\u7121\u65ad\u8907\u5199\u30fb\u8ee2\u8f09\u3092\u7981\u3058\u307e"
    "\u3059",  // 無断複写・転載を禁じます
    "All rights reserved", "All Rights Reserved"};

std::string Resolve(const std::string& base, const std::string& p) {
  return fs::path(p).is_absolute() ? p : (fs::path(base) / p).lexically_normal().string();
}

void ReadQuality(StrictTable& t, QualityOptions& q) {
  auto count = [&](const char* key, int64_t& field) {
    if (auto v = t.Int(key, -1)) field = *v;
  };
  auto fraction = [&](const char* key, double& field, double max = 1.0) {
    if (auto v = t.Number(key, -1, max)) field = *v;
  };
  count("min_chars", q.min_chars);
  count("max_chars", q.max_chars);
  fraction("max_duplicate_lines", q.max_duplicate_lines);
  fraction("max_duplicate_line_chars", q.max_duplicate_line_chars);
  fraction("max_top_2gram_chars", q.max_top_2gram_chars);
  fraction("max_bullet_lines", q.max_bullet_lines);
  fraction("max_ellipsis_lines", q.max_ellipsis_lines);
  fraction("max_digit_chars", q.max_digit_chars);
  count("min_words", q.min_words);
  count("max_words", q.max_words);
  fraction("min_mean_word_length", q.min_mean_word_length, 1000);
  fraction("max_mean_word_length", q.max_mean_word_length, 1000);
  fraction("max_symbol_words", q.max_symbol_words, 1000);
  fraction("min_alpha_words", q.min_alpha_words);
  count("min_stop_words", q.min_stop_words);
  count("min_cjk_chars", q.min_cjk_chars);
  fraction("min_hiragana", q.min_hiragana);
}

std::vector<std::string> Languages(StrictTable& t) {
  std::vector<std::string> keep = t.StringArray("keep");
  if (keep.empty())
    t.Fail("keep", "an empty list would remove every document",
           "name the languages to keep, as [\"ja\", \"en\"]");
  for (const std::string& l : keep) {
    if (l.empty() || l.size() > 8 ||
        !std::all_of(l.begin(), l.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
      t.Fail("keep", fmt::format("\"{}\" is not a language's primary subtag", l),
             "lowercase ISO 639 codes such as \"ja\" or \"en\"");
  }
  return keep;
}

Stage ReadStage(StrictTable& t, const std::string& base) {
  Stage s;
  s.kind = *t.Choice("kind", StageKinds());
  if (s.kind == "declared-language") {
    s.keep = Languages(t);
  } else if (s.kind == "language") {
    s.keep = Languages(t);
    s.candidates = t.Has("candidates") ? t.StringArray("candidates") : kWebLanguages;
    for (const std::string& k : s.keep) {
      if (std::count(s.candidates.begin(), s.candidates.end(), k) == 0)
        t.Fail("keep", fmt::format("\"{}\" is not among the candidate languages", k),
               "add it to candidates");
    }
    if (auto v = t.Int("sample_bytes", 64, 1 << 20)) s.sample_bytes = static_cast<size_t>(*v);
  } else if (s.kind == "footer") {
    s.phrases = t.Has("phrases") ? t.StringArray("phrases") : kFooterPhrases;
    if (auto v = t.Int("last_lines", 1, 1000)) s.last_lines = static_cast<int>(*v);
  } else if (s.kind == "quality") {
    ReadQuality(t, s.quality);
  } else if (s.kind == "url-filter") {
    s.block_hosts = t.StringArray("block_hosts");
    if (auto f = t.String("block_hosts_file")) {
      ForEachLine(ReadTextFile(Resolve(base, *f)), [&](std::string_view host) {
        if (!host.empty() && host.back() == '\r') host.remove_suffix(1);
        if (!host.empty() && host[0] != '#') s.block_hosts.emplace_back(host);
      });
    }
    s.block_url_substrings = t.StringArray("block_url_substrings");
  } else if (s.kind == "minhash-dedup") {
    if (auto p = t.String("preset")) {
      try {
        s.minhash = MinHashPreset(*p);
      } catch (const Error&) {
        t.Fail("preset", fmt::format("unknown preset \"{}\"", *p), "\"swallow\" or \"fineweb\"");
      }
    }
    if (auto v = t.Int("ngram", 1, 64)) s.minhash.ngram = static_cast<int>(*v);
    if (auto v = t.Int("bands", 1, 1024)) s.minhash.bands = static_cast<int>(*v);
    if (auto v = t.Int("rows", 1, 1024)) s.minhash.rows = static_cast<int>(*v);
    if (s.minhash.hashes() > 4096)
      t.Fail("rows", fmt::format("bands x rows = {} hashes; at most 4096", s.minhash.hashes()));
  } else if (s.kind == "tokenize") {
    if (auto v = t.Int("vocab", 256, 65536)) s.vocab = *v;
    if (auto v = t.Int("held_out_every", 2, 1000000)) s.held_out_every = *v;
  }
  t.Finish();
  return s;
}

// The kinds' phases: 0 declared-language, 1 per-document on text, 2 dedup, 3 tokenize.
int PhaseOf(const std::string& kind) {
  if (kind == "declared-language") return 0;
  if (kind == "exact-dedup" || kind == "minhash-dedup") return 2;
  if (kind == "tokenize") return 3;
  return 1;
}

}  // namespace

const std::vector<std::string>& StageKinds() {
  static const std::vector<std::string> kKinds = {
      "declared-language", "extract",    "normalize",   "footer",        "language",
      "quality",           "url-filter", "exact-dedup", "minhash-dedup", "tokenize"};
  return kKinds;
}

const Stage* PipelineSpec::Find(const std::string& kind) const {
  for (const Stage& s : stages)
    if (s.kind == kind) return &s;
  return nullptr;
}

PipelineSpec LoadPipelineSpec(const std::string& path) {
  const toml::table doc = ParseTomlText(ReadTextFile(path), path);
  StrictTable root(doc, path, "");
  PipelineSpec spec;
  spec.file = path;
  const std::string base = fs::path(path).parent_path().string();
  spec.name = root.String("name").value_or(fs::path(path).stem().string());
  std::optional<StrictTable> data = root.Table("data");
  if (!data) root.Fail("data", "no [data.pipeline] table: this is not a corpus pipeline job");
  std::optional<StrictTable> p = data->Table("pipeline");
  if (!p) data->Fail("pipeline", "no [data.pipeline] table: this is not a corpus pipeline job");
  const std::vector<std::string> patterns = p->StringArray("inputs");
  if (patterns.empty()) p->Fail("inputs", "no inputs", "a list of files, directories or globs");
  for (const std::string& pattern : patterns) {
    try {
      for (std::string& in : ExpandInputs(Resolve(base, pattern)))
        spec.inputs.push_back(std::move(in));
    } catch (const Error& e) {
      p->Fail("inputs", e.what());
    }
  }
  std::sort(spec.inputs.begin(), spec.inputs.end());
  spec.inputs.erase(std::unique(spec.inputs.begin(), spec.inputs.end()), spec.inputs.end());
  if (spec.inputs.size() > (size_t{1} << 30)) p->Fail("inputs", "more than 2^30 input shards");
  spec.out = Resolve(base, p->String("out").value_or("corpus"));
  static const std::vector<std::string> kBackends = {"local", "slurm"};
  if (auto b = p->Choice("backend", kBackends)) spec.backend = *b;
  if (auto v = p->Int("workers", 1, 1024)) spec.workers = static_cast<int>(*v);
  if (auto v = p->Int("partitions", 1, 4096)) spec.partitions = static_cast<int>(*v);
  if (auto v = p->Int("max_retries", 0, 100)) spec.max_retries = static_cast<int>(*v);
  if (auto v = p->Bytes("max_document_bytes")) {
    if (*v < 1024 || *v > 1e9) p->Fail("max_document_bytes", "expected 1KiB..1GB");
    spec.limits.max_document_bytes = static_cast<int64_t>(*v);
  }
  int last_phase = 0;
  bool extracted = false;
  for (StrictTable& t : p->TableArray("stage")) {
    Stage s = ReadStage(t, base);
    const int phase = PhaseOf(s.kind);
    if (spec.Find(s.kind)) t.Fail("kind", fmt::format("a second \"{}\" stage", s.kind));
    if (phase < last_phase || (phase == 0 && extracted)) {
      t.Fail("kind", fmt::format("\"{}\" after \"{}\"", s.kind, spec.stages.back().kind),
             "declared-language first, then the per-document stages, then the dedup stages, "
             "tokenize last");
    }
    if (phase == 1 && s.kind != "extract" && s.kind != "url-filter" && !extracted) {
      // Text stages on HTML would read markup: extraction must come first.
      // (JSON-lines text inputs pass through extract unchanged.)
      t.Fail("kind", fmt::format("\"{}\" before \"extract\"", s.kind),
             "put an extract stage before the stages that read text");
    }
    if (s.kind == "language" && spec.Find("quality")) {
      t.Fail("kind", "\"language\" after \"quality\"",
             "the quality rules read the language (word rules, or character rules for "
             "Japanese): put language first");
    }
    extracted = extracted || s.kind == "extract";
    last_phase = phase;
    spec.stages.push_back(std::move(s));
  }
  if (!spec.Find("extract"))
    p->Fail("stage", "no \"extract\" stage", "every pipeline turns its inputs into text first");
  p->Finish();
  data->Finish();
  root.Finish();
  return spec;
}

}  // namespace fmstack::data
