// data: the corpus pipeline's inputs, one shard per input path:
//   *.warc, *.warc.gz   WARC/1.0 or 1.1 files (Common Crawl's format): each
//                       "response" record's HTTP body is an HTML document,
//                       each "conversion" record's body a text one;
//   *.jsonl             one JSON object per line, {"text": ...} or
//                       {"html": ...}, with "url" optional;
//   *.html, *.htm       one HTML document;
//   a directory         every *.html / *.htm file under it, in name order.
//
// Everything read is bounded: a record or line larger than
// max_document_bytes is skipped without being held (its length is read
// first, its bytes passed over), a header line longer than 64 KiB or a
// record with more than 256 headers ends the file as malformed. A skip is
// reported with its reason; a file that cannot be opened, or a malformed
// one, throws Error naming the file and the byte offset.
//
// Thread-safety: none needed; ReadShard is a free function.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace fmstack::data {

struct RawDocument {
  int64_t index = 0;  // position in its shard, counting skipped records
  std::string url;
  std::string body;
  bool html = true;
};

struct ReadLimits {
  int64_t max_document_bytes = 16 << 20;
};

// Calls on_document for each document and on_skip(reason, bytes) for each
// record it passes over ("too-large", "not-a-document", "bad-json").
void ReadShard(const std::string& path, const ReadLimits& limits,
               const std::function<void(RawDocument&&)>& on_document,
               const std::function<void(const std::string&, int64_t)>& on_skip);

// The input paths a pattern names: a file, a directory (itself, as one
// shard), or a glob; sorted. Throws Error when it names nothing.
std::vector<std::string> ExpandInputs(const std::string& pattern);

}  // namespace fmstack::data
