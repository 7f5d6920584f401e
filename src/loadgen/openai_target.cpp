#include "loadgen/openai_target.h"

#include <pthread.h>
#include <sched.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <thread>
#include <unordered_map>

#include "core/json.h"
#include "net/http_client.h"
#include "net/sse.h"

namespace plumb::loadgen {

namespace asio = boost::asio;

Result<std::string> openai_request_body(const workload::Request& r, Api api, std::string_view model,
                                        bool show_special_tokens) {
  json::object o;
  if (!model.empty()) o["model"] = model;
  if (api == Api::kChat) {
    if (r.prompt) return invalid_argument("a completions request (prompt) cannot go to the chat API");
    json::array msgs;
    for (const auto& m : r.messages) {
      json::object mo;
      mo["role"] = m.role;
      mo["content"] = m.content;
      msgs.emplace_back(std::move(mo));
    }
    o["messages"] = std::move(msgs);
  } else {
    if (!r.prompt) return invalid_argument("a chat request (messages) cannot go to the completions API");
    o["prompt"] = *r.prompt;
  }
  o["max_tokens"] = r.max_tokens;
  o["temperature"] = r.temperature;
  o["ignore_eos"] = r.ignore_eos;
  if (show_special_tokens) o["skip_special_tokens"] = false;
  o["stream"] = r.stream;
  if (r.stream) {
    json::object so;
    so["include_usage"] = true;
    o["stream_options"] = std::move(so);
  }
  return json::dump(o);
}

Result<StreamEvent> parse_stream_event(std::string_view data, Api api) {
  StreamEvent ev;
  if (data == "[DONE]") {
    ev.done = true;
    return ev;
  }
  auto parsed = json::parse_object(data);
  if (!parsed.ok()) return corrupt("stream event is not a JSON object: " + parsed.status().message());
  const json::object& o = *parsed;
  if (auto it = o.find("error"); it != o.end() && !it->value().is_null()) {
    std::string msg = json::dump(it->value());
    if (msg.size() > 200) msg.resize(200);
    return corrupt("error inside the stream: " + msg);
  }
  if (auto it = o.find("choices"); it != o.end() && it->value().is_array()) {
    for (const auto& ch : it->value().as_array()) {
      if (!ch.is_object()) return corrupt("a choice is not an object");
      const auto& c = ch.as_object();
      const json::value* text = nullptr;
      if (api == Api::kChat) {
        if (auto d = c.find("delta"); d != c.end() && d->value().is_object()) {
          if (auto t = d->value().as_object().find("content"); t != d->value().as_object().end())
            text = &t->value();
        }
      } else if (auto t = c.find("text"); t != c.end()) {
        text = &t->value();
      }
      if (text && text->is_string()) {
        ev.has_content = true;
        ev.text += std::string_view(text->as_string());
      } else if (text && !text->is_null()) {
        return corrupt("content is not a string");
      }
      if (auto f = c.find("finish_reason"); f != c.end() && !f->value().is_null()) ev.finished = true;
    }
  } else if (it != o.end() && !it->value().is_null()) {
    return corrupt("'choices' is not an array");
  }
  if (auto u = o.find("usage"); u != o.end() && u->value().is_object()) {
    auto p = json::opt_int(u->value().as_object(), "prompt_tokens");
    auto c = json::opt_int(u->value().as_object(), "completion_tokens");
    if (!p.ok() || !c.ok()) return corrupt("bad usage object");
    ev.usage = Usage{p->value_or(-1), c->value_or(-1)};
  }
  if (ev.finished || ev.usage) ev.server_timings = parse_server_timings(o);
  return ev;
}

std::optional<metrics::ServerTimings> parse_server_timings(const json::object& response) {
  // A field that is present, a number and >= 0.
  auto field = [](const json::object& o, std::string_view key) -> std::optional<double> {
    auto v = json::opt_double(o, key);
    if (!v.ok() || !v->has_value() || !(**v >= 0.0)) return std::nullopt;
    return **v;
  };
  metrics::ServerTimings t;
  std::optional<double> queue = 0.0, prefill, decode, n;
  if (auto it = response.find("plumb_timings"); it != response.end() && it->value().is_object()) {
    const auto& o = it->value().as_object();
    t.source = metrics::ServerClock::kPlumb;
    queue = field(o, "queue_ms");
    prefill = field(o, "prefill_ms");
    decode = field(o, "decode_ms");
    n = field(o, "completion_tokens");
  } else if (auto jt = response.find("timings"); jt != response.end() && jt->value().is_object()) {
    const auto& o = jt->value().as_object();
    t.source = metrics::ServerClock::kLlamaCpp;
    prefill = field(o, "prompt_ms");
    decode = field(o, "predicted_ms");
    n = field(o, "predicted_n");
  } else {
    return std::nullopt;
  }
  if (!queue || !prefill || !decode || !n) return std::nullopt;
  t.queue_ms = *queue;
  t.prefill_ms = *prefill;
  t.decode_ms = *decode;
  t.completion_tokens = int64_t(*n);
  return t;
}

namespace {
Failure map_failure(net::FailureKind k, int status) {
  using K = net::FailureKind;
  switch (k) {
    case K::kNone:
      return Failure::kNone;
    case K::kConnectRefused:
    case K::kConnectError:
    case K::kConnectTimeout:
      return Failure::kConnect;
    case K::kFirstByteTimeout:
    case K::kIdleTimeout:
    case K::kTotalTimeout:
      return Failure::kTimeout;
    case K::kReset:
    case K::kClosedBeforeEnd:
    case K::kIoError:
      return Failure::kReset;
    case K::kMalformedResponse:
      return Failure::kMalformed;
    case K::kHttpStatus:
      return status >= 500 ? Failure::kHttp5xx : Failure::kHttp4xx;
    case K::kCancelled:
      return Failure::kCancelled;
  }
  return Failure::kClient;
}

// State of one request; lives on the IO thread.
struct Stream {
  StreamSink* sink = nullptr;
  net::SseParser parser;
  std::vector<net::SseEvent> events;
  bool reported = false;  // the sink got its final call
  bool done_seen = false;
  bool stream = true;  // false: one JSON body instead of SSE
  net::HttpClient::RequestId id = 0;
};
}  // namespace

struct OpenAiTarget::Impl {
  OpenAiTargetOptions opts;
  std::string path;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::unique_ptr<net::HttpClient> client;
  std::unordered_map<uint64_t, std::shared_ptr<Stream>> live;  // IO thread only
  uint64_t next_key = 0;                                       // IO thread only
  std::atomic<uint64_t> connections{0};
  std::thread thread;
  bool realtime = false;  // set_realtime(true) took effect; old_* is what to restore
  int old_policy = SCHED_OTHER;
  sched_param old_param{};

  void fail(Stream& s, SteadyTime t, Failure f, int status, std::string msg) {
    if (s.reported) return;
    s.reported = true;
    s.sink->on_failure(t, f, status, std::move(msg));
  }

  void on_body(const std::shared_ptr<Stream>& s, uint64_t key, std::string_view bytes, SteadyTime at) {
    if (s->reported) return;
    s->events.clear();
    Status st = s->parser.feed(bytes, s->events);
    for (const auto& e : s->events) {
      if (s->reported) break;
      auto ev = parse_stream_event(e.data, opts.api);
      if (!ev.ok()) {
        fail(*s, at, Failure::kMalformed, 200, ev.status().message());
        break;
      }
      if (ev->done) {
        s->done_seen = true;
        continue;
      }
      if (ev->has_content) {
        int32_t tokens = 0;
        if (opts.count_tokens) {
          auto n = opts.count_tokens(ev->text);
          if (!n.ok()) {
            fail(*s, at, Failure::kClient, 200, n.status().message());
            break;
          }
          tokens = int32_t(*n);
        } else {
          tokens = ev->text.empty() ? 0 : 1;
        }
        s->sink->on_chunk(at, tokens, ev->text);
      }
      if (ev->usage) s->sink->on_usage(*ev->usage);
      if (ev->server_timings) s->sink->on_server_timings(*ev->server_timings);
    }
    if (!st.ok()) fail(*s, at, Failure::kMalformed, 200, st.message());
    if (s->reported) {
      // Stop reading a broken stream; cancel from a fresh handler, not from inside the callback.
      asio::post(io, [this, key] {
        auto it = live.find(key);
        if (it != live.end()) client->cancel(it->second->id);
      });
    }
  }

  void on_done(const std::shared_ptr<Stream>& s, uint64_t key, net::ClientResult&& r) {
    live.erase(key);
    ended = true;
    if (s->reported) return;
    if (!r.reused_connection && r.times.connected != SteadyTime{})
      s->sink->on_connect(r.times.connected - r.times.start);
    SteadyTime end = r.times.end;
    if (!r.ok()) {
      std::string msg = std::string(net::failure_name(r.failure)) + (r.error.empty() ? "" : ": " + r.error);
      if (r.failure == net::FailureKind::kHttpStatus && !r.body.empty()) msg += ": " + r.body.substr(0, 200);
      fail(*s, end, map_failure(r.failure, r.head.status), r.head.status, std::move(msg));
      return;
    }
    if (!s->stream) return finish_whole(*s, end, r);
    s->events.clear();
    Status st = s->parser.finish(s->events);
    for (const auto& e : s->events) {
      if (e.data == "[DONE]") s->done_seen = true;
    }
    if (!st.ok()) return fail(*s, end, Failure::kMalformed, r.head.status, st.message());
    if (!s->done_seen)
      return fail(*s, end, Failure::kIncomplete, r.head.status, "the stream ended without data: [DONE]");
    s->reported = true;
    s->sink->on_end(end);
  }

  // A non-streamed response: one chunk with the whole text at the end. Its local count needs
  // count_tokens; without it the chunk carries the server's completion_tokens (no independent check).
  void finish_whole(Stream& s, SteadyTime end, const net::ClientResult& r) {
    auto body = json::parse_object(r.body);
    if (!body.ok()) return fail(s, end, Failure::kMalformed, r.head.status, "response is not a JSON object");
    std::string text;
    if (auto it = body->find("choices"); it != body->end() && it->value().is_array()) {
      for (const auto& ch : it->value().as_array()) {
        if (!ch.is_object()) continue;
        const auto& c = ch.as_object();
        if (auto m = c.find("message"); m != c.end() && m->value().is_object()) {
          if (auto t = m->value().as_object().find("content");
              t != m->value().as_object().end() && t->value().is_string())
            text += std::string_view(t->value().as_string());
        } else if (auto t = c.find("text"); t != c.end() && t->value().is_string()) {
          text += std::string_view(t->value().as_string());
        }
      }
    } else {
      return fail(s, end, Failure::kMalformed, r.head.status, "response has no 'choices' array");
    }
    auto ev = parse_stream_event(r.body, opts.api);  // reads usage the same way as a stream event
    std::optional<Usage> usage = ev.ok() ? ev->usage : std::nullopt;
    if (ev.ok() && ev->server_timings) s.sink->on_server_timings(*ev->server_timings);
    int64_t tokens = 0;
    if (opts.count_tokens) {
      auto n = opts.count_tokens(text);
      if (!n.ok()) return fail(s, end, Failure::kClient, r.head.status, n.status().message());
      tokens = *n;
    } else if (usage) {
      tokens = usage->completion_tokens;
    }
    s.sink->on_chunk(end, int32_t(tokens), text);
    if (usage) s.sink->on_usage(*usage);
    s.reported = true;
    s.sink->on_end(end);
  }

  // The IO thread. After a request ends, the driver's next send (the slot it freed) usually follows
  // within tens of microseconds: polling for it instead of sleeping in epoll spares that send a
  // thread wake-up (tens of microseconds on a VM), which would otherwise land in its TTFT. The
  // poll runs whatever is ready meanwhile and gives up after kSpinAfterEnd.
  static constexpr std::chrono::microseconds kSpinAfterEnd{100};
  bool ended = false;      // a request ended since the last poll window; IO thread only
  bool submitted = false;  // a send was taken up during the window; IO thread only
  void run() {
    for (;;) {
      if (io.run_one() == 0) return;  // stopped: no work left
      if (!ended) continue;
      ended = false;
      submitted = false;
      const SteadyTime until = std::chrono::steady_clock::now() + kSpinAfterEnd;
      while (!submitted && std::chrono::steady_clock::now() < until) {
        if (io.poll_one() == 0 && io.stopped()) return;
      }
    }
  }

  void submit(std::string body, bool stream, StreamSink* sink) {
    submitted = true;
    auto s = std::make_shared<Stream>();
    s->sink = sink;
    s->stream = stream;
    uint64_t key = next_key++;
    net::ClientRequest req;
    req.method = "POST";
    req.target = path;
    req.body = std::move(body);
    req.timeouts.connect = opts.connect_timeout;
    req.timeouts.first_byte = opts.first_byte_timeout;
    req.timeouts.idle = opts.idle_timeout;
    req.headers.emplace_back("Accept", stream ? "text/event-stream" : "application/json");
    if (!opts.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + opts.api_key);
    if (std::string id = sink->request_id(); !id.empty())
      req.headers.emplace_back("X-Request-Id", std::move(id));
    if (!opts.keep_alive) req.headers.emplace_back("Connection", "close");
    net::ClientCallbacks cbs;
    cbs.on_head = [s](const net::ResponseHead&, SteadyTime at) {
      if (!s->reported) s->sink->on_first_byte(at);
    };
    if (stream) cbs.on_body = [this, s, key](std::string_view b, SteadyTime at) { on_body(s, key, b, at); };
    cbs.on_done = [this, s, key](net::ClientResult&& r) { on_done(s, key, std::move(r)); };
    live[key] = s;
    s->id = client->submit(std::move(req), std::move(cbs));
    connections = client->connections_opened();
  }
};

OpenAiTarget::OpenAiTarget(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<OpenAiTarget>> OpenAiTarget::create(OpenAiTargetOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  PLUMB_ASSIGN_OR_RETURN(net::Url url, net::parse_url(impl->opts.base_url));
  std::string prefix = url.target == "/" ? "" : url.target;
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  impl->path = prefix + (impl->opts.api == Api::kChat ? "/v1/chat/completions" : "/v1/completions");
  PLUMB_ASSIGN_OR_RETURN(impl->client, net::HttpClient::create(impl->io, impl->opts.base_url));
  Impl* p = impl.get();
  impl->thread = std::thread([p] { p->run(); });
  return std::unique_ptr<OpenAiTarget>(new OpenAiTarget(std::move(impl)));
}

OpenAiTarget::~OpenAiTarget() {  // NOLINT(bugprone-exception-escape): see the header
  cancel_all();
  std::promise<void> gone;
  asio::post(impl_->io, [this, &gone] {
    impl_->client.reset();
    impl_->work.reset();
    gone.set_value();
  });
  gone.get_future().wait();
  impl_->thread.join();
}

bool OpenAiTarget::set_realtime(bool on) {
  const pthread_t t = impl_->thread.native_handle();
  if (on) {
    if (impl_->realtime) return true;
    if (pthread_getschedparam(t, &impl_->old_policy, &impl_->old_param) != 0) return false;
    sched_param p{};
    p.sched_priority = sched_get_priority_min(SCHED_FIFO);
    impl_->realtime = pthread_setschedparam(t, SCHED_FIFO, &p) == 0;  // EPERM: stays normal
    return impl_->realtime;
  }
  if (impl_->realtime) pthread_setschedparam(t, impl_->old_policy, &impl_->old_param);
  impl_->realtime = false;
  return false;
}

void OpenAiTarget::send(const workload::Request& request, StreamSink* sink) {
  auto body =
      openai_request_body(request, impl_->opts.api, impl_->opts.model, impl_->opts.show_special_tokens);
  if (!body.ok()) {
    sink->on_failure(std::chrono::steady_clock::now(), Failure::kClient, 0, body.status().message());
    return;
  }
  asio::post(impl_->io, [p = impl_.get(), b = std::move(body).value(), stream = request.stream,
                         sink]() mutable { p->submit(std::move(b), stream, sink); });
}

void OpenAiTarget::cancel_all() {
  std::promise<void> done;
  asio::post(impl_->io, [p = impl_.get(), &done] {
    std::vector<std::shared_ptr<Stream>> streams;
    for (auto& [k, s] : p->live) streams.push_back(s);
    for (auto& s : streams) {
      p->fail(*s, std::chrono::steady_clock::now(), Failure::kCancelled, 0,
              "cancelled at the end of the run");
      p->client->cancel(s->id);
    }
    p->live.clear();
    done.set_value();
  });
  done.get_future().wait();
}

void OpenAiTarget::cancel(StreamSink* sink) {
  asio::post(impl_->io, [p = impl_.get(), sink] {
    for (auto& [k, s] : p->live) {
      if (s->sink != sink) continue;
      std::shared_ptr<Stream> keep = s;
      p->fail(*keep, std::chrono::steady_clock::now(), Failure::kCancelled, 0, "cancelled");
      p->client->cancel(keep->id);  // runs on_done, which erases the entry: stop iterating
      return;
    }
  });
}

void OpenAiTarget::prepare(size_t connections) {
  if (!impl_->opts.keep_alive) return;  // every request opens its own
  std::promise<void> done;
  asio::post(impl_->io, [p = impl_.get(), connections, &done] {
    p->client->preconnect(connections, p->opts.connect_timeout, [p, &done](size_t) {
      p->connections = p->client->connections_opened();
      done.set_value();
    });
  });
  done.get_future().wait();
}

std::string OpenAiTarget::describe() const {
  return std::string("openai ") + (impl_->opts.api == Api::kChat ? "chat " : "completions ") +
         impl_->opts.base_url + (impl_->opts.model.empty() ? "" : " model=" + impl_->opts.model);
}

uint64_t OpenAiTarget::connections_opened() const { return impl_->connections.load(); }

}  // namespace plumb::loadgen
