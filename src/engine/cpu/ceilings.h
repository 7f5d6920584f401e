// Measured machine ceilings: the rates the engine's benchmarks and reports divide by.
//
// Definitions (all rates in decimal units: GB/s = 1e9 bytes/s, GFLOP/s = 1e9 flop/s; a multiply-add
// counts as 2 flops; "best of N" = the fastest of N timed passes, on the monotonic clock):
//  - read bandwidth: `threads` threads (a ThreadPool) each stream-read a disjoint slice of one
//    buffer far larger than the last-level cache (default 1 GiB, written first so every page is
//    real; on huge pages where the kernel gives them, as the weights are: huge_pages.h), summing it
//    with AVX2 (SSE2 on older CPUs); bytes read / seconds, best of `passes`.
//  - peak GFLOP/s of our matmul (`measure_peak_gflops`): the best rate of the fastest registered
//    decode matmul (registry best(kMatmul, kDecode): "amx_bf16" on CPUs with AMX-BF16, whose tile
//    instructions do ~16x an f32 FMA's work; "avx512_bf16" on AMD CPUs with AVX512_BF16, whose bf16
//    dot instructions do twice an f32 FMA's work; else "avx512" or "avx2") on compute-bound,
//    cache-resident shapes: weights [1024, 1024] in `weights` dtype (2 MiB bf16, inside L3; packed
//    16 features wide, engine/cpu/packed.h, where the variant reads that layout, as in the model),
//    m = 16 and m = 64 rows; 2*m*n*k flops / seconds, best of several passes. This is the rate our
//    own kernel can sustain when memory is not the limit, i.e. the compute roof for batch decode.
//  - oneDNN GEMM GFLOP/s (`measure_onednn_gemm_gflops`): dnnl_sgemm (f32, row-major, B transposed as
//    our weights are) on random matrices of the given shape, with oneDNN's OpenMP thread count set
//    to `threads` for the measurement and restored after; best of several passes.
//  - oneDNN bf16 GFLOP/s (`measure_onednn_bf16_gflops`): the "onednn_bf16" variant (oneDNN's bf16
//    matmul, x rounded to bf16 in the call) on the same kind of shapes; 0 without AVX512_BF16.
//  - FMA GFLOP/s: a register-only loop of independent 8-wide f32 FMAs on every thread; the upper bound
//    of f32 arithmetic (bf16 dot instructions exceed it; context for the figures above).
// Each function takes seconds, allocates its buffers, and is not meant to run concurrently with
// other heavy work (the result would be the share it got). Thread-safe but pointless to overlap.
#pragma once

#include <cstdint>

#include "engine/cpu/kernels.h"

namespace plumb::engine {

// Streaming read bandwidth in GB/s over `bytes` bytes (rounded down to a multiple of 64 KiB).
double measure_read_bandwidth_gbs(int threads, int64_t bytes = int64_t(1) << 30, int passes = 5);

// Best rate of our fastest decode matmul on compute-bound cache-resident shapes (see above).
double measure_peak_gflops(DType weights, int threads);

// oneDNN f32 sgemm rate on y[m, n] = x[m, k] · W[n, k]ᵀ.
double measure_onednn_gemm_gflops(int64_t m, int64_t n, int64_t k, int threads);

// oneDNN bf16 matmul rate on the same product, bf16 weights (0 where the CPU lacks AVX512_BF16).
double measure_onednn_bf16_gflops(int64_t m, int64_t n, int64_t k, int threads);

// Register-only FMA throughput over `threads` threads (0 when the CPU lacks AVX2/FMA).
double measure_fma_gflops(int threads);

struct MachineCeilings {
  int threads = 0;                  // threads every figure below used
  double read_bandwidth_gbs = 0;    // measure_read_bandwidth_gbs(threads)
  double peak_gflops_bf16 = 0;      // measure_peak_gflops(kBF16, threads)
  double peak_gflops_f32 = 0;       // measure_peak_gflops(kF32, threads)
  double onednn_sgemm_gflops = 0;   // measure_onednn_gemm_gflops(512, 896, 896, threads)
  double fma_gflops = 0;            // measure_fma_gflops(threads)
  const char* matmul_variant = "";  // the decode matmul variant the peaks were measured on
};

// Runs every measurement above (a few seconds).
MachineCeilings measure_ceilings(int threads);

}  // namespace plumb::engine
