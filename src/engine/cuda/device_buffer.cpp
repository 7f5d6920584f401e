#include "engine/cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include <string>

namespace plumb::cuda {
namespace {

std::string gib(size_t bytes) {
  return std::to_string(double(bytes) / double(1ull << 30)).substr(0, 6) + " GiB";
}

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes, const char* what) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMalloc(&b.p_, bytes);
  if (e != cudaSuccess) {
    b.p_ = nullptr;
    cudaGetLastError();  // clear the error so that later calls do not report it again
    return resource_exhausted(std::string("cannot allocate ") + gib(bytes) + " of device memory for " + what +
                              ": " + cudaGetErrorString(e));
  }
  b.bytes_ = bytes;
  return b;
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFreeHost(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Result<PinnedBuffer> PinnedBuffer::allocate(size_t bytes, const char* what) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  const cudaError_t e = cudaMallocHost(&b.p_, bytes);
  if (e != cudaSuccess) {
    b.p_ = nullptr;
    cudaGetLastError();
    return resource_exhausted(std::string("cannot allocate ") + gib(bytes) + " of pinned host memory for " +
                              what + ": " + cudaGetErrorString(e));
  }
  b.bytes_ = bytes;
  return b;
}

}  // namespace plumb::cuda
