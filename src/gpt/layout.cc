#include "gpt/layout.h"

#include <fmt/format.h>

#include "util/error.h"

namespace fmstack::gpt {
namespace {

void Require(bool ok, const workload::TransformerShape& s, std::string_view key,
             std::string_view why) {
  if (!ok) {
    throw Error(fmt::format("model \"{}\": model.{} {} (gpt/ builds GPT-2-style decoders only)",
                            s.name, key, why));
  }
}

// Hands out consecutive offsets in one buffer.
struct Bump {
  int64_t next = 0;
  int64_t Take(int64_t n) {
    const int64_t at = next;
    next += n;
    return at;
  }
};

}  // namespace

int64_t TensorInfo::size() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

ParamLayout ParamLayout::For(const workload::TransformerShape& s) {
  if (auto problem = s.FindProblem()) {
    throw Error(fmt::format("model \"{}\": model.{}: {}", s.name, problem->key, problem->message));
  }
  Require(s.mlp == workload::MlpKind::kGelu, s, "mlp", "must be \"gelu\"");
  Require(s.norm == workload::NormKind::kLayerNorm, s, "norm", "must be \"layernorm\"");
  Require(s.position == workload::PositionKind::kLearned, s, "position", "must be \"learned\"");
  Require(s.tied_embeddings, s, "tied_embeddings", "must be true");
  Require(s.bias, s, "bias", "must be true");
  Require(!s.is_moe(), s, "experts", "must be 1 (dense)");
  Require(s.kv_heads == s.heads, s, "kv_heads", "must equal heads (no GQA)");
  Require(s.q_dim() == s.hidden, s, "head_dim", "must be hidden / heads");
  Require(s.vocab <= 65536, s, "vocab", "must be at most 65536 (tokens are stored as uint16)");

  ParamLayout p;
  p.L = s.layers, p.C = s.hidden, p.F = s.ffn_hidden, p.V = s.vocab, p.maxT = s.seq_len;
  p.NH = s.heads;
  const int64_t L = p.L, C = p.C, F = p.F;
  Bump b;
  p.wte = b.Take(p.V * C);
  p.wpe = b.Take(p.maxT * C);
  p.ln1w = b.Take(L * C);
  p.ln1b = b.Take(L * C);
  p.qkvw = b.Take(L * 3 * C * C);
  p.qkvb = b.Take(L * 3 * C);
  p.attprojw = b.Take(L * C * C);
  p.attprojb = b.Take(L * C);
  p.ln2w = b.Take(L * C);
  p.ln2b = b.Take(L * C);
  p.fcw = b.Take(L * F * C);
  p.fcb = b.Take(L * F);
  p.fcprojw = b.Take(L * C * F);
  p.fcprojb = b.Take(L * C);
  p.lnfw = b.Take(C);
  p.lnfb = b.Take(C);
  p.total = b.next;
  return p;
}

std::vector<TensorInfo> ParamLayout::Tensors() const {
  std::vector<TensorInfo> t;
  t.push_back({"wte.weight", wte, {V, C}});
  t.push_back({"wpe.weight", wpe, {maxT, C}});
  struct Kind {
    const char* name;
    int64_t base;
    std::vector<int64_t> dims;
  };
  const Kind kinds[] = {
      {"ln_1.weight", ln1w, {C}},
      {"ln_1.bias", ln1b, {C}},
      {"attn.c_attn.weight", qkvw, {3 * C, C}},
      {"attn.c_attn.bias", qkvb, {3 * C}},
      {"attn.c_proj.weight", attprojw, {C, C}},
      {"attn.c_proj.bias", attprojb, {C}},
      {"ln_2.weight", ln2w, {C}},
      {"ln_2.bias", ln2b, {C}},
      {"mlp.c_fc.weight", fcw, {F, C}},
      {"mlp.c_fc.bias", fcb, {F}},
      {"mlp.c_proj.weight", fcprojw, {C, F}},
      {"mlp.c_proj.bias", fcprojb, {C}},
  };
  for (const Kind& k : kinds) {
    int64_t size = 1;
    for (int64_t d : k.dims) size *= d;
    for (int64_t l = 0; l < L; ++l) {
      t.push_back(
          {fmt::format("h.{}.{}", l, k.name), k.base + l * size, k.dims, static_cast<int>(l)});
    }
  }
  t.push_back({"ln_f.weight", lnfw, {C}});
  t.push_back({"ln_f.bias", lnfb, {C}});
  return t;
}

std::vector<std::vector<TensorInfo>> ParamLayout::GradReadyGroups() const {
  std::vector<std::vector<TensorInfo>> groups(L + 2);
  for (TensorInfo& t : Tensors()) {
    const bool embedding = t.name == "wte.weight" || t.name == "wpe.weight";
    const int64_t g = t.layer >= 0 ? L - t.layer : (embedding ? L + 1 : 0);
    groups[g].push_back(std::move(t));
  }
  return groups;
}

bool ParamLayout::IsResidualProjection(const TensorInfo& t) const {
  return t.name.ends_with("attn.c_proj.weight") || t.name.ends_with("mlp.c_proj.weight");
}

ActivationLayout ActivationLayout::For(const ParamLayout& p, int64_t B, int64_t T,
                                       int64_t logits_stride) {
  if (logits_stride != 0 && logits_stride < p.V) {
    throw Error(
        fmt::format("logits stride {} is shorter than the vocabulary {}", logits_stride, p.V));
  }
  ActivationLayout a;
  a.B = B, a.T = T;
  a.logits_stride = logits_stride != 0 ? logits_stride : p.V;
  const int64_t L = p.L, C = p.C, F = p.F, N = B * T;
  const int64_t scores = B * p.NH * T * T;
  Bump b;
  a.ln1 = b.Take(L * N * C);
  a.ln1_mean = b.Take(L * N);
  a.ln1_rstd = b.Take(L * N);
  a.qkv = b.Take(L * N * 3 * C);
  a.att = b.Take(L * scores);
  a.atty = b.Take(L * N * C);
  a.residual2 = b.Take(L * N * C);
  a.ln2 = b.Take(L * N * C);
  a.ln2_mean = b.Take(L * N);
  a.ln2_rstd = b.Take(L * N);
  a.fch = b.Take(L * N * F);
  a.fch_gelu = b.Take(L * N * F);
  a.residual3 = b.Take(L * N * C);
  a.encoded = b.Take(N * C);
  a.lnf = b.Take(N * C);
  a.lnf_mean = b.Take(N);
  a.lnf_rstd = b.Take(N);
  a.logits = b.Take(N * a.logits_stride);
  a.losses = b.Take(N);
  a.kept = b.next;
  a.dresidual = b.Take(N * C);
  a.dln = b.Take(N * C);
  a.dqkv = b.Take(N * 3 * C);
  a.datty = b.Take(N * C);
  a.dfch = b.Take(N * F);
  a.datt = b.Take(scores);
  a.total = b.next;
  return a;
}

}  // namespace fmstack::gpt
