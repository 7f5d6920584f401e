// The model's weights, arranged per layer for the forward pass.
//
// Linear layers are kernels' WeightMatrix ([out_features, in_features], row-major, stored dtype):
// views straight into the safetensors memory map when the compute path can use them as stored
// (F32/F16/BF16, element-aligned), otherwise converted once at load into buffers this object owns.
// Norm weights and biases are small and always float32 copies.
//
// Hugging Face names mapped here (N = layer index):
//   model.embed_tokens.weight [vocab, d]              -> embed
//   lm_head.weight [vocab, d] (absent when tied)      -> lm_head (== embed when tie_word_embeddings)
//   model.norm.weight [d]                             -> final_norm
//   model.layers.N.input_layernorm.weight [d]         -> input_norm
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight    -> q_proj [nh*hd, d], k/v_proj [nkv*hd, d], o_proj [d,
//   nh*hd] model.layers.N.self_attn.{q,k,v}_proj.bias        -> q/k/v_bias (attention_bias, Qwen2)
//   model.layers.N.self_attn.{q,k}_norm.weight [hd]   -> q/k_norm (Qwen3)
//   model.layers.N.post_attention_layernorm.weight    -> post_attention_norm
//   model.layers.N.mlp.{gate,up}_proj.weight [ff, d], mlp.down_proj.weight [d, ff]
// Tensors the architecture does not use (e.g. rotary_emb.inv_freq of old checkpoints) are ignored.
//
// Immutable after construction; safe to read from many threads. Move-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/kernels/kernels.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"

namespace plumb::engine {

class ThreadPool;

// How linear weights are held in memory.
enum class WeightDType : uint8_t {
  kAsStored,  // as in the file (zero copy); dummy weights: bf16
  kF32,       // converted to float32 once at load
  kBF16,      // converted to bfloat16 once at load (round to nearest even)
};
// "auto"/"as-stored" | "f32"/"float32" | "bf16"/"bfloat16"; InvalidArgument otherwise.
Result<WeightDType> parse_weight_dtype(const std::string& s);

struct LayerWeights {
  std::vector<float> input_norm;              // [d]
  WeightMatrix q_proj, k_proj, v_proj;        // [nh*hd, d], [nkv*hd, d], [nkv*hd, d]
  std::vector<float> q_bias, k_bias, v_bias;  // [nh*hd], [nkv*hd], [nkv*hd]; empty without attention_bias
  std::vector<float> q_norm, k_norm;          // [hd]; empty unless qk_norm
  WeightMatrix o_proj;                        // [d, nh*hd]
  std::vector<float> post_attention_norm;     // [d]
  WeightMatrix gate_proj, up_proj;            // [ff, d]
  WeightMatrix down_proj;                     // [d, ff]
};

class ModelWeights {
 public:
  // Maps the tensors of `tensors` (kept alive by this object) for config `c`. InvalidArgument
  // naming the tensor and both shapes on a shape mismatch; NotFound naming a missing tensor.
  static Result<ModelWeights> from_tensors(const ModelConfig& c, std::shared_ptr<const ModelTensors> tensors,
                                           WeightDType dtype, ThreadPool* pool);
  // Seeded random weights of the right shapes: linears and biases ~ normal(0, 0.02) (inverse-CDF
  // of a 16-bit uniform, so tails end at ±4.3σ), norms 1.
  // Deterministic for a seed whatever the thread count. dtype kAsStored means bf16.
  static Result<ModelWeights> dummy(const ModelConfig& c, uint64_t seed, WeightDType dtype, ThreadPool* pool);

  WeightMatrix embed;             // [vocab, d]
  WeightMatrix lm_head;           // [vocab, d]; the same memory as embed when tied
  std::vector<float> final_norm;  // [d]
  std::vector<LayerWeights> layers;

  // Bytes of linear weights + embeddings the forward pass reads (tied embeddings counted once).
  int64_t bytes() const;
  DType linear_dtype() const { return layers.empty() ? embed.dtype : layers[0].q_proj.dtype; }

 private:
  struct Buffer {
    void* p = nullptr;
    ~Buffer();
  };
  // Owns 64-byte-aligned memory for converted or generated weights.
  void* own(size_t bytes);
  std::shared_ptr<const ModelTensors> tensors_;
  std::vector<std::unique_ptr<Buffer>> owned_;
};

}  // namespace plumb::engine
