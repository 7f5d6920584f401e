// The CUDA runner's GEMM through cuBLASLt, with the algorithm chosen per shape by measurement:
// y[T, n] = x[T, k] · W[n, k]ᵀ + beta · y, bf16 W and x, float32 accumulate and y.
//
// cuBLAS's own choice (cublasGemmEx) takes the heuristic's first algorithm for a shape. tune() asks
// the heuristic for several candidates, times each on this device (CUDA events, scratch output, the
// caller's inputs), and keeps the fastest for that shape; run() uses it, or the heuristic's first
// for a shape never tuned. Tuning synchronizes the stream, so it is never done while a graph is
// being captured (engine/cuda/check.h capturing()): the runner tunes a graph step's shapes before
// it captures them.
//
// Threading: one caller thread, as the runner.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/status.h"

namespace plumb::cuda {

class LtGemm {
 public:
  // `workspace` (device, `workspace_bytes`) is shared with the caller's cuBLAS handle: both run on
  // `stream` only.
  static Result<std::unique_ptr<LtGemm>> create(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  Status run(const uint16_t* w, const uint16_t* x, float* y, int64_t T, int64_t n, int64_t k, float beta);
  // Times up to `candidates` algorithms for the shape on a scratch output and keeps the fastest.
  // A no-op for a shape already tuned.
  Status tune(const uint16_t* w, const uint16_t* x, int64_t T, int64_t n, int64_t k, float beta,
              int candidates = 8);

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, bool>;
  LtGemm() = default;
  Result<Plan*> plan(int64_t T, int64_t n, int64_t k, float beta);
  // Up to `n` of the heuristic's algorithms for the plan's shape, best guess first.
  Result<std::vector<cublasLtMatmulHeuristicResult_t>> heuristics(const Plan& p, int n);
  Result<float> time_algo(Plan& p, const cublasLtMatmulAlgo_t& algo, const uint16_t* w, const uint16_t* x,
                          float* y, float beta);

  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace plumb::cuda
