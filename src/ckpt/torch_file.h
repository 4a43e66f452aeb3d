// ckpt: writing tensors in PyTorch's own file format, so that
// `torch.load(path)` returns them as a state dict (an OrderedDict of CPU
// tensors) with no fmstack code on the reading side. The format is
// torch.save's: an uncompressed zip holding a pickle (protocol 2) whose
// tensors are persistent references to one raw little-endian record each,
// records aligned to 64 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ckpt/format.h"

namespace fmstack::ckpt {

struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;       // row-major, contiguous
  std::span<const std::byte> data;  // product(shape) elements
};

// Writes `tensors`, in order, to `path` atomically (a crash leaves the old
// file or none). Throws Error naming the file, or the tensor whose bytes do
// not match its shape. Files past 4 GiB (zip64) are refused.
void WriteTorchFile(const std::string& path, const std::vector<NamedTensor>& tensors);

// The pickle of the state dict alone (for tests of the format).
std::string TorchStateDictPickle(const std::vector<NamedTensor>& tensors);

}  // namespace fmstack::ckpt
