// ckpt: a small S3 client over libcurl: path-style requests signed with AWS
// Signature Version 4, retried with exponential backoff on network errors,
// 5xx and throttling. Client errors (bad credentials, missing bucket) are
// never retried: they come back at once as an Error naming the request, the
// S3 error code and what to check.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/tier.h"

namespace fmstack::ckpt {

// SigV4 pieces, exposed for tests against AWS's published examples.
std::string Sha256Hex(std::span<const char> data);
std::string UriEncode(std::string_view s, bool keep_slash);
struct SignedRequest {
  std::string method, path;                    // path: "/bucket/key", not encoded
  std::map<std::string, std::string> query;    // decoded
  std::map<std::string, std::string> headers;  // lower-case names; host and x-amz-* included
  std::string payload_sha256;
};
// The Authorization header for `r` at time `amz_date` ("20261122T101500Z").
std::string SignV4(const SignedRequest& r, const std::string& amz_date, const std::string& region,
                   const std::string& access_key, const std::string& secret_key);

struct S3Response {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

class S3Client {
 public:
  explicit S3Client(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // Keys are relative to the bucket. `ok` lists the statuses that are not errors.
  S3Response Request(const std::string& method, const std::string& key,
                     const std::map<std::string, std::string>& query, std::span<const char> body,
                     const std::map<std::string, std::string>& headers = {},
                     std::vector<long> ok = {200});

  void Put(const std::string& key, std::span<const char> body);
  std::optional<std::string> Get(const std::string& key);  // nullopt on 404
  void GetRange(const std::string& key, int64_t offset, std::span<char> out);
  std::optional<int64_t> Head(const std::string& key);  // size, nullopt on 404
  void Delete(const std::string& key);
  std::vector<std::string> List(const std::string& prefix);  // every key, paginated

  std::string CreateMultipart(const std::string& key);
  std::string UploadPart(const std::string& key, const std::string& upload_id, int part,
                         std::span<const char> body);  // returns the ETag
  void CompleteMultipart(const std::string& key, const std::string& upload_id,
                         const std::vector<std::string>& etags);
  void AbortMultipart(const std::string& key, const std::string& upload_id);

  std::string Url(const std::string& key) const;  // "s3://bucket/key", for messages
  const S3Config& config() const { return config_; }
  // Thread-safe: requests in flight abort within a second, later ones fail at once.
  void Cancel() { cancelled_ = true; }

 private:
  S3Config config_;
  std::string host_;  // host[:port] of the endpoint, as signed
  std::atomic<bool> cancelled_{false};
};

// Values of every <tag>...</tag> in an XML document, entities decoded.
std::vector<std::string> XmlValues(const std::string& xml, const std::string& tag);

}  // namespace fmstack::ckpt
