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

#include "gpt/model.h"
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
  // Named by type: C++ callers see an inline overload beside the library's.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
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

// A cuBLAS handle on one stream. Gemm multiplies fp32 operands: sgemm, on
// TF32 tensor cores in the tf32 and bf16 modes. GemmBf16 multiplies bf16
// operands (16-bit words, as CastToBf16 writes them) into an fp32 result,
// accumulating in fp32. cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF, which would
// round fp32 operands to bf16 inside the multiply, ran TF32 kernels on an
// H200 (cuBLAS 13.1) at TF32's speed: bf16's throughput needs the operands
// stored as bf16. Arguments are sgemm's, column-major; `what` names the
// call in errors.
class Blas {
 public:
  Blas(cudaStream_t stream, Matmul matmul);
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas();
  cublasHandle_t get() const { return handle_; }
  Matmul matmul() const { return matmul_; }

  void Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
            const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
            std::string_view what) const;
  void GemmBf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta, float* c,
                int ldc, std::string_view what) const;
  // `count` fp32 products whose operands' addresses are in device arrays.
  void GemmBatched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                   const float* const* a, int lda, const float* const* b, int ldb, float beta,
                   float* const* c, int ldc, int count, std::string_view what) const;

 private:
  cublasHandle_t handle_ = nullptr;
  Matmul matmul_;
};

// cuBLAS GFLOP/s over `shapes` through blas.Gemm (fp32 operands, in the
// handle's math mode) on `stream`, FLOP-weighted, best of three rounds after a warm-up: the
// GPU's twin of MeasureSgemmGflops. 0 when the device has no room for the
// operands.
double SgemmGflops(const Blas& blas, const Stream& stream, const std::vector<GemmShape>& shapes);

// The same through GemmBf16: the bf16 mode's linear layers.
double Bf16GemmGflops(const Blas& blas, const Stream& stream, const std::vector<GemmShape>& shapes);

}  // namespace fmstack::gpt::cuda
