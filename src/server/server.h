// The OpenAI-compatible HTTP server: a thin adapter from net/'s HttpServer to an ServingEngine.
//
// Endpoints: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (stream and not),
// POST /tokenize, POST /detokenize, GET /health, GET /metrics (Prometheus text). Every completion
// response carries "plumb_timings" (queue_ms, prefill_ms, decode_ms, prompt_tokens,
// completion_tokens, cached_prompt_tokens, preemptions): in the body, or in the final SSE chunk.
// Errors are OpenAI error bodies: 400 bad JSON/parameters, 404 unknown model or path, 429 queue
// full, 503 draining or too many connections, 500 a backend failure (code "nonfinite_logits" when
// the model's logits were NaN or Inf). A client that disconnects mid-request cancels it
// (its KV blocks are freed). Handlers never throw across the HTTP boundary.
//
// Threading: IO threads (net/) parse requests and submit them; the backend's thread produces
// tokens and writes SSE chunks through the thread-safe ResponseWriter. Methods are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/scheduler/serving_engine.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace plumb::server {

struct ServerOptions {
  std::string host = "127.0.0.1";          // bind address
  uint16_t port = 8000;                    // 0 = any free port (read it back with port())
  int io_threads = 2;                      // HTTP IO threads (separate from the engine thread)
  std::string served_model_name;           // the model id clients send and /v1/models lists
  std::size_t max_body_bytes = 16u << 20;  // larger request bodies get 413
  // Connections at once; past it a new one gets 503 (code "too_many_connections"). 0 = from the
  // file-descriptor limit (net::default_max_connections: the soft limit minus min(128, limit/2)).
  std::size_t max_connections = 0;
  std::chrono::milliseconds idle_timeout{60'000};    // keep-alive (or new) connection waiting for a request
  std::chrono::milliseconds header_timeout{60'000};  // a request head, from its first byte
  std::chrono::milliseconds body_timeout{60'000};    // a request body, after its head
  // Debugging (`plumb serve --debug-eos-after F`), 0 = off: behave like a server that ignores
  // ignore_eos, as the naive baselines of some benchmarks do. ParseContext::debug_eos_after.
  double debug_eos_after = 0.0;
};

class OpenAiServer {
 public:
  // The backend and tokenizer are borrowed and must outlive the server. The chat template comes
  // from the tokenizer; without one, chat requests get 400.
  OpenAiServer(ServerOptions options, scheduler::ServingEngine& backend, const engine::Tokenizer& tokenizer);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds and starts serving. IoError when the address cannot be bound.
  Status start();
  uint16_t port() const;
  // Graceful drain: new completions get 503, requests in flight get up to `bound` to finish
  // (then they are cancelled), then the HTTP server stops. Idempotent; not from an IO thread.
  void drain(std::chrono::milliseconds bound);
  // Requests with a response still open.
  int64_t in_flight() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace plumb::server
