// Tensor parallelism: how one Llama-family model is split over `size` GPUs of one host (the CUDA
// runner's --tensor-parallel-size, docs/cuda.md "Tensor parallelism"). Host arithmetic only: which
// rows and columns of each weight matrix a rank holds, and what that costs in device memory.
//
// The split (Megatron-style, as vLLM's): each rank holds a contiguous run of the query heads and of
// the KV heads, and of the SwiGLU inner width.
//   q/k/v_proj, gate/up_proj  rows of the rank's heads / inner columns ("column parallel"): the rank
//                             computes its heads' attention and its part of SwiGLU from the full input;
//   o_proj, down_proj         the matching columns ("row parallel"): the rank's product is a partial
//                             sum of the full output, and the ranks' partial sums are added together
//                             (one all-reduce after o_proj and one after down_proj per layer).
// Norms, the embedding and RoPE are the same on every rank; lm_head is held and applied by rank 0
// only (after the last all-reduce every rank has the full residual stream).
//
// GQA stays exact: the query heads of KV head j are [j·g, (j+1)·g) with g = heads / kv_heads, so a
// rank with KV heads [a, b) holds exactly their query heads [a·g, b·g). This needs size to divide
// the KV heads (KV heads are not replicated), and the inner width.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/model_config.h"

namespace plumb::engine {

// Rank `rank` of `size`: its query heads [q_head0, q_head0 + heads), KV heads
// [kv_head0, kv_head0 + kv_heads) and SwiGLU inner columns [ffn0, ffn0 + ffn).
struct TensorShard {
  int32_t rank = 0, size = 1;
  int64_t q_head0 = 0, heads = 0;
  int64_t kv_head0 = 0, kv_heads = 0;
  int64_t ffn0 = 0, ffn = 0;
};

// Whether the model can be split over `size` ranks: size ≥ 1, dividing num_key_value_heads (and so
// num_attention_heads) and intermediate_size. InvalidArgument naming the count that does not divide
// and the sizes that would.
Status check_tensor_parallel(const ModelConfig& c, int32_t size);

// Rank `rank` of `size`; check_tensor_parallel(c, size) must be ok and 0 ≤ rank < size.
TensorShard tensor_shard(const ModelConfig& c, int32_t rank, int32_t size);

// The part of a weight matrix W[rows, cols] a rank holds: rows [r0, r1) × columns [c0, c1).
struct MatrixSlice {
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  int64_t rows() const { return r1 - r0; }
  int64_t cols() const { return c1 - c0; }
};

// The rank's slice of each projection of a layer (the whole matrix when size is 1).
MatrixSlice q_proj_slice(const ModelConfig& c, const TensorShard& s);
MatrixSlice kv_proj_slice(const ModelConfig& c, const TensorShard& s);  // k_proj and v_proj
MatrixSlice o_proj_slice(const ModelConfig& c, const TensorShard& s);
MatrixSlice ffn_in_slice(const ModelConfig& c, const TensorShard& s);  // gate_proj and up_proj
MatrixSlice down_proj_slice(const ModelConfig& c, const TensorShard& s);

// Device memory the rank's weights take: its slices in bf16, the norms and biases it holds in
// float32, the embedding (every rank) and an untied lm_head (rank 0 only) in bf16.
int64_t shard_weight_bytes(const ModelConfig& c, const TensorShard& s);

}  // namespace plumb::engine
