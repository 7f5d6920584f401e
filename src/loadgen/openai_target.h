// The OpenAI HTTP target: drives any OpenAI-compatible server (chat or completions API) with
// streaming SSE over keep-alive connections (net/), asking for usage in the stream
// (stream_options.include_usage) so output tokens can be cross-checked. Each request carries the
// sink's request_id() as an X-Request-Id header when it has one, so a server's own log (or the
// truth server of docs/metrics.md, "Timing error") can be joined with plumb's records.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/json.h"
#include "core/status.h"
#include "loadgen/target.h"
#include "workload/sources.h"

namespace plumb::loadgen {

enum class Api {
  kChat,         // POST /v1/chat/completions with "messages"
  kCompletions,  // POST /v1/completions with "prompt"
};

struct OpenAiTargetOptions {
  std::string base_url{};  // "http://host:port" (no https)
  Api api =
      Api::kChat;       // which endpoint; a request must match it (messages for chat, prompt for completions)
  std::string model{};  // the "model" field; empty: omitted
  std::string api_key{};                              // sent as "Authorization: Bearer <key>" when not empty
  std::chrono::milliseconds connect_timeout{10'000};  // TCP connect
  std::chrono::milliseconds first_byte_timeout{600'000};  // from sending to the first response byte
  std::chrono::milliseconds idle_timeout{60'000};         // longest silence once the body has started
                                                          // (before it, first_byte_timeout applies)
  // Local re-count of output tokens: when set, each content chunk counts count_tokens(its text)
  // tokens; when empty, each chunk with non-empty content counts 1 (servers that stream one token
  // per event). Either way the server's usage is reported beside it.
  workload::TokenCounter count_tokens{};
  // Sends "skip_special_tokens": false (vLLM, SGLang and plumb serve accept it) so tokens with no
  // visible text — an EOS generated under ignore_eos — still stream as text and the local re-count
  // sees them. Off: the field is not sent (for servers that reject unknown fields).
  bool show_special_tokens = false;
  // false: every request asks for "Connection: close", so each one opens its own connection (its
  // connect time is recorded, and is part of its TTFT) and prepare() opens none ahead. For servers
  // that close a connection after each streamed response although they answered keep-alive (llama.cpp's
  // llama-server c392e50 does): a pooled connection can then be reused in the microseconds before
  // its close arrives. With keep_alive on, net::HttpClient sends such a request again on a new
  // connection (its connect time, the lost attempt included, is then recorded); off, no request
  // ever meets the race.
  bool keep_alive = true;
};

// Non-streamed requests (Request::stream false) are supported: the whole text arrives as one chunk
// at the end (so TTFT = E2E), counted by count_tokens when set, else by the server's usage.
// Runs its own IO thread. Timestamps come from std::chrono::steady_clock, taken by net/ when
// each network read completed, so the driver must run on SteadyClock (its default). send() and
// cancel_all() are thread-safe; callbacks run on the IO thread.
class OpenAiTarget final : public Target {
 public:
  // Resolves the host (blocking). Errors: bad URL (kInvalidArgument), https (kUnimplemented),
  // unresolvable host (kUnavailable).
  static Result<std::unique_ptr<OpenAiTarget>> create(OpenAiTargetOptions options);
  // Only a failed thread join or allocation can throw here; terminating then is right.
  ~OpenAiTarget() override;  // NOLINT(bugprone-exception-escape)

  // A request of the wrong shape for the API (e.g. messages on completions) fails at once as
  // kClient without touching the network.
  void send(const workload::Request& request, StreamSink* sink) override;
  void cancel_all() override;
  void cancel(StreamSink* sink) override;
  std::string describe() const override;
  // Pools up to `connections` keep-alive connections (net::HttpClient::preconnect), waiting at most
  // the connect timeout; nothing with keep_alive off.
  void prepare(size_t connections) override;
  // The IO thread (responses read, timestamps taken) to SCHED_FIFO 1 and back.
  bool set_realtime(bool on) override;
  uint64_t connections_opened() const;  // keep-alive reuse: connections opened so far

  struct Impl;

 private:
  explicit OpenAiTarget(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The JSON request body: model (if set), messages or prompt, max_tokens, temperature,
// ignore_eos, stream, and stream_options.include_usage when streaming.
Result<std::string> openai_request_body(const workload::Request& request, Api api, std::string_view model,
                                        bool show_special_tokens = false);

// What one SSE data payload of a streamed response says.
struct StreamEvent {
  bool done = false;           // the "[DONE]" terminator
  bool has_content = false;    // carries output text (delta.content / text), possibly empty
  std::string text;            // that text
  bool finished = false;       // a choice reported finish_reason
  std::optional<Usage> usage;  // a usage object (prompt_tokens, completion_tokens)
  // The server's timings object, read only from an event that ends the response (a finish_reason or
  // a usage object): plumb serve's "plumb_timings" or llama.cpp's "timings" (parse_server_timings).
  std::optional<metrics::ServerTimings> server_timings;
};
// kCorrupt (naming what is wrong) for data that is not a JSON object or that carries an "error".
// A timings object that cannot be read leaves server_timings empty: it is a cross-check, never a
// reason to fail the request.
Result<StreamEvent> parse_stream_event(std::string_view data, Api api);

// The server timings in a response's final object: "plumb_timings" {queue_ms, prefill_ms,
// decode_ms, completion_tokens} (plumb serve), else "timings" {prompt_ms, predicted_ms,
// predicted_n} (llama.cpp's llama-server; it reports no queue time). nullopt when there is none,
// or when a field is missing, not a number, or negative.
std::optional<metrics::ServerTimings> parse_server_timings(const json::object& response);

}  // namespace plumb::loadgen
