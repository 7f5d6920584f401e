// The built-in generator of CUDA candidates: for each op of the ABI a grid of variants, each a
// complete CUDA source against plumb_cuda_abi.h whose PLUMB_LAUNCH states its own configuration.
//
// rmsnorm_residual: block_threads {128, 256, 512} x rows_per_block {1, 2, 4} (a row is reduced by
//   block_threads / rows_per_block threads) x vector width {1, 4} (float4 loads where d, the strides
//   and the pointers allow; a scalar path otherwise) x fused {yes, no} (fused: the residual add and
//   the sum of squares in one pass; unfused: the add, then the sum over the written residual, as two
//   separate kernels would) = 36 variants.
// swiglu: block_threads {128, 256, 512} x vector width {1, 2, 4} x items per thread {1, 4} x grid
//   {one thread per item, capped at 1056 blocks and grid-striding} = 36 variants. Fusion does not
//   apply (one element-wise op).
// Every variant is correct for every shape: vector paths are taken only where alignment allows.
#pragma once

#include <string>
#include <vector>

#include "kernels/cuda/abi.h"

namespace plumb::kernels::cuda {

struct Variant {
  std::string name;  // e.g. "rmsnorm_residual.b256.r2.v4.fused"
  CudaOp op = CudaOp::kRmsNormResidual;
  int block_threads = 256;
  int rows_per_block = 1;    // rmsnorm_residual
  int vector_width = 1;      // 1, 2 or 4 floats per load
  int items_per_thread = 1;  // swiglu: vector chunks per thread (PLUMB_LAUNCH gets items * vector_width)
  int max_blocks = 0;        // swiglu: 0 = one thread per item
  bool fused = true;         // rmsnorm_residual
  std::string source;        // the CUDA source
};

// Every variant of `op`, in a fixed order.
std::vector<Variant> generate_variants(CudaOp op);

}  // namespace plumb::kernels::cuda
