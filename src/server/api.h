// The OpenAI-compatible request layer: parsing /v1/completions and /v1/chat/completions bodies
// into a backend request, the OpenAI error body, and the incremental text handling every response
// shares (detokenization, stop strings, logprob entries). Pure functions and plain classes, no
// HTTP, so they are unit-tested directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "engine/scheduler/serving_engine.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace plumb::server {

// An error as the OpenAI API reports it: HTTP status and {"error": {message, type, param, code}}.
struct ApiError {
  int status = 400;                            // HTTP status
  std::string message;                         // what is wrong and what to do
  std::string type = "invalid_request_error";  // "invalid_request_error", "server_error", ...
  std::string param;                           // the offending field, "" when none
  std::string code;                            // machine-readable code, "" for null
  std::string body() const;                    // the JSON body
};
ApiError bad_request(std::string message, std::string param = "");

// What a completion request asked for, resolved to token ids.
struct CompletionRequest {
  bool chat = false;                // /v1/chat/completions
  std::string model;                // as sent ("" when absent)
  std::vector<int32_t> prompt_ids;  // the prompt (chat: the rendered template)
  std::string prompt_text;          // completions with a text prompt: for echo
  engine::SamplingParams sampling;  // temperature, top_p, top_k, seed, max_tokens, stop ids, logprobs
  bool seeded = false;              // the client sent a seed
  std::vector<std::string> stop;    // stop strings
  bool stream = false;              // SSE
  bool include_usage = false;       // stream_options.include_usage
  bool echo = false;                // completions: prepend the prompt to the text
  bool prompt_logprobs = false;     // completions: echo with logprobs
  int32_t top_logprobs = 0;         // alternatives per token (chat top_logprobs; completions logprobs:int)
  bool want_logprobs = false;       // logprob entries in the response
  bool skip_special_tokens = true;  // vLLM-compatible: false streams special tokens' text too, so a
                                    // client can re-count every generated token (plumb bench does)
  int32_t min_tokens = 0;  // stop strings (and stop ids) do not end the output before this many tokens
};

struct ParseContext {
  const engine::Tokenizer* tokenizer = nullptr;         // required
  const engine::ChatTemplate* chat_template = nullptr;  // null: chat requests get a 400
  std::string served_model;                             // the only model name accepted
  int64_t max_context = 0;                              // prompt + max_tokens must fit
  std::vector<int32_t> eos_ids;                         // the model's EOS set: SamplingParams::eos_ids
  // Debugging, in (0, 1] (0 = off): every request ignores its ignore_eos, and generates at most
  // ceil(debug_eos_after · max_tokens) tokens, as a server that ends at its end-of-sequence token
  // would (a strawman that cannot honour the output length; docs/protocol.md §3).
  double debug_eos_after = 0.0;
};

// Parses a request body. Unknown fields are ignored; wrong types and out-of-range values are 400
// naming the field (`param`; a message's field as "messages.[i].role"); known fields that would
// change the output and that plumb does not implement (response_format other than text, tools,
// best_of, min_p, guided decoding, ...: docs/serving.md) are 400 naming the field; another model
// name is 404 (code "model_not_found"); a prompt that does not fit the context is 400 (code
// "context_length_exceeded").
std::variant<CompletionRequest, ApiError> parse_completion(std::string_view body, bool chat,
                                                           const ParseContext& ctx);

// One generated token's logprob entry, with its text.
struct LogprobEntry {
  std::string token;                               // the token's text
  std::optional<float> logprob;                    // null for the first prompt token
  std::vector<std::pair<std::string, float>> top;  // alternatives, most likely first
};

// Turns the backend's token stream into response text: incremental detokenization (special
// tokens skipped, as OpenAI servers do), stop strings (the matched string and everything after it
// are dropped; text that could still become a stop string is held back), and logprob entries.
// One per request; not thread-safe (the backend calls a request's sink on one thread).
class TextAssembler {
 public:
  // Stop strings are looked for only once `min_tokens` tokens were pushed (vLLM's min_tokens).
  TextAssembler(const engine::Tokenizer& tokenizer, std::vector<std::string> stop, bool want_logprobs,
                bool skip_special_tokens = true, int64_t min_tokens = 0);
  // Feeds generated tokens (and their logprobs when wanted). Returns the text that is final now.
  // After a stop string matched, stopped() is true and later tokens are ignored.
  std::string push(const std::vector<int32_t>& tokens, const std::vector<scheduler::TokenLogprob>& logprobs);
  // End of generation: the held-back text (unless a stop string matched).
  std::string finish();
  bool stopped() const { return stopped_; }
  // Tokens accepted before (and including) the one that completed a stop string.
  int64_t tokens() const { return tokens_; }
  // Logprob entries not yet taken.
  std::vector<LogprobEntry> take_logprobs();

 private:
  std::string release(bool final);
  const engine::Tokenizer& tok_;
  engine::StreamDecoder decoder_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  bool want_logprobs_;
  std::string text_;    // all text decoded so far
  size_t emitted_ = 0;  // bytes of text_ already returned
  bool stopped_ = false;
  int64_t tokens_ = 0;
  int64_t min_tokens_ = 0;
  std::vector<LogprobEntry> logprobs_;
};

// A token's text for logprob entries.
LogprobEntry logprob_entry(const engine::Tokenizer& tok, const scheduler::TokenLogprob& lp);

// JSON of logprob entries: chat {"content":[{token, logprob, bytes, top_logprobs}]}, completions
// {"tokens", "token_logprobs", "top_logprobs", "text_offset"} (offsets from text_offset0).
json::value chat_logprobs_json(const std::vector<LogprobEntry>& entries);
json::value completion_logprobs_json(const std::vector<LogprobEntry>& entries, int64_t text_offset0);

// {"queue_ms", "prefill_ms", "decode_ms", "prompt_tokens", "completion_tokens", ...}.
json::object timings_json(const scheduler::RequestTimings& t, int64_t completion_tokens);

// The fields every streamed chunk of one response shares: id, object, created, model.
struct ChunkHeader {
  std::string id;
  bool chat = false;
  int64_t created = 0;
  std::string model;
};

// {"id", "object", "created", "model"}: the start of every streamed chunk of the response.
json::object chunk_base(const ChunkHeader& h);

// A streamed chunk carrying `text` (chat: "delta": {"content": text}; completions: "text"), with
// `logprobs` and "finish_reason": null.
json::object piece_chunk(const ChunkHeader& h, std::string_view text, json::value logprobs);

// The SSE event of a piece without logprobs, sse_format_data(json::dump(piece_chunk(h, text,
// nullptr))) byte for byte, from the JSON around the text serialized once per response: each
// piece then costs one escape and one copy instead of building and serializing the object (the
// synthetic server's event rate is bound by its per-event CPU, BENCHMARKS.md "Serving").
class PieceFrame {
 public:
  explicit PieceFrame(const ChunkHeader& h);
  std::string event(std::string_view text) const;

 private:
  std::string prefix_, suffix_;  // "data: {...,\"text\":" and ",...}\n\n"
};

}  // namespace plumb::server
