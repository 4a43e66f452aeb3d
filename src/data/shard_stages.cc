#include "data/shard_stages.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>

#include "data/html_text.h"
#include "data/langid.h"
#include "data/normalize.h"
#include "util/error.h"
#include "util/xxh3.h"

namespace fmstack::data {

void StageCounts::Add(const StageCounts& o) {
  docs_in += o.docs_in, docs_out += o.docs_out;
  bytes_in += o.bytes_in, bytes_out += o.bytes_out;
  for (const auto& [reason, n] : o.removed) removed[reason] += n;
}

void to_json(nlohmann::json& j, const StageCounts& c) {
  j = {{"docs_in", c.docs_in},
       {"docs_out", c.docs_out},
       {"bytes_in", c.bytes_in},
       {"bytes_out", c.bytes_out},
       {"removed", c.removed}};
}

void from_json(const nlohmann::json& j, StageCounts& c) {
  c.docs_in = j.at("docs_in").get<int64_t>();
  c.docs_out = j.at("docs_out").get<int64_t>();
  c.bytes_in = j.at("bytes_in").get<int64_t>();
  c.bytes_out = j.at("bytes_out").get<int64_t>();
  c.removed = j.at("removed").get<std::map<std::string, int64_t>>();
}

std::string DeclaredLanguage(std::string_view html) {
  const std::string head(html.substr(0, 8192));
  std::string lower(head);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  size_t at = 0;
  while ((at = lower.find("<html", at)) != std::string::npos) {
    const char next = at + 5 < lower.size() ? lower[at + 5] : '>';
    if (next == ' ' || next == '>' || next == '\n' || next == '\t' || next == '\r') break;
    at += 5;
  }
  if (at == std::string::npos) return "";
  const size_t end = lower.find('>', at);
  const std::string tag = lower.substr(at, end == std::string::npos ? std::string::npos : end - at);
  for (const char* attr : {" lang=", " xml:lang=", "\nlang=", "\tlang="}) {
    size_t p = tag.find(attr);
    if (p == std::string::npos) continue;
    p += std::string_view(attr).size();
    const char quote = p < tag.size() && (tag[p] == '"' || tag[p] == '\'') ? tag[p] : ' ';
    if (quote != ' ') ++p;
    size_t q = p;
    while (q < tag.size() && tag[q] != quote && tag[q] != '>' && !(quote == ' ' && tag[q] == '/'))
      ++q;
    return PrimaryLanguage(tag.substr(p, q - p));
  }
  return "";
}

std::string HostOf(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return "";
  std::string_view rest = url.substr(scheme + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) rest.remove_prefix(at + 1);
  rest = rest.substr(0, rest.find(':'));
  std::string host(rest);
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return host;
}

namespace {

bool Blocked(const std::string& host, const std::vector<std::string>& hosts) {
  // The host or any domain above it: "ads.example.com" is blocked by "example.com".
  for (const std::string& b : hosts) {
    if (host == b ||
        (host.size() > b.size() && host.ends_with(b) && host[host.size() - b.size() - 1] == '.'))
      return true;
  }
  return false;
}

struct Doc {
  RawDocument raw;
  std::string text, lang;
  bool extracted = false;
  int64_t Bytes() const { return static_cast<int64_t>(extracted ? text.size() : raw.body.size()); }
};

}  // namespace

struct ShardStages::Impl {
  const PipelineSpec& spec;
  std::optional<LanguageId> langid;
  std::optional<MinHasher> minhasher;

  explicit Impl(const PipelineSpec& s) : spec(s) {
    if (const Stage* l = spec.Find("language")) langid.emplace(l->candidates, l->sample_bytes);
    if (const Stage* m = spec.Find("minhash-dedup")) minhasher.emplace(m->minhash);
  }

  // The reason the stage removes the document, or nullopt.
  std::optional<std::string> Apply(const Stage& s, Doc& d) {
    if (s.kind == "declared-language") {
      if (!d.raw.html) return std::nullopt;
      const std::string lang = DeclaredLanguage(d.raw.body);
      if (lang.empty() || std::count(s.keep.begin(), s.keep.end(), lang) > 0) return std::nullopt;
      return "declared:" + lang;
    }
    if (s.kind == "extract") {
      if (FirstInvalidUtf8(d.raw.body) && !d.raw.html) return "invalid-utf8";
      if (d.raw.html) {
        HtmlText h = ExtractHtmlText(d.raw.body);
        if (h.too_deep) return "html-too-deep";
        d.text = std::move(h.text);
      } else {
        d.text = d.raw.body;
      }
      d.extracted = true;
      // gumbo passes invalid bytes through as U+FFFD; text inputs were checked.
      if (FirstInvalidUtf8(d.text)) return "invalid-utf8";
      if (d.text.empty()) return "empty";
      return std::nullopt;
    }
    if (s.kind == "normalize") {
      d.text = Normalize(d.text);
      if (d.text.empty()) return "empty";
      return std::nullopt;
    }
    if (s.kind == "footer") {
      d.text = StripFooter(d.text, s.phrases, s.last_lines);
      if (d.text.empty()) return "empty";
      return std::nullopt;
    }
    if (s.kind == "language") {
      const LanguageGuess g = langid->Classify(d.text);
      d.lang = g.lang;
      if (g.lang.empty()) return "lang:" + g.why;
      if (std::count(s.keep.begin(), s.keep.end(), g.lang) == 0) return "lang:" + g.lang;
      return std::nullopt;
    }
    if (s.kind == "quality") {
      if (auto rule = FailedRule(s.quality, d.text, d.lang)) return "quality:" + *rule;
      return std::nullopt;
    }
    if (s.kind == "url-filter") {
      if (Blocked(HostOf(d.raw.url), s.block_hosts)) return "blocked-host";
      for (const std::string& sub : s.block_url_substrings)
        if (d.raw.url.find(sub) != std::string::npos) return "blocked-url";
      return std::nullopt;
    }
    return std::nullopt;  // dedup and tokenize run in later phases
  }

  void Keys(ShardOutput& out, const std::string& text, uint64_t key) {
    const auto parts = static_cast<uint64_t>(spec.partitions);
    if (spec.Find("exact-dedup")) {
      const uint64_t h1 = Xxh3(text.data(), text.size());
      const std::string salted = text + '\x01';
      const uint64_t h2 = Xxh3(salted.data(), salted.size());
      out.exact[h1 % parts].push_back({h1, h2, key});
    }
    if (minhasher) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<uint32_t> shingles = Shingles(text, minhasher->options().ngram);
      const std::vector<uint64_t> bands = minhasher->BandKeys(minhasher->Sign(shingles));
      out.minhash_shingles += static_cast<int64_t>(shingles.size());
      out.minhash_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (const uint64_t b : bands) out.bands[b % parts].push_back({b, key});
    }
  }
};

ShardStages::ShardStages(const PipelineSpec& spec) : impl_(std::make_unique<Impl>(spec)) {}
ShardStages::~ShardStages() = default;

ShardOutput ShardStages::Run(int shard) {
  const PipelineSpec& spec = impl_->spec;
  ShardOutput out;
  out.exact.resize(static_cast<size_t>(spec.partitions));
  out.bands.resize(static_cast<size_t>(spec.partitions));
  StageCounts& read = out.counts["read"];
  auto on_skip = [&](const std::string& reason, int64_t bytes) {
    ++read.docs_in;
    read.bytes_in += bytes;
    ++read.removed[reason];
  };
  auto on_doc = [&](RawDocument&& raw) {
    Doc d;
    d.raw = std::move(raw);
    ++read.docs_in, ++read.docs_out;
    read.bytes_in += d.Bytes(), read.bytes_out += d.Bytes();
    for (const Stage& s : spec.stages) {
      if (s.kind == "exact-dedup" || s.kind == "minhash-dedup" || s.kind == "tokenize") continue;
      StageCounts& c = out.counts[s.kind];
      ++c.docs_in;
      c.bytes_in += d.Bytes();
      if (std::optional<std::string> why = impl_->Apply(s, d)) {
        ++c.removed[*why];
        out.removed.push_back({d.raw.url, s.kind, *why, d.lang});
        return;
      }
      ++c.docs_out;
      c.bytes_out += d.Bytes();
    }
    const uint64_t key = DocKey(static_cast<uint64_t>(shard), static_cast<uint64_t>(d.raw.index));
    impl_->Keys(out, d.text, key);
    out.docs.push_back({key, std::move(d.raw.url), std::move(d.lang), std::move(d.text)});
  };
  ReadShard(spec.inputs.at(static_cast<size_t>(shard)), spec.limits, on_doc, on_skip);
  return out;
}

}  // namespace fmstack::data
