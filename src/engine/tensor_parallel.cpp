#include "engine/tensor_parallel.h"

#include <string>

namespace plumb::engine {
namespace {

// The sizes from 1 to 64 that divide both counts, as "1, 2, 4, 8".
std::string dividing_sizes(int64_t a, int64_t b) {
  std::string out;
  for (int64_t n = 1; n <= 64; ++n) {
    if (a % n == 0 && b % n == 0) out += (out.empty() ? "" : ", ") + std::to_string(n);
  }
  return out;
}

}  // namespace

Status check_tensor_parallel(const ModelConfig& c, int32_t size) {
  if (size < 1) {
    return invalid_argument("--tensor-parallel-size must be at least 1, not " + std::to_string(size));
  }
  const int64_t nkv = c.num_key_value_heads, ff = c.intermediate_size;
  const std::string sizes = " (sizes that split this model: " + dividing_sizes(nkv, ff) + ")";
  if (nkv % size != 0) {
    return invalid_argument("--tensor-parallel-size " + std::to_string(size) +
                            " does not divide the model's " + std::to_string(nkv) +
                            " KV heads: each card holds whole KV heads" + sizes);
  }
  if (ff % size != 0) {
    return invalid_argument("--tensor-parallel-size " + std::to_string(size) +
                            " does not divide the model's intermediate_size " + std::to_string(ff) + sizes);
  }
  return Status::Ok();
}

TensorShard tensor_shard(const ModelConfig& c, int32_t rank, int32_t size) {
  TensorShard s;
  s.rank = rank, s.size = size;
  s.heads = c.num_attention_heads / size, s.q_head0 = rank * s.heads;
  s.kv_heads = c.num_key_value_heads / size, s.kv_head0 = rank * s.kv_heads;
  s.ffn = c.intermediate_size / size, s.ffn0 = rank * s.ffn;
  return s;
}

MatrixSlice q_proj_slice(const ModelConfig& c, const TensorShard& s) {
  const int64_t hd = c.head_dim;
  return {s.q_head0 * hd, (s.q_head0 + s.heads) * hd, 0, c.hidden_size};
}

MatrixSlice kv_proj_slice(const ModelConfig& c, const TensorShard& s) {
  const int64_t hd = c.head_dim;
  return {s.kv_head0 * hd, (s.kv_head0 + s.kv_heads) * hd, 0, c.hidden_size};
}

MatrixSlice o_proj_slice(const ModelConfig& c, const TensorShard& s) {
  const int64_t hd = c.head_dim;
  return {0, c.hidden_size, s.q_head0 * hd, (s.q_head0 + s.heads) * hd};
}

MatrixSlice ffn_in_slice(const ModelConfig& c, const TensorShard& s) {
  return {s.ffn0, s.ffn0 + s.ffn, 0, c.hidden_size};
}

MatrixSlice down_proj_slice(const ModelConfig& c, const TensorShard& s) {
  return {0, c.hidden_size, s.ffn0, s.ffn0 + s.ffn};
}

int64_t shard_weight_bytes(const ModelConfig& c, const TensorShard& s) {
  auto elems = [](const MatrixSlice& m) { return m.rows() * m.cols(); };
  const int64_t d = c.hidden_size, hd = c.head_dim;
  const int64_t matrices = elems(q_proj_slice(c, s)) + 2 * elems(kv_proj_slice(c, s)) +
                           elems(o_proj_slice(c, s)) + 2 * elems(ffn_in_slice(c, s)) +
                           elems(down_proj_slice(c, s));
  // input and post-attention norms, q/k norms and the q/k/v bias as the CUDA runner holds them
  const int64_t floats = 2 * d + 2 * hd + (s.heads + 2 * s.kv_heads) * hd;
  const int64_t per_layer = matrices * 2 + floats * 4;
  const bool lm_head_here = !c.tie_word_embeddings && s.rank == 0;
  const int64_t embeddings = c.vocab_size * d * 2 * (lm_head_here ? 2 : 1);
  return embeddings + c.num_hidden_layers * per_layer + d * 4;
}

}  // namespace plumb::engine
