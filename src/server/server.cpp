#include "server/server.h"

#include <boost/json.hpp>
#include <ctime>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "core/json.h"
#include "core/log.h"
#include "net/http_server.h"
#include "net/sse.h"
#include "server/api.h"
#include "server/metrics.h"

namespace plumb::server {

using scheduler::FinishReason;
using scheduler::TokenEvent;

namespace {

// One completion in flight. Its mutex orders the IO thread's submit/start_stream against the
// engine thread's sink calls.
struct Stream {
  std::mutex mu;
  std::shared_ptr<net::ResponseWriter> writer;
  CompletionRequest req;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  scheduler::RequestId backend_id = 0;
  bool submitted = false;
  bool done = false;
  bool stopped_by_string = false;
  std::unique_ptr<TextAssembler> text;
  std::string body_text;               // non-stream: the text so far
  std::vector<LogprobEntry> logprobs;  // non-stream: every entry
  int64_t text_bytes_sent = 0;         // completions: for logprob text offsets
  std::vector<LogprobEntry> prompt_entries;
  bool echo_sent = false;           // stream + echo: the prompt chunk went out
  std::optional<PieceFrame> frame;  // stream without logprobs: the pieces' JSON around the text
};

std::string_view finish_reason_text(FinishReason r, bool stopped_by_string) {
  if (stopped_by_string) return "stop";
  return r == FinishReason::kLength ? "length" : "stop";
}

}  // namespace

struct OpenAiServer::Impl : std::enable_shared_from_this<OpenAiServer::Impl> {
  ServerOptions options;
  scheduler::ServingEngine& backend;
  const engine::Tokenizer& tokenizer;
  std::optional<engine::ChatTemplate> chat_template;
  std::unique_ptr<net::HttpServer> http;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> seq{0};
  uint64_t seed_base = 0;
  int64_t started = 0;
  ServerMetrics metrics;
  mutable std::mutex live_mu;
  std::map<uint64_t, std::shared_ptr<Stream>> live;  // responses still open

  Impl(ServerOptions o, scheduler::ServingEngine& b, const engine::Tokenizer& t)
      : options(std::move(o)), backend(b), tokenizer(t) {
    auto ct = engine::ChatTemplate::for_tokenizer(tokenizer);
    if (ct.ok()) chat_template.emplace(std::move(ct).value());
    std::random_device rd;
    seed_base = (uint64_t(rd()) << 32) ^ rd();
    started = int64_t(std::time(nullptr));
  }

  void send_error(net::ResponseWriter& w, const ApiError& e) {
    w.send(e.status, "application/json", e.body());
  }

  ParseContext parse_context() const {
    ParseContext c;
    c.tokenizer = &tokenizer;
    c.chat_template = chat_template ? &*chat_template : nullptr;
    c.served_model = options.served_model_name;
    c.max_context = backend.max_context();
    c.eos_ids = tokenizer.eos_ids();
    c.debug_eos_after = options.debug_eos_after;
    return c;
  }

  // --- JSON bodies ---

  ChunkHeader chunk_header(const Stream& s) const {
    return {s.id, s.req.chat, s.created, options.served_model_name};
  }

  json::object chunk_base(const Stream& s) const { return server::chunk_base(chunk_header(s)); }

  json::object usage_json(const Stream& s, int64_t completion_tokens) const {
    json::object u;
    int64_t p = int64_t(s.req.prompt_ids.size());
    u["prompt_tokens"] = p;
    u["completion_tokens"] = completion_tokens;
    u["total_tokens"] = p + completion_tokens;
    return u;
  }

  json::value logprobs_json(const Stream& s, const std::vector<LogprobEntry>& entries,
                            int64_t offset0) const {
    if (!s.req.want_logprobs) return nullptr;
    return s.req.chat ? chat_logprobs_json(entries) : completion_logprobs_json(entries, offset0);
  }

  // One streamed text piece (no finish reason). Without logprobs (every event of a plain stream)
  // the chunk's JSON around the text is built once per response (PieceFrame).
  std::string sse_piece(Stream& s, const std::string& text, const std::vector<LogprobEntry>& entries) {
    const int64_t offset0 = s.text_bytes_sent;
    s.text_bytes_sent += int64_t(text.size());
    if (!s.req.want_logprobs) {
      if (!s.frame) s.frame.emplace(chunk_header(s));
      return s.frame->event(text);
    }
    return net::sse_format_data(
        json::dump(piece_chunk(chunk_header(s), text, logprobs_json(s, entries, offset0))));
  }

  // --- the sink ---

  // One engine event for one request: a cancellation or a failure ends it at once; otherwise the
  // event's text goes out (or into the body), and a final event completes the response.
  void on_event(const std::shared_ptr<Stream>& sp, TokenEvent&& ev) {
    Stream& s = *sp;
    std::lock_guard lock(s.mu);
    if (s.done) return;
    if (ev.finished && ev.reason == FinishReason::kCancelled && !s.stopped_by_string) return end_cancelled(s);
    if (ev.finished && ev.reason == FinishReason::kError) return end_failed(s, ev);
    take_prompt_logprobs(s, ev);
    emit_text(s, ev);
    if (!ev.finished) return;
    s.done = true;
    int64_t completion_tokens = s.text->tokens();
    std::string_view reason = finish_reason_text(ev.reason, s.stopped_by_string || s.text->stopped());
    metrics.record(ev.timings, completion_tokens);
    json::object timings = timings_json(ev.timings, completion_tokens);
    if (s.req.stream) {
      end_stream(s, reason, completion_tokens, timings);
    } else {
      send_body(s, reason, completion_tokens, std::move(timings));
    }
    forget(s);
  }

  // The client went away, or the server is shutting down. Caller holds s.mu.
  void end_cancelled(Stream& s) {
    s.done = true;
    metrics.cancelled++;
    if (!s.writer->is_closed()) {
      if (s.req.stream) {
        s.writer->end();
      } else {
        ApiError e;
        e.status = 503;
        e.type = "server_error";
        e.message = "the request was cancelled (server shutting down)";
        send_error(*s.writer, e);
      }
    }
    forget(s);
  }

  // 500: the server (its model) failed, not the request. A stream already sent its 200 head: it
  // ends with this error body as its last event before [DONE], and no finish_reason. Caller holds s.mu.
  void end_failed(Stream& s, const TokenEvent& ev) {
    s.done = true;
    metrics.failed++;
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = "inference failed: " + ev.error.message();
    if (engine::is_nonfinite_logits(ev.error)) {
      metrics.nonfinite_logits++;
      e.code = "nonfinite_logits";
    } else {
      metrics.other_errors++;
    }
    if (s.req.stream) {
      s.writer->write(net::sse_format_data(e.body()));
      s.writer->write(net::sse_format_data("[DONE]"));
      s.writer->end();
    } else {
      send_error(*s.writer, e);
    }
    forget(s);
  }

  // Echo with logprobs: the prompt's entries (the first prompt token has no logprob), streamed
  // once they exist. Caller holds s.mu.
  void take_prompt_logprobs(Stream& s, const TokenEvent& ev) {
    if (!ev.prompt_logprobs.empty() ||
        (s.req.prompt_logprobs && s.prompt_entries.empty() && !ev.tokens.empty())) {
      LogprobEntry first;
      int32_t t0 = s.req.prompt_ids[0];
      first.token = tokenizer.decode(std::span<const int32_t>(&t0, 1));
      s.prompt_entries.push_back(std::move(first));
      for (const auto& lp : ev.prompt_logprobs) s.prompt_entries.push_back(logprob_entry(tokenizer, lp));
    }
    if (s.req.stream && s.req.echo && !s.echo_sent && !s.prompt_entries.empty()) {
      // Echo with logprobs streams the prompt once its logprobs exist (the engine's first event),
      // as vLLM does: the first chunk carries the prompt text and one entry per prompt token.
      s.echo_sent = true;
      s.writer->write(sse_piece(s, s.req.prompt_text, s.prompt_entries));
    }
  }

  // The event's tokens as text (cut at a stop string, which cancels the request at the engine):
  // one SSE chunk when streaming, else appended to the body. Caller holds s.mu.
  void emit_text(Stream& s, const TokenEvent& ev) {
    std::string piece;
    if (!s.stopped_by_string) {
      piece = s.text->push(ev.tokens, ev.logprobs);
      if (s.text->stopped() && !ev.finished) {
        s.stopped_by_string = true;
        backend.cancel(s.backend_id);  // its final (cancelled) event ends the response
      }
    }
    if (ev.finished) piece += s.text->finish();
    std::vector<LogprobEntry> entries = s.text->take_logprobs();
    if (s.req.stream) {
      if (!piece.empty() || !entries.empty()) s.writer->write(sse_piece(s, piece, entries));
    } else {
      s.body_text += piece;
      for (auto& e : entries) s.logprobs.push_back(std::move(e));
    }
  }

  // The final chunk with finish_reason, the usage chunk if asked for, [DONE]. Caller holds s.mu.
  void end_stream(Stream& s, std::string_view reason, int64_t completion_tokens,
                  const json::object& timings) {
    json::object o = chunk_base(s);
    json::object choice;
    choice["index"] = 0;
    if (s.req.chat) {
      choice["delta"] = json::object();
    } else {
      choice["text"] = "";
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = reason;
    json::array choices;
    choices.push_back(std::move(choice));
    o["choices"] = std::move(choices);
    o["plumb_timings"] = timings;
    s.writer->write(net::sse_format_data(json::dump(o)));
    if (s.req.include_usage) {
      json::object u = chunk_base(s);
      u["choices"] = json::array();
      u["usage"] = usage_json(s, completion_tokens);
      u["plumb_timings"] = timings;
      s.writer->write(net::sse_format_data(json::dump(u)));
    }
    s.writer->write(net::sse_format_data("[DONE]"));
    s.writer->end();
  }

  // The whole non-streamed response. Caller holds s.mu.
  void send_body(Stream& s, std::string_view reason, int64_t completion_tokens, json::object timings) {
    json::object o;
    o["id"] = s.id;
    o["object"] = s.req.chat ? "chat.completion" : "text_completion";
    o["created"] = s.created;
    o["model"] = options.served_model_name;
    json::object choice;
    choice["index"] = 0;
    if (s.req.chat) {
      json::object msg;
      msg["role"] = "assistant";
      msg["content"] = s.body_text;
      choice["message"] = std::move(msg);
      choice["logprobs"] = logprobs_json(s, s.logprobs, 0);
    } else {
      std::string text = s.req.echo ? s.req.prompt_text + s.body_text : s.body_text;
      std::vector<LogprobEntry> all;
      if (s.req.echo && s.req.want_logprobs) {
        all = s.prompt_entries;
      }
      for (auto& e : s.logprobs) all.push_back(e);
      choice["text"] = text;
      choice["logprobs"] = logprobs_json(s, all, 0);
    }
    choice["finish_reason"] = reason;
    json::array choices;
    choices.push_back(std::move(choice));
    o["choices"] = std::move(choices);
    o["usage"] = usage_json(s, completion_tokens);
    o["plumb_timings"] = std::move(timings);
    s.writer->send(200, "application/json", json::dump(o));
  }

  void forget(Stream& s) {
    std::lock_guard l(live_mu);
    live.erase(s.backend_id);
  }

  // --- handlers ---

  void completion(const net::Request& req, const std::shared_ptr<net::ResponseWriter>& w, bool chat) {
    if (draining.load()) {
      ApiError e;
      e.status = 503;
      e.type = "server_error";
      e.message = "the server is shutting down";
      return send_error(*w, e);
    }
    auto parsed = parse_completion(req.body, chat, parse_context());
    if (auto* err = std::get_if<ApiError>(&parsed)) {
      metrics.bad_requests++;
      return send_error(*w, *err);
    }
    auto sp = std::make_shared<Stream>();
    Stream& s = *sp;
    s.req = std::move(std::get<CompletionRequest>(parsed));
    s.writer = w;
    uint64_t n = seq.fetch_add(1);
    s.id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(started) + "-" + std::to_string(n);
    s.created = int64_t(std::time(nullptr));
    s.text = std::make_unique<TextAssembler>(tokenizer, s.req.stop, s.req.want_logprobs,
                                             s.req.skip_special_tokens, s.req.min_tokens);

    scheduler::GenerationRequest g;
    g.prompt = s.req.prompt_ids;
    g.sampling = s.req.sampling;
    if (!s.req.seeded) g.sampling.seed = seed_base + n * 0x9e3779b97f4a7c15ULL;
    g.prompt_logprobs = s.req.prompt_logprobs;
    std::weak_ptr<Impl> weak = weak_from_this();
    g.sink = [weak, sp](TokenEvent&& ev) {
      if (auto self = weak.lock()) self->on_event(sp, std::move(ev));
    };

    std::lock_guard lock(s.mu);
    auto id = backend.submit(std::move(g));
    if (!id.ok()) {
      s.done = true;
      return send_error(*w, submit_error(id.status()));
    }
    s.backend_id = *id;
    s.submitted = true;
    {
      std::lock_guard l(live_mu);
      live[s.backend_id] = sp;
    }
    scheduler::RequestId bid = *id;
    w->on_close([weak, bid] {
      if (auto self = weak.lock()) {
        self->metrics.disconnects++;
        self->backend.cancel(bid);
      }
    });
    if (s.req.stream) open_stream(s, *w, chat);
  }

  // The engine refused the request: 400 for a bad one, 429 when its queue is full, 503 while it
  // stops, 500 otherwise.
  ApiError submit_error(const Status& st) {
    ApiError e;
    e.message = st.message();
    switch (st.code()) {
      case Code::kInvalidArgument:
        e.status = 400;
        break;
      case Code::kResourceExhausted:
        e.status = 429;
        e.type = "rate_limit_error";
        e.code = "queue_full";
        metrics.rejected++;
        break;
      case Code::kUnavailable:
        e.status = 503;
        e.type = "server_error";
        break;
      default:
        e.status = 500;
        e.type = "server_error";
        break;
    }
    return e;
  }

  // The stream's head and its first chunk: the assistant's role for chat, the prompt for echo
  // without logprobs. Caller holds s.mu.
  void open_stream(Stream& s, net::ResponseWriter& w, bool chat) {
    w.start_stream(200, "text/event-stream");
    if (chat) {
      json::object o = chunk_base(s);
      json::object choice;
      choice["index"] = 0;
      json::object delta;
      delta["role"] = "assistant";
      delta["content"] = "";
      choice["delta"] = std::move(delta);
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = nullptr;
      json::array choices;
      choices.push_back(std::move(choice));
      o["choices"] = std::move(choices);
      w.write(net::sse_format_data(json::dump(o)));
    } else if (s.req.echo && !s.req.prompt_logprobs) {
      // Without logprobs the prompt goes out at once; with them, on_event sends it together with
      // the prompt logprobs.
      s.echo_sent = true;
      w.write(sse_piece(s, s.req.prompt_text, {}));
    }
  }

  void models(const std::shared_ptr<net::ResponseWriter>& w) {
    json::object m;
    m["id"] = options.served_model_name;
    m["object"] = "model";
    m["created"] = started;
    m["owned_by"] = "plumb";
    m["root"] = options.served_model_name;
    m["max_model_len"] = backend.max_context();
    auto d = json::parse(backend.describe());
    if (d.ok()) m["plumb"] = *d;
    json::array data;
    data.push_back(std::move(m));
    json::object o;
    o["object"] = "list";
    o["data"] = std::move(data);
    w->send(200, "application/json", json::dump(o));
  }

  void health(const std::shared_ptr<net::ResponseWriter>& w) {
    scheduler::ServingStats st = backend.stats();
    json::object o;
    bool d = draining.load();
    o["status"] = d ? "draining" : "ok";
    o["model"] = options.served_model_name;
    o["max_model_len"] = backend.max_context();
    o["running"] = st.running;
    o["waiting"] = st.waiting;
    o["kv_cache_usage"] = st.kv_usage();
    auto desc = json::parse(backend.describe());
    if (desc.ok()) o["engine"] = *desc;
    w->send(d ? 503 : 200, "application/json", json::dump(o));
  }

  void tokenize(const net::Request& req, const std::shared_ptr<net::ResponseWriter>& w) {
    auto parsed = json::parse_object(req.body);
    if (!parsed.ok())
      return send_error(*w, bad_request("the body is not valid JSON: " + parsed.status().message()));
    const json::object& o = *parsed;
    std::optional<bool> add_special, add_gen;
    if (auto r = json::opt_bool(o, "add_special_tokens"); !r.ok()) {
      return send_error(*w, bad_request(r.status().message(), "add_special_tokens"));
    } else {
      add_special = *r;
    }
    if (auto r = json::opt_bool(o, "add_generation_prompt"); !r.ok()) {
      return send_error(*w, bad_request(r.status().message(), "add_generation_prompt"));
    } else {
      add_gen = *r;
    }
    std::vector<int32_t> ids;
    if (o.contains("messages")) {
      // Reuse the chat parser for the messages; only the ids matter.
      json::object body = o;
      body.erase("max_tokens");
      body.erase("max_completion_tokens");
      ParseContext ctx = parse_context();
      ctx.max_context = INT64_MAX / 4;
      body["max_tokens"] = 1;
      if (!add_gen.value_or(true)) {
        // Render without the generation prompt.
        std::vector<engine::ChatMessage> msgs;
        if (!o.at("messages").is_array())
          return send_error(*w, bad_request("'messages' must be a list", "messages"));
        for (const auto& m : o.at("messages").as_array()) {
          if (!m.is_object() || !m.as_object().contains("role") || !m.as_object().at("role").is_string() ||
              !m.as_object().contains("content") || !m.as_object().at("content").is_string()) {
            return send_error(*w, bad_request("each message needs string 'role' and 'content'", "messages"));
          }
          msgs.push_back({std::string(m.as_object().at("role").as_string()),
                          std::string(m.as_object().at("content").as_string())});
        }
        if (!chat_template) return send_error(*w, bad_request("this model has no chat template", "messages"));
        auto text = chat_template->apply(msgs, false);
        if (!text.ok()) return send_error(*w, bad_request(text.status().message(), "messages"));
        ids = tokenizer.encode(*text, false);
      } else {
        auto p = parse_completion(json::dump(body), true, ctx);
        if (auto* err = std::get_if<ApiError>(&p)) return send_error(*w, *err);
        ids = std::get<CompletionRequest>(p).prompt_ids;
      }
    } else {
      std::optional<std::string> prompt;
      if (auto r = json::opt_string(o, "prompt"); !r.ok()) {
        return send_error(*w, bad_request(r.status().message(), "prompt"));
      } else {
        prompt = *r;
      }
      if (!prompt)
        return send_error(*w, bad_request("field 'prompt' (a string) or 'messages' is required", "prompt"));
      ids = tokenizer.encode(*prompt, add_special.value_or(true));
    }
    json::object out;
    out["count"] = int64_t(ids.size());
    out["max_model_len"] = backend.max_context();
    json::array a;
    for (int32_t id : ids) a.push_back(int64_t(id));
    out["tokens"] = std::move(a);
    w->send(200, "application/json", json::dump(out));
  }

  void detokenize(const net::Request& req, const std::shared_ptr<net::ResponseWriter>& w) {
    auto parsed = json::parse_object(req.body);
    if (!parsed.ok())
      return send_error(*w, bad_request("the body is not valid JSON: " + parsed.status().message()));
    auto it = parsed->find("tokens");
    if (it == parsed->end() || !it->value().is_array()) {
      return send_error(*w, bad_request("field 'tokens' must be a list of token ids", "tokens"));
    }
    std::vector<int32_t> ids;
    int32_t vocab = tokenizer.vocab_size();
    for (const auto& v : it->value().as_array()) {
      if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() >= vocab) {
        return send_error(
            *w, bad_request("field 'tokens' must hold token ids in [0, " + std::to_string(vocab) + ")",
                            "tokens"));
      }
      ids.push_back(int32_t(v.as_int64()));
    }
    json::object out;
    out["prompt"] = tokenizer.decode(ids);
    w->send(200, "application/json", json::dump(out));
  }

  void metrics_page(const std::shared_ptr<net::ResponseWriter>& w) {
    std::string page = metrics.render(options.served_model_name, backend.stats());
    const net::HttpServerStats h = http->stats();
    const std::string labels = "{model_name=\"" + options.served_model_name + "\"}";
    auto line = [&](const char* name, const char* type, const char* help, uint64_t v) {
      page += std::string("# HELP plumb:") + name + " " + help + "\n# TYPE plumb:" + name + " " + type +
              "\nplumb:" + name + labels + " " + std::to_string(v) + "\n";
    };
    line("http_connections_open", "gauge", "HTTP connections open.", h.connections_open);
    line("http_connections_rejected_total", "counter",
         "HTTP connections answered 503 because --max-connections were open.", h.connections_rejected);
    line("http_accept_errors_total", "counter", "accept() failures (e.g. out of file descriptors).",
         h.accept_errors);
    w->send(200, "text/plain; version=0.0.4", page);
  }

  // Wraps a handler so nothing escapes it.
  template <typename F>
  net::Handler guarded(F f) {
    std::weak_ptr<Impl> weak = weak_from_this();
    return [weak, f](const net::Request& req, std::shared_ptr<net::ResponseWriter> w) {
      auto self = weak.lock();
      if (!self) return;
      try {
        f(*self, req, w);
      } catch (const std::exception& e) {
        log::error("event=handler_exception path={} what=\"{}\"", req.path, e.what());
        ApiError err;
        err.status = 500;
        err.type = "server_error";
        err.message = std::string("internal error: ") + e.what();
        w->send(err.status, "application/json", err.body());
      }
    };
  }
};

OpenAiServer::OpenAiServer(ServerOptions options, scheduler::ServingEngine& backend,
                           const engine::Tokenizer& tokenizer)
    : impl_(std::make_shared<Impl>(std::move(options), backend, tokenizer)) {
  net::HttpServerOptions ho;
  ho.host = impl_->options.host;
  ho.port = impl_->options.port;
  ho.io_threads = impl_->options.io_threads;
  ho.max_body_bytes = impl_->options.max_body_bytes;
  ho.max_connections = impl_->options.max_connections;
  ho.idle_timeout = impl_->options.idle_timeout;
  ho.header_timeout = impl_->options.header_timeout;
  ho.body_timeout = impl_->options.body_timeout;
  impl_->http = std::make_unique<net::HttpServer>(ho);
  auto& h = *impl_->http;
  h.route("GET", "/v1/models", impl_->guarded([](Impl& i, const net::Request&, auto w) { i.models(w); }));
  h.route("POST", "/v1/completions",
          impl_->guarded([](Impl& i, const net::Request& r, auto w) { i.completion(r, w, false); }));
  h.route("POST", "/v1/chat/completions",
          impl_->guarded([](Impl& i, const net::Request& r, auto w) { i.completion(r, w, true); }));
  h.route("POST", "/tokenize",
          impl_->guarded([](Impl& i, const net::Request& r, auto w) { i.tokenize(r, w); }));
  h.route("POST", "/detokenize",
          impl_->guarded([](Impl& i, const net::Request& r, auto w) { i.detokenize(r, w); }));
  h.route("GET", "/health", impl_->guarded([](Impl& i, const net::Request&, auto w) { i.health(w); }));
  h.route("GET", "/metrics", impl_->guarded([](Impl& i, const net::Request&, auto w) { i.metrics_page(w); }));
  // A known path with another method is 405 with Allow (as vLLM answers), anything else 404.
  static const std::map<std::string, std::string> kAllowed = {
      {"/v1/models", "GET"}, {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
      {"/tokenize", "POST"}, {"/detokenize", "POST"},     {"/health", "GET"},
      {"/metrics", "GET"}};
  h.set_fallback([](const net::Request& r, const std::shared_ptr<net::ResponseWriter>& w) {
    ApiError e;
    if (auto it = kAllowed.find(r.path); it != kAllowed.end()) {
      e.status = 405;
      e.message = "method " + r.method + " is not allowed on " + r.path + "; use " + it->second;
      e.code = "method_not_allowed";
      w->send(405, "application/json", e.body(), {{"Allow", it->second}});
      return;
    }
    e.status = 404;
    e.message = "no endpoint " + r.method + " " + r.path;
    e.code = "not_found";
    w->send(404, "application/json", e.body());
  });
}

OpenAiServer::~OpenAiServer() { impl_->http->stop(std::chrono::milliseconds(0)); }

Status OpenAiServer::start() { return impl_->http->start(); }
uint16_t OpenAiServer::port() const { return impl_->http->port(); }

int64_t OpenAiServer::in_flight() const {
  std::lock_guard l(impl_->live_mu);
  return int64_t(impl_->live.size());
}

void OpenAiServer::drain(std::chrono::milliseconds bound) {
  impl_->draining.store(true);
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (in_flight() > 0) {
    std::vector<scheduler::RequestId> ids;
    {
      std::lock_guard l(impl_->live_mu);
      for (auto& [id, s] : impl_->live) ids.push_back(id);
    }
    log::warn("event=drain_timeout cancelling={}", ids.size());
    for (auto id : ids) impl_->backend.cancel(id);
    auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (in_flight() > 0 && std::chrono::steady_clock::now() < hard) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  impl_->http->stop(std::chrono::milliseconds(1000));
}

}  // namespace plumb::server
