// gpt: the few CUDA runtime pieces the CUDA backend needs, as RAII types
// whose errors are exceptions naming the call and what it was doing. Built
// only with FMSTACK_HAVE_CUDA; nothing here needs a device until it is used.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpt/sgemm_peak.h"

namespace fmstack::gpt::cuda {

// cuBLAS, opened with dlopen on first use instead of linked: its libraries
// (about 600 MB of libcublasLt) cost every fmstack process 200 MB of memory
// at start-up when linked, GPU or not. Throws Error naming the library and
// why it would not load.
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGetVersion_v2) get_version = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  decltype(&cublasSgemmBatched) sgemm_batched = nullptr;
};
const CublasApi& Cublas();

// Throws Error("CUDA: <what>: <call's error>") unless `status` is success.
void Check(cudaError_t status, std::string_view what);
void Check(cublasStatus_t status, std::string_view what);

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  int64_t total_bytes = 0, free_bytes = 0;
};

// The devices this process can use. When there is none, `why_none` says
// what was looked for and what answered (no driver, no device, hidden by
// CUDA_VISIBLE_DEVICES), and devices is empty. Never throws.
struct DeviceProbe {
  std::vector<DeviceInfo> devices;
  std::string why_none;
};
DeviceProbe ProbeDevices();

// Selects device `index` for this thread; throws with the probe's reason
// when there is no such device. `who` names the setting that asked for it.
DeviceInfo UseDevice(int index, std::string_view who);

// CUDA memory for `count` values of T, freed on destruction: on the device,
// or page-locked on the host (device copies from and to it run at full PCIe
// speed and asynchronously).
enum class Memory { kDevice, kPinnedHost };

template <typename T, Memory kMemory>
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t count, std::string_view what) : count_(count) {
    void* p = nullptr;
    if (count > 0) {
      Check(kMemory == Memory::kDevice ? cudaMalloc(&p, count * sizeof(T))
                                       : cudaMallocHost(&p, count * sizeof(T)),
            what);
    }
    data_ = static_cast<T*>(p);
  }
  Buffer(Buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (data_ == nullptr) return;
    if constexpr (kMemory == Memory::kDevice) {
      cudaFree(data_);
    } else {
      cudaFreeHost(data_);
    }
  }
  T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  // Host memory only: the values as a span.
  std::span<T> span() const requires(kMemory == Memory::kPinnedHost) { return {data_, count_}; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

template <typename T>
using DeviceBuffer = Buffer<T, Memory::kDevice>;
template <typename T>
using PinnedBuffer = Buffer<T, Memory::kPinnedHost>;

class Stream {
 public:
  explicit Stream(std::string_view what);
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  cudaStream_t get() const { return stream_; }
  // Waits for everything queued so far; throws with `what` on a device error.
  void Synchronize(std::string_view what) const;

 private:
  cudaStream_t stream_ = nullptr;
};

class Blas {
 public:
  explicit Blas(cudaStream_t stream, bool tf32);
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas();
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// cuBLAS sgemm GFLOP/s over `shapes` on `blas` (in its math mode, so TF32
// when the handle allows it) and `stream`, FLOP-weighted, best of three
// rounds after a warm-up: the GPU's twin of MeasureSgemmGflops. 0 when the
// device has no room for the operands.
double SgemmGflops(const Blas& blas, const Stream& stream, const std::vector<GemmShape>& shapes);

}  // namespace fmstack::gpt::cuda
