#include "data/reader.h"

#include <fmt/format.h>
#include <glob.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace fmstack::data {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxLine = 64 << 10;
constexpr int kMaxHeaders = 256;

// Bytes from a file, gzip or plain (zlib reads both), with a position.
class Source {
 public:
  explicit Source(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (f_ == nullptr) throw Error(fmt::format("{}: cannot open", path));
    gzbuffer(f_, 256 << 10);
  }
  ~Source() { gzclose(f_); }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // A line without its "\r\n"; false at the end of the file.
  bool Line(std::string& out) {
    out.clear();
    for (;;) {
      const int c = gzgetc(f_);
      if (c < 0) {
        Check();
        return !out.empty();
      }
      ++offset_;
      if (c == '\n') break;
      out.push_back(static_cast<char>(c));
      if (out.size() > kMaxLine) Fail(fmt::format("a line longer than {} bytes", kMaxLine));
    }
    if (!out.empty() && out.back() == '\r') out.pop_back();
    return true;
  }
  // A line of at most `max` bytes; `bytes` is its whole length, and a longer
  // one is passed over (out holds its start only).
  bool BoundedLine(std::string& out, int64_t max, int64_t& bytes) {
    out.clear();
    bytes = 0;
    for (;;) {
      const int c = gzgetc(f_);
      if (c < 0) {
        Check();
        return bytes > 0;
      }
      ++offset_;
      if (c == '\n') return true;
      if (++bytes <= max) out.push_back(static_cast<char>(c));
    }
  }
  void Read(std::string& out, int64_t n) {
    out.resize(static_cast<size_t>(n));
    int64_t done = 0;
    while (done < n) {
      const int got = gzread(f_, out.data() + done,
                             static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30)));
      if (got <= 0) {
        Check();
        Fail(fmt::format("the record ends {} bytes early", n - done));
      }
      done += got;
    }
    offset_ += n;
  }
  void Skip(int64_t n) {
    if (gzseek(f_, n, SEEK_CUR) < 0) Fail(fmt::format("cannot pass over {} bytes", n));
    offset_ += n;
  }
  [[noreturn]] void Fail(const std::string& what) const {
    throw Error(fmt::format("{}: byte {}: malformed: {}", path_, offset_, what));
  }

 private:
  void Check() const {
    int code = 0;
    const char* msg = gzerror(f_, &code);
    if (code != Z_OK && code != Z_STREAM_END) Fail(fmt::format("gzip: {}", msg));
  }
  std::string path_;
  gzFile f_;
  int64_t offset_ = 0;
};

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return Lower(s).ends_with(suffix);
}

// The body of an HTTP response (after its headers); empty when none.
std::string_view HttpBody(std::string_view payload) {
  size_t at = payload.find("\r\n\r\n");
  if (at != std::string_view::npos) return payload.substr(at + 4);
  at = payload.find("\n\n");
  return at == std::string_view::npos ? std::string_view{} : payload.substr(at + 2);
}

void ReadWarc(const std::string& path, const ReadLimits& limits,
              const std::function<void(RawDocument&&)>& on_document,
              const std::function<void(const std::string&, int64_t)>& on_skip) {
  Source in(path);
  std::string line, payload;
  int64_t index = 0;
  while (in.Line(line)) {
    if (line.empty()) continue;  // the blank lines between records
    if (!line.starts_with("WARC/"))
      in.Fail(fmt::format("expected \"WARC/1.x\", read \"{:.40}\"", line));
    int64_t length = -1;
    std::string type, url;
    for (int n = 0;; ++n) {
      if (!in.Line(line)) in.Fail("the file ends inside a record's headers");
      if (line.empty()) break;
      if (n >= kMaxHeaders) in.Fail(fmt::format("more than {} headers", kMaxHeaders));
      const size_t colon = line.find(':');
      if (colon == std::string::npos)
        in.Fail(fmt::format("a header without ':': \"{:.40}\"", line));
      const std::string name = Lower(line.substr(0, colon));
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      if (name == "content-length") {
        try {
          size_t used = 0;
          length = std::stoll(value, &used);
          if (used != value.size() || length < 0) length = -2;
        } catch (const std::exception&) {
          length = -2;
        }
        if (length < 0) in.Fail(fmt::format("Content-Length \"{}\" is not a byte count", value));
      } else if (name == "warc-type") {
        type = value;
      } else if (name == "warc-target-uri") {
        url = value;
      }
    }
    if (length < 0) in.Fail("a record without Content-Length");
    const bool wanted = type == "response" || type == "conversion";
    if (!wanted || length > limits.max_document_bytes) {
      in.Skip(length);
      if (wanted) on_skip("too-large", length);
      ++index;
      continue;
    }
    in.Read(payload, length);
    RawDocument d;
    d.index = index++;
    d.url = url;
    d.html = type == "response";
    d.body = type == "response" ? std::string(HttpBody(payload)) : payload;
    on_document(std::move(d));
  }
}

void ReadJsonLines(const std::string& path, const ReadLimits& limits,
                   const std::function<void(RawDocument&&)>& on_document,
                   const std::function<void(const std::string&, int64_t)>& on_skip) {
  Source in(path);
  // A line is read whole to be parsed: the bound is a document's, with room
  // for JSON's escapes.
  const int64_t max_line = limits.max_document_bytes * 2 + 4096;
  std::string line;
  int64_t bytes = 0;
  for (int64_t index = 0; in.BoundedLine(line, max_line, bytes); ++index) {
    if (bytes > max_line) {
      on_skip("too-large", bytes);
      continue;
    }
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      on_skip("bad-json", bytes);
      continue;
    }
    const bool html = j.is_object() && j.contains("html") && j["html"].is_string();
    const bool text = j.is_object() && j.contains("text") && j["text"].is_string();
    if (!html && !text) {
      on_skip("not-a-document", bytes);
      continue;
    }
    RawDocument d;
    d.index = index;
    d.html = html;
    d.body = j[html ? "html" : "text"].get<std::string>();
    if (j.contains("url") && j["url"].is_string()) d.url = j["url"].get<std::string>();
    if (static_cast<int64_t>(d.body.size()) > limits.max_document_bytes) {
      on_skip("too-large", static_cast<int64_t>(d.body.size()));
      continue;
    }
    on_document(std::move(d));
  }
}

}  // namespace

void ReadShard(const std::string& path, const ReadLimits& limits,
               const std::function<void(RawDocument&&)>& on_document,
               const std::function<void(const std::string&, int64_t)>& on_skip) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(path)) {
      const std::string p = e.path().string();
      if (e.is_regular_file() && (EndsWith(p, ".html") || EndsWith(p, ".htm"))) files.push_back(p);
    }
    std::sort(files.begin(), files.end());
    int64_t index = 0;
    for (const std::string& f : files) {
      const auto size = static_cast<int64_t>(fs::file_size(f));
      if (size > limits.max_document_bytes) {
        on_skip("too-large", size);
        ++index;
        continue;
      }
      Source in(f);
      RawDocument d;
      d.index = index++;
      d.url = "file://" + fs::relative(f, path).string();
      in.Read(d.body, size);
      on_document(std::move(d));
    }
    return;
  }
  if (EndsWith(path, ".warc") || EndsWith(path, ".warc.gz")) {
    ReadWarc(path, limits, on_document, on_skip);
  } else if (EndsWith(path, ".jsonl") || EndsWith(path, ".jsonl.gz")) {
    ReadJsonLines(path, limits, on_document, on_skip);
  } else if (EndsWith(path, ".html") || EndsWith(path, ".htm")) {
    const auto size = static_cast<int64_t>(fs::file_size(path));
    if (size > limits.max_document_bytes) return on_skip("too-large", size);
    Source in(path);
    RawDocument d;
    d.url = "file://" + fs::path(path).filename().string();
    in.Read(d.body, size);
    on_document(std::move(d));
  } else {
    throw Error(
        fmt::format("{}: not an input the pipeline reads (expected .warc, .warc.gz, "
                    ".jsonl, .jsonl.gz, .html, .htm or a directory)",
                    path));
  }
}

std::vector<std::string> ExpandInputs(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT | GLOB_NOCHECK, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  std::error_code ec;
  std::erase_if(out, [&](const std::string& p) { return !fs::exists(p, ec); });
  if (out.empty()) throw Error(fmt::format("input \"{}\": no such file or directory", pattern));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fmstack::data
