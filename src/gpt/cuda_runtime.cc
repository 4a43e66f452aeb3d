#include "gpt/cuda_runtime.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
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
  throw Error(fmt::format("cuBLAS: {}: {} ({})", what, Cublas().status_string(status),
                          Cublas().status_name(status)));
}

namespace {

template <typename Fn>
void Bind(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(::dlsym(library, name));
  if (fn == nullptr) {
    throw Error(fmt::format("cuBLAS: libcublas.so.{} has no {} (another cuBLAS version?)",
                            CUBLAS_VER_MAJOR, name));
  }
}

CublasApi LoadCublas() {
  const std::string name = fmt::format("libcublas.so.{}", CUBLAS_VER_MAJOR);
  // The toolkit this build used first (the binary's RPATH does not reach
  // dlopen from a static library's code), then the loader's search path.
  void* library =
      ::dlopen((std::string(FMSTACK_CUDA_LIB_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    throw Error(fmt::format("cuBLAS: cannot load {} (looked in {} and LD_LIBRARY_PATH): {}", name,
                            FMSTACK_CUDA_LIB_DIR, ::dlerror()));
  }
  CublasApi api;
  Bind(library, "cublasCreate_v2", api.create);
  Bind(library, "cublasDestroy_v2", api.destroy);
  Bind(library, "cublasSetStream_v2", api.set_stream);
  Bind(library, "cublasSetMathMode", api.set_math_mode);
  Bind(library, "cublasGetVersion_v2", api.get_version);
  Bind(library, "cublasGetStatusName", api.status_name);
  Bind(library, "cublasGetStatusString", api.status_string);
  Bind(library, "cublasSgemm_v2", api.sgemm);
  Bind(library, "cublasSgemmStridedBatched", api.sgemm_strided_batched);
  Bind(library, "cublasSgemmBatched", api.sgemm_batched);
  Bind(library, "cublasGemmEx", api.gemm_ex);
  return api;  // the library stays loaded for the life of the process
}

}  // namespace

const CublasApi& Cublas() {
  static const CublasApi api = LoadCublas();  // NOLINT: loaded once, never changes
  return api;
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

Blas::Blas(cudaStream_t stream, Matmul matmul) : matmul_(matmul) {
  Check(Cublas().create(&handle_), "creating the cuBLAS handle");
  Check(Cublas().set_stream(handle_, stream), "binding cuBLAS to the model's stream");
  Check(Cublas().set_math_mode(
            handle_, matmul == Matmul::kFp32 ? CUBLAS_DEFAULT_MATH : CUBLAS_TF32_TENSOR_OP_MATH),
        "setting cuBLAS's math mode");
}

Blas::~Blas() {
  if (handle_ != nullptr) Cublas().destroy(handle_);
}

void Blas::Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
                std::string_view what) const {
  Check(Cublas().sgemm(handle_, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc), what);
}

void Blas::GemmBf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                    const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta, float* c,
                    int ldc, std::string_view what) const {
  Check(Cublas().gemm_ex(handle_, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb,
                         &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        what);
}

void Blas::GemmBatched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       const float* const* a, int lda, const float* const* b, int ldb, float beta,
                       float* const* c, int ldc, int count, std::string_view what) const {
  Check(Cublas().sgemm_batched(handle_, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc,
                               count),
        what);
}

namespace {

struct GemmWork {
  size_t biggest = 0;  // elements of the largest operand
  double flops = 0;
};

GemmWork WorkOf(const std::vector<GemmShape>& shapes) {
  GemmWork w;
  for (const GemmShape& g : shapes) {
    w.biggest = std::max<size_t>({w.biggest, static_cast<size_t>(g.m * g.k),
                                  static_cast<size_t>(g.k * g.n), static_cast<size_t>(g.m * g.n)});
    w.flops += 2.0 * static_cast<double>(g.m * g.n * g.k);
  }
  return w;
}

bool Fits(size_t bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  Check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free device memory");
  return bytes <= free_bytes;
}

// A benchmark operand of n values, every byte 0x3c (0.0115 as floats and
// as bf16): all-zero operands run faster than real data on tensor cores.
template <typename T>
DeviceBuffer<T> Operand(size_t n, const Stream& stream) {
  DeviceBuffer<T> d(n, "a matmul benchmark operand");
  Check(cudaMemsetAsync(d.data(), 0x3c, d.bytes(), stream.get()), "filling matmul operands");
  return d;
}

// Best of three timed rounds after a warm-up; `enqueue(m, n, k)` queues one
// row-major (m x k) @ (k x n) product, as sgemm_peak.cc times them.
template <typename Enqueue>
double BestGflops(const Stream& stream, const std::vector<GemmShape>& shapes, double flops,
                  const Enqueue& enqueue) {
  double best = 0;
  for (int round = 0; round < 4; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (const GemmShape& g : shapes) {
      enqueue(static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k));
    }
    stream.Synchronize("the matmul benchmark");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round > 0) best = std::max(best, flops / seconds / 1e9);
  }
  return best;
}

}  // namespace

double SgemmGflops(const Blas& blas, const Stream& stream, const std::vector<GemmShape>& shapes) {
  const GemmWork w = WorkOf(shapes);
  if (w.biggest == 0 || !Fits(3 * w.biggest * sizeof(float))) return 0;
  const DeviceBuffer<float> a = Operand<float>(w.biggest, stream);
  const DeviceBuffer<float> b = Operand<float>(w.biggest, stream);
  DeviceBuffer<float> c(w.biggest, "matmul benchmark result");
  return BestGflops(stream, shapes, w.flops, [&](int m, int n, int k) {
    blas.Gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, 1.0f, b.data(), n, a.data(), k, 0.0f, c.data(), n,
              "a benchmark matmul");
  });
}

double Bf16GemmGflops(const Blas& blas, const Stream& stream,
                      const std::vector<GemmShape>& shapes) {
  const GemmWork w = WorkOf(shapes);
  if (w.biggest == 0 || !Fits(w.biggest * (2 + 2 + sizeof(float)))) return 0;
  const DeviceBuffer<uint16_t> a = Operand<uint16_t>(w.biggest, stream);
  const DeviceBuffer<uint16_t> b = Operand<uint16_t>(w.biggest, stream);
  DeviceBuffer<float> c(w.biggest, "bf16 matmul benchmark result");
  return BestGflops(stream, shapes, w.flops, [&](int m, int n, int k) {
    blas.GemmBf16(CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, 1.0f, b.data(), n, a.data(), k, 0.0f, c.data(),
                  n, "a bf16 benchmark matmul");
  });
}

}  // namespace fmstack::gpt::cuda
