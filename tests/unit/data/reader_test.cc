#include "data/reader.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace fmstack::data {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path = fs::temp_directory_path() / ("reader_test." + std::to_string(::getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
  std::string Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

std::string Record(const std::string& type, const std::string& url, const std::string& payload) {
  return "WARC/1.0\r\nWARC-Type: " + type + "\r\nWARC-Target-URI: " + url +
         "\r\nContent-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload +
         "\r\n\r\n";
}

struct Read {
  std::vector<RawDocument> docs;
  std::vector<std::pair<std::string, int64_t>> skips;
};

Read ReadAll(const std::string& path, ReadLimits limits = {}) {
  Read r;
  ReadShard(
      path, limits, [&](RawDocument&& d) { r.docs.push_back(std::move(d)); },
      [&](const std::string& why, int64_t n) { r.skips.emplace_back(why, n); });
  return r;
}

const std::string kHttp = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>hi</html>";

TEST(Reader, WarcResponsesAndConversions) {
  Dir d;
  const std::string warc = Record("warcinfo", "", "software: test\r\n") +
                           Record("request", "http://a.example/", "GET / HTTP/1.1\r\n\r\n") +
                           Record("response", "http://a.example/", kHttp) +
                           Record("conversion", "http://b.example/", "plain text");
  const Read plain = ReadAll(d.Write("x.warc", warc));
  ASSERT_EQ(plain.docs.size(), 2u);
  EXPECT_EQ(plain.docs[0].url, "http://a.example/");
  EXPECT_EQ(plain.docs[0].body, "<html>hi</html>");
  EXPECT_TRUE(plain.docs[0].html);
  EXPECT_EQ(plain.docs[0].index, 2);
  EXPECT_EQ(plain.docs[1].body, "plain text");
  EXPECT_FALSE(plain.docs[1].html);
  // The same, gzip-compressed one member per record as Common Crawl does.
  const std::string gz = (d.path / "x.warc.gz").string();
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, warc.data(), static_cast<unsigned>(warc.size()));
  gzclose(f);
  const Read packed = ReadAll(gz);
  ASSERT_EQ(packed.docs.size(), 2u);
  EXPECT_EQ(packed.docs[0].body, plain.docs[0].body);
}

TEST(Reader, ATwoGigabyteRecordIsPassedOverNotHeld) {
  Dir d;
  const std::string path = (d.path / "big.warc").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "WARC/1.0\r\nWARC-Type: response\r\nContent-Length: 2147483648\r\n\r\n";
  }
  // A sparse file: 2 GiB of zeros that take no disk, then a small record.
  fs::resize_file(path, fs::file_size(path) + 2147483648ULL);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << "\r\n\r\n" << Record("response", "http://small/", kHttp);
  }
  const Read r = ReadAll(path);
  ASSERT_EQ(r.skips.size(), 1u);
  EXPECT_EQ(r.skips[0].first, "too-large");
  EXPECT_EQ(r.skips[0].second, 2147483648LL);
  ASSERT_EQ(r.docs.size(), 1u);
  EXPECT_EQ(r.docs[0].url, "http://small/");
}

TEST(Reader, MalformedWarcNamesTheFileAndOffset) {
  Dir d;
  const std::string bad = d.Write("bad.warc", "WARC/1.0\r\nContent-Length: ten\r\n\r\n");
  try {
    ReadAll(bad);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.warc: byte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Content-Length \"ten\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(ReadAll(d.Write("junk.warc", "<html>not warc</html>")), Error);
  EXPECT_THROW(
      ReadAll(d.Write("cut.warc",
                      "WARC/1.0\r\nWARC-Type: response\r\nContent-Length: 100\r\n\r\nshort")),
      Error);
  EXPECT_THROW(ReadAll(d.Write("x.txt", "text")), Error);
  EXPECT_TRUE(ReadAll(d.Write("empty.warc", "")).docs.empty());
}

TEST(Reader, JsonLinesSkipWhatIsNotADocument) {
  Dir d;
  const std::string path =
      d.Write("x.jsonl",
              "{\"text\": \"one\", \"url\": \"http://u/\"}\n{bad json\n[1,2]\n\n"
              "{\"html\": \"<p>two</p>\"}\n{\"text\": \"" +
                  std::string(5000, 'x') + "\"}\n");
  ReadLimits small;
  small.max_document_bytes = 1024;
  const Read r = ReadAll(path, small);
  ASSERT_EQ(r.docs.size(), 2u);
  EXPECT_EQ(r.docs[0].body, "one");
  EXPECT_FALSE(r.docs[0].html);
  EXPECT_TRUE(r.docs[1].html);
  ASSERT_EQ(r.skips.size(), 3u);
  EXPECT_EQ(r.skips[0].first, "bad-json");
  EXPECT_EQ(r.skips[1].first, "not-a-document");
  EXPECT_EQ(r.skips[2].first, "too-large");
}

TEST(Reader, DirectoriesAndGlobs) {
  Dir d;
  fs::create_directories(d.path / "site" / "sub");
  d.Write("site/b.html", "<p>b</p>");
  d.Write("site/sub/a.htm", "<p>a</p>");
  d.Write("site/notes.txt", "ignored");
  const Read r = ReadAll((d.path / "site").string());
  ASSERT_EQ(r.docs.size(), 2u);
  EXPECT_EQ(r.docs[0].url, "file://b.html");
  EXPECT_EQ(r.docs[1].url, "file://sub/a.htm");
  d.Write("1.jsonl", "");
  d.Write("2.jsonl", "");
  EXPECT_EQ(ExpandInputs((d.path / "*.jsonl").string()).size(), 2u);
  EXPECT_THROW(ExpandInputs((d.path / "none*.warc").string()), Error);
}

}  // namespace
}  // namespace fmstack::data
