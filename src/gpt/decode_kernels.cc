// The serving forward's CPU kernels (decode_kernels.h). Compiled with
// -ffp-contract=off and without fast math (CMakeLists.txt): the only fused
// multiply-adds are the ones written here, so each result has one order.
#include "gpt/decode_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FMSTACK_DECODE_AVX2 1
#endif

#include "gpt/fast_math.h"
#include "util/error.h"

namespace fmstack::gpt::decode {
namespace {

constexpr int64_t kRows = 6;    // rows per micro-kernel: 12 accumulators + 2 weights + 1 broadcast
// Rows per pass over the weights, at most: each pass streams every panel from
// memory once, so a step's rows go in as few passes as this allows, split
// evenly (64 rows as one pass, not 48 + 16: a pass of few rows is bound by
// the stream, 69 against 100 GFLOP/s on the 2-core Zen 3 VM).
constexpr int64_t kChunk = 128;

void CheckSize(std::string_view what, size_t have, int64_t want) {
  if (static_cast<int64_t>(have) < want)
    throw Error(fmt::format("decode kernel: {} holds {} floats, needs {}", what, have, want));
}

// acc[r * kPanel + j] = fma chain over k of x[r * ldx + k] * panel[k * kPanel + j].
template <int R>
void Micro(const float* x, int64_t ldx, const float* panel, int64_t K, float* acc) {
#if FMSTACK_DECODE_AVX2
  __m256 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 w0 = _mm256_loadu_ps(panel + k * kPanel);
    const __m256 w1 = _mm256_loadu_ps(panel + k * kPanel + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_broadcast_ss(x + r * ldx + k);
      a0[r] = _mm256_fmadd_ps(xb, w0, a0[r]);
      a1[r] = _mm256_fmadd_ps(xb, w1, a1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(acc + r * kPanel, a0[r]);
    _mm256_storeu_ps(acc + r * kPanel + 8, a1[r]);
  }
#else
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < kPanel; ++j) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) s = std::fma(x[r * ldx + k], panel[k * kPanel + j], s);
      acc[r * kPanel + j] = s;
    }
  }
#endif
}

void MicroRows(int64_t R, const float* x, int64_t ldx, const float* panel, int64_t K, float* acc) {
  switch (R) {
    case 1:
      return Micro<1>(x, ldx, panel, K, acc);
    case 2:
      return Micro<2>(x, ldx, panel, K, acc);
    case 3:
      return Micro<3>(x, ldx, panel, K, acc);
    case 4:
      return Micro<4>(x, ldx, panel, K, acc);
    case 5:
      return Micro<5>(x, ldx, panel, K, acc);
    default:
      return Micro<6>(x, ldx, panel, K, acc);
  }
}

// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)): two horizontal adds
// pair the lanes in exactly that order.
#if FMSTACK_DECODE_AVX2
inline float Reduce8(__m256 v) {
  const __m256 h = _mm256_hadd_ps(v, v);  // l0+l1, l2+l3, .., l4+l5, l6+l7, ..
  const __m256 q = _mm256_hadd_ps(h, h);  // (l0+l1)+(l2+l3) | (l4+l5)+(l6+l7)
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}
#endif

inline float Dot8Inline(const float* x, const float* y, int64_t n) {
  int64_t i = 0;
#if FMSTACK_DECODE_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
  if (i == n) return Reduce8(acc);
  alignas(32) float l[8];
  _mm256_store_ps(l, acc);
#else
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#endif
  for (; i < n; ++i) l[i % 8] = std::fma(x[i], y[i], l[i % 8]);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// o[d] = fma chain over positions j of p[j] * v_j[d], o starting at 0, for
// d in [0, hd): eight registers of o held across every position.
template <class ValueAt>
void WeightedSum(float* o, const float* p, int64_t positions, int64_t hd, ValueAt value_at) {
  int64_t d0 = 0;
#if FMSTACK_DECODE_AVX2
  for (; d0 + 64 <= hd; d0 += 64) {
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t j = 0; j < positions; ++j) {
      const float* v = value_at(j) + d0;
      const __m256 pj = _mm256_set1_ps(p[j]);
      for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + 8 * r), acc[r]);
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(o + d0 + 8 * r, acc[r]);
  }
#endif
  if (d0 == hd) return;
  std::fill(o + d0, o + hd, 0.0f);
  for (int64_t j = 0; j < positions; ++j) {
    const float* v = value_at(j);
    for (int64_t d = d0; d < hd; ++d) o[d] = std::fma(p[j], v[d], o[d]);
  }
}

}  // namespace

float Sum8(const float* x, int64_t n) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) l[i % 8] += x[i];
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

float Dot8(const float* x, const float* y, int64_t n) { return Dot8Inline(x, y, n); }

PackedLinear PackLinear(ConstFloats weight, ConstFloats bias, int64_t in, int64_t out) {
  if (in < 1 || out < 1) throw Error(fmt::format("PackLinear: shape {} x {} is empty", out, in));
  if (static_cast<int64_t>(weight.size()) != in * out)
    throw Error(fmt::format("PackLinear: weight holds {} floats, the shape {} x {} needs {}",
                            weight.size(), out, in, in * out));
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != out)
    throw Error(fmt::format("PackLinear: bias holds {} floats, needs {}", bias.size(), out));
  PackedLinear p;
  p.in = in, p.out = out;
  const int64_t P = (out + kPanel - 1) / kPanel;
  p.panels.assign(static_cast<size_t>(P * in * kPanel), 0.0f);
  for (int64_t o = 0; o < out; ++o) {
    float* panel = p.panels.data() + (o / kPanel) * in * kPanel + o % kPanel;
    const float* row = weight.data() + o * in;
    for (int64_t k = 0; k < in; ++k) panel[k * kPanel] = row[k];
  }
  p.bias.assign(bias.begin(), bias.end());
  return p;
}

void Linear(Floats y, ConstFloats x, const PackedLinear& w, int64_t N, ConstFloats residual) {
  CheckSize("Linear's input", x.size(), N * w.in);
  CheckSize("Linear's output", y.size(), N * w.out);
  if (!residual.empty()) CheckSize("Linear's residual", residual.size(), N * w.out);
  const int64_t P = (w.out + kPanel - 1) / kPanel, K = w.in;
  const int64_t passes = (N + kChunk - 1) / kChunk;
  const int64_t per_pass = (N + passes - 1) / std::max<int64_t>(passes, 1);
  for (int64_t n0 = 0; n0 < N; n0 += per_pass) {
    const int64_t rows = std::min(per_pass, N - n0);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < P; ++p) {
      alignas(32) float acc[kRows * kPanel];
      const float* panel = w.panels.data() + p * K * kPanel;
      const int64_t cols = std::min(kPanel, w.out - p * kPanel);
      for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
        const int64_t R = std::min(kRows, rows - r0);
        MicroRows(R, x.data() + (n0 + r0) * K, K, panel, K, acc);
        for (int64_t r = 0; r < R; ++r) {
          const int64_t at = (n0 + r0 + r) * w.out + p * kPanel;
          for (int64_t j = 0; j < cols; ++j) {
            float v = acc[r * kPanel + j];
            if (!w.bias.empty()) v = v + w.bias[p * kPanel + j];
            y[at + j] = residual.empty() ? v : residual[at + j] + v;
          }
        }
      }
    }
  }
}

void LayerNorm(Floats out, ConstFloats x, ConstFloats weight, ConstFloats bias, int64_t N,
               int64_t C) {
  CheckSize("LayerNorm's input", x.size(), N * C);
  CheckSize("LayerNorm's output", out.size(), N * C);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x.data() + n * C;
    float* o = out.data() + n * C;
    const float m = Sum8(xr, C) / static_cast<float>(C);
    for (int64_t c = 0; c < C; ++c) o[c] = xr[c] - m;
    const float var = Dot8(o, o, C) / static_cast<float>(C);
    const float s = 1.0f / std::sqrt(var + 1e-5f);
    for (int64_t c = 0; c < C; ++c) o[c] = o[c] * s * weight[c] + bias[c];
  }
}

void Gelu(Floats inout) {
  constexpr float kScale = 0.7978845608028654f;  // sqrt(2 / pi)
  const auto n = static_cast<int64_t>(inout.size());
  float* v = inout.data();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = v[i];
    const float u = kScale * (x + 0.044715f * x * x * x);
    v[i] = x / (1.0f + ExpFast(-2.0f * u));
  }
}

void StoreKv(Floats kv, const KvGeometry& g, int64_t layer, ConstFloats qkv,
             std::span<const AttentionRow> rows) {
  const int64_t C = g.C, bs = g.block_size;
  for (size_t r = 0; r < rows.size(); ++r) {
    const AttentionRow& row = rows[r];
    const int64_t b = row.blocks[static_cast<size_t>(row.pos / bs)];
    const float* src = qkv.data() + static_cast<int64_t>(r) * 3 * C;
    std::copy_n(src + C, C, kv.data() + g.At(b, layer, 0, row.pos % bs));
    std::copy_n(src + 2 * C, C, kv.data() + g.At(b, layer, 1, row.pos % bs));
  }
}

void PagedAttention(Floats out, ConstFloats qkv, ConstFloats kv, const KvGeometry& g, int64_t layer,
                    std::span<const AttentionRow> rows, int64_t NH) {
  const int64_t C = g.C, hd = C / NH, bs = g.block_size, N = std::ssize(rows);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  int64_t longest = 0;
  for (const AttentionRow& r : rows) longest = std::max(longest, r.pos + 1);
#pragma omp parallel
  {
    std::vector<float> e(static_cast<size_t>(longest));
#pragma omp for schedule(dynamic, 1)
    for (int64_t rh = 0; rh < N * NH; ++rh) {
      const int64_t r = rh / NH, h = rh % NH;
      const AttentionRow& row = rows[static_cast<size_t>(r)];
      const float* q = qkv.data() + r * 3 * C + h * hd;
      float maxv = -INFINITY;
      for (int64_t j = 0; j <= row.pos; ++j) {
        const int64_t b = row.blocks[static_cast<size_t>(j / bs)];
        e[j] = Dot8Inline(q, kv.data() + g.At(b, layer, 0, j % bs) + h * hd, hd) * scale;
        maxv = std::max(maxv, e[j]);
      }
      for (int64_t j = 0; j <= row.pos; ++j) e[j] = ExpFast(e[j] - maxv);
      const float inv = 1.0f / Sum8(e.data(), row.pos + 1);
      for (int64_t j = 0; j <= row.pos; ++j) e[j] = e[j] * inv;
      WeightedSum(out.data() + r * C + h * hd, e.data(), row.pos + 1, hd, [&](int64_t j) {
        return kv.data() + g.At(row.blocks[static_cast<size_t>(j / bs)], layer, 1, j % bs) + h * hd;
      });
    }
  }
}

}  // namespace fmstack::gpt::decode
