// gpt: the CUDA model's linear layers on cuBLAS: out = inp @ weight^T
// (+ bias, + residual) and the input, weight and bias gradients, row-major
// as in cpu_model.cc. In fp32 and TF32 they are sgemm calls on the fp32
// values. In bf16 mode they multiply bf16 copies of their operands: the
// weights' in a twin of the parameter buffer (which the model refreshes),
// the inputs' where the model's Forward left them (Input::bf16), and the
// output gradient's in one shared buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpt/cuda_runtime.h"

namespace fmstack::gpt::cuda {

class LinearLayers {
 public:
  // A linear layer's input: its values and, in bf16 mode, where Forward
  // leaves their bf16 copy for Backward; `copied` when the kernel that
  // produced the values wrote that copy too.
  struct Input {
    const float* values;
    uint16_t* bf16;
    bool copied = false;
  };
  // bf16 mode's buffers, all null in fp32 and TF32: the fp32 parameters and
  // their bf16 twin (same offsets), and where an output gradient is rounded.
  struct Bf16 {
    const float* params = nullptr;
    const uint16_t* params16 = nullptr;
    uint16_t* dout16 = nullptr;
  };
  // `scratch` is the column-sum scratch of the bias gradients
  // (ColumnSumScratch for the widest output).
  LinearLayers(const Blas& blas, cudaStream_t stream, float* scratch, Bf16 bf16)
      : blas_(blas), stream_(stream), scratch_(scratch), bf16_(bf16) {}

  // bf16 mode: the buffer an output gradient is rounded into; else null.
  uint16_t* dout16() const { return bf16_.dout16; }

  // out (N, OC) = inp (N, C) @ weight (OC, C)^T + beta * out, row-major,
  // rows of out `out_stride` floats apart (0 = OC): column-major cuBLAS
  // computes out^T = weight^T' inp^T'. In bf16 mode it first writes the
  // input's bf16 copy unless it is `copied`.
  void Gemm(float* out, Input inp, const float* weight, int64_t N, int64_t C, int64_t OC,
            float beta, int64_t out_stride = 0) const;
  // out = inp @ weight^T + bias, and out = residual + inp @ weight^T + bias.
  void Forward(float* out, Input inp, const float* weight, const float* bias, int64_t N, int64_t C,
               int64_t OC) const;
  void ResidualForward(float* out, const float* residual, Input inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, int64_t OC) const;
  // dinp = dout @ weight (overwritten); dweight += dout^T @ inp; dbias (if
  // any) += dout's column sums. In bf16 mode it reads the input's bf16 copy
  // that Forward wrote, and dout's from `dout16` (dout16(), written by the
  // kernel that produced dout) or, when that is null, rounds dout into
  // dout16() first.
  void Backward(float* dinp, float* dweight, float* dbias, const float* dout,
                const uint16_t* dout16, Input inp, const float* weight, int64_t N, int64_t C,
                int64_t OC, int64_t dout_stride = 0) const;

 private:
  bool bf16() const { return bf16_.params16 != nullptr; }
  // A parameter's twin in the bf16 copy.
  const uint16_t* W16(const float* param) const { return bf16_.params16 + (param - bf16_.params); }

  const Blas& blas_;
  cudaStream_t stream_;
  float* scratch_;
  Bf16 bf16_;
};

}  // namespace fmstack::gpt::cuda
