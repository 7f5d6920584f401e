// How fast can a batch-1 GEMV stream the weights of the Llama-3-8B shapes on this card? A sweep of
// the design choices of the engine's decode GEMV (src/engine/cuda/gemv.cu: one warp per output row,
// 16-byte loads) against a plain read of the same bytes, with the L2 flushed between repetitions
// (a buffer twice its size written), medians of CUDA-event times. One JSON line per (shape, variant):
// the bytes read per microsecond, and the ratio to the plain read of that shape.
//
// Not part of the CMake build: it tests kernel designs, not plumb. Built and run on the GPU host:
//   nvcc -O3 -std=c++17 -arch=sm_90a bench/cuda_gemv_sweep.cu -o /tmp/gemv_sweep && /tmp/gemv_sweep
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

__device__ __forceinline__ float dot8(const uint4& w, const uint4& x) {
  const uint32_t a[4] = {w.x, w.y, w.z, w.w}, b[4] = {x.x, x.y, x.z, x.w};
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    s += __uint_as_float(a[j] << 16) * __uint_as_float(b[j] << 16);
    s += __uint_as_float(a[j] & 0xffff0000u) * __uint_as_float(b[j] & 0xffff0000u);
  }
  return s;
}

enum Load { kCs = 0, kNc = 1, kPlain = 2 };

template <int L>
__device__ __forceinline__ uint4 ld(const uint4* p) {
  if constexpr (L == kCs) return __ldcs(p);
  if constexpr (L == kNc) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  }
  return *p;
}

// WARPS warps per block, R rows per warp, U 16-byte loads per lane per row in flight.
template <int WARPS, int R, int U, int L>
__global__ void __launch_bounds__(32 * WARPS) gemv(const uint4* w, const uint4* x, float* y, int n, int nk) {
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * WARPS + (threadIdx.x >> 5)) * R;
  float acc[R] = {};
  int c = lane;
  for (; c + 32 * (U - 1) < nk; c += 32 * U) {
    uint4 wv[R][U];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int u = 0; u < U; ++u)
        wv[r][u] = row0 + r < n ? ld<L>(w + int64_t(row0 + r) * nk + c + 32 * u) : uint4{};
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint4 xv = x[c + 32 * u];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += dot8(wv[r][u], xv);
    }
  }
  for (; c < nk; c += 32) {
    const uint4 xv = x[c];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (row0 + r < n) acc[r] += dot8(ld<L>(w + int64_t(row0 + r) * nk + c), xv);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && row0 + r < n) y[row0 + r] = s;
  }
}

// The plain read: every 16-byte word once, grid-stride, four in flight per thread.
__global__ void read_all(const uint4* w, int64_t n16, float* sink) {
  uint32_t a = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 v0 = __ldcs(w + i), v1 = __ldcs(w + i + stride), v2 = __ldcs(w + i + 2 * stride),
                v3 = __ldcs(w + i + 3 * stride);
    a ^= v0.x ^ v1.y ^ v2.z ^ v3.w;
  }
  for (; i < n16; i += stride) a ^= __ldcs(w + i).x;
  if (a == 0x12345678u) sink[0] = 1.0f;  // keeps the loads
}

struct Shape {
  const char* name;
  int n, k;
};

int main() {
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096},
                          {"o 4096x4096", 4096, 4096},
                          {"gate_up 28672x4096", 28672, 4096},
                          {"down 4096x14336", 4096, 14336},
                          {"lm_head 128256x4096", 128256, 4096}};
  int dev = 0, sms = 0, l2 = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  size_t max_bytes = 0;
  for (const Shape& s : shapes) max_bytes = std::max(max_bytes, size_t(s.n) * s.k * 2);
  uint4 *w = nullptr, *x = nullptr;
  float *y = nullptr, *flush = nullptr;
  const size_t flush_bytes = size_t(l2) * 2;
  CHECK(cudaMalloc(&w, max_bytes));
  CHECK(cudaMalloc(&x, 14336 * 2));
  CHECK(cudaMalloc(&y, 128256 * 4));
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMemset(w, 0x3c, max_bytes));
  CHECK(cudaMemset(x, 0x3c, 14336 * 2));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time = [&](auto&& launch) {
    std::vector<float> t;
    for (int rep = 0; rep < 23; ++rep) {
      CHECK(cudaMemsetAsync(flush, rep, flush_bytes));
      CHECK(cudaEventRecord(a));
      launch();
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      if (rep >= 3) t.push_back(ms * 1000.0f);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  for (const Shape& s : shapes) {
    const int nk = s.k / 8;
    const double bytes = double(s.n) * s.k * 2;
    const float base = time([&] { read_all<<<sms * 8, 512>>>(w, int64_t(bytes / 16), y); });
    std::printf(
        "{\"device\":\"%s\",\"shape\":\"%s\",\"variant\":\"read\",\"us\":%.2f,\"GBps\":%.0f,\"ratio\":1}\n",
        prop.name, s.name, base, bytes / base / 1e3);
#define RUN(WARPS, R, U, L)                                                                              \
  do {                                                                                                   \
    const int blocks = (s.n + WARPS * R - 1) / (WARPS * R);                                              \
    const float us = time([&] { gemv<WARPS, R, U, L><<<blocks, 32 * WARPS>>>(w, x, y, s.n, nk); });      \
    std::printf(                                                                                         \
        "{\"device\":\"%s\",\"shape\":\"%s\",\"variant\":\"w%d r%d u%d l%d\",\"us\":%.2f,\"GBps\":%.0f," \
        "\"ratio\":%.3f}\n",                                                                             \
        prop.name, s.name, WARPS, R, U, L, us, bytes / us / 1e3, base / us);                             \
  } while (0)
    RUN(8, 1, 4, kCs);  // the engine's GEMV
    RUN(8, 1, 8, kCs);
    RUN(8, 2, 4, kCs);
    RUN(4, 1, 4, kCs);
    RUN(4, 2, 4, kCs);
    RUN(8, 1, 4, kNc);
    RUN(8, 1, 8, kNc);
    RUN(8, 2, 4, kNc);
    RUN(8, 1, 4, kPlain);
    RUN(16, 1, 4, kCs);
    RUN(2, 1, 8, kCs);
    RUN(4, 4, 2, kCs);
    std::fflush(stdout);
  }
  return 0;
}
