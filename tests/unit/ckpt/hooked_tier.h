// Tests' tier wrapper: a real tier with hooks where faults are injected.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/tier.h"

namespace fmstack::ckpt::testing {

// A tier that runs `before_write` ahead of every chunk it writes, and
// `before_remove` ahead of every step it removes, then goes through to
// `inner`.
class HookedTier : public Tier {
 public:
  HookedTier(std::unique_ptr<Tier> inner, std::string name, std::function<void()> before_write,
             std::function<void(int64_t step)> before_remove = {})
      : inner_(std::move(inner)),
        name_(std::move(name)),
        before_write_(std::move(before_write)),
        before_remove_(std::move(before_remove)) {}
  const std::string& name() const override { return name_; }
  std::string Where(int64_t step, const std::string& file) const override {
    return inner_->Where(step, file);
  }
  std::unique_ptr<Sink> Create(int64_t step, const std::string& file) override {
    struct Hooked : Sink {
      std::unique_ptr<Sink> inner;
      std::function<void()> hook;
      void Write(std::span<const char> d) override {
        hook();
        inner->Write(d);
      }
      void Finish() override { inner->Finish(); }
    };
    auto s = std::make_unique<Hooked>();
    s->inner = inner_->Create(step, file);
    s->hook = before_write_;
    return s;
  }
  void PutSmall(int64_t step, const std::string& f, const std::string& t) override {
    inner_->PutSmall(step, f, t);
  }
  void Commit(int64_t step) override { inner_->Commit(step); }
  std::vector<StepListing> List() override { return inner_->List(); }
  std::optional<std::string> ReadSmall(int64_t step, const std::string& f) override {
    return inner_->ReadSmall(step, f);
  }
  std::optional<int64_t> Size(int64_t step, const std::string& f) override {
    return inner_->Size(step, f);
  }
  void Read(int64_t step, const std::string& f, int64_t o, std::span<char> out) override {
    inner_->Read(step, f, o, out);
  }
  void Remove(int64_t step) override {
    if (before_remove_) before_remove_(step);
    inner_->Remove(step);
  }

 private:
  std::unique_ptr<Tier> inner_;
  std::string name_;
  std::function<void()> before_write_;
  std::function<void(int64_t)> before_remove_;
};

}  // namespace fmstack::ckpt::testing
