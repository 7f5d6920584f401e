#include "engine/cpu/ceilings.h"

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/random.h"
#include "engine/cpu/avx2_util.h"
#include "engine/cpu/huge_pages.h"
#include "engine/cpu/packed.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine {
namespace {

// Monotonic seconds.
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

PLUMB_AVX2 double sum_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  return avx2::hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

double sum_plain(const float* p, int64_t n) {
  float a[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  }
  return double(a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7]);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// oneDNN's OpenMP thread count, through libgomp's symbols if they are loaded (they are whenever
// libdnnl is OpenMP-threaded, as Debian's is); a no-op otherwise.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) {
    set_ = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
    if (set_ && get) {
      old_ = get();
      set_(threads);
    }
  }
  ~OmpThreads() {
    if (set_ && old_ > 0) set_(old_);
  }

 private:
  void (*set_)(int) = nullptr;
  int old_ = 0;
};

PLUMB_AVX2 double fma_loop(int64_t iters) {
  __m256 a[10];
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 10; ++i) a[i] = _mm256_set1_ps(float(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 10
    for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, a[i]);
  return avx2::hsum(s);
}

}  // namespace

double measure_read_bandwidth_gbs(int threads, int64_t bytes, int passes) {
  bytes = std::max<int64_t>(bytes / 65536 * 65536, 65536);
  // On huge pages where the kernel gives them, as the model's weights are (huge_pages.h): the
  // ceiling is what the memory system delivers, not what 4 KiB pages' TLB misses leave of it.
  HugeBuffer mem(static_cast<size_t>(bytes));
  std::unique_ptr<float, FreeDeleter> fallback;
  float* buf = static_cast<float*>(mem.data());
  if (!buf) {
    fallback.reset(static_cast<float*>(std::aligned_alloc(64, size_t(bytes))));
    buf = fallback.get();
  }
  if (!buf) return 0.0;
  // Writing every page makes it real memory; untouched pages all map the one zero page and would
  // be read from cache.
  std::memset(buf, 1, size_t(bytes));
  const int64_t n = bytes / 4;
  ThreadPool pool(threads);
  const bool avx2 = avx2::cpu_has_avx2();
  std::atomic<double> sink{0.0};
  double best = 0.0;
  for (int pass = 0; pass < std::max(passes, 1); ++pass) {
    double t0 = now_s();
    pool.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          double s = avx2 ? sum_avx2(buf + b, e - b) : sum_plain(buf + b, e - b);
          sink.store(s, std::memory_order_relaxed);
        },
        4096);
    double dt = now_s() - t0;
    best = std::max(best, double(bytes) / dt / 1e9);
  }
  return best;
}

double measure_peak_gflops(DType weights, int threads) {
  const KernelVariant* v = KernelRegistry::instance().best(Op::kMatmul, Phase::kDecode);
  auto fn = v->cpu<MatmulFn>();
  const int64_t n = 1024, k = 1024;
  Rng rng(7);
  std::vector<uint16_t> w16(size_t(n * k));
  std::vector<float> w32(size_t(n * k));
  for (size_t i = 0; i < w32.size(); ++i) {
    w32[i] = float(rng.uniform() - 0.5);
    w16[i] = weights == DType::kBF16 ? f32_to_bf16(w32[i]) : f32_to_f16(w32[i]);
  }
  WeightMatrix w{weights == DType::kF32 ? static_cast<const void*>(w32.data()) : w16.data(), weights, n, k};
  ThreadPool pool(threads);
  if (v->reads_packed16 && can_pack16(w)) {  // the layout the model gives this variant
    pack16(w16.data(), n, k, w16.data(), &pool);
    w.layout = WeightLayout::kPacked16;
  }
  KernelContext ctx{&pool, Phase::kDecode};
  double best = 0.0;
  for (int64_t m : {16, 64}) {
    std::vector<float> x(size_t(m * k), 0.5f), y(size_t(m * n));
    fn(ctx, x.data(), m, w, nullptr, y.data());  // warm the caches
    const int reps = m == 16 ? 20 : 5;
    for (int pass = 0; pass < 5; ++pass) {
      double t0 = now_s();
      for (int r = 0; r < reps; ++r) fn(ctx, x.data(), m, w, nullptr, y.data());
      double dt = now_s() - t0;
      best = std::max(best, 2.0 * double(m * n * k) * reps / dt / 1e9);
    }
  }
  return best;
}

// GFLOP/s of gemm() (an [m, k] x [k, n] product): one untimed call (first-use setup), then the best
// of 5 timed passes of ~2 GFLOP each.
template <class Gemm>
double best_gemm_gflops(int64_t m, int64_t n, int64_t k, Gemm&& gemm) {
  gemm();
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const int reps = std::max(1, int(2e9 / flops));
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    double t0 = now_s();
    for (int r = 0; r < reps; ++r) gemm();
    best = std::max(best, flops * reps / (now_s() - t0) / 1e9);
  }
  return best;
}

double measure_onednn_gemm_gflops(int64_t m, int64_t n, int64_t k, int threads) {
  OmpThreads omp(threads);
  Rng rng(11);
  std::vector<float> x(size_t(m * k)), w(size_t(n * k)), y(size_t(m * n));
  for (auto& f : x) f = float(rng.uniform() - 0.5);
  for (auto& f : w) f = float(rng.uniform() - 0.5);
  return best_gemm_gflops(
      m, n, k, [&] { dnnl_sgemm('N', 'T', m, n, k, 1.0f, x.data(), k, w.data(), k, 0.0f, y.data(), n); });
}

double measure_onednn_bf16_gflops(int64_t m, int64_t n, int64_t k, int threads) {
  auto v = KernelRegistry::instance().find(Op::kMatmul, "onednn_bf16");
  if (!v.ok()) return 0.0;  // no AVX512_BF16 here
  auto fn = (*v)->cpu<MatmulFn>();
  OmpThreads omp(threads);
  Rng rng(13);
  std::vector<float> x(size_t(m * k)), y(size_t(m * n));
  std::vector<uint16_t> w(size_t(n * k));
  for (auto& f : x) f = float(rng.uniform() - 0.5);
  for (auto& b : w) b = f32_to_bf16(float(rng.uniform() - 0.5));
  const WeightMatrix wm{w.data(), DType::kBF16, n, k};
  return best_gemm_gflops(m, n, k, [&] {
    fn({nullptr, Phase::kPrefill}, x.data(), m, wm, nullptr, y.data());
  });
}

double measure_fma_gflops(int threads) {
  if (!avx2::cpu_has_avx2()) return 0.0;
  ThreadPool pool(threads);
  const int64_t iters = 20'000'000;
  std::atomic<double> sink{0.0};
  double best = 0.0;
  for (int pass = 0; pass < 3; ++pass) {
    double t0 = now_s();
    pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sink.store(fma_loop(iters), std::memory_order_relaxed);
    });
    double dt = now_s() - t0;
    best = std::max(best, double(pool.size()) * double(iters) * 10 * 8 * 2 / dt / 1e9);
  }
  return best;
}

MachineCeilings measure_ceilings(int threads) {
  MachineCeilings c;
  c.threads = std::max(threads, 1);
  c.read_bandwidth_gbs = measure_read_bandwidth_gbs(c.threads);
  c.peak_gflops_bf16 = measure_peak_gflops(DType::kBF16, c.threads);
  c.peak_gflops_f32 = measure_peak_gflops(DType::kF32, c.threads);
  c.onednn_sgemm_gflops = measure_onednn_gemm_gflops(512, 896, 896, c.threads);
  c.fma_gflops = measure_fma_gflops(c.threads);
  c.matmul_variant = KernelRegistry::instance().best(Op::kMatmul, Phase::kDecode)->name.c_str();
  return c;
}

}  // namespace plumb::engine
