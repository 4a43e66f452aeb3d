// The CUDA backend against its CPU twin: each kernel on random inputs, then
// the whole model's loss and gradients, then a few training steps. Without a
// device every test that needs one reports itself SKIPPED (ctest counts it as
// skipped, never passed), and the one that needs none checks the error a
// user gets for device = "cuda" on such a machine.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "ckpt/engine.h"
#include "gpt/cpu_kernels.h"
#include "gpt/cuda_kernels.h"
#include "gpt/cuda_runtime.h"
#include "gpt/model.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/token_file.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/random.h"

namespace fmstack::gpt {
namespace {

bool HaveDevice() {
  return !cuda::ProbeDevices().devices.empty();
}

#define REQUIRE_DEVICE()                                              \
  do {                                                                \
    if (!HaveDevice()) GTEST_SKIP() << cuda::ProbeDevices().why_none; \
  } while (0)

workload::TransformerShape Tiny() {
  workload::TransformerShape s;
  s.name = "tiny";
  s.layers = 2, s.hidden = 64, s.heads = 4, s.kv_heads = 4, s.ffn_hidden = 256;
  s.vocab = 97, s.seq_len = 40;
  return s;
}

std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * static_cast<float>(rng.Normal());
  return v;
}

std::vector<int32_t> RandomTokens(size_t n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  return t;
}

// A device copy of a host vector, and back.
template <typename T>
cuda::DeviceBuffer<T> Up(const std::vector<T>& host) {
  cuda::DeviceBuffer<T> d(host.size(), "test upload");
  cuda::Check(cudaMemcpy(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice), "test upload");
  return d;
}

template <typename T>
std::vector<T> Down(const cuda::DeviceBuffer<T>& d) {
  cuda::Check(cudaDeviceSynchronize(), "test kernel");
  std::vector<T> host(d.size());
  cuda::Check(cudaMemcpy(host.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost),
              "test download");
  return host;
}

// |a - b| <= tol * (1 + |b|) elementwise, naming the first index that is not.
void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, float tol,
                const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::fabs(a[i] - b[i]), tol * (1.0f + std::fabs(b[i])))
        << what << " at " << i << ": cuda " << a[i] << ", cpu " << b[i];
  }
}

TEST(CudaDevice, NoDeviceIsAClearErrorNamingWhatWasLookedFor) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present; this checks machines without one";
  try {
    CreateModel(Tiny(), {.backend = "cuda"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device \"cuda\""), std::string::npos) << m;
    EXPECT_NE(m.find("no CUDA device"), std::string::npos) << m;
    EXPECT_NE(m.find("libcuda.so.1"), std::string::npos) << m;
  }
}

// cuBLAS is opened on first use, not linked (gpt/cuda_runtime.h); loading it
// needs no device, so this runs everywhere the backend builds.
TEST(CudaRuntime, CublasLoadsOnFirstUseWithoutADevice) {
  const cuda::CublasApi& api = cuda::Cublas();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.sgemm, nullptr);
  EXPECT_NE(api.sgemm_strided_batched, nullptr);
  EXPECT_STREQ(api.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_EQ(&api, &cuda::Cublas());  // loaded once
}

// The host twin of the bf16 cast needs no device: ties go to the even
// neighbour, and a NaN stays a NaN rather than rounding into infinity.
TEST(CudaRuntime, HostBf16RoundingTiesToEven) {
  EXPECT_EQ(cuda::RoundToBf16(1.0f), 0x3f80);
  EXPECT_EQ(cuda::RoundToBf16(1.00390625f), 0x3f80);  // halfway to 0x3f81: even 0x3f80
  EXPECT_EQ(cuda::RoundToBf16(1.01171875f), 0x3f82);  // halfway to 0x3f82: even 0x3f82
  EXPECT_EQ(cuda::RoundToBf16(std::nextafter(1.00390625f, 2.0f)), 0x3f81);  // past halfway
  EXPECT_EQ(cuda::RoundToBf16(-2.0f), 0xc000);
  EXPECT_EQ(cuda::RoundToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  const uint16_t nan = cuda::RoundToBf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x7f, 0);
}

TEST(CudaKernels, EncoderForwardAndBackwardMatchCpu) {
  REQUIRE_DEVICE();
  const int64_t B = 3, T = 17, C = 64, V = 11;  // few tokens: rows repeat them
  const auto tokens = RandomTokens(B * T, V, 1);
  const auto wte = RandomFloats(V * C, 2), wpe = RandomFloats(T * C, 3);
  std::vector<float> out(B * T * C);
  cpu::EncoderForward(out, tokens, wte, wpe, B, T, C);
  auto d_out = Up(std::vector<float>(out.size()));
  auto d_tokens = Up(tokens);
  auto d_wte = Up(wte), d_wpe = Up(wpe);
  cuda::EncoderForward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T, C, nullptr);
  ExpectNear(Down(d_out), out, 1e-6f, "encoder forward");

  const auto dout = RandomFloats(B * T * C, 4);
  auto dwte = RandomFloats(V * C, 5), dwpe = RandomFloats(T * C, 6);  // accumulate into these
  auto d_dwte = Up(dwte), d_dwpe = Up(dwpe), d_dout = Up(dout);
  cpu::EncoderBackward(dwte, dwpe, dout, tokens, B, T, C);
  // Rows grouped by token, as CudaModel builds them.
  std::vector<int32_t> uniques, starts, rows;
  for (int32_t v = 0; v < V; ++v) {
    const auto before = static_cast<int32_t>(rows.size());
    for (int32_t n = 0; n < B * T; ++n) {
      if (tokens[n] == v) rows.push_back(n);
    }
    if (static_cast<int32_t>(rows.size()) > before) uniques.push_back(v), starts.push_back(before);
  }
  starts.push_back(static_cast<int32_t>(rows.size()));
  auto d_uniques = Up(uniques), d_starts = Up(starts), d_rows = Up(rows);
  cuda::PositionBackward(d_dwpe.data(), d_dout.data(), B, T, C, nullptr);
  cuda::TokenBackward(d_dwte.data(), d_dout.data(), d_uniques.data(), d_starts.data(),
                      d_rows.data(), static_cast<int64_t>(uniques.size()), C, nullptr);
  ExpectNear(Down(d_dwte), dwte, 1e-5f, "token embedding gradient");
  ExpectNear(Down(d_dwpe), dwpe, 1e-5f, "position embedding gradient");
}

TEST(CudaKernels, LayerNormForwardAndBackwardMatchCpu) {
  REQUIRE_DEVICE();
  const int64_t N = 45, C = 200;  // C not a multiple of the warp
  const auto inp = RandomFloats(N * C, 1, 3.0f), w = RandomFloats(C, 2), b = RandomFloats(C, 3);
  std::vector<float> out(N * C), mean(N), rstd(N);
  cpu::LayerNormForward(out, mean, rstd, inp, w, b, N, C);
  auto d_inp = Up(inp), d_w = Up(w), d_b = Up(b);
  cuda::DeviceBuffer<float> d_out(N * C, "t"), d_mean(N, "t"), d_rstd(N, "t");
  cuda::LayerNormForward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(),
                         d_b.data(), N, C, nullptr);
  ExpectNear(Down(d_out), out, 1e-5f, "layernorm output");
  ExpectNear(Down(d_mean), mean, 1e-5f, "layernorm mean");
  ExpectNear(Down(d_rstd), rstd, 1e-5f, "layernorm rstd");

  const auto dout = RandomFloats(N * C, 4);
  auto dinp = RandomFloats(N * C, 5), dw = RandomFloats(C, 6), db = RandomFloats(C, 7);
  auto d_dinp = Up(dinp), d_dw = Up(dw), d_db = Up(db), d_dout = Up(dout);
  cpu::LayerNormBackwardAccumulate(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  cuda::DeviceBuffer<float> scratch(cuda::ColumnSumScratch(N, C), "t");
  cuda::LayerNormBackwardAccumulate(d_dinp.data(), d_dw.data(), d_db.data(), d_dout.data(),
                                    d_inp.data(), d_w.data(), d_mean.data(), d_rstd.data(), N, C,
                                    scratch.data(), nullptr);
  ExpectNear(Down(d_dinp), dinp, 1e-4f, "layernorm input gradient");
  ExpectNear(Down(d_dw), dw, 1e-4f, "layernorm weight gradient");
  ExpectNear(Down(d_db), db, 1e-4f, "layernorm bias gradient");
}

TEST(CudaKernels, GeluForwardAndBackwardMatchCpu) {
  REQUIRE_DEVICE();
  const auto inp = RandomFloats(1000, 1, 4.0f);
  std::vector<float> out(inp.size());
  cpu::GeluForward(out, inp);
  auto d_inp = Up(inp);
  cuda::DeviceBuffer<float> d_out(inp.size(), "t");
  cuda::GeluForward(d_out.data(), d_inp.data(), 1000, nullptr);
  ExpectNear(Down(d_out), out, 1e-5f, "gelu");
  auto d = RandomFloats(1000, 2);
  auto d_d = Up(d);
  cpu::GeluBackwardInPlace(d, inp);
  cuda::GeluBackwardInPlace(d_d.data(), d_inp.data(), 1000, nullptr);
  ExpectNear(Down(d_d), d, 1e-5f, "gelu gradient");
}

TEST(CudaKernels, BiasRowsAndBiasGradientMatchCpu) {
  REQUIRE_DEVICE();
  const int64_t N = 300, OC = 70;
  const auto bias = RandomFloats(OC, 1), residual = RandomFloats(N * OC, 2);
  auto d_bias = Up(bias), d_res = Up(residual);
  cuda::DeviceBuffer<float> d_out(N * OC, "t");
  cuda::FillRowsResidual(d_out.data(), d_res.data(), d_bias.data(), N, OC, nullptr);
  const std::vector<float> got = Down(d_out);
  for (int64_t i = 0; i < N * OC; ++i) ASSERT_FLOAT_EQ(got[i], residual[i] + bias[i % OC]);

  const auto dout = RandomFloats(N * OC, 3);
  auto dbias = RandomFloats(OC, 4);
  auto d_dbias = Up(dbias), d_dout = Up(dout);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < OC; ++c) dbias[c] += dout[n * OC + c];
  }
  // 300 rows: a full group of 256 and a partial one.
  cuda::DeviceBuffer<float> scratch(cuda::ColumnSumScratch(N, OC), "t");
  cuda::BiasBackwardAccumulate(d_dbias.data(), d_dout.data(), N, OC, scratch.data(), nullptr);
  ExpectNear(Down(d_dbias), dbias, 1e-4f, "bias gradient");
}

// With causal blocks, zeros are written past the diagonal only up to the
// end of the row's block (block k starts at k T / blocks); past it the row
// keeps what it held. T = 70 in 4 blocks: 0, 17, 35, 52, 70.
TEST(CudaKernels, CausalSoftmaxForwardAndBackwardMatchAPlainLoop) {
  REQUIRE_DEVICE();
  const int64_t heads = 3, T = 70;
  const float scale = 0.125f;
  for (const int64_t blocks : {int64_t{1}, int64_t{4}}) {
    SCOPED_TRACE(::testing::Message() << blocks << " causal blocks");
    auto block_end = [&](int64_t i) {
      int64_t k = 1;
      while (k * T / blocks <= i) ++k;
      return k * T / blocks;
    };
    const auto scores = RandomFloats(heads * T * T, 1, 4.0f);
    auto d_att = Up(scores);
    cuda::CausalSoftmaxForward(d_att.data(), heads * T, T, scale, blocks, nullptr);
    std::vector<float> p = scores;  // past a row's block: untouched
    for (int64_t r = 0; r < heads * T; ++r) {
      const int64_t i = r % T;
      float max = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) max = std::max(max, scale * scores[r * T + j]);
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(scale * scores[r * T + j] - max);
      for (int64_t j = 0; j < block_end(i); ++j) {
        p[r * T + j] = j <= i ? std::exp(scale * scores[r * T + j] - max) / sum : 0.0f;
      }
    }
    ExpectNear(Down(d_att), p, 1e-5f, "causal softmax");

    auto dp = RandomFloats(scores.size(), 2);
    auto d_dp = Up(dp);
    auto d_p = Up(p);
    for (int64_t r = 0; r < heads * T; ++r) {
      const int64_t i = r % T;
      float dot = 0;
      for (int64_t j = 0; j <= i; ++j) dot += p[r * T + j] * dp[r * T + j];
      for (int64_t j = 0; j < block_end(i); ++j) {
        dp[r * T + j] = j <= i ? p[r * T + j] * (dp[r * T + j] - dot) : 0.0f;
      }
    }
    cuda::CausalSoftmaxBackwardInPlace(d_dp.data(), d_p.data(), heads * T, T, blocks, nullptr);
    ExpectNear(Down(d_dp), dp, 1e-5f, "causal softmax gradient");
  }
}

TEST(CudaKernels, SoftmaxCrossEntropyMatchesCpu) {
  REQUIRE_DEVICE();
  const int64_t N = 33, V = 50257;  // GPT-2's vocabulary: a row longer than a block
  const int64_t stride = 50304;     // rows padded as the model pads them
  const float kPad = 123.0f;        // must survive both kernels
  const auto logits = RandomFloats(N * V, 1, 2.0f);
  const auto targets = RandomTokens(N, V, 2);
  std::vector<float> probs = logits, losses(N);
  cpu::SoftmaxCrossEntropyForward(probs, losses, targets, N, V);
  std::vector<float> padded(N * stride, kPad);
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(logits.begin() + n * V, V, padded.begin() + n * stride);
  }
  // The device rows without their padding, after checking the padding.
  auto unpad = [&](const std::vector<float>& rows) {
    std::vector<float> out(N * V);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t v = V; v < stride; ++v) EXPECT_EQ(rows[n * stride + v], kPad) << n << "," << v;
      std::copy_n(rows.begin() + n * stride, V, out.begin() + n * V);
    }
    return out;
  };
  auto d_probs = Up(padded);
  auto d_targets = Up(targets);
  cuda::DeviceBuffer<float> d_losses(N, "t");
  cuda::SoftmaxCrossEntropyForward(d_probs.data(), d_losses.data(), d_targets.data(), N, V, stride,
                                   nullptr);
  ExpectNear(Down(d_losses), losses, 1e-5f, "losses");
  ExpectNear(unpad(Down(d_probs)), probs, 1e-5f, "probabilities");
  cpu::SoftmaxCrossEntropyBackwardInPlace(probs, targets, N, V, 0.5f);
  cuda::SoftmaxCrossEntropyBackwardInPlace(d_probs.data(), d_targets.data(), N, V, stride, 0.5f,
                                           nullptr);
  ExpectNear(unpad(Down(d_probs)), probs, 1e-5f, "logit gradient");
}

// The cast that feeds bf16 matmuls, against its host twin: ties to even,
// values that round up into the next binade, infinities and NaN.
TEST(CudaKernels, CastToBf16MatchesTheHostRounding) {
  REQUIRE_DEVICE();
  std::vector<float> x = RandomFloats(100003, 31, 3.0f);  // odd: the loop's tail
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            1.00390625f /* a tie, rounds to even 1.0 */,
                            1.01171875f /* a tie, rounds up */,
                            3.3895e38f /* near the largest bf16 */,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1e-40f /* denormal */};
  std::ranges::copy(specials, x.begin());
  const cuda::DeviceBuffer<float> d_x = Up(x);
  cuda::DeviceBuffer<uint16_t> d_y(x.size(), "test bf16");
  cuda::CastToBf16(d_y.data(), d_x.data(), static_cast<int64_t>(x.size()), nullptr);
  const std::vector<uint16_t> y = Down(d_y);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_EQ(y[i] & 0x7f80, 0x7f80) << i;
      EXPECT_NE(y[i] & 0x7f, 0) << i;
      continue;
    }
    ASSERT_EQ(y[i], cuda::RoundToBf16(x[i])) << "at " << i << ": " << x[i];
  }
}

// The kernels that write a bf16 copy beside their result (for the bf16
// matmul after them) write exactly the result rounded, and the result itself
// is what it is without the copy; the cross-entropy's backward with a copy
// writes the copy alone and leaves the probabilities.
TEST(CudaKernels, Bf16CopiesAreTheirResultsRounded) {
  REQUIRE_DEVICE();
  auto rounded = [](const std::vector<float>& v) {
    std::vector<uint16_t> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = cuda::RoundToBf16(v[i]);
    return r;
  };
  const int64_t N = 45, C = 200;
  const auto inp = RandomFloats(N * C, 1, 3.0f), w = RandomFloats(C, 2), b = RandomFloats(C, 3);
  auto d_inp = Up(inp), d_w = Up(w), d_b = Up(b);
  cuda::DeviceBuffer<float> d_out(N * C, "t"), d_plain(N * C, "t"), d_mean(N, "t"), d_rstd(N, "t");
  cuda::DeviceBuffer<uint16_t> d_out16(N * C, "t");
  cuda::LayerNormForward(d_plain.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(),
                         d_b.data(), N, C, nullptr);
  cuda::LayerNormForward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(),
                         d_b.data(), N, C, nullptr, d_out16.data());
  EXPECT_EQ(Down(d_out), Down(d_plain));
  EXPECT_EQ(Down(d_out16), rounded(Down(d_out))) << "layernorm";

  cuda::GeluForward(d_plain.data(), d_inp.data(), N * C, nullptr);
  cuda::GeluForward(d_out.data(), d_inp.data(), N * C, nullptr, d_out16.data());
  EXPECT_EQ(Down(d_out), Down(d_plain));
  EXPECT_EQ(Down(d_out16), rounded(Down(d_out))) << "gelu";

  const auto d = RandomFloats(N * C, 4);
  auto d_d = Up(d), d_d_plain = Up(d);
  cuda::GeluBackwardInPlace(d_d_plain.data(), d_inp.data(), N * C, nullptr);
  cuda::GeluBackwardInPlace(d_d.data(), d_inp.data(), N * C, nullptr, d_out16.data());
  EXPECT_EQ(Down(d_d), Down(d_d_plain));
  EXPECT_EQ(Down(d_out16), rounded(Down(d_d))) << "gelu gradient";

  const int64_t rows = 7, V = 300, stride = 384;
  std::vector<float> logits = RandomFloats(rows * stride, 5);
  const auto targets = RandomTokens(rows, V, 6);
  auto d_probs = Up(logits);
  auto d_targets = Up(targets);
  cuda::DeviceBuffer<float> d_losses(rows, "t");
  cuda::SoftmaxCrossEntropyForward(d_probs.data(), d_losses.data(), d_targets.data(), rows, V,
                                   stride, nullptr);
  const std::vector<float> probs = Down(d_probs);
  cuda::DeviceBuffer<uint16_t> d_grad16(rows * stride, "t");
  cuda::SoftmaxCrossEntropyBackwardInPlace(d_probs.data(), d_targets.data(), rows, V, stride, 0.5f,
                                           nullptr, d_grad16.data());
  EXPECT_EQ(Down(d_probs), probs) << "the probabilities are left as they were";
  cuda::SoftmaxCrossEntropyBackwardInPlace(d_probs.data(), d_targets.data(), rows, V, stride, 0.5f,
                                           nullptr);
  const std::vector<float> grad = Down(d_probs);
  const std::vector<uint16_t> grad16 = Down(d_grad16);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t v = 0; v < V; ++v) {
      ASSERT_EQ(grad16[n * stride + v], cuda::RoundToBf16(grad[n * stride + v])) << n << "," << v;
    }
  }
}

// The optimizer's kernels against train/'s: the squared-norm partials summed
// in order give GlobalNorm, clipping scales alike, and AdamW moves params and
// moments alike (decay only where the mask says).
TEST(CudaOptimizer, NormClipAndAdamWMatchTrain) {
  REQUIRE_DEVICE();
  const int64_t n = 3 * cuda::kNormBlock + 12345;
  std::vector<float> grads = RandomFloats(n, 1, 0.5f), params = RandomFloats(n, 2);
  std::vector<float> m = RandomFloats(n, 3, 0.01f), v = RandomFloats(n, 4, 0.01f);
  for (float& x : v) x = x * x;  // second moments are non-negative
  std::vector<uint8_t> decay(n);
  for (int64_t i = 0; i < n; ++i) decay[i] = static_cast<uint8_t>(i % 3 != 0);
  auto d_g = Up(grads), d_p = Up(params), d_m = Up(m), d_v = Up(v);
  auto d_decay = Up(decay);
  cuda::DeviceBuffer<double> d_partial((n + cuda::kNormBlock - 1) / cuda::kNormBlock, "t");

  const train::OptimConfig c{.weight_decay = 0.1, .grad_clip = 1.0};
  const double norm = train::GlobalNorm(grads);
  const float scale = train::ClipByGlobalNorm(grads, norm, c.grad_clip);
  const int64_t step = 3;
  const double lr = 3e-4;
  train::AdamWKernel(c, params.data(), grads.data(), m.data(), v.data(), decay.data(), n, step, lr);

  cuda::SquaredNormPartials(d_partial.data(), d_g.data(), n, nullptr);
  double sum = 0;
  for (double x : Down(d_partial)) sum += x;  // in order, as GlobalNorm adds its blocks
  EXPECT_NEAR(std::sqrt(sum), norm, 1e-12 * norm);
  ASSERT_LT(scale, 1.0f) << "the test means to exercise clipping";
  cuda::ScaleInPlace(d_g.data(), scale, n, nullptr);
  ExpectNear(Down(d_g), grads, 1e-6f, "clipped gradients");
  const cuda::AdamWArgs a{
      .lr = static_cast<float>(lr),
      .beta1 = static_cast<float>(c.beta1),
      .beta2 = static_cast<float>(c.beta2),
      .eps = static_cast<float>(c.eps),
      .weight_decay = static_cast<float>(c.weight_decay),
      .correction1 = static_cast<float>(1.0 - std::pow(c.beta1, static_cast<double>(step))),
      .correction2 = static_cast<float>(1.0 - std::pow(c.beta2, static_cast<double>(step)))};
  cuda::AdamW(d_p.data(), d_g.data(), d_m.data(), d_v.data(), d_decay.data(), n, a, nullptr);
  ExpectNear(Down(d_p), params, 1e-6f, "parameters");
  ExpectNear(Down(d_m), m, 1e-6f, "first moments");
  ExpectNear(Down(d_v), v, 1e-6f, "second moments");
}

// The whole model, forward and backward, against the CPU model from the
// same parameters: the loss to 1e-5 and every gradient to 1e-4 relative.
// Vocabulary 297 runs the LM head's matmuls in two parts (256 aligned rows,
// then 41) and pads the logits rows to 384 floats. Attention's causal
// blocks: 1 (the full products), 4 (the default) and 7 (uneven blocks of
// 5-6 rows at T = 40, of 1-2 at T = 13).
TEST(CudaModel, LossAndGradientsMatchTheCpuModel) {
  REQUIRE_DEVICE();
  const int64_t B = 3, T = 40;
  for (const auto& [vocab, blocks] :
       {std::pair<int64_t, int64_t>{97, 1}, {97, 4}, {97, 7}, {297, 4}}) {
    SCOPED_TRACE(::testing::Message() << "V = " << vocab << ", attention blocks = " << blocks);
    workload::TransformerShape shape = Tiny();
    shape.vocab = vocab;
    auto cpu_model = CreateModel(shape, {.backend = "cpu", .max_batch = B, .max_seq = T});
    auto cuda_model = CreateModel(
        shape, {.backend = "cuda", .max_batch = B, .max_seq = T, .attention_blocks = blocks});
    InitParams(cpu_model->params_layout(), cpu_model->params(), 7);
    std::ranges::copy(cpu_model->params(), cuda_model->params().begin());
    const auto tokens = RandomTokens(B * T, vocab, 8);
    const auto targets = RandomTokens(B * T, vocab, 9);
    for (const int64_t t : {T, int64_t{13}}) {  // the full allocation, then a shorter sequence
      const std::span<const int32_t> tok(tokens.data(), B * t), tgt(targets.data(), B * t);
      cpu_model->ZeroGrad();
      cuda_model->ZeroGrad();
      const float cpu_loss = cpu_model->Forward(tok, tgt, B, t);
      const float cuda_loss = cuda_model->Forward(tok, tgt, B, t);
      EXPECT_NEAR(cuda_loss, cpu_loss, 1e-5f * cpu_loss) << "T = " << t << ", V = " << vocab;
      std::vector<int> cpu_groups, cuda_groups;
      cpu_model->Backward(0.5f, [&](int g) { cpu_groups.push_back(g); });
      cuda_model->Backward(0.5f, [&](int g) { cuda_groups.push_back(g); });
      EXPECT_EQ(cuda_groups, cpu_groups);
      const std::vector<float> cg(cpu_model->grads().begin(), cpu_model->grads().end());
      const std::vector<float> gg(cuda_model->grads().begin(), cuda_model->grads().end());
      float scale = 0;
      for (float g : cg) scale = std::max(scale, std::fabs(g));
      for (size_t i = 0; i < cg.size(); ++i) {
        ASSERT_LE(std::fabs(gg[i] - cg[i]), 1e-4f * scale)
            << "gradient " << i << " at T = " << t << ", V = " << vocab;
      }
    }
    // Without targets: the logits of one position, read through the padded rows.
    cpu_model->Forward(tokens, {}, B, T);
    cuda_model->Forward(tokens, {}, B, T);
    const std::vector<float> cl(cpu_model->Logits(2, 7).begin(), cpu_model->Logits(2, 7).end());
    const std::vector<float> gl(cuda_model->Logits(2, 7).begin(), cuda_model->Logits(2, 7).end());
    ExpectNear(gl, cl, 1e-4f, "logits");
  }
}

// Plain SGD through the host spans for a few steps: the CUDA model must see
// every parameter update train/ makes and keep tracking the CPU's losses.
TEST(CudaModel, TrainingStepsTrackTheCpuModel) {
  REQUIRE_DEVICE();
  const int64_t B = 2, T = 40;
  auto cpu_model = CreateModel(Tiny(), {.backend = "cpu", .max_batch = B, .max_seq = T});
  auto cuda_model = CreateModel(Tiny(), {.backend = "cuda", .max_batch = B, .max_seq = T});
  InitParams(cpu_model->params_layout(), cpu_model->params(), 3);
  std::ranges::copy(cpu_model->params(), cuda_model->params().begin());
  for (int step = 0; step < 8; ++step) {
    const auto tokens = RandomTokens(B * T, 8, 100 + step);  // a small, learnable alphabet
    std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());
    targets.push_back(tokens.front());
    float losses[2];
    int i = 0;
    for (Model* m : {cpu_model.get(), cuda_model.get()}) {
      m->ZeroGrad();
      losses[i++] = m->Forward(tokens, targets, B, T);
      m->Backward(1.0f);
      std::span<float> p = m->params();
      std::span<const float> g = std::as_const(*m).grads();
      for (size_t k = 0; k < p.size(); ++k) p[k] -= 0.05f * g[k];
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-4f * losses[0]) << "step " << step;
  }
}

// bf16 matmuls store each linear layer's operands with 8 significant bits
// (u = 2^-8, about 3.9e-3) and accumulate in fp32, so the model tracks the
// CPU's fp32 to a few u, not to float rounding: the loss to 5e-3 relative
// and every gradient to 3e-2 of the largest (docs/gpu.md). Wrong operands,
// transposes or a stale bf16 copy would miss by the size of the values.
TEST(CudaModel, Bf16MatmulsTrackTheCpuModelWithinBf16Rounding) {
  REQUIRE_DEVICE();
  const int64_t B = 3, T = 40;
  for (const int64_t vocab : {int64_t{97}, int64_t{297}}) {
    SCOPED_TRACE(::testing::Message() << "V = " << vocab);
    workload::TransformerShape shape = Tiny();
    shape.vocab = vocab;
    auto cpu_model = CreateModel(shape, {.backend = "cpu", .max_batch = B, .max_seq = T});
    auto bf16_model = CreateModel(
        shape, {.backend = "cuda", .matmul = Matmul::kBf16, .max_batch = B, .max_seq = T});
    InitParams(cpu_model->params_layout(), cpu_model->params(), 7);
    std::ranges::copy(cpu_model->params(), bf16_model->params().begin());
    const auto tokens = RandomTokens(B * T, vocab, 8);
    const auto targets = RandomTokens(B * T, vocab, 9);
    cpu_model->ZeroGrad();
    bf16_model->ZeroGrad();
    const float cpu_loss = cpu_model->Forward(tokens, targets, B, T);
    const float bf16_loss = bf16_model->Forward(tokens, targets, B, T);
    cpu_model->Backward(1.0f);
    bf16_model->Backward(1.0f);
    const std::span<const float> cg = std::as_const(*cpu_model).grads();
    const std::span<const float> gg = std::as_const(*bf16_model).grads();
    float scale = 0, worst = 0;
    for (size_t i = 0; i < cg.size(); ++i) {
      scale = std::max(scale, std::fabs(cg[i]));
      worst = std::max(worst, std::fabs(gg[i] - cg[i]));
    }
    std::cout << fmt::format(
        "V = {}: bf16 loss off by {:.2e} relative, gradients by {:.2e} of "
        "the largest\n",
        vocab, std::fabs(bf16_loss - cpu_loss) / cpu_loss, worst / scale);
    EXPECT_NEAR(bf16_loss, cpu_loss, 5e-3f * cpu_loss);
    EXPECT_LE(worst, 3e-2f * scale);
  }
}

train::TokenFile LearnableTokens(const std::string& name) {
  Rng rng(5);
  std::vector<int32_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = i == 0 || rng.Below(8) == 0 ? static_cast<int32_t>(rng.Below(97))
                                            : (tokens[i - 1] + 1) % 97;
  }
  const std::string path = ::testing::TempDir() + "/" + name;
  train::WriteTokenFile(path, tokens, 97);
  return train::TokenFile::Load(path);
}

train::TrainConfig TinyRun(const std::string& backend) {
  train::TrainConfig c;
  c.shape = Tiny();
  c.backend = backend;
  c.micro_batch = 2, c.grad_accum = 2, c.steps = 10, c.seed = 21;
  c.optim.lr = 3e-3, c.optim.warmup_steps = 2;
  return c;
}

// The check: the first steps' loss curve on the GPU (AdamW on the
// device) follows the CPU trainer's within float tolerance.
TEST(CudaTrainer, LossCurveFollowsTheCpuTrainer) {
  REQUIRE_DEVICE();
  const train::TokenFile data = LearnableTokens("cuda_curve.bin");
  train::Trainer cpu(TinyRun("cpu"), data), gpu(TinyRun("cuda"), data);
  EXPECT_FALSE(cpu.optimizer_on_device());
  EXPECT_TRUE(gpu.optimizer_on_device());
  for (int i = 0; i < 10; ++i) {
    const train::StepStats a = cpu.Step(), b = gpu.Step();
    EXPECT_NEAR(b.loss, a.loss, 1e-3 * a.loss) << "step " << i + 1;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-3 * a.grad_norm) << "step " << i + 1;
  }
}

// The same run with bf16 matmuls: ten AdamW steps stay within bf16's
// rounding of the CPU's curve (loss 2e-2, gradient norm 5e-2 relative),
// and the loss falls as the CPU's does.
TEST(CudaTrainer, Bf16LossCurveFollowsTheCpuTrainer) {
  REQUIRE_DEVICE();
  const train::TokenFile data = LearnableTokens("cuda_bf16_curve.bin");
  train::TrainConfig bf16_run = TinyRun("cuda");
  bf16_run.matmul = Matmul::kBf16;
  train::Trainer cpu(TinyRun("cpu"), data), gpu(bf16_run, data);
  double worst_loss = 0, worst_norm = 0, first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    const train::StepStats a = cpu.Step(), b = gpu.Step();
    worst_loss = std::max(worst_loss, std::fabs(b.loss - a.loss) / a.loss);
    worst_norm = std::max(worst_norm, std::fabs(b.grad_norm - a.grad_norm) / a.grad_norm);
    EXPECT_NEAR(b.loss, a.loss, 2e-2 * a.loss) << "step " << i + 1;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 5e-2 * a.grad_norm) << "step " << i + 1;
    (i == 0 ? first : last) = b.loss;
  }
  std::cout << fmt::format("bf16 curve: loss off by at most {:.2e}, gradient norm by {:.2e}\n",
                           worst_loss, worst_norm);
  EXPECT_LT(last, first);
}

// The host copies the checkpoint engine reads and restores through: a second
// GPU trainer given the first one's state after 4 steps takes the same next
// steps, bit for bit (same device, kernels without atomics).
TEST(CudaTrainer, HostStateRoundTripsThroughTheDeviceOptimizer) {
  REQUIRE_DEVICE();
  const train::TokenFile data = LearnableTokens("cuda_state.bin");
  train::Trainer a(TinyRun("cuda"), data), b(TinyRun("cuda"), data);
  for (int i = 0; i < 4; ++i) a.Step();
  a.SyncHostState();
  std::ranges::copy(a.model().params(), b.model().params().begin());
  std::ranges::copy(a.MomentRuns()[0].m, b.MomentRuns()[0].m.begin());
  std::ranges::copy(a.MomentRuns()[0].v, b.MomentRuns()[0].v.begin());
  b.set_counters(a.counters());
  b.HostStateChanged();
  EXPECT_EQ(b.ParamHash(), a.ParamHash());
  for (int i = 0; i < 3; ++i) {
    const train::StepStats sa = a.Step(), sb = b.Step();
    EXPECT_EQ(sb.loss, sa.loss) << "step " << sa.step;
  }
  EXPECT_EQ(b.ParamHash(), a.ParamHash());
}

// A checkpoint taken straight from device memory (into the engine's pinned
// staging pool, no host copy of the state) restores into a second GPU
// trainer, which then takes the same steps bit for bit.
TEST(CudaTrainer, CheckpointFromDeviceMemoryRestoresBitForBit) {
  REQUIRE_DEVICE();
  const train::TokenFile data = LearnableTokens("cuda_ckpt.bin");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "cuda_test_ckpt";
  std::filesystem::remove_all(dir);
  train::Trainer a(TinyRun("cuda"), data), b(TinyRun("cuda"), data);
  for (int i = 0; i < 4; ++i) a.Step();
  {
    std::vector<std::unique_ptr<ckpt::Tier>> tiers;
    tiers.push_back(ckpt::MakePosixTier("local", dir.string()));
    ckpt::Engine engine(std::move(tiers), {});
    const ckpt::Snapshot snap = train::CheckpointSnapshot(a);
    ASSERT_NE(snap.device, nullptr);
    EXPECT_TRUE(std::ranges::all_of(snap.slices, [](const auto& s) { return s.on_device; }));
    engine.Save(snap);
    engine.Wait();
    const std::optional<ckpt::RestoreResult> r = engine.Restore(train::CheckpointTargets(b));
    ASSERT_TRUE(r.has_value());
    train::FinishRestore(b, *r);
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(b.ParamHash(), a.ParamHash());
  for (int i = 0; i < 3; ++i) {
    const train::StepStats sa = a.Step(), sb = b.Step();
    EXPECT_EQ(sb.loss, sa.loss) << "step " << sa.step;
  }
  EXPECT_EQ(b.ParamHash(), a.ParamHash());
}

// The trainer's MFU denominator on a GPU is cuBLAS on that GPU, not the
// host's OpenBLAS: a TF32 model measures more than an fp32 one on the same
// shapes (tensor cores), and both name the device they ran on.
TEST(CudaModel, MatmulThroughputIsTheDevicesInItsMathMode) {
  REQUIRE_DEVICE();
  const std::vector<GemmShape> shapes = TrainingGemms(4096, 1024, 4096, 8192);
  const auto fp32 = CreateModel(Tiny(), {.backend = "cuda"});
  const auto tf32 = CreateModel(Tiny(), {.backend = "cuda", .matmul = Matmul::kTf32});
  const auto bf16 = CreateModel(Tiny(), {.backend = "cuda", .matmul = Matmul::kBf16});
  const double fp32_gflops = fp32->MatmulGflops(shapes), tf32_gflops = tf32->MatmulGflops(shapes);
  const double bf16_gflops = bf16->MatmulGflops(shapes);
  std::cout << fmt::format("GFLOP/s on these shapes: fp32 {:.0f}, tf32 {:.0f}, bf16 {:.0f}\n",
                           fp32_gflops, tf32_gflops, bf16_gflops);
  EXPECT_GT(fp32_gflops, 0);
  EXPECT_GT(tf32_gflops, fp32_gflops);
  EXPECT_GT(bf16_gflops, fp32_gflops);
  const std::string name = cuda::ProbeDevices().devices.front().name;
  EXPECT_EQ(fp32->Hardware(), "cuda:0 " + name + ", fp32 matmuls");
  EXPECT_EQ(tf32->Hardware(), "cuda:0 " + name + ", TF32 matmuls");
  EXPECT_EQ(bf16->Hardware(), "cuda:0 " + name + ", bf16 linear layers, TF32 attention");
}

TEST(CudaModel, AModelLargerThanTheDeviceIsAClearError) {
  REQUIRE_DEVICE();
  workload::TransformerShape huge = Tiny();
  huge.seq_len = 4096;
  try {
    CreateModel(huge, {.backend = "cuda", .max_batch = 1 << 16});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("needs"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
    EXPECT_NE(m.find("train.micro_batch"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fmstack::gpt
