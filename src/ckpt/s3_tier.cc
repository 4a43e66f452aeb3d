// ckpt: the object-store tier. A step is a key prefix; shards go up as
// multipart uploads of `part_bytes` parts (a single PUT when smaller), and
// the commit is the COMMITTED object, PUT after everything else: S3 has no
// rename, but a completed upload is atomic and read-after-write consistent.
#include <fmt/format.h>

#include <set>

#include "ckpt/format.h"
#include "ckpt/s3_client.h"
#include "ckpt/tier.h"
#include "util/error.h"

namespace fmstack::ckpt {
namespace {

class S3Sink final : public Sink {
 public:
  S3Sink(S3Client& s3, std::string key) : s3_(s3), key_(std::move(key)) {
    buf_.reserve(static_cast<size_t>(s3_.config().part_bytes));
  }
  ~S3Sink() override {
    if (finished_ || upload_id_.empty()) return;
    try {
      s3_.AbortMultipart(key_, upload_id_);
    } catch (const std::exception&) {
      // The bucket's lifecycle rule for incomplete uploads is the backstop.
    }
  }

  void Write(std::span<const char> data) override {
    const size_t part = static_cast<size_t>(s3_.config().part_bytes);
    while (!data.empty()) {
      const size_t n = std::min(data.size(), part - buf_.size());
      buf_.insert(buf_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
      data = data.subspan(n);
      if (buf_.size() == part) Flush();
    }
  }

  void Finish() override {
    if (upload_id_.empty()) {
      s3_.Put(key_, buf_);
    } else {
      if (!buf_.empty()) Flush();
      s3_.CompleteMultipart(key_, upload_id_, etags_);
    }
    finished_ = true;
  }

 private:
  void Flush() {
    if (upload_id_.empty()) upload_id_ = s3_.CreateMultipart(key_);
    etags_.push_back(s3_.UploadPart(key_, upload_id_, static_cast<int>(etags_.size()) + 1, buf_));
    buf_.clear();
  }

  S3Client& s3_;
  std::string key_;
  std::vector<char> buf_;
  std::string upload_id_;
  std::vector<std::string> etags_;
  bool finished_ = false;
};

class S3Tier final : public Tier {
 public:
  S3Tier(std::string name, S3Config config) : name_(std::move(name)), s3_(std::move(config)) {
    prefix_ = s3_.config().prefix;
    while (!prefix_.empty() && prefix_.back() == '/') prefix_.pop_back();
    if (!prefix_.empty()) prefix_ += "/";
  }

  const std::string& name() const override { return name_; }
  std::string Where(int64_t step, const std::string& file) const override {
    return s3_.Url(Key(step, file));
  }
  void Cancel() override { s3_.Cancel(); }

  std::unique_ptr<Sink> Create(int64_t step, const std::string& file) override {
    return std::make_unique<S3Sink>(s3_, Key(step, file));
  }
  void PutSmall(int64_t step, const std::string& file, const std::string& text) override {
    s3_.Put(Key(step, file), text);
  }
  void Commit(int64_t step) override {
    s3_.Put(Key(step, kCommittedName), fmt::format("{}\n", step));
  }

  std::vector<StepListing> List() override {
    std::map<int64_t, bool> steps;
    for (const std::string& key : Keys()) {
      const std::string rest = key.substr(prefix_.size());
      const auto slash = rest.find('/');
      if (slash == std::string::npos) continue;
      const std::optional<int64_t> step = ParseStepDirName(rest.substr(0, slash));
      if (!step) continue;
      steps[*step] |= rest.substr(slash + 1) == kCommittedName;
    }
    std::vector<StepListing> out;
    for (const auto& [step, committed] : steps) out.push_back({step, committed});
    return out;
  }

  std::optional<std::string> ReadSmall(int64_t step, const std::string& file) override {
    return s3_.Get(Key(step, file));
  }
  std::optional<int64_t> Size(int64_t step, const std::string& file) override {
    return s3_.Head(Key(step, file));
  }
  void Read(int64_t step, const std::string& file, int64_t offset, std::span<char> out) override {
    s3_.GetRange(Key(step, file), offset, out);
  }
  void Remove(int64_t step) override {
    s3_.Delete(Key(step, kCommittedName));
    const std::string dir = Key(step, "") + "/";
    for (const std::string& key : Keys())
      if (key.rfind(dir, 0) == 0) s3_.Delete(key);
  }

 private:
  // Every key under the tier's prefix. The listing asks for the prefix
  // without its trailing slash and filters here: moto_server (the test
  // endpoint) rejects the signature of a list whose prefix ends in "/".
  std::vector<std::string> Keys() {
    std::vector<std::string> keys =
        s3_.List(prefix_.empty() ? "" : prefix_.substr(0, prefix_.size() - 1));
    std::erase_if(keys, [&](const std::string& k) { return k.rfind(prefix_, 0) != 0; });
    return keys;
  }

  std::string Key(int64_t step, const std::string& file) const {
    return prefix_ + StepDirName(step) + (file.empty() ? "" : "/" + file);
  }

  std::string name_;
  S3Client s3_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<Tier> MakeS3Tier(std::string name, S3Config config) {
  return std::make_unique<S3Tier>(std::move(name), std::move(config));
}

}  // namespace fmstack::ckpt
