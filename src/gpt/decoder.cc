// The CPU Decoder: the training forward's sequence of layers (cpu_model.cc)
// over the row-invariant kernels of decode_kernels.h and a paged KV cache.
#include "gpt/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "gpt/blas_core.h"
#include "gpt/flush_denormals.h"
#include "gpt/sgemm_peak.h"
#include "util/error.h"

namespace fmstack::gpt {
namespace {

using decode::AttentionRow;
using decode::PackedLinear;

struct LayerWeights {
  std::vector<float> ln1w, ln1b, ln2w, ln2b;
  PackedLinear qkv, attproj, fc, fcproj;
};

class CpuDecoder final : public Decoder {
 public:
  CpuDecoder(const workload::TransformerShape& shape, std::span<const float> params,
             const DecoderOptions& options)
      : p_(ParamLayout::For(shape)), options_(options) {
    if (static_cast<int64_t>(params.size()) != p_.total)
      throw Error(
          fmt::format("decoder: the parameter buffer holds {} floats, the model {} needs {}",
                      params.size(), shape.name, p_.total));
    if (options.max_tokens < 1 || options.max_logits < 1 || options.block_size < 1)
      throw Error(
          fmt::format("decoder: max_tokens {}, max_logits {} and block_size {} must be >= 1",
                      options.max_tokens, options.max_logits, options.block_size));
    g_ = {.L = p_.L, .C = p_.C, .block_size = options.block_size};
    const int64_t C = p_.C, F = p_.F;
    auto at = [&](int64_t base, int64_t size, int64_t l) {
      return params.subspan(static_cast<size_t>(base + l * size), static_cast<size_t>(size));
    };
    auto copy = [&](int64_t base, int64_t size, int64_t l) {
      const auto s = at(base, size, l);
      return std::vector<float>(s.begin(), s.end());
    };
    for (int64_t l = 0; l < p_.L; ++l) {
      LayerWeights w;
      w.ln1w = copy(p_.ln1w, C, l), w.ln1b = copy(p_.ln1b, C, l);
      w.ln2w = copy(p_.ln2w, C, l), w.ln2b = copy(p_.ln2b, C, l);
      w.qkv = decode::PackLinear(at(p_.qkvw, 3 * C * C, l), at(p_.qkvb, 3 * C, l), C, 3 * C);
      w.attproj = decode::PackLinear(at(p_.attprojw, C * C, l), at(p_.attprojb, C, l), C, C);
      w.fc = decode::PackLinear(at(p_.fcw, F * C, l), at(p_.fcb, F, l), C, F);
      w.fcproj = decode::PackLinear(at(p_.fcprojw, C * F, l), at(p_.fcprojb, C, l), F, C);
      layers_.push_back(std::move(w));
    }
    wte_ = copy(p_.wte, p_.V * C, 0);
    wpe_ = copy(p_.wpe, p_.maxT * C, 0);
    lnfw_ = copy(p_.lnfw, C, 0), lnfb_ = copy(p_.lnfb, C, 0);
    head_ = decode::PackLinear(wte_, {}, C, p_.V);  // tied LM head, no bias
    const int64_t N = options.max_tokens;
    x_.resize(N * C), ln_.resize(N * C), qkv_.resize(N * 3 * C), atty_.resize(N * C);
    fch_.resize(N * F), lnf_.resize(options.max_logits * C);
  }

  const ParamLayout& layout() const override { return p_; }
  const decode::KvGeometry& kv_geometry() const override { return g_; }
  const DecoderOptions& options() const override { return options_; }
  int64_t weight_bytes() const override {
    int64_t b = head_.bytes();
    for (const LayerWeights& w : layers_)
      b += w.qkv.bytes() + w.attproj.bytes() + w.fc.bytes() + w.fcproj.bytes();
    return b;
  }
  std::string Hardware() const override {
    return fmt::format("{} threads, row-invariant AVX2/FMA kernels (gpt/decode_kernels.h)",
                       CpuThreads());
  }

  void Forward(std::span<const DecodeSeq> seqs, std::span<float> kv,
               std::span<float> logits) override;

 private:
  // Fills rows_ and tokens_, checking every sequence; returns the logits rows.
  int64_t Gather(std::span<const DecodeSeq> seqs, int64_t kv_blocks);

  ParamLayout p_;
  DecoderOptions options_;
  decode::KvGeometry g_;
  std::vector<LayerWeights> layers_;
  std::vector<float> wte_, wpe_, lnfw_, lnfb_;
  PackedLinear head_;
  std::vector<float> x_, ln_, qkv_, atty_, fch_, lnf_;  // (N, C), (N, C), (N, 3C), (N, C), (N, F)
  std::vector<AttentionRow> rows_;
  std::vector<int32_t> tokens_;
  std::vector<int64_t> logit_rows_;
};

int64_t CpuDecoder::Gather(std::span<const DecodeSeq> seqs, int64_t kv_blocks) {
  rows_.clear(), tokens_.clear(), logit_rows_.clear();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const DecodeSeq& q = seqs[s];
    const auto n = std::ssize(q.tokens);
    const int64_t end = q.start + n;
    if (n < 1 || q.start < 0 || q.logits < 0 || q.logits > n)
      throw Error(
          fmt::format("decoder: sequence {} of the step has {} tokens from position {} "
                      "and asks {} logits rows",
                      s, n, q.start, q.logits));
    if (end > p_.maxT)
      throw Error(
          fmt::format("decoder: sequence {} reaches position {}, past the model's "
                      "context of {} tokens",
                      s, end - 1, p_.maxT));
    const int64_t need = (end + g_.block_size - 1) / g_.block_size;
    if (std::ssize(q.blocks) < need)
      throw Error(fmt::format("decoder: sequence {}'s block table has {} blocks, {} tokens need {}",
                              s, q.blocks.size(), end, need));
    for (int64_t b = 0; b < need; ++b) {
      if (q.blocks[b] < 0 || q.blocks[b] >= kv_blocks)
        throw Error(fmt::format("decoder: sequence {}'s block {} is {}, outside the pool of {}", s,
                                b, q.blocks[b], kv_blocks));
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = q.tokens[i];
      if (t < 0 || t >= p_.V)
        throw Error(
            fmt::format("decoder: sequence {}'s token {} at position {} is outside the "
                        "vocabulary [0, {})",
                        s, t, q.start + i, p_.V));
      if (i >= n - q.logits) logit_rows_.push_back(std::ssize(rows_));
      rows_.push_back({q.blocks, q.start + i});
      tokens_.push_back(t);
    }
  }
  if (std::ssize(rows_) > options_.max_tokens || std::ssize(logit_rows_) > options_.max_logits)
    throw Error(
        fmt::format("decoder: a step of {} tokens and {} logits rows exceeds the caps "
                    "{} and {}",
                    rows_.size(), logit_rows_.size(), options_.max_tokens, options_.max_logits));
  return std::ssize(logit_rows_);
}

void CpuDecoder::Forward(std::span<const DecodeSeq> seqs, std::span<float> kv,
                         std::span<float> logits) {
  const int64_t C = p_.C, F = p_.F, V = p_.V;
  if (static_cast<int64_t>(kv.size()) % g_.block_floats() != 0)
    throw Error(fmt::format("decoder: the KV pool holds {} floats, not a multiple of a block's {}",
                            kv.size(), g_.block_floats()));
  const int64_t M = Gather(seqs, static_cast<int64_t>(kv.size()) / g_.block_floats());
  if (static_cast<int64_t>(logits.size()) < M * V)
    throw Error(fmt::format("decoder: the logits buffer holds {} floats, {} rows need {}",
                            logits.size(), M, M * V));
  const int64_t N = std::ssize(rows_);
  if (N == 0) return;
  const FlushDenormalsScope flush;
  const std::span<float> x(x_.data(), N * C), ln(ln_.data(), N * C), qkv(qkv_.data(), N * 3 * C),
      atty(atty_.data(), N * C), fch(fch_.data(), N * F);
  for (int64_t n = 0; n < N; ++n) {
    const float* te = wte_.data() + tokens_[n] * C;
    const float* pe = wpe_.data() + rows_[n].pos * C;
    for (int64_t c = 0; c < C; ++c) x[n * C + c] = te[c] + pe[c];
  }
  for (const LayerWeights& w : layers_) {
    const int64_t l = &w - layers_.data();
    decode::LayerNorm(ln, x, w.ln1w, w.ln1b, N, C);
    decode::Linear(qkv, ln, w.qkv, N);
    decode::StoreKv(kv, g_, l, qkv, rows_);
    decode::PagedAttention(atty, qkv, kv, g_, l, rows_, p_.NH);
    decode::Linear(x, atty, w.attproj, N, x);
    decode::LayerNorm(ln, x, w.ln2w, w.ln2b, N, C);
    decode::Linear(fch, ln, w.fc, N);
    decode::Gelu(fch);
    decode::Linear(x, fch, w.fcproj, N, x);
  }
  // The final LayerNorm and the head for the rows that are sampled only.
  for (int64_t m = 0; m < M; ++m) std::copy_n(x.data() + logit_rows_[m] * C, C, ln_.data() + m * C);
  decode::LayerNorm(std::span<float>(lnf_.data(), M * C), std::span<const float>(ln_.data(), M * C),
                    lnfw_, lnfb_, M, C);
  decode::Linear(logits.first(M * V), std::span<const float>(lnf_.data(), M * C), head_, M);
}

}  // namespace

std::unique_ptr<Decoder> CreateDecoder(const workload::TransformerShape& shape,
                                       std::span<const float> params,
                                       const DecoderOptions& options) {
  if (options.backend == "cpu") return std::make_unique<CpuDecoder>(shape, params, options);
  throw Error(fmt::format("serving backend \"{}\" is not built: this build serves on \"cpu\"",
                          options.backend));
}

}  // namespace fmstack::gpt
