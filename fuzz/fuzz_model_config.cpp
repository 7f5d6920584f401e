// A Hugging Face config.json (engine/model_config.h, parse_model_config). Invariants for an
// accepted config, as the header and the model code rely on them: every size positive, the KV
// heads dividing the query heads, head_dim even, the EOS ids inside the vocabulary, a positive
// context, and RoPE inverse frequencies (what the model computes from the config first) finite
// and not negative (the parser refuses a rope_theta beyond float range, which would give zero
// frequencies).
#include <cmath>
#include <string>

#include "engine/model_config.h"
#include "fuzz/fuzz_target.h"

PLUMB_FUZZ_TARGET(model_config) {
  auto parsed = plumb::engine::parse_model_config(input);
  if (!parsed.ok()) return parsed.status().message().empty() ? "refused without a message" : "";
  const plumb::engine::ModelConfig& c = *parsed;
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0) {
    return "accepted a size that is not positive";
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) return "KV heads do not divide the query heads";
  if (c.head_dim % 2 != 0) return "accepted an odd head_dim";
  if (c.max_context() <= 0) return "max_context() is not positive";
  for (int64_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) return "an EOS id outside the vocabulary";
  }
  // Larger head_dim values are refused by the model's allocation, not by the parser.
  if (c.head_dim <= 4096) {
    for (float f : plumb::engine::rope_inv_freq(c)) {
      if (!std::isfinite(f) || !(f >= 0)) return "a RoPE inverse frequency is " + std::to_string(f);
    }
  }
  return "";
}
