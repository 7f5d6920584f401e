// The device side of screening, internal to kernels/cuda/: a candidate loaded from its cubin
// (engine/cuda/candidate.h), buffers between guard regions, and the L2 flush. Every call returns a
// Status naming the CUDA call that failed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/abi.h"

namespace plumb::kernels::cuda {

Status cuda_ok(cudaError_t e, const char* what);

// A candidate's module (engine/cuda/candidate.h), as the CUDA runner loads it.
using plumb::cuda::LoadedCandidate;

// Device memory of `bytes` between two guard regions of kGuardBytes filled with kGuardWord.
class GuardedBuffer {
 public:
  static constexpr size_t kGuardBytes = 64 * 1024;
  GuardedBuffer() = default;
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  Status alloc(size_t bytes);
  void* data() const { return static_cast<char*>(base_) + kGuardBytes; }
  size_t bytes() const { return bytes_; }
  Status upload(const void* src, size_t bytes);
  Status download(void* dst, size_t bytes) const;
  // Fills the data area with 0xff bytes (a float and a bf16 NaN).
  Status poison();
  // The first damaged byte offset of either guard ("before +N" / "after +N"), empty when intact.
  Result<std::string> guard_damage() const;

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// Writes a buffer of twice the L2 size and resets the persisting L2 lines, on `stream`.
class L2Flush {
 public:
  ~L2Flush();
  Status init();
  Status flush(cudaStream_t stream) const;

 private:
  void* buf_ = nullptr;
  size_t bytes_ = 0;
};

// Device-to-device copy bandwidth in bytes/s (best of 5 copies of 256 MiB, read + write counted).
Result<double> copy_bandwidth(cudaStream_t stream);

}  // namespace plumb::kernels::cuda
