// matmul "onednn": the prefill path (large m) through oneDNN's sgemm.
//
// f32 sgemm works on every CPU (AVX512_BF16 CPUs also have the opt-in "onednn_bf16" variant,
// matmul_onednn_bf16.cpp, which multiplies the stored bf16 weights directly).
// Rather than caching an f32 copy of every bf16/f16 weight (it would double the resident weights,
// and a cache keyed by data pointer goes stale when a mapping is replaced), we convert a panel of
// kPanelBytes of weight rows at a time into a per-thread buffer and run sgemm on that panel. With
// m = 512 each converted element feeds 512 FMAs, so conversion costs a few percent.
// oneDNN threads with its own OpenMP runtime (OMP_NUM_THREADS), not ctx.pool.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "engine/cpu/avx2_util.h"
#include "engine/cpu/reference.h"

namespace plumb::engine::avx2 {
void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y);
}  // namespace plumb::engine::avx2
namespace plumb::engine::avx512 {
bool cpu_has_avx512();
void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y);
}  // namespace plumb::engine::avx512

namespace plumb::engine::onednn {
namespace {

constexpr int64_t kPanelBytes = 2 << 20;  // f32 bytes of one converted weight panel

PLUMB_AVX2 void convert_rows_avx2(const uint16_t* src, DType dtype, int64_t count, float* dst) {
  int64_t i = 0;
  if (dtype == DType::kBF16) {
    for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, avx2::load_bf16x8(src + i));
  } else {
    for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, avx2::load_f16x8(src + i));
  }
  for (; i < count; ++i) dst[i] = ref::load_weight(src, dtype, i);
}

void convert_rows(const uint16_t* src, DType dtype, int64_t count, float* dst) {
  static const bool has_avx2 = avx2::cpu_has_avx2();
  if (has_avx2) return convert_rows_avx2(src, dtype, count, dst);
  for (int64_t i = 0; i < count; ++i) dst[i] = ref::load_weight(src, dtype, i);
}

// y[:, j0:j0+nb] = x · Wpanelᵀ, with y's leading dimension n.
void sgemm_panel(const float* x, int64_t m, int64_t k, const float* wpanel, int64_t nb, float* y, int64_t n) {
  dnnl_sgemm('N', 'T', m, nb, k, 1.0f, x, k, wpanel, k, 0.0f, y, n);
}

}  // namespace

void matmul(const KernelContext&, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  // x: [m, k]; W: [n, k]; y: [m, n].
  const int64_t n = w.rows, k = w.cols;
  if (w.dtype == DType::kF32) {
    sgemm_panel(x, m, k, static_cast<const float*>(w.data), n, y, n);
  } else {
    thread_local std::vector<float> panel;  // [rows_per_panel, k] f32; grows once per thread
    const int64_t rows_per_panel = std::max<int64_t>(1, std::min<int64_t>(n, kPanelBytes / (4 * k)));
    if (panel.size() < size_t(rows_per_panel * k)) panel.resize(size_t(rows_per_panel * k));
    const auto* src = static_cast<const uint16_t*>(w.data);
    for (int64_t j0 = 0; j0 < n; j0 += rows_per_panel) {
      const int64_t nb = std::min(rows_per_panel, n - j0);
      convert_rows(src + j0 * k, w.dtype, nb * k, panel.data());
      sgemm_panel(x, m, k, panel.data(), nb, y + j0, n);
    }
  }
  if (bias) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += bias[j];
    }
  }
}

// matmul "hybrid": oneDNN only where it pays. Below the threshold the avx512 or avx2 tiles win:
// they read the weights as stored, while oneDNN first converts every bf16 weight to f32
// (single-threaded) and wakes its OpenMP team, which on a 2-core machine competes with our own
// pool. Short prefills (chat turns, chunked-prefill tails) hit this case constantly. The `avx512`
// tiles stay ahead of oneDNN up to ~128 rows (4864 x 896 bf16, 2 threads, Zen 5: 2.3-2.7x at
// m = 32, 1.5-2.2x at 64, 1.0-1.4x at 128; BENCHMARKS.md "Engine kernels"); `avx2` up to ~32.
constexpr int64_t kHybridMinRowsAvx2 = 32, kHybridMinRowsAvx512 = 128;

void matmul_hybrid(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                   const float* bias, float* y) {
  static const bool kAvx512 = avx512::cpu_has_avx512();
  if (m < (kAvx512 ? kHybridMinRowsAvx512 : kHybridMinRowsAvx2)) {
    if (kAvx512) return avx512::matmul(ctx, x, m, w, bias, y);
    avx2::matmul(ctx, x, m, w, bias, y);
  } else {
    matmul(ctx, x, m, w, bias, y);
  }
}

}  // namespace plumb::engine::onednn

namespace plumb::engine::detail {

void register_onednn_kernels(KernelRegistry& r) {
  r.add(Op::kMatmul, {"onednn",
                      "oneDNN f32 sgemm (bf16/f16 weights converted per 2 MiB panel); "
                      "best for prefill (large m)",
                      nullptr,
                      &onednn::matmul,
                      {2, 0}});
  r.add(Op::kMatmul, {"hybrid",
                      "avx512 tiles below 128 rows (avx2 below 32 without AVX-512), oneDNN sgemm above; "
                      "the default for prefill where neither amx_bf16 nor avx512_bf16 is",
                      &avx2::cpu_has_avx2,
                      &onednn::matmul_hybrid,
                      {3, 0}});
}

}  // namespace plumb::engine::detail
