// The plain draw's kernel (launch_draw, ops.h), in a header of its own so that a host test can run
// it under the CPU emulator of tests/kernels/cuda/emulator (which defines the CUDA keywords and
// intrinsics it uses) against scheduler::ModelRunner::sample_plain. Device code only otherwise:
// included by sample.cu.
#pragma once

#include <cstdint>

namespace plumb::cuda::detail {

// The plain draw (scheduler::ModelRunner::sample_plain): one block per row. The row's maximum is
// known from the argmax (division by a positive temperature keeps the order, so max(x / T) is
// x[argmax] / T), so one pass computes each thread's sum of p = exp(x / T - max) in double over a
// contiguous range of the row; the threads' running totals (in thread order) place u times the
// total in one thread's range, and that thread walks it. A row with a temperature of 0 (greedy, or a
// padding row) or a non-finite row (the argmax's negative report) keeps what the argmax wrote.
constexpr int kDrawThreads = 1024;

__device__ __forceinline__ double warp_incl_scan(double v, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const double n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

__global__ void __launch_bounds__(kDrawThreads)
    draw_kernel(const float* logits, int64_t V, const int32_t* params, int32_t* ids) {
  __shared__ double upper[kDrawThreads];  // each thread's running total at the end of its range
  __shared__ double warp_total[32];
  __shared__ int winner_part[32];
  const int64_t r = blockIdx.x;
  const float T = __int_as_float(params[3 * r]);
  const int32_t best = ids[r];
  if (!(T > 0.0f) || best < 0) return;
  const auto ub = uint64_t(uint32_t(params[3 * r + 1])) | (uint64_t(uint32_t(params[3 * r + 2])) << 32);
  const double u = __longlong_as_double(static_cast<long long>(ub));
  const float* row = logits + r * V;
  const double m = double(row[best] / T);
  const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
  const int64_t per = (V + kDrawThreads - 1) / kDrawThreads;
  const int64_t begin = min(V, int64_t(t) * per), end = min(V, begin + per);
  double s = 0.0;
  for (int64_t i = begin; i < end; ++i) s += exp(double(row[i] / T) - m);
  const double incl = warp_incl_scan(s, lane);
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const double w = warp_incl_scan(warp_total[lane], lane);
    __syncwarp();
    warp_total[lane] = w;
  }
  __syncthreads();
  upper[t] = incl + (warp > 0 ? warp_total[warp - 1] : 0.0);
  __syncthreads();
  const double target = u * warp_total[31];
  // The first thread whose running total passes the target (rounding may leave none: the last id).
  int first = upper[t] > target ? t : kDrawThreads;
  for (int o = 16; o > 0; o >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, o));
  if (lane == 0) winner_part[warp] = first;
  __syncthreads();
  int winner = winner_part[lane];
  for (int o = 16; o > 0; o >>= 1) winner = min(winner, __shfl_xor_sync(0xffffffffu, winner, o));
  if (winner == kDrawThreads) {
    if (t == 0) ids[r] = int32_t(V - 1);
    return;
  }
  if (t != winner) return;
  double acc = t > 0 ? upper[t - 1] : 0.0;
  for (int64_t i = begin; i < end; ++i) {
    acc += exp(double(row[i] / T) - m);
    if (target < acc) {
      ids[r] = int32_t(i);
      return;
    }
  }
  ids[r] = int32_t(end - 1);
}

}  // namespace plumb::cuda::detail
