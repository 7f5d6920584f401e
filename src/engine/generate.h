// In-process generation: prompt ids in, tokens (and their text) streamed out through a callback.
// This is what `plumb generate` runs and what the server's engine wraps for one request; it runs
// one sequence on its own paged KV cache, prefill then one-token decode steps.
//
// Stopping: a token in the EOS set (config eos_token_id ∪ tokenizer eos ids; skipped with
// ignore_eos) or in SamplingParams::stop_token_ids ends generation with finish_reason "stop" (the
// stop token is emitted and counted); max_tokens, or the context filling up, ends it with "length";
// the callback returning false ends it with "cancelled".
//
// Timing is on the monotonic clock: prefill = from the start of the prompt's forward pass to the
// first sampled token; decode = from there to the last token (decode tokens = generated - 1).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "engine/model.h"
#include "engine/sampling.h"

namespace plumb::engine {

class Tokenizer;

// Incremental detokenizer: ids in, text that became final out (never ending inside a UTF-8 char).
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

// Through the tokenizer's StreamDecoder. Ids the tokenizer does not know (a dummy model's vocab can
// be larger) are written as "[id]", so every generated token is visible.
std::unique_ptr<TextStream> tokenizer_text_stream(const Tokenizer& tok, bool skip_special_tokens = false);
// Byte-level fallback for models without a tokenizer: id < 256 is that byte (UTF-8 assembled
// across tokens, ill-formed bytes become U+FFFD), other ids "[id]".
std::unique_ptr<TextStream> byte_text_stream();
// The matching fallback encoder: the prompt's UTF-8 bytes as ids.
std::vector<int32_t> byte_encode(std::string_view text);

struct GeneratedToken {
  int32_t id = -1;
  std::string text;                            // text that became final with this token (may be "")
  float logprob = 0.0f;                        // when SamplingParams::logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // top alternatives, when logprobs > 0
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids
  std::string text;             // all streamed text (incl. the final flush)
  std::string finish_reason;    // "stop" | "length" | "cancelled"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // prompt forward + first sample
  double decode_seconds = 0;   // the remaining tokens
  double prefill_tokens_per_s() const {
    return prefill_seconds > 0 ? double(prompt_tokens) / prefill_seconds : 0;
  }
  double decode_tokens_per_s() const {
    return decode_seconds > 0 && tokens.size() > 1 ? double(tokens.size() - 1) / decode_seconds : 0;
  }
};

struct GenerateOptions {
  SamplingParams sampling;             // validated; see sampling.h
  int32_t block_size = 16;             // KV block size of the private cache
  std::vector<int32_t> extra_eos_ids;  // added to the config's eos ids (e.g. the tokenizer's)
  Clock* clock = nullptr;              // null = SteadyClock
};

// Returns false from on_token to stop. InvalidArgument: an empty prompt, a prompt longer than the
// model's context, bad sampling values. `text` may be null (no text is produced then).
Result<GenerateResult> generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opts,
                                TextStream* text, const std::function<bool(const GeneratedToken&)>& on_token);

}  // namespace plumb::engine
