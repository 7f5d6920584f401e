/* The CUDA candidate ABI: what a kernel candidate for `plumb kernels` on CUDA is compiled against.
 *
 * plumb ships this header inside its binary and hands it to NVRTC as "plumb_cuda_abi.h"; a
 * candidate source starts with `#include "plumb_cuda_abi.h"` (`plumb kernels abi --device cuda`
 * prints it). The host side (engine/cuda/candidate.h, kernels/cuda/abi.h) includes the same file,
 * so the argument structs the host fills are the structs the device reads.
 *
 * A candidate defines, with C linkage:
 *   1. exactly one entry `extern "C" __global__ void plumb_candidate(<op's args struct> a)`;
 *   2. its launch configuration with PLUMB_LAUNCH(abi, op, block_threads, rows_per_block,
 *      items_per_thread, max_blocks, dynamic_smem_bytes), a __constant__ the host reads from the
 *      cubin's ELF symbol table without a GPU. `abi` is the ABI version the candidate was written
 *      for; plumb refuses a cubin whose version differs from PLUMB_CUDA_ABI_VERSION.
 * Grid rules (the host computes the grid; the candidate only states the numbers above):
 *   row ops (rmsnorm_residual): grid.x = ceil(rows / rows_per_block);
 *   element-wise ops (swiglu):  grid.x = ceil(T * ff / (block_threads * items_per_thread)),
 *                               capped at max_blocks when max_blocks > 0 (the kernel grid-strides).
 *   block = (block_threads, 1, 1); dynamic shared memory = dynamic_smem_bytes.
 * Inputs are const: a candidate that writes them is refused by screening. bf16 values travel as
 * their bit pattern (unsigned short), as in the engine (engine/cuda/ops.h).
 *
 * Version history: 1 = rmsnorm_residual and swiglu.
 */
#ifndef PLUMB_CUDA_CANDIDATE_ABI_H
#define PLUMB_CUDA_CANDIDATE_ABI_H

#define PLUMB_CUDA_ABI_VERSION 1

/* Ops (plumb_launch_config.op). */
#define PLUMB_OP_RMSNORM_RESIDUAL 1
#define PLUMB_OP_SWIGLU 2

/* rmsnorm_residual: for r in [0, rows), h = x[r, :] + residual[r, :] (float32);
 * h_out[r, :] = h (the new residual stream); y[r, :] = bf16(h / sqrt(mean(h^2) + eps) * w[:]).
 * Row r of x, residual and h_out starts at r * x_stride floats; row r of y at r * y_stride. */
struct plumb_rmsnorm_residual_args {
  const float* x;
  const float* residual;
  const float* w;
  float* h_out;
  unsigned short* y;
  long long rows;
  long long d;
  long long x_stride;
  long long y_stride;
  float eps;
};

/* swiglu: out[t, i] = bf16(silu(gu[t, i]) * gu[t, ff + i]) for t in [0, T), i in [0, ff);
 * silu(g) = g / (1 + exp(-g)). Row t of gu starts at t * gu_stride floats (gate then up); row t of
 * out at t * out_stride. */
struct plumb_swiglu_args {
  const float* gu;
  unsigned short* out;
  long long T;
  long long ff;
  long long gu_stride;
  long long out_stride;
};

/* The launch configuration a candidate declares (8 ints, 32 bytes). */
struct plumb_launch_config {
  int abi_version;
  int op;
  int block_threads;
  int rows_per_block;
  int items_per_thread;
  int max_blocks;
  int dynamic_smem_bytes;
  int reserved;
};

#ifdef __CUDACC__
#define PLUMB_LAUNCH(abi, op, block_threads, rows_per_block, items_per_thread, max_blocks, smem) \
  extern "C" __constant__ plumb_launch_config plumb_launch = {                                   \
      (abi), (op), (block_threads), (rows_per_block), (items_per_thread), (max_blocks), (smem), 0}

/* float -> bf16 bits, round to nearest even, NaN kept quiet (as __float2bfloat16). */
__device__ __forceinline__ unsigned short plumb_bf16_bits(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float plumb_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
#endif /* __CUDACC__ */

#endif /* PLUMB_CUDA_CANDIDATE_ABI_H */
