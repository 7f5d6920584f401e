#include "engine/model_config.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numbers>

#include "core/file.h"
#include "core/json.h"
#include "core/shipped.h"

namespace plumb::engine {

const char* architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kLlama:
      return "LlamaForCausalLM";
    case Architecture::kMistral:
      return "MistralForCausalLM";
    case Architecture::kQwen2:
      return "Qwen2ForCausalLM";
    case Architecture::kQwen3:
      return "Qwen3ForCausalLM";
  }
  return "?";
}

int64_t ModelConfig::max_context() const {
  if (sliding_window > 0 && sliding_window < max_position_embeddings) return sliding_window;
  return max_position_embeddings;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t d = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t layer = d * q + 2 * d * kv + q * d + 3 * d * intermediate_size + 2 * d;
  if (attention_bias) layer += q + 2 * kv;
  if (qk_norm) layer += 2 * head_dim;
  int64_t total = num_hidden_layers * layer + vocab_size * d + d;
  if (!tie_word_embeddings) total += vocab_size * d;
  return total;
}

namespace {

Result<int64_t> need_int(const json::object& o, std::string_view key) {
  PLUMB_ASSIGN_OR_RETURN(auto v, json::opt_int(o, key));
  if (!v) return invalid_argument("config.json: missing field '" + std::string(key) + "'");
  return *v;
}

Status positive(int64_t v, std::string_view key) {
  if (v <= 0) {
    return invalid_argument("config.json: field '" + std::string(key) + "' must be > 0, got " +
                            std::to_string(v));
  }
  return Status::Ok();
}

// A token id field that may be a number, a list of numbers, or null.
Result<std::vector<int64_t>> id_list(const json::object& o, std::string_view key) {
  std::vector<int64_t> out;
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return out;
  auto one = [&](const json::value& v) -> Status {
    if (!v.is_int64() && !v.is_uint64()) {
      return invalid_argument("config.json: field '" + std::string(key) +
                              "' must be a token id or a list of ids");
    }
    out.push_back(v.is_int64() ? v.get_int64() : int64_t(v.get_uint64()));
    return Status::Ok();
  };
  if (it->value().is_array()) {
    for (const auto& v : it->value().get_array()) PLUMB_RETURN_IF_ERROR(one(v));
  } else {
    PLUMB_RETURN_IF_ERROR(one(it->value()));
  }
  return out;
}

Result<RopeScaling> parse_rope_scaling(const json::object& o) {
  RopeScaling rs;
  auto it = o.find("rope_scaling");
  if (it == o.end() || it->value().is_null()) return rs;
  if (!it->value().is_object())
    return invalid_argument("config.json: field 'rope_scaling' must be an object or null");
  const auto& r = it->value().get_object();
  // transformers accepts the legacy key "type" as well as "rope_type".
  PLUMB_ASSIGN_OR_RETURN(auto rope_type, json::opt_string(r, "rope_type"));
  if (!rope_type) {
    PLUMB_ASSIGN_OR_RETURN(auto legacy, json::opt_string(r, "type"));
    rope_type = legacy;
  }
  if (!rope_type) return invalid_argument("config.json: rope_scaling lacks 'rope_type'");
  rs.type = *rope_type;
  if (rs.type == "default") return rs;
  if (rs.type != "linear" && rs.type != "llama3") {
    return unimplemented("config.json: rope_scaling.rope_type '" + rs.type +
                         "' is not supported (supported: default, linear, llama3)");
  }
  PLUMB_ASSIGN_OR_RETURN(auto factor, json::opt_double(r, "factor"));
  if (!factor) return invalid_argument("config.json: rope_scaling lacks 'factor'");
  if (!(*factor >= 1.0)) return invalid_argument("config.json: rope_scaling.factor must be >= 1");
  rs.factor = *factor;
  if (rs.type == "llama3") {
    PLUMB_ASSIGN_OR_RETURN(auto lo, json::opt_double(r, "low_freq_factor"));
    PLUMB_ASSIGN_OR_RETURN(auto hi, json::opt_double(r, "high_freq_factor"));
    PLUMB_ASSIGN_OR_RETURN(auto orig, json::opt_int(r, "original_max_position_embeddings"));
    if (!lo) return invalid_argument("config.json: rope_scaling lacks 'low_freq_factor'");
    if (!hi) return invalid_argument("config.json: rope_scaling lacks 'high_freq_factor'");
    if (!orig) return invalid_argument("config.json: rope_scaling lacks 'original_max_position_embeddings'");
    if (!(*hi > *lo) || !(*lo > 0)) {
      return invalid_argument("config.json: rope_scaling needs 0 < low_freq_factor < high_freq_factor");
    }
    if (*orig <= 0)
      return invalid_argument("config.json: rope_scaling.original_max_position_embeddings must be > 0");
    rs.low_freq_factor = *lo;
    rs.high_freq_factor = *hi;
    rs.original_max_position_embeddings = *orig;
  }
  return rs;
}

}  // namespace

namespace {

// The architecture named first in 'architectures'.
Result<Architecture> parse_architecture(const json::object& o) {
  auto arch_it = o.find("architectures");
  if (arch_it == o.end()) return invalid_argument("config.json: missing field 'architectures'");
  if (!arch_it->value().is_array() || arch_it->value().get_array().empty() ||
      !arch_it->value().get_array()[0].is_string()) {
    return invalid_argument("config.json: field 'architectures' must be a non-empty list of strings");
  }
  const std::string arch(arch_it->value().get_array()[0].get_string());
  if (arch == "LlamaForCausalLM") {
    return Architecture::kLlama;
  } else if (arch == "MistralForCausalLM") {
    return Architecture::kMistral;
  } else if (arch == "Qwen2ForCausalLM") {
    return Architecture::kQwen2;
  } else if (arch == "Qwen3ForCausalLM") {
    return Architecture::kQwen3;
  } else {
    return unimplemented("config.json: architecture '" + arch +
                         "' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                         "Qwen2ForCausalLM, Qwen3ForCausalLM)");
  }
}

// head_dim, given or derived; it must be even for RoPE.
Status resolve_head_dim(const json::object& o, ModelConfig& c) {
  // head_dim may be absent or null (then hidden_size / num_attention_heads).
  auto hd_it = o.find("head_dim");
  if (hd_it != o.end() && !hd_it->value().is_null()) {
    PLUMB_ASSIGN_OR_RETURN(auto hd, json::opt_int(o, "head_dim"));
    c.head_dim = *hd;
    PLUMB_RETURN_IF_ERROR(positive(c.head_dim, "head_dim"));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return invalid_argument("config.json: hidden_size (" + std::to_string(c.hidden_size) +
                              ") is not divisible by num_attention_heads (" +
                              std::to_string(c.num_attention_heads) + ") and no 'head_dim' is given");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    return invalid_argument("config.json: field 'head_dim' must be even for RoPE, got " +
                            std::to_string(c.head_dim));
  }

  return Status::Ok();
}

// num_key_value_heads, defaulting to num_attention_heads, which it must divide.
Status parse_kv_heads(const json::object& o, ModelConfig& c) {
  PLUMB_ASSIGN_OR_RETURN(auto kv, json::opt_int(o, "num_key_value_heads"));
  c.num_key_value_heads = (kv && *kv != 0) ? *kv : c.num_attention_heads;
  PLUMB_RETURN_IF_ERROR(positive(c.num_key_value_heads, "num_key_value_heads"));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return invalid_argument("config.json: field 'num_key_value_heads' (" +
                            std::to_string(c.num_key_value_heads) + ") must divide num_attention_heads (" +
                            std::to_string(c.num_attention_heads) + ")");
  }

  return Status::Ok();
}

// Sizes, head counts and head_dim (c.arch is set).
Status parse_shape(const json::object& o, ModelConfig& c) {
  PLUMB_ASSIGN_OR_RETURN(c.vocab_size, need_int(o, "vocab_size"));
  PLUMB_ASSIGN_OR_RETURN(c.hidden_size, need_int(o, "hidden_size"));
  PLUMB_ASSIGN_OR_RETURN(c.intermediate_size, need_int(o, "intermediate_size"));
  PLUMB_ASSIGN_OR_RETURN(c.num_hidden_layers, need_int(o, "num_hidden_layers"));
  PLUMB_ASSIGN_OR_RETURN(c.num_attention_heads, need_int(o, "num_attention_heads"));
  PLUMB_ASSIGN_OR_RETURN(c.max_position_embeddings, need_int(o, "max_position_embeddings"));
  PLUMB_RETURN_IF_ERROR(positive(c.vocab_size, "vocab_size"));
  PLUMB_RETURN_IF_ERROR(positive(c.hidden_size, "hidden_size"));
  PLUMB_RETURN_IF_ERROR(positive(c.intermediate_size, "intermediate_size"));
  PLUMB_RETURN_IF_ERROR(positive(c.num_hidden_layers, "num_hidden_layers"));
  PLUMB_RETURN_IF_ERROR(positive(c.num_attention_heads, "num_attention_heads"));
  PLUMB_RETURN_IF_ERROR(positive(c.max_position_embeddings, "max_position_embeddings"));

  PLUMB_RETURN_IF_ERROR(parse_kv_heads(o, c));
  return resolve_head_dim(o, c);
}

// rms_norm_eps, rope_theta and rope_scaling.
Status parse_numerics(const json::object& o, ModelConfig& c) {
  PLUMB_ASSIGN_OR_RETURN(auto eps, json::opt_double(o, "rms_norm_eps"));
  if (eps) c.rms_norm_eps = *eps;
  if (!(c.rms_norm_eps > 0)) return invalid_argument("config.json: field 'rms_norm_eps' must be > 0");
  PLUMB_ASSIGN_OR_RETURN(auto theta, json::opt_double(o, "rope_theta"));
  if (theta) c.rope_theta = *theta;
  // The model computes its RoPE frequencies in float32 (rope_inv_freq): a base beyond float range
  // would give zero frequencies, i.e. no rotation at all.
  if (!(c.rope_theta > 1.0) || !(c.rope_theta <= double(std::numeric_limits<float>::max())))
    return invalid_argument(
        "config.json: field 'rope_theta' must be > 1 and finite in float32 (at most 3.4e38)");
  PLUMB_ASSIGN_OR_RETURN(c.rope_scaling, parse_rope_scaling(o));

  return Status::Ok();
}

// Tied embeddings, biases, q/k norm, activation and sliding window (c.arch is set).
Status parse_features(const json::object& o, ModelConfig& c) {
  // transformers' class defaults: LlamaConfig and Qwen3Config tie=False, Qwen2Config tie=False,
  // MistralConfig tie=False; the saved config.json normally states it explicitly.
  PLUMB_ASSIGN_OR_RETURN(auto tie, json::opt_bool(o, "tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(false);

  PLUMB_ASSIGN_OR_RETURN(auto bias, json::opt_bool(o, "attention_bias"));
  c.attention_bias = c.arch == Architecture::kQwen2 ? true : bias.value_or(false);
  c.qk_norm = c.arch == Architecture::kQwen3;
  PLUMB_ASSIGN_OR_RETURN(auto mlp_bias, json::opt_bool(o, "mlp_bias"));
  if (mlp_bias.value_or(false)) return unimplemented("config.json: 'mlp_bias': true is not supported");

  PLUMB_ASSIGN_OR_RETURN(auto act, json::opt_string(o, "hidden_act"));
  if (act && *act != "silu") {
    return unimplemented("config.json: field 'hidden_act' is '" + *act +
                         "'; only 'silu' (SwiGLU) is supported");
  }

  // Sliding window: Mistral applies it whenever set; Qwen2/3 only with use_sliding_window.
  auto sw_it = o.find("sliding_window");
  if (sw_it != o.end() && !sw_it->value().is_null()) {
    PLUMB_ASSIGN_OR_RETURN(auto sw, json::opt_int(o, "sliding_window"));
    PLUMB_ASSIGN_OR_RETURN(auto use_sw, json::opt_bool(o, "use_sliding_window"));
    bool applies = c.arch == Architecture::kMistral || use_sw.value_or(false);
    if (applies && *sw > 0) c.sliding_window = *sw;
  }

  return Status::Ok();
}

// bos and eos ids (c.vocab_size is set).
Status parse_token_ids(const json::object& o, ModelConfig& c) {
  PLUMB_ASSIGN_OR_RETURN(auto bos, id_list(o, "bos_token_id"));
  if (bos.size() > 1) return invalid_argument("config.json: field 'bos_token_id' must be a single id");
  if (!bos.empty()) c.bos_token_id = bos[0];
  PLUMB_ASSIGN_OR_RETURN(c.eos_token_ids, id_list(o, "eos_token_id"));
  for (int64_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return invalid_argument("config.json: field 'eos_token_id' has id " + std::to_string(id) +
                              " outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
  }

  return Status::Ok();
}

// The stored dtype, under either of its names.
Status parse_dtype(const json::object& o, ModelConfig& c) {
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  PLUMB_ASSIGN_OR_RETURN(auto td, json::opt_string(o, "torch_dtype"));
  if (!td) {
    auto d_it = o.find("dtype");
    if (d_it != o.end() && d_it->value().is_string()) td = std::string(d_it->value().get_string());
  }
  if (td) c.torch_dtype = *td;
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(std::string_view json_text) {
  auto parsed = json::parse_object(json_text);
  if (!parsed.ok()) return parsed.status().with_context("config.json");
  const json::object& o = *parsed;
  ModelConfig c;
  PLUMB_ASSIGN_OR_RETURN(c.arch, parse_architecture(o));
  PLUMB_RETURN_IF_ERROR(parse_shape(o, c));
  PLUMB_RETURN_IF_ERROR(parse_numerics(o, c));
  PLUMB_RETURN_IF_ERROR(parse_features(o, c));
  PLUMB_RETURN_IF_ERROR(parse_token_ids(o, c));
  PLUMB_RETURN_IF_ERROR(parse_dtype(o, c));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status();
  auto c = parse_model_config(*text);
  if (!c.ok()) return c.status().with_context(path);
  return c;
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(half);
  // transformers: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), all in float32.
  const float base = float(c.rope_theta);
  for (int64_t i = 0; i < half; ++i) {
    float expo = float(2 * i) / float(c.head_dim);
    inv[i] = 1.0f / std::pow(base, expo);
  }
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == "linear") {
    for (auto& f : inv) f = f / float(rs.factor);
  } else if (rs.type == "llama3") {
    // transformers _compute_llama3_parameters, in float32 tensor arithmetic with Python-float scalars.
    const float factor = float(rs.factor);
    const float lo = float(rs.low_freq_factor), hi = float(rs.high_freq_factor);
    const float old_ctx = float(rs.original_max_position_embeddings);
    // Python-float scalars meet float32 tensors: torch computes (and compares) in float32.
    const float low_freq_wavelen = float(double(rs.original_max_position_embeddings) / rs.low_freq_factor);
    const float high_freq_wavelen = float(double(rs.original_max_position_embeddings) / rs.high_freq_factor);
    for (auto& f : inv) {
      const float wavelen = float(2.0 * std::numbers::pi) / f;
      float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
      const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

namespace {
// The one search for shipped folders (core/shipped.h), so an installed binary finds models too.
std::vector<std::string> models_dir_candidates() { return shipped_candidates(Shipped::kModels); }
}  // namespace

Result<std::string> find_models_dir() {
  std::string tried;
  for (const auto& d : models_dir_candidates()) {
    std::error_code ec;
    if (std::filesystem::is_directory(d, ec)) return std::filesystem::weakly_canonical(d, ec).string();
    tried += (tried.empty() ? "" : ", ") + d;
  }
  return not_found("no models directory found (tried " + tried + "); set PLUMB_MODELS_DIR");
}

Result<std::string> shipped_model_dir() {
  PLUMB_ASSIGN_OR_RETURN(std::string models, find_models_dir());
  std::string dir = models + "/plumb-tiny";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir + "/config.json", ec)) {
    return not_found("the shipped model " + dir + " is missing (no config.json); pass --model DIR");
  }
  return dir;
}

Result<std::string> resolve_model_config(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return invalid_argument("model config name '" + name + "' must be a plain name such as 'qwen2.5-0.5b'");
  }
  std::string tried;
  for (const auto& d : models_dir_candidates()) {
    std::string p = d + "/configs/" + name + "/config.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return std::filesystem::weakly_canonical(p, ec).string();
    tried += (tried.empty() ? "" : ", ") + p;
  }
  return not_found("model config '" + name + "' not found (tried " + tried + ")");
}

}  // namespace plumb::engine
