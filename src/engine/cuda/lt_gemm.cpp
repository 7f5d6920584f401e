#include "engine/cuda/lt_gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/device_buffer.h"

namespace plumb::cuda {

// One shape's descriptors and its algorithm. Column-major view of the row-major product:
// yᵀ [n, T] = op(W) · xᵀ with W stored [k, n] column-major (transposed), xᵀ [k, T], yᵀ [n, T].
struct LtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool tuned = false;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Result<std::unique_ptr<LtGemm>> LtGemm::create(cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  std::unique_ptr<LtGemm> g(new LtGemm());
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&g->lt_));
  g->stream_ = stream;
  g->ws_ = workspace;
  g->ws_bytes_ = workspace_bytes;
  return g;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (lt_) cublasLtDestroy(lt_);
}

Result<LtGemm::Plan*> LtGemm::plan(int64_t T, int64_t n, int64_t k, float beta) {
  auto& slot = plans_[Key{T, n, k, beta != 0.0f}];
  if (slot) return slot.get();
  auto p = std::make_unique<Plan>();
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  PLUMB_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  PLUMB_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k));
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, uint64_t(k), uint64_t(T), k));
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, uint64_t(n), uint64_t(T), n));
  PLUMB_ASSIGN_OR_RETURN(auto hs, heuristics(*p, 1));
  if (hs.empty()) return unimplemented("cuBLASLt has no algorithm for this GEMM shape");
  p->algo = hs[0].algo;
  slot = std::move(p);
  return slot.get();
}

Result<std::vector<cublasLtMatmulHeuristicResult_t>> LtGemm::heuristics(const Plan& p, int n) {
  cublasLtMatmulPreference_t pref = nullptr;
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ws_bytes_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  std::vector<cublasLtMatmulHeuristicResult_t> hs(size_t(std::max(1, n)));
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.c, p.c, pref, int(hs.size()), hs.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  PLUMB_CUBLAS_RETURN_IF_ERROR(s);
  hs.resize(size_t(found));
  return hs;
}

Status LtGemm::run(const uint16_t* w, const uint16_t* x, float* y, int64_t T, int64_t n, int64_t k,
                   float beta) {
  PLUMB_ASSIGN_OR_RETURN(Plan * p, plan(T, n, k, beta));
  const float alpha = 1.0f;
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt_, p->op, &alpha, w, p->a, x, p->b, &beta, y, p->c, y, p->c,
                                              &p->algo, ws_, ws_bytes_, stream_));
  return Status::Ok();
}

Result<float> LtGemm::time_algo(Plan& p, const cublasLtMatmulAlgo_t& algo, const uint16_t* w,
                                const uint16_t* x, float* y, float beta) {
  constexpr int kReps = 5;
  const float alpha = 1.0f;
  cudaEvent_t start = nullptr, stop = nullptr;
  PLUMB_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  float best = INFINITY;
  Status st;
  for (int r = 0; r <= kReps && st.ok(); ++r) {  // the first is a warm-up
    cudaEventRecord(start, stream_);
    const cublasStatus_t s = cublasLtMatmul(lt_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &algo,
                                            ws_, ws_bytes_, stream_);
    cudaEventRecord(stop, stream_);
    if (s != CUBLAS_STATUS_SUCCESS) {
      st = unavailable("algorithm refused");
      break;
    }
    if (const cudaError_t e = cudaEventSynchronize(stop); e != cudaSuccess) {
      st = cuda_status(e, "cudaEventSynchronize", __FILE__, __LINE__);
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (r > 0) best = std::min(best, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!st.ok()) return st;
  return best;
}

Status LtGemm::tune(const uint16_t* w, const uint16_t* x, int64_t T, int64_t n, int64_t k, float beta,
                    int candidates) {
  PLUMB_ASSIGN_OR_RETURN(Plan * p, plan(T, n, k, beta));
  if (p->tuned) return Status::Ok();
  PLUMB_ASSIGN_OR_RETURN(auto hs, heuristics(*p, candidates));
  PLUMB_ASSIGN_OR_RETURN(DeviceBuffer scratch,
                         DeviceBuffer::allocate(size_t(T * n) * 4, "GEMM tuning scratch"));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch.get(), 0, size_t(T * n) * 4, stream_));
  float best = INFINITY;
  for (const auto& h : hs) {
    if (h.state != CUBLAS_STATUS_SUCCESS) continue;
    Result<float> t = time_algo(*p, h.algo, w, x, scratch.as<float>(), beta);
    if (!t.ok()) continue;  // an algorithm this shape refuses at launch is skipped
    if (*t < best) {
      best = *t;
      p->algo = h.algo;
    }
  }
  PLUMB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  p->tuned = true;
  return Status::Ok();
}

}  // namespace plumb::cuda
