#include "gpt/bf16_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace fmstack::gpt {
namespace {

constexpr int64_t kMr = 12, kNr = 32;
// Blocks, for a 1 MiB L2: A's block (kMc rows x kKc, 384 KiB as bf16)
// stays in L2 while B's panels stream through it; B's block (6 MiB) in L3.
// An inner block of 1024 holds a weight gradient's whole inner dimension at
// 1024 tokens a step, so the gradient, cold in memory, is read and written
// once, not twice (768: those products ran 4-9% slower). B's block is as
// wide as a gpt2-124m layer's widest product, so that A's rows are packed
// once for all of it, not once per 768 columns.
constexpr int64_t kKc = 1024, kMc = 192, kNc = 3072;
static_assert(kKc % 2 == 0 && kMc % kMr == 0 && kNc % kNr == 0);

// A pair of bf16, the first in the low half: what VDPBF16PS multiplies.
using Pair = uint32_t;

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

Pair MakePair(float lo, float hi) {
  return static_cast<Pair>(ToBf16(lo)) | (static_cast<Pair>(ToBf16(hi)) << 16);
}

// 64-byte aligned scratch, not initialized: packing writes every element.
class Scratch {
 public:
  explicit Scratch(int64_t pairs)
      : raw_(std::make_unique_for_overwrite<Pair[]>(static_cast<size_t>(pairs + 16))) {
    const auto at = reinterpret_cast<uintptr_t>(raw_.get());
    data_ = reinterpret_cast<Pair*>((at + 63) & ~uintptr_t{63});
  }
  Pair* data() const { return data_; }

 private:
  std::unique_ptr<Pair[]> raw_;
  Pair* data_ = nullptr;
};

// The element (r, c) of a strided matrix.
float At(const StridedMatrix& x, int64_t r, int64_t c) {
  return x.data[r * x.row_stride + c * x.col_stride];
}

#if defined(__AVX512BF16__)
// 32 consecutive floats as 16 pairs, in order.
__m512i PairsOfRun(const float* from) {
  const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(from + 16), _mm512_loadu_ps(from));
  return reinterpret_cast<__m512i>(both);
}

// Lane i: (lo[i], hi[i]) for the first `lanes` lanes of two runs: the two
// converted runs side by side, then their 16-bit words interleaved.
__m512i PairsOfTwoRuns(const float* lo, const float* hi, int64_t lanes) {
  const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1);
  const auto both = reinterpret_cast<__m512i>(
      _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mask, hi), _mm512_maskz_loadu_ps(mask, lo)));
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, both);
}
#endif

#if defined(__AVX512BF16__)
// rows[i] lane t -> rows[t] lane i, for 16 x 16 32-bit elements.
void Transpose16(__m512i rows[16]) {
  // The masked forms: GCC 12 warns on the unmasked ones (_mm512_undefined_epi32).
  constexpr __mmask16 kAll = 0xffff;
  constexpr __mmask8 kAll8 = 0xff;
  __m512i a[16], b[16];
  for (int i = 0; i < 16; i += 2) {
    a[i] = _mm512_maskz_unpacklo_epi32(kAll, rows[i], rows[i + 1]);
    a[i + 1] = _mm512_maskz_unpackhi_epi32(kAll, rows[i], rows[i + 1]);
  }
  // b[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j.
  for (int i = 0; i < 16; i += 4) {
    b[i] = _mm512_maskz_unpacklo_epi64(kAll8, a[i], a[i + 2]);
    b[i + 1] = _mm512_maskz_unpackhi_epi64(kAll8, a[i], a[i + 2]);
    b[i + 2] = _mm512_maskz_unpacklo_epi64(kAll8, a[i + 1], a[i + 3]);
    b[i + 3] = _mm512_maskz_unpackhi_epi64(kAll8, a[i + 1], a[i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i u = _mm512_maskz_shuffle_i32x4(kAll, b[j], b[4 + j], 0x44);
    const __m512i v = _mm512_maskz_shuffle_i32x4(kAll, b[j], b[4 + j], 0xee);
    const __m512i u2 = _mm512_maskz_shuffle_i32x4(kAll, b[8 + j], b[12 + j], 0x44);
    const __m512i v2 = _mm512_maskz_shuffle_i32x4(kAll, b[8 + j], b[12 + j], 0xee);
    rows[j] = _mm512_maskz_shuffle_i32x4(kAll, u, u2, 0x88);
    rows[4 + j] = _mm512_maskz_shuffle_i32x4(kAll, u, u2, 0xdd);
    rows[8 + j] = _mm512_maskz_shuffle_i32x4(kAll, v, v2, 0x88);
    rows[12 + j] = _mm512_maskz_shuffle_i32x4(kAll, v, v2, 0xdd);
  }
}
#endif

// Pairs q of `width` lines of a matrix, each line contiguous along the inner
// dimension (`line(w)` points at its element p0): out[q * width + w]. The
// inner run is kc long; a last odd element pairs with zero. Sixteen lines at a
// time are converted and transposed in registers: storing each pair on its
// own cost a store per pair, each to another cache line.
template <class Line>
void PackLinesAlongInner(Line line, int64_t lines, int64_t width, int64_t kc, Pair* out) {
  const int64_t pairs = (kc + 1) / 2;
  int64_t q0 = 0;
#if defined(__AVX512BF16__)
  for (; 2 * q0 + 32 <= kc; q0 += 16) {
    for (int64_t w0 = 0; w0 < width; w0 += 16) {
      __m512i rows[16];
      for (int64_t i = 0; i < 16; ++i)
        rows[i] = w0 + i < lines ? PairsOfRun(line(w0 + i) + 2 * q0) : _mm512_setzero_si512();
      Transpose16(rows);
      const auto mask = static_cast<__mmask16>((1u << std::min<int64_t>(16, width - w0)) - 1);
      for (int64_t t = 0; t < 16; ++t)
        _mm512_mask_storeu_epi32(out + (q0 + t) * width + w0, mask, rows[t]);
    }
  }
#endif
  for (int64_t w = 0; w < width; ++w) {
    const float* from = w < lines ? line(w) : nullptr;
    for (int64_t q = q0; q < pairs; ++q) {
      if (from == nullptr) {
        out[q * width + w] = 0;
        continue;
      }
      const float hi = 2 * q + 1 < kc ? from[2 * q + 1] : 0.0f;
      out[q * width + w] = MakePair(from[2 * q], hi);
    }
  }
}

// Pairs q from inner steps 2q and 2q + 1, each a contiguous run of `lines`
// elements (`step(p)` points at step p's first), into panels of `width`
// lines: pair q of line l at out[(l / width) * width * pairs + q * width +
// l % width], the last panel's lines past `lines` zeros. Each step's run is
// read once, across all the panels: panel by panel, every panel re-read
// every step's cache lines for its 12 or 32 elements.
template <class Step>
void PackStepsAcrossLines(Step step, int64_t lines, int64_t width, int64_t kc, Pair* out) {
  const int64_t pairs = (kc + 1) / 2;
  // An odd kc's last pair has no second step: its partner is a run of
  // zeros as long as the lines read (a kNr-float one was read past its end
  // for wider blocks: NaNs in C on the 2-core Zen 3 VM).
  std::vector<float> zeros(kc % 2 == 1 ? static_cast<size_t>(lines) : 0, 0.0f);
  for (int64_t q = 0; q < pairs; ++q) {
    const float* lo = step(2 * q);
    const float* hi = 2 * q + 1 < kc ? step(2 * q + 1) : zeros.data();
    for (int64_t l0 = 0; l0 < lines; l0 += width) {
      Pair* to = out + l0 * pairs + q * width;
      const int64_t n = std::min(width, lines - l0);
      int64_t w = 0;
#if defined(__AVX512BF16__)
      for (; w < n; w += 16) {
        const int64_t lanes = std::min<int64_t>(16, n - w);
        _mm512_mask_storeu_epi32(to + w, static_cast<__mmask16>((1u << lanes) - 1),
                                 PairsOfTwoRuns(lo + l0 + w, hi + l0 + w, lanes));
      }
      w = n;
#endif
      for (; w < n; ++w) to[w] = MakePair(lo[l0 + w], hi[l0 + w]);
      for (w = n; w < width; ++w) to[w] = 0;
    }
  }
}

// Rows [i0, i0 + mc) and inner columns [p0, p0 + kc) of A, as panels of kMr
// rows: pair q of row r at [q * kMr + r]; rows past mc are zeros.
void PackA(const StridedMatrix& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, Pair* out) {
  const int64_t pairs = (kc + 1) / 2;
  if (a.row_stride == 1 && a.col_stride != 1) {
    const float* base = a.data + i0 + p0 * a.col_stride;
    return PackStepsAcrossLines([&](int64_t p) { return base + p * a.col_stride; }, mc, kMr, kc,
                                out);
  }
  for (int64_t ir = 0; ir < mc; ir += kMr, out += kMr * pairs) {
    const int64_t rows = std::min(kMr, mc - ir);
    const float* base = a.data + (i0 + ir) * a.row_stride + p0 * a.col_stride;
    if (a.col_stride == 1) {
      PackLinesAlongInner([&](int64_t r) { return base + r * a.row_stride; }, rows, kMr, kc, out);
    } else {
      for (int64_t q = 0; q < pairs; ++q) {
        for (int64_t r = 0; r < kMr; ++r) {
          const int64_t i = i0 + ir + r, p = p0 + 2 * q;
          out[q * kMr + r] =
              r < rows ? MakePair(At(a, i, p), p + 1 < p0 + kc ? At(a, i, p + 1) : 0.0f) : 0;
        }
      }
    }
  }
}

// Inner rows [p0, p0 + kc) and columns [j0, j0 + nc) of B, as panels of kNr
// columns: pair q of column j at [q * kNr + j]; columns past nc are zeros.
void PackB(const StridedMatrix& b, int64_t p0, int64_t kc, int64_t j0, int64_t nc, Pair* out) {
  const int64_t pairs = (kc + 1) / 2;
  if (b.col_stride == 1) {
    const float* base = b.data + p0 * b.row_stride + j0;
    return PackStepsAcrossLines([&](int64_t p) { return base + p * b.row_stride; }, nc, kNr, kc,
                                out);
  }
  for (int64_t jr = 0; jr < nc; jr += kNr, out += kNr * pairs) {
    const int64_t cols = std::min(kNr, nc - jr);
    const float* base = b.data + p0 * b.row_stride + (j0 + jr) * b.col_stride;
    if (b.row_stride == 1) {
      PackLinesAlongInner([&](int64_t j) { return base + j * b.col_stride; }, cols, kNr, kc, out);
    } else {
      for (int64_t q = 0; q < pairs; ++q) {
        for (int64_t j = 0; j < kNr; ++j) {
          const int64_t p = p0 + 2 * q, col = j0 + jr + j;
          out[q * kNr + j] =
              j < cols ? MakePair(At(b, p, col), p + 1 < p0 + kc ? At(b, p + 1, col) : 0.0f) : 0;
        }
      }
    }
  }
}

#if defined(__AVX512BF16__)
// C (kMr x kNr) = or += one A panel times one B panel, `pairs` steps.
void Tile(int64_t pairs, const Pair* __restrict ap, const Pair* __restrict bp, bool accumulate,
          float* c, int64_t ldc) {
  __m512 lo[kMr], hi[kMr];
  for (int64_t r = 0; r < kMr; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const auto b_lo = reinterpret_cast<__m512bh>(_mm512_load_si512(bp + q * kNr));
    const auto b_hi = reinterpret_cast<__m512bh>(_mm512_load_si512(bp + q * kNr + 16));
#pragma GCC unroll 12
    for (int64_t r = 0; r < kMr; ++r) {
      const auto x =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ap[q * kMr + r])));
      lo[r] = _mm512_dpbf16_ps(lo[r], x, b_lo);
      hi[r] = _mm512_dpbf16_ps(hi[r], x, b_hi);
    }
  }
  for (int64_t r = 0; r < kMr; ++r) {
    float* row = c + r * ldc;
    if (accumulate) {
      lo[r] = _mm512_add_ps(lo[r], _mm512_loadu_ps(row));
      hi[r] = _mm512_add_ps(hi[r], _mm512_loadu_ps(row + 16));
    }
    _mm512_storeu_ps(row, lo[r]);
    _mm512_storeu_ps(row + 16, hi[r]);
  }
}
#else
// What VDPBF16PS computes, lane by lane: acc + lo * lo + hi * hi.
void Tile(int64_t pairs, const Pair* ap, const Pair* bp, bool accumulate, float* c, int64_t ldc) {
  float acc[kMr][kNr] = {};
  for (int64_t q = 0; q < pairs; ++q) {
    for (int64_t r = 0; r < kMr; ++r) {
      const Pair x = ap[q * kMr + r];
      const float x_lo = FromBf16(static_cast<uint16_t>(x)), x_hi = FromBf16(x >> 16);
      for (int64_t j = 0; j < kNr; ++j) {
        const Pair y = bp[q * kNr + j];
        acc[r][j] += x_lo * FromBf16(static_cast<uint16_t>(y)) + x_hi * FromBf16(y >> 16);
      }
    }
  }
  for (int64_t r = 0; r < kMr; ++r) {
    for (int64_t j = 0; j < kNr; ++j)
      c[r * ldc + j] = (accumulate ? c[r * ldc + j] : 0.0f) + acc[r][j];
  }
}
#endif

// A tile cut by C's edge: computed whole into scratch (the panels are zero
// past the edge), then the part inside C is written.
void EdgeTile(int64_t pairs, const Pair* ap, const Pair* bp, bool accumulate, float* c, int64_t ldc,
              int64_t rows, int64_t cols) {
  alignas(64) float tile[kMr * kNr];
  Tile(pairs, ap, bp, false, tile, kNr);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j)
      c[r * ldc + j] = (accumulate ? c[r * ldc + j] : 0.0f) + tile[r * kNr + j];
  }
}

void Macro(int64_t mc, int64_t nc, int64_t pairs, const Pair* ap, const Pair* bp, bool accumulate,
           float* c, int64_t ldc) {
  for (int64_t jr = 0; jr < nc; jr += kNr) {
    const int64_t cols = std::min(kNr, nc - jr);
    const Pair* b_panel = bp + jr * pairs;
    for (int64_t ir = 0; ir < mc; ir += kMr) {
      const int64_t rows = std::min(kMr, mc - ir);
      float* ct = c + ir * ldc + jr;
      // The next tile's rows of C, fetched (for writing) while this one
      // runs: C is often cold, and the tile would wait on each row (1.5-2.5%
      // of a product, warm and cold).
      const bool down = ir + kMr < mc, across = jr + kNr < nc;
      if (down || across) {
        const float* next = down ? ct + kMr * ldc : c + jr + kNr;
        const int64_t next_rows = down ? std::min(kMr, mc - ir - kMr) : std::min(kMr, mc);
        const int64_t next_cols = down ? cols : std::min(kNr, nc - jr - kNr);
        for (int64_t r = 0; r < next_rows; ++r) {
          __builtin_prefetch(next + r * ldc, 1, 3);
          if (next_cols > 16) __builtin_prefetch(next + r * ldc + 16, 1, 3);
        }
      }
      if (rows == kMr && cols == kNr) {
        Tile(pairs, ap + ir * pairs, b_panel, accumulate, ct, ldc);
      } else {
        EdgeTile(pairs, ap + ir * pairs, b_panel, accumulate, ct, ldc, rows, cols);
      }
    }
  }
}

// Blocks of at most `most`, as equal as multiples of `unit` allow: 1,024 is
// two blocks of 512, not 768 and 256.
int64_t EvenBlock(int64_t size, int64_t most, int64_t unit) {
  if (size <= 0) return most;  // no blocks to size (callers pass at least 1)
  const int64_t blocks = (size + most - 1) / most;
  return std::min(most, ((size + blocks - 1) / blocks + unit - 1) / unit * unit);
}

// Pairs in the largest blocks of A and of B that RunShare cuts from an
// m x n x k product, however it is split (EvenBlock never exceeds them).
struct Blocks {
  int64_t a = 0, b = 0;
};
Blocks BlocksFor(int64_t m, int64_t n, int64_t k) {
  const int64_t pairs = (std::min(kKc, k) + 1) / 2;
  return {std::min(kMc, (m + kMr - 1) / kMr * kMr) * pairs,
          pairs * std::min(kNc, (n + kNr - 1) / kNr * kNr)};
}

// [lo, hi) of part t of `units` whole units split into `parts`.
struct Range {
  int64_t lo, hi;
};
Range PartOf(int64_t size, int64_t unit, int64_t t, int64_t parts) {
  const int64_t units = (size + unit - 1) / unit;
  return {std::min(units * t / parts * unit, size), std::min(units * (t + 1) / parts * unit, size)};
}

// One thread's share of C = A B: rows `mine` of every (jc, pc) block, the
// block of B packed by all threads together (each its share of the panels)
// and read by all after a barrier.
void RunShare(int64_t m, int64_t n, int64_t k, const StridedMatrix& a, const StridedMatrix& b,
              bool accumulate, float* c, int64_t ldc, Pair* a_block, Pair* b_block, int64_t t,
              int64_t parts) {
  const int64_t kc_step = EvenBlock(k, kKc, 2), nc_step = EvenBlock(n, kNc, kNr);
  const Range mine = PartOf(m, kMr, t, parts);
  const int64_t mc_step = EvenBlock(mine.hi - mine.lo, kMc, kMr);
  for (int64_t jc = 0; jc < n; jc += nc_step) {
    const int64_t nc = std::min(nc_step, n - jc);
    for (int64_t pc = 0; pc < k; pc += kc_step) {
      const int64_t kc = std::min(kc_step, k - pc), pairs = (kc + 1) / 2;
      const Range panels = PartOf(nc, kNr, t, parts);
      if (panels.hi > panels.lo)
        PackB(b, pc, kc, jc + panels.lo, panels.hi - panels.lo, b_block + panels.lo * pairs);
      if (parts > 1) {
#pragma omp barrier
      }
      for (int64_t ic = mine.lo; ic < mine.hi; ic += mc_step) {
        const int64_t mc = std::min(mc_step, mine.hi - ic);
        PackA(a, ic, mc, pc, kc, a_block);
        Macro(mc, nc, pairs, a_block, b_block, accumulate || pc > 0, c + ic * ldc + jc, ldc);
      }
      if (parts > 1) {
#pragma omp barrier
      }
    }
  }
}

// C's columns split between `parts` threads, each with its own packing
// buffers and no barrier: for a C of fewer row panels than threads (a few
// tokens), where splitting rows would leave threads idle. A is small then,
// and each thread packs all of it.
void SplitColumns(int64_t m, int64_t n, int64_t k, const StridedMatrix& a, const StridedMatrix& b,
                  bool accumulate, float* c, int64_t ldc, int64_t parts) {
  // Sized for the whole of C: a team smaller than asked for gives each
  // thread more columns.
  const Blocks size = BlocksFor(m, n, k);
  std::vector<Scratch> a_blocks, b_blocks;
  for (int64_t t = 0; t < parts; ++t) {
    a_blocks.emplace_back(size.a);
    b_blocks.emplace_back(size.b);
  }
#pragma omp parallel num_threads(static_cast <int>(parts))
  {
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    const Range mine = PartOf(n, kNr, t, team);
    StridedMatrix part = b;
    part.data += mine.lo * b.col_stride;
    if (mine.hi > mine.lo) {
      RunShare(m, mine.hi - mine.lo, k, a, part, accumulate, c + mine.lo, ldc,
               a_blocks[static_cast<size_t>(t)].data(), b_blocks[static_cast<size_t>(t)].data(), 0,
               1);
    }
  }
}

}  // namespace

uint16_t ToBf16(float x) {
  uint32_t u = Bits(x);
  // As VCVTNEPS2BF16: a NaN stays quiet, and denormal inputs count as zero.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t x) {
  const uint32_t u = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

void Bf16Gemm(int64_t m, int64_t n, int64_t k, StridedMatrix a, StridedMatrix b, bool accumulate,
              float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    }
    return;
  }
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t row_panels = (m + kMr - 1) / kMr, column_panels = (n + kNr - 1) / kNr;
  if (row_panels < threads && column_panels > row_panels)
    return SplitColumns(m, n, k, a, b, accumulate, c, ldc,
                        std::min<int64_t>(threads, column_panels));
  // Threads split C's rows and share each packed block of B: each packs
  // its share of B's panels and its own rows of A, so nothing is packed
  // twice.
  const int64_t parts = std::clamp<int64_t>(threads, 1, row_panels);
  // Allocated here, not inside the parallel region, where a failed
  // allocation could not reach the caller.
  const Blocks size = BlocksFor(m, n, k);
  const Scratch b_block(size.b);
  std::vector<Scratch> a_blocks;
  for (int64_t t = 0; t < parts; ++t) a_blocks.emplace_back(size.a);
  if (parts == 1)
    return RunShare(m, n, k, a, b, accumulate, c, ldc, a_blocks[0].data(), b_block.data(), 0, 1);
#pragma omp parallel num_threads(static_cast <int>(parts))
  {
    // The team may be smaller than asked for; its members split the work.
    const int64_t t = omp_get_thread_num(), team = omp_get_num_threads();
    RunShare(m, n, k, a, b, accumulate, c, ldc, a_blocks[static_cast<size_t>(t)].data(),
             b_block.data(), t, team);
  }
}

bool Bf16GemmIsFast() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

}  // namespace fmstack::gpt
