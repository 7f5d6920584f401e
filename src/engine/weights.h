// The model's weights, arranged per layer for the forward pass.
//
// Linear layers are kernels' WeightMatrix ([out_features, in_features], row-major, stored dtype):
// views straight into the safetensors memory map when the compute path can use them as stored
// (F32/F16/BF16, element-aligned), otherwise converted once at load into buffers this object owns.
// Norm weights and biases are small and always float32 copies.
//
// Quantization (--quantization int8|int4): the seven linear matrices of every layer (q/k/v/o,
// gate/up/down) are quantized once at load from their stored (or dummy) f32/f16/bf16 values into
// buffers this object owns, in the formats of engine/cpu/quant.h (WeightMatrix::quant != kNone;
// the model multiplies them with Op::kMatmulQuant). The embedding table and lm_head stay as stored
// (or as `dtype` asks): the embedding is read one row per token, and lm_head (tied to it in most
// small models) is the layer whose error reaches the logits directly.
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
// bf16 matrices may be held in WeightLayout::kPacked16 (set_layout) when the selected matmul reads
// that layout; a tied lm_head then shares the packed embedding table.
//
// Immutable after construction except through set_layout; safe to read from many threads. Move-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/cpu/kernels.h"
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
  // With quantization: InvalidArgument naming the tensor and row if a linear weight is not finite.
  static Result<ModelWeights> from_tensors(const ModelConfig& c, std::shared_ptr<const ModelTensors> tensors,
                                           WeightDType dtype, ThreadPool* pool, Quantization quant = {});
  // Seeded random weights of the right shapes: linears and biases ~ normal(0, 0.02) (inverse-CDF
  // of a 16-bit uniform, so tails end at ±4.3σ), norms 1.
  // Deterministic for a seed whatever the thread count. dtype kAsStored means bf16.
  // With quantization, the linears are generated as above and then quantized.
  static Result<ModelWeights> dummy(const ModelConfig& c, uint64_t seed, WeightDType dtype, ThreadPool* pool,
                                    Quantization quant = {});

  WeightMatrix embed;             // [vocab, d]
  WeightMatrix lm_head;           // [vocab, d]; the same memory as embed when tied
  std::vector<float> final_norm;  // [d]
  std::vector<LayerWeights> layers;

  // Bytes of linear weights + embeddings the forward pass reads (tied embeddings counted once);
  // quantized linears count codes + scales (+ mins).
  int64_t bytes() const;
  // Bytes of the quantized (or float) linear layers alone, and the quantization they carry.
  int64_t linear_bytes() const;
  const Quantization& quantization() const { return quant_; }
  // Puts every bf16 matrix that can take it (engine/cpu/packed.h: can_pack16) in `layout`, the
  // one the selected matmul reads (Model::set_kernels). Owned buffers convert in place; a view into
  // the memory map is packed into an owned buffer and its pages released from this process
  // (MADV_DONTNEED), so resident memory does not double. Values never change.
  void set_layout(WeightLayout layout, ThreadPool* pool);
  DType linear_dtype() const { return layers.empty() ? embed.dtype : layers[0].q_proj.dtype; }

  ModelWeights();
  ~ModelWeights();
  ModelWeights(ModelWeights&&) noexcept;
  ModelWeights& operator=(ModelWeights&&) noexcept;

 private:
  struct Buffer;  // one owned allocation (weights.cpp)
  // Owns 64-byte-aligned memory for converted or generated weights. Buffers of 4 MiB and more are
  // HugeBuffers (engine/cpu/huge_pages.h): a decode step streams every weight.
  void* own(size_t bytes);
  bool owns(const void* p) const;  // p is the start of one of owned_
  // Quantizes `src` (a float WeightMatrix) into owned buffers; InvalidArgument naming `name` and
  // the row if a value is not finite.
  Result<WeightMatrix> quantize(const WeightMatrix& src, const std::string& name, ThreadPool* pool);
  Quantization quant_;
  std::shared_ptr<const ModelTensors> tensors_;
  std::vector<std::unique_ptr<Buffer>> owned_;
};

}  // namespace plumb::engine
