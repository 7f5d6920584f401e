// A CPU emulator of the few CUDA features plumb's built-in candidates and the CUDA runner's
// plain-draw kernel (engine/cuda/draw.cuh) use, for checking what those kernels compute on a
// machine without a GPU: each block runs as blockDim.x OS threads (blocks one after another),
// __syncthreads is a barrier of the block, __shfl_xor_sync and __shfl_up_sync an exchange
// through a barrier of the warp, __shared__ a static (one block at a time). It knows nothing of the
// GPU's memory model, timing or occupancy: it checks indexing, reductions, vector paths and bf16
// packing, not speed or races the hardware could expose. Included before plumb_cuda_abi.h in a
// host C++ translation unit (emulate_test.cpp builds one).
#pragma once

#include <math.h>

#include <algorithm>
#include <barrier>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct emu_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local emu_dim3 threadIdx, blockIdx;
inline emu_dim3 blockDim, gridDim;

struct EmuBlock {
  std::barrier<>* block = nullptr;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> lanes;
  std::vector<double> lanes_d;  // the exchanges of doubles and ints
};
inline thread_local EmuBlock* emu_block = nullptr;

inline void __syncthreads() { emu_block->block->arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int o) {
  const unsigned t = threadIdx.x, w = t >> 5, lane = t & 31;
  emu_block->lanes[t] = v;
  emu_block->warps[w]->arrive_and_wait();
  const float r = emu_block->lanes[(w << 5) | (lane ^ unsigned(o))];
  emu_block->warps[w]->arrive_and_wait();
  return r;
}

// The exchanges of doubles and ints (the plain draw's kernel, engine/cuda/draw.cuh).
inline double emu_exchange(double v, int from_lane) {
  const unsigned t = threadIdx.x, w = t >> 5;
  emu_block->lanes_d[t] = v;
  emu_block->warps[w]->arrive_and_wait();
  const double r = emu_block->lanes_d[(w << 5) | unsigned(from_lane)];
  emu_block->warps[w]->arrive_and_wait();
  return r;
}
inline double __shfl_up_sync(unsigned, double v, int o) {
  const int lane = int(threadIdx.x & 31);
  return emu_exchange(v, lane >= o ? lane - o : lane);
}
inline int __shfl_xor_sync(unsigned, int v, int o) {
  return int(emu_exchange(double(v), int(threadIdx.x & 31) ^ o));
}
inline void __syncwarp() { emu_block->warps[threadIdx.x >> 5]->arrive_and_wait(); }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}
using std::min;

inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct float4 {
  float x, y, z, w;
};
struct float2 {
  float x, y;
};
struct uint2 {
  unsigned x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

#define __global__
#define __device__
#define __forceinline__ inline
#define __constant__
#define __shared__ static
#define __launch_bounds__(n)
#define __CUDACC__ 1

// Runs kernel `k` over `grid` blocks of `block` threads (block a multiple of 32).
template <typename Args>
void emu_launch(void (*k)(Args), long grid, int block, Args a) {
  blockDim = {unsigned(block), 1, 1};
  gridDim = {unsigned(grid), 1, 1};
  for (long b = 0; b < grid; ++b) {
    std::barrier<> bar(block);
    EmuBlock eb;
    eb.block = &bar;
    eb.lanes.resize(size_t(block));
    eb.lanes_d.resize(size_t(block));
    for (int w = 0; w < block / 32; ++w) eb.warps.push_back(std::make_unique<std::barrier<>>(32));
    std::vector<std::thread> threads;
    threads.reserve(size_t(block));
    for (int t = 0; t < block; ++t)
      threads.emplace_back([&, t] {
        threadIdx = {unsigned(t), 0, 0};
        blockIdx = {unsigned(b), 0, 0};
        emu_block = &eb;
        k(a);
      });
    for (auto& th : threads) th.join();
  }
}
