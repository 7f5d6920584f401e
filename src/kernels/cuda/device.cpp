#include "kernels/cuda/device.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/cuda/checks.h"

namespace plumb::kernels::cuda {
namespace {

using LoadData = CUresult (*)(CUmodule*, const void*);
using GetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, CUstream, void**, void**);
using Unload = CUresult (*)(CUmodule);

template <typename Fn>
Status entry(const char* name, Fn* out) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || p == nullptr)
    return unavailable(
        fmt::format("the CUDA driver has no {} (driver too old?): {}", name, cudaGetErrorString(e)));
  *out = reinterpret_cast<Fn>(p);
  return Status::Ok();
}

Status cu_ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  return internal_error(fmt::format("{} failed: CUresult {}", what, int(r)));
}

}  // namespace

Status cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return internal_error(fmt::format("{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

LoadedCandidate::~LoadedCandidate() {
  Unload unload = nullptr;
  if (module_ != nullptr && entry("cuModuleUnload", &unload).ok()) unload(module_);
}

Status LoadedCandidate::load(const std::string& cubin, const LaunchConfig& launch) {
  LoadData load_data = nullptr;
  GetFunction get_function = nullptr;
  if (Status st = entry("cuModuleLoadData", &load_data); !st.ok()) return st;
  if (Status st = entry("cuModuleGetFunction", &get_function); !st.ok()) return st;
  if (Status st = cuda_ok(cudaFree(nullptr), "creating the CUDA context"); !st.ok()) return st;
  if (Status st = cu_ok(load_data(&module_, cubin.data()), "cuModuleLoadData (a cubin for another GPU?)");
      !st.ok())
    return st;
  cfg_ = launch;
  return cu_ok(get_function(&fn_, module_, std::string(kEntrySymbol).c_str()),
               "cuModuleGetFunction(plumb_candidate)");
}

Status LoadedCandidate::launch(void* args, int64_t grid, cudaStream_t stream) const {
  LaunchKernel launch_kernel = nullptr;
  if (Status st = entry("cuLaunchKernel", &launch_kernel); !st.ok()) return st;
  void* params[] = {args};
  return cu_ok(
      launch_kernel(fn_, unsigned(grid), 1, 1, unsigned(cfg_.block_threads), 1, 1,
                    unsigned(cfg_.dynamic_smem_bytes), reinterpret_cast<CUstream>(stream), params, nullptr),
      "cuLaunchKernel(plumb_candidate)");
}

GuardedBuffer::~GuardedBuffer() {
  if (base_ != nullptr) cudaFree(base_);
}

Status GuardedBuffer::alloc(size_t bytes) {
  bytes_ = bytes;
  const size_t total = bytes + 2 * kGuardBytes;
  if (Status st = cuda_ok(cudaMalloc(&base_, total), "cudaMalloc"); !st.ok()) return st;
  std::vector<uint32_t> words(total / 4 + 1, kGuardWord);
  return cuda_ok(cudaMemcpy(base_, words.data(), total, cudaMemcpyHostToDevice), "filling guard regions");
}

Status GuardedBuffer::upload(const void* src, size_t bytes) {
  return cuda_ok(cudaMemcpy(data(), src, std::min(bytes, bytes_), cudaMemcpyHostToDevice), "upload");
}

Status GuardedBuffer::download(void* dst, size_t bytes) const {
  return cuda_ok(cudaMemcpy(dst, data(), std::min(bytes, bytes_), cudaMemcpyDeviceToHost), "download");
}

Status GuardedBuffer::poison() { return cuda_ok(cudaMemset(data(), 0xff, bytes_), "poisoning the output"); }

Result<std::string> GuardedBuffer::guard_damage() const {
  std::vector<uint8_t> g(kGuardBytes);
  const char* base = static_cast<const char*>(base_);
  for (int side = 0; side < 2; ++side) {
    const size_t from = side == 0 ? 0 : kGuardBytes + bytes_;  // the second starts mid-word for odd sizes
    if (Status st =
            cuda_ok(cudaMemcpy(g.data(), base + from, kGuardBytes, cudaMemcpyDeviceToHost), "reading guards");
        !st.ok())
      return st;
    const int64_t off = kernels::cuda::guard_damage(g, from % 4);
    if (off >= 0)
      return side == 0 ? fmt::format("{} bytes before the buffer", int64_t(kGuardBytes) - off)
                       : fmt::format("{} bytes past its end", off);
  }
  return std::string();
}

L2Flush::~L2Flush() {
  if (buf_ != nullptr) cudaFree(buf_);
}

Status L2Flush::init() {
  int dev = 0, l2 = 0;
  if (Status st = cuda_ok(cudaGetDevice(&dev), "cudaGetDevice"); !st.ok()) return st;
  if (Status st = cuda_ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "L2 size"); !st.ok())
    return st;
  bytes_ = std::max<size_t>(size_t(l2) * 2, 8u << 20);
  return cuda_ok(cudaMalloc(&buf_, bytes_), "cudaMalloc(L2 flush buffer)");
}

Status L2Flush::flush(cudaStream_t stream) const {
  if (Status st = cuda_ok(cudaCtxResetPersistingL2Cache(), "cudaCtxResetPersistingL2Cache"); !st.ok())
    return st;
  return cuda_ok(cudaMemsetAsync(buf_, 0x5a, bytes_, stream), "flushing L2");
}

Result<double> copy_bandwidth(cudaStream_t stream) {
  const size_t n = size_t(256) << 20;
  void *a = nullptr, *b = nullptr;
  if (Status st = cuda_ok(cudaMalloc(&a, n), "cudaMalloc"); !st.ok()) return st;
  if (Status st = cuda_ok(cudaMalloc(&b, n), "cudaMalloc"); !st.ok()) {
    cudaFree(a);
    return st;
  }
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best_ms = 0;
  Status st;
  for (int i = 0; i < 6 && st.ok(); ++i) {
    cudaEventRecord(e0, stream);
    cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, stream);
    cudaEventRecord(e1, stream);
    st = cuda_ok(cudaEventSynchronize(e1), "timing a device copy");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;  // the first copy warms up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  if (!st.ok()) return st;
  if (best_ms <= 0) return internal_error("a 256 MiB device copy took no time: the events are broken");
  return 2.0 * double(n) / (double(best_ms) * 1e-3);
}

}  // namespace plumb::kernels::cuda
