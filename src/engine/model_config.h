// The model's hyper-parameters, parsed from a Hugging Face config.json into a plain struct.
//
// Supported architectures (config "architectures"[0]): LlamaForCausalLM (Llama 2, Llama 3 with
// "llama3" rope scaling, SmolLM, TinyLlama), MistralForCausalLM, Qwen2ForCausalLM (q/k/v bias),
// Qwen3ForCausalLM (per-head q/k RMSNorm, explicit head_dim). Anything else is an error that names
// the architecture. Parsing is pure: no files are read except by load_model_config().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plumb::engine {

enum class Architecture : uint8_t { kLlama, kMistral, kQwen2, kQwen3 };
const char* architecture_name(Architecture a);  // the HF class name, e.g. "LlamaForCausalLM"

// config.json "rope_scaling". type "default" means none.
struct RopeScaling {
  std::string type = "default";                  // "default" | "linear" | "llama3"
  double factor = 1.0;                           // linear, llama3: frequency divisor
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3: the pre-scaling context
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  int64_t vocab_size = 0;               // rows of the embedding and of lm_head
  int64_t hidden_size = 0;              // model width d
  int64_t intermediate_size = 0;        // SwiGLU inner width
  int64_t num_hidden_layers = 0;        // decoder layers
  int64_t num_attention_heads = 0;      // query heads
  int64_t num_key_value_heads = 0;      // KV heads (GQA); divides num_attention_heads
  int64_t head_dim = 0;                 // per-head width; default hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;  // the context the model was trained for
  // Mistral v0.1 / Qwen2 with use_sliding_window: attention only sees this many past tokens. The
  // engine has no sliding-window attention, so the usable context is capped at it (exact, not
  // approximate). 0 = none.
  int64_t sliding_window = 0;
  double rms_norm_eps = 1e-6;           // RMSNorm epsilon
  double rope_theta = 10000.0;          // RoPE base
  RopeScaling rope_scaling;             // none unless config says so
  bool tie_word_embeddings = false;     // lm_head shares model.embed_tokens.weight
  bool attention_bias = false;          // q/k/v projections have a bias (Qwen2: always)
  bool qk_norm = false;                 // per-head RMSNorm on q and k before RoPE (Qwen3)
  std::optional<int64_t> bos_token_id;  // absent in some configs
  std::vector<int64_t> eos_token_ids;   // config's eos_token_id (a number or a list); may be empty
  std::string torch_dtype = "float32";  // dtype the checkpoint was saved in ("bfloat16", ...)

  // The context length the engine will accept: max_position_embeddings, capped by sliding_window.
  int64_t max_context() const;
  // Parameter count implied by the shapes (embeddings counted once when tied).
  int64_t num_parameters() const;
};

// Parses config.json text. InvalidArgument naming the field on a missing, wrongly typed or
// inconsistent field; Unimplemented for an unknown architecture, activation or rope type.
Result<ModelConfig> parse_model_config(std::string_view json_text);
// Reads <path> (a config.json file) and parses it; errors carry the path.
Result<ModelConfig> load_model_config(const std::string& path);

// RoPE inverse frequencies, head_dim/2 values, computed in float32 exactly as transformers'
// ROPE_INIT_FUNCTIONS do ("default", "linear", "llama3").
std::vector<float> rope_inv_freq(const ModelConfig& c);

// Resolves a shipped config name (e.g. "qwen2.5-0.5b") to <models>/configs/<name>/config.json,
// trying the shipped models folders in core/shipped.h's order ($PLUMB_MODELS_DIR, the repository
// above the executable, the install prefix's share/plumb/models, ./models). NotFound lists the places tried.
// `name` must be a plain name (no '/', no "..").
Result<std::string> resolve_model_config(const std::string& name);
// The first existing models directory by the same search (for models/plumb-tiny); NotFound if none.
Result<std::string> find_models_dir();
// The shipped small model, <models dir>/plumb-tiny; NotFound (saying how to point at a model) if the
// models directory or the model's config.json is missing.
Result<std::string> shipped_model_dir();

}  // namespace plumb::engine
