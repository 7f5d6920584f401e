#include "kernels/cuda/device.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/cuda/checks.h"

namespace plumb::kernels::cuda {

Status cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return internal_error(fmt::format("{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e)));
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
