#include "ckpt/s3_client.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <thread>

#include "util/error.h"

namespace fmstack::ckpt {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string AmzDate() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// A listing or a HEAD moves no data: a store that does not answer one
// quickly is down, and asking again and again only delays the run.
constexpr double kMetadataTimeoutSeconds = 10;
constexpr int kMetadataAttempts = 2;

struct Transfer {
  const std::atomic<bool>* cancelled = nullptr;
  std::string* body = nullptr;
  std::span<char> into;  // GetRange: write straight into the caller's buffer
  size_t filled = 0;
  bool overflow = false;
  std::map<std::string, std::string>* headers = nullptr;
};

size_t OnData(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->body != nullptr) {
    t->body->append(p, bytes);
  } else if (t->filled + bytes <= t->into.size()) {
    std::copy(p, p + bytes, t->into.data() + t->filled);
    t->filled += bytes;
  } else {
    t->overflow = true;
    return 0;
  }
  return bytes;
}

// Called about once a second during a transfer: non-zero aborts it.
int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<Transfer*>(user)->cancelled->load() ? 1 : 0;
}

size_t OnHeader(char* p, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(p, size * n);
  const auto colon = line.find(':');
  if (colon != std::string::npos) {
    (*t->headers)[Lower(Trim(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
  }
  return size * n;
}

bool Retryable(long status) {
  return status >= 500 || status == 429 || status == 408;
}

}  // namespace

std::string Sha256Hex(std::span<const char> data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return Hex(md, sizeof md);
}

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string SignV4(const SignedRequest& r, const std::string& amz_date, const std::string& region,
                   const std::string& access_key, const std::string& secret_key) {
  std::string query, headers, signed_names;
  for (const auto& [k, v] : r.query) {
    query += (query.empty() ? "" : "&") + UriEncode(k, false) + "=" + UriEncode(v, false);
  }
  for (const auto& [k, v] : r.headers) {
    headers += k + ":" + Trim(v) + "\n";
    signed_names += (signed_names.empty() ? "" : ";") + k;
  }
  const std::string canonical = r.method + "\n" + UriEncode(r.path, true) + "\n" + query + "\n" +
                                headers + "\n" + signed_names + "\n" + r.payload_sha256;
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = date + "/" + region + "/s3/aws4_request";
  const std::string to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(canonical);
  const std::string key =
      Hmac(Hmac(Hmac(Hmac("AWS4" + secret_key, date), region), "s3"), "aws4_request");
  const std::string sig = Hmac(key, to_sign);
  return fmt::format("AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={}, Signature={}",
                     access_key, scope, signed_names,
                     Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size()));
}

std::vector<std::string> XmlValues(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  for (size_t p = xml.find(open); p != std::string::npos; p = xml.find(open, p)) {
    p += open.size();
    const size_t e = xml.find(close, p);
    if (e == std::string::npos) break;
    std::string v = xml.substr(p, e - p);
    for (const auto& [ent, ch] : std::vector<std::pair<std::string, std::string>>{
             {"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}}) {
      for (size_t q = v.find(ent); q != std::string::npos; q = v.find(ent, q + 1))
        v.replace(q, ent.size(), ch);
    }
    out.push_back(std::move(v));
    p = e + close.size();
  }
  return out;
}

S3Client::S3Client(S3Config config) : config_(std::move(config)) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (config_.access_key.empty()) config_.access_key = env("AWS_ACCESS_KEY_ID");
  if (config_.secret_key.empty()) config_.secret_key = env("AWS_SECRET_ACCESS_KEY");
  if (config_.region.empty()) config_.region = env("AWS_DEFAULT_REGION");
  if (config_.region.empty()) config_.region = "us-east-1";
  if (config_.access_key.empty() || config_.secret_key.empty()) {
    throw Error(
        fmt::format("s3://{}: no credentials: export AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (and AWS_DEFAULT_REGION, default us-east-1) where "
                    "fmstack runs; job files never hold secrets",
                    config_.bucket));
  }
  const auto scheme = config_.endpoint.find("://");
  if (scheme == std::string::npos || config_.bucket.empty()) {
    throw Error(
        fmt::format("s3 tier: endpoint \"{}\" and bucket \"{}\": expected "
                    "http(s)://host[:port] and a bucket name",
                    config_.endpoint, config_.bucket));
  }
  host_ = config_.endpoint.substr(scheme + 3);
  while (!host_.empty() && host_.back() == '/') host_.pop_back();
  while (!config_.endpoint.empty() && config_.endpoint.back() == '/') config_.endpoint.pop_back();
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

S3Client::~S3Client() = default;

std::string S3Client::Url(const std::string& key) const {
  return fmt::format("s3://{}/{}", config_.bucket, key);
}

S3Response S3Client::Request(const std::string& method, const std::string& key,
                             const std::map<std::string, std::string>& query,
                             std::span<const char> body,
                             const std::map<std::string, std::string>& headers,
                             std::vector<long> ok) {
  SignedRequest r;
  r.method = method;
  r.path = "/" + config_.bucket + (key.empty() ? "" : "/" + key);
  r.query = query;
  r.headers = headers;
  r.payload_sha256 = Sha256Hex(body);
  std::string url = config_.endpoint + UriEncode(r.path, true);
  std::string qs;
  for (const auto& [k, v] : query)
    qs += (qs.empty() ? "?" : "&") + UriEncode(k, false) + "=" + UriEncode(v, false);
  url += qs;
  const std::string what = fmt::format("{} {}{}", method, Url(key), qs);

  std::string last_error;
  double backoff = config_.backoff_seconds;
  const bool bulk = body.size() > (1u << 20) || (method == "GET" && !key.empty());
  const int attempts =
      bulk ? config_.max_attempts : std::min(config_.max_attempts, kMetadataAttempts);
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (cancelled_) throw Error(fmt::format("{}: cancelled", what));
    const std::string date = AmzDate();
    SignedRequest signed_r = r;
    signed_r.headers["host"] = host_;
    signed_r.headers["x-amz-date"] = date;
    signed_r.headers["x-amz-content-sha256"] = r.payload_sha256;
    const std::string auth =
        SignV4(signed_r, date, config_.region, config_.access_key, config_.secret_key);

    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
    if (!curl) throw Error("s3: curl_easy_init failed");
    curl_slist* list = nullptr;
    for (const auto& [k, v] : signed_r.headers) {
      if (k != "host") list = curl_slist_append(list, (k + ": " + v).c_str());
    }
    list = curl_slist_append(list, ("Authorization: " + auth).c_str());
    list = curl_slist_append(list, "Expect:");
    list = curl_slist_append(list, "Content-Type: application/octet-stream");
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(list,
                                                                            curl_slist_free_all);
    S3Response resp;
    Transfer t;
    t.body = &resp.body;
    t.headers = &resp.headers;
    CURL* c = curl.get();
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, header_list.get());
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnData);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    t.cancelled = &cancelled_;
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    // Every wait has a deadline: connecting, the whole request, and a stall.
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(config_.connect_timeout_seconds * 1000));
    const double limit = bulk ? config_.request_timeout_seconds
                              : std::min(config_.request_timeout_seconds, kMetadataTimeoutSeconds);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(limit * 1000));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                     std::max(1L, static_cast<long>(std::min(limit, config_.stall_seconds))));
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (method == "PUT" || method == "POST") {
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    const CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
      if (std::find(ok.begin(), ok.end(), resp.status) != ok.end()) return resp;
      const std::vector<std::string> code = XmlValues(resp.body, "Code");
      const std::vector<std::string> msg = XmlValues(resp.body, "Message");
      last_error = fmt::format("HTTP {}{}{}", resp.status, code.empty() ? "" : " " + code[0],
                               msg.empty() ? "" : ": " + msg[0]);
      if (!Retryable(resp.status)) {
        const bool auth_error =
            resp.status == 403 || (!code.empty() && code[0].find("Signature") != std::string::npos);
        throw Error(fmt::format("{}: {}{}", what, last_error,
                                auth_error ? " (check the access key and secret key of the "
                                             "object tier, or AWS_ACCESS_KEY_ID / "
                                             "AWS_SECRET_ACCESS_KEY)"
                                           : ""));
      }
    } else {
      last_error = curl_easy_strerror(rc);
    }
    if (attempt < attempts) {
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, 10.0);
    }
  }
  throw Error(fmt::format("{}: failed after {} attempts: {}", what, attempts, last_error));
}

void S3Client::Put(const std::string& key, std::span<const char> body) {
  Request("PUT", key, {}, body);
}

std::optional<std::string> S3Client::Get(const std::string& key) {
  S3Response r = Request("GET", key, {}, {}, {}, {200, 404});
  if (r.status == 404) return std::nullopt;
  return std::move(r.body);
}

void S3Client::GetRange(const std::string& key, int64_t offset, std::span<char> out) {
  if (out.empty()) return;
  const std::string range =
      fmt::format("bytes={}-{}", offset, offset + static_cast<int64_t>(out.size()) - 1);
  S3Response r = Request("GET", key, {}, {}, {{"range", range}}, {200, 206});
  if (r.status == 200) r.body = r.body.substr(std::min<size_t>(r.body.size(), offset));
  if (r.body.size() < out.size()) {
    throw Error(fmt::format("{}: truncated: {} bytes wanted at offset {}, got {}", Url(key),
                            out.size(), offset, r.body.size()));
  }
  std::copy(r.body.begin(), r.body.begin() + static_cast<std::ptrdiff_t>(out.size()), out.data());
}

std::optional<int64_t> S3Client::Head(const std::string& key) {
  const S3Response r = Request("HEAD", key, {}, {}, {}, {200, 404});
  if (r.status == 404) return std::nullopt;
  const auto it = r.headers.find("content-length");
  if (it == r.headers.end()) throw Error(fmt::format("{}: HEAD without Content-Length", Url(key)));
  return std::stoll(it->second);
}

void S3Client::Delete(const std::string& key) {
  Request("DELETE", key, {}, {}, {}, {200, 204, 404});
}

std::vector<std::string> S3Client::List(const std::string& prefix) {
  std::vector<std::string> keys;
  std::string token;
  for (;;) {
    std::map<std::string, std::string> q = {{"list-type", "2"}, {"prefix", prefix}};
    if (!token.empty()) q["continuation-token"] = token;
    const S3Response r = Request("GET", "", q, {});
    for (std::string& k : XmlValues(r.body, "Key")) keys.push_back(std::move(k));
    const std::vector<std::string> next = XmlValues(r.body, "NextContinuationToken");
    const std::vector<std::string> truncated = XmlValues(r.body, "IsTruncated");
    if (next.empty() || truncated.empty() || truncated[0] != "true") return keys;
    token = next[0];
  }
}

std::string S3Client::CreateMultipart(const std::string& key) {
  const S3Response r = Request("POST", key, {{"uploads", ""}}, {});
  const std::vector<std::string> id = XmlValues(r.body, "UploadId");
  if (id.empty())
    throw Error(fmt::format("{}: CreateMultipartUpload returned no UploadId", Url(key)));
  return id[0];
}

std::string S3Client::UploadPart(const std::string& key, const std::string& upload_id, int part,
                                 std::span<const char> body) {
  const S3Response r =
      Request("PUT", key, {{"partNumber", std::to_string(part)}, {"uploadId", upload_id}}, body);
  const auto it = r.headers.find("etag");
  if (it == r.headers.end())
    throw Error(fmt::format("{}: part {} returned no ETag", Url(key), part));
  return it->second;
}

void S3Client::CompleteMultipart(const std::string& key, const std::string& upload_id,
                                 const std::vector<std::string>& etags) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i) {
    xml += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, etags[i]);
  }
  xml += "</CompleteMultipartUpload>";
  const S3Response r = Request("POST", key, {{"uploadId", upload_id}}, xml);
  // S3 may answer 200 with an error document when completion fails late.
  if (!XmlValues(r.body, "Code").empty()) {
    throw Error(fmt::format("{}: CompleteMultipartUpload failed: {}", Url(key),
                            XmlValues(r.body, "Code")[0]));
  }
}

void S3Client::AbortMultipart(const std::string& key, const std::string& upload_id) {
  Request("DELETE", key, {{"uploadId", upload_id}}, {}, {}, {200, 204, 404});
}

}  // namespace fmstack::ckpt
