#include "gpt/cuda_runtime.h"

#include <fmt/format.h>

#include <cstdlib>

#include "gpt/cuda_kernels.h"
#include "util/error.h"

namespace fmstack::gpt::cuda {

void Check(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  throw Error(
      fmt::format("CUDA: {}: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status)));
}

void Check(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(fmt::format("cuBLAS: {}: {} ({})", what, cublasGetStatusString(status),
                          cublasGetStatusName(status)));
}

void CheckLaunch(const char* what) {
  Check(cudaGetLastError(), fmt::format("launching {}", what));
}

DeviceProbe ProbeDevices() {
  DeviceProbe probe;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string hidden =
      visible != nullptr ? fmt::format("; CUDA_VISIBLE_DEVICES=\"{}\"", visible) : "";
  if (status != cudaSuccess) {
    // Reset the sticky error so that later calls report their own.
    cudaGetLastError();
    probe.why_none = fmt::format(
        "no CUDA device: cudaGetDeviceCount answered \"{}\" ({}){} — looked for the NVIDIA "
        "driver (libcuda.so.1) and a device it exposes",
        cudaGetErrorString(status), cudaGetErrorName(status), hidden);
    return probe;
  }
  if (count == 0) {
    probe.why_none = fmt::format("no CUDA device: the driver answered with 0 devices{}", hidden);
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = prop.name;
    d.sm_major = prop.major;
    d.sm_minor = prop.minor;
    d.multiprocessors = prop.multiProcessorCount;
    d.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    size_t free_bytes = 0, total = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
      d.free_bytes = static_cast<int64_t>(free_bytes);
    }
    probe.devices.push_back(std::move(d));
  }
  if (probe.devices.empty()) {
    probe.why_none =
        fmt::format("no CUDA device: {} reported, none answered its properties{}", count, hidden);
  }
  return probe;
}

DeviceInfo UseDevice(int index, std::string_view who) {
  DeviceProbe probe = ProbeDevices();
  if (probe.devices.empty()) throw Error(fmt::format("{}: {}", who, probe.why_none));
  for (const DeviceInfo& d : probe.devices) {
    if (d.index != index) continue;
    Check(cudaSetDevice(index), fmt::format("selecting device {}", index));
    return d;
  }
  throw Error(
      fmt::format("{}: device {} does not exist ({} visible)", who, index, probe.devices.size()));
}

Stream::Stream(std::string_view what) {
  Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what);
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void Stream::Synchronize(std::string_view what) const {
  Check(cudaStreamSynchronize(stream_), what);
}

Blas::Blas(cudaStream_t stream, bool tf32) {
  Check(cublasCreate(&handle_), "creating the cuBLAS handle");
  Check(cublasSetStream(handle_, stream), "binding cuBLAS to the model's stream");
  Check(cublasSetMathMode(handle_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        "setting cuBLAS's math mode");
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

}  // namespace fmstack::gpt::cuda
