// gpt: the plain forms of the kernels that cpu_kernels.h computes a faster
// way, kept beside them so that a test holds the two together
// (tests/unit/gpt/fast_kernels_test.cc). Not used for training.
#pragma once

#include "gpt/cpu_kernels.h"

namespace fmstack::gpt::cpu::reference {

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) with std::tanh.
void GeluForward(Floats out, ConstFloats inp);
void GeluBackwardInPlace(Floats dinout, ConstFloats inp);
// row = softmax(row) with std::exp, in double.
void SoftmaxInPlace(Floats row);
// Causal attention as plain loops over the full T x T scores, in double;
// same arguments and results as cpu::AttentionForward/Backward.
void AttentionForward(Floats out, Floats att, ConstFloats qkv, int64_t B, int64_t T, int64_t C,
                      int64_t NH);
void AttentionBackward(Floats dqkv, ConstFloats dout, ConstFloats qkv, ConstFloats att, int64_t B,
                       int64_t T, int64_t C, int64_t NH);

}  // namespace fmstack::gpt::cpu::reference
