#include "net/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/log.h"

namespace plumb::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

class Session;

std::string sanitize(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  for (char c : s)
    if (c != '\r' && c != '\n' && c != '\0') r.push_back(c);
  return r;
}

// The size line of one chunk of a chunked body ("1a2\r\n") into buf; returns its length.
std::size_t chunk_size_line(std::size_t size, char (&buf)[24]) {
  return static_cast<std::size_t>(std::snprintf(buf, sizeof buf, "%zx\r\n", size));
}

// The whole answer to a connection past max_connections: 503 with an OpenAI error body whose code
// names the cause.
std::string too_many_connections_response(std::size_t cap) {
  std::string body = json_error_body(503,
                                     "the server has " + std::to_string(cap) +
                                         " connections open, its limit (--max-connections); retry shortly",
                                     "server_error");
  const std::string numeric = "\"code\":503";
  if (auto at = body.find(numeric); at != std::string::npos) {
    body.replace(at, numeric.size(), "\"code\":\"too_many_connections\"");
  }
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
}

std::string endpoint_string(const tcp::socket& s) {
  error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "?";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  explicit Impl(HttpServerOptions o) : opt(std::move(o)), accept_strand(asio::make_strand(ioc)) {}

  HttpServerOptions opt;
  // path -> method -> handler
  std::unordered_map<std::string, std::map<std::string, Handler>> routes;
  Handler fallback;

  asio::io_context ioc;
  asio::strand<asio::io_context::executor_type> accept_strand;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::atomic<uint16_t> bound_port{0};
  std::atomic<bool> started{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> io_done{false};  // IO threads joined: posting would only queue forever

  std::mutex mu;  // guards sessions, open_sockets, serving
  std::condition_variable cv;
  std::map<Session*, std::weak_ptr<Session>> sessions;
  uint64_t open_sockets = 0;          // every open connection, those being turned away included
  uint64_t serving = 0;               // connections counted against max_connections
  uint64_t lingering = 0;             // connections turned away (answered 503) and still open
  std::size_t max_connections = 0;    // resolved at start()
  std::size_t reject_linger_cap = 0;  // turned-away connections that may linger at once (on_accept)

  std::atomic<uint64_t> n_accepted{0}, n_requests{0}, n_bad{0}, n_exceptions{0}, n_disconnects{0},
      n_rejected{0}, n_accept_errors{0};
  LogThrottle accept_log{std::chrono::seconds(1)};  // accept strand only
  LogThrottle reject_log{std::chrono::seconds(1)};  // accept strand only
  uint64_t stats_open() {
    std::lock_guard lock(mu);
    return open_sockets;
  }

  void do_accept();
  void on_accept(const error_code& ec, tcp::socket socket);
  void socket_closed(bool counted) {
    std::lock_guard lock(mu);
    --open_sockets;
    if (counted) {
      --serving;
    } else {
      --lingering;
    }
    cv.notify_all();
  }
  std::vector<std::shared_ptr<Session>> live_sessions() {
    std::vector<std::shared_ptr<Session>> out;
    std::lock_guard lock(mu);
    for (auto& [p, w] : sessions)
      if (auto s = w.lock()) out.push_back(std::move(s));
    return out;
  }
};

namespace {

using Impl = HttpServer::Impl;

class Writer;

// One TCP connection. All members are touched only on the connection's strand, except the
// atomics (read by writers from any thread).
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `counted`: the connection holds one of max_connections (false for one being turned away).
  Session(std::shared_ptr<Impl> impl, tcp::socket socket, bool counted)
      : impl_(std::move(impl)),
        stream_(std::move(socket)),
        linger_timer_(stream_.get_executor()),
        counted_(counted) {
    remote_ = endpoint_string(stream_.socket());
  }
  ~Session() {
    std::lock_guard lock(impl_->mu);
    impl_->sessions.erase(this);
  }

  auto executor() { return stream_.get_executor(); }
  const std::shared_ptr<Impl>& impl() const { return impl_; }

  void start() {
    asio::post(executor(), [self = shared_from_this()] { self->do_read(); });
  }
  // Turns the connection away: `response` (a whole 503), then a graceful close (its request, if
  // any, is read and dropped).
  void reject(std::string response) {
    asio::post(executor(), [self = shared_from_this(), r = std::move(response)]() mutable {
      self->state_ = State::kHandling;
      self->current_id_.fetch_add(1);
      self->keep_alive_ = false;
      self->close_after_ = true;
      self->resp_ = Resp::kWhole;
      self->queue(std::move(r));
    });
  }
  // Shutdown, phase 1: close if idle between requests; otherwise close after the response.
  void drain() {
    if (!socket_open_) return;
    if (state_ == State::kReadingHead && buffer_.size() == 0 && (!parser_ || !parser_->got_some())) {
      close_socket();
    }
  }
  // Shutdown, phase 2.
  void force_close() { close_socket(); }

  // --- called on the strand on behalf of a Writer for request `id` ---
  void w_send(uint64_t id, int status, const std::string& content_type, std::string body, Headers headers);
  void w_start(uint64_t id, int status, const std::string& content_type, Headers headers);
  void w_write(uint64_t id, std::string chunk);
  void w_end(uint64_t id);
  void w_abandon(uint64_t id);
  void w_on_close(uint64_t id, std::function<void()> cb);
  bool closed_for(uint64_t id) const { return closed_.load() || current_id_.load() != id; }
  std::size_t queued() const { return queued_.load(); }

  // --- called by a Writer on the thread that produces the stream (see Direct writes below) ---
  // Writes one chunk of stream `id` on the calling thread when the connection is idle; false when
  // it must go through the strand (w_write) instead. Never blocks.
  bool try_direct_write(uint64_t id, std::string_view chunk);
  // A byte-writing post (w_write, w_end) is on its way to the strand: no direct write may pass it.
  void note_posted_write() {
    std::lock_guard lock(wmu_);
    posted_writes_++;
    direct_ = false;
  }

 private:
  enum class State { kReadingHead, kReadingBody, kHandling, kClosing, kClosed };
  enum class Resp { kNone, kWhole, kStreaming, kEnded, kDone };

  void do_read();
  void parse_more();
  void read_socket();
  void on_socket_read(const error_code& ec, std::size_t n);
  bool bare_lf_in_buffer();
  void on_head();
  void read_body();
  void on_read_error(const error_code& ec);
  void reply_error_and_close(int status, const std::string& message);
  void dispatch();
  void bg_read();
  void on_bg_read(const error_code& ec, std::size_t n);
  void queue(std::string bytes);
  void do_write();
  void on_write(const error_code& ec, std::size_t n);
  void response_done();
  void graceful_close();
  void close_socket();
  void fire_on_close();
  std::string make_head(int status, std::string_view content_type, const Headers& headers);

  std::shared_ptr<Impl> impl_;
  beast::tcp_stream stream_;
  asio::steady_timer linger_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;
  State state_ = State::kReadingHead;
  bool socket_open_ = true;
  bool counted_ = true;
  bool head_started_ = false;   // a byte of the current request head arrived (header_timeout runs)
  std::size_t lf_checked_ = 0;  // leading bytes of buffer_ already checked for a bare LF

  // Per request.
  std::atomic<uint64_t> current_id_{0};
  std::atomic<bool> closed_{false};
  std::atomic<std::size_t> queued_{0};
  Resp resp_ = Resp::kNone;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool head_request_ = false;
  bool close_after_ = false;
  bool chunked_ = false;
  std::function<void()> on_close_;

  // Direct writes. A streamed chunk is written by the thread that produces it (the engine's),
  // straight to the socket with a non-blocking sendmsg, whenever the connection is idle: the
  // head is out, nothing is queued or being written by the strand, and no byte-writing post is
  // on its way (posted_writes_ == 0). That saves the post to the strand, a wake-up of an IO
  // thread and the allocations of the asynchronous write for every event. Whatever a direct
  // write cannot finish at once (the socket buffer is full), and every write while the
  // connection is not idle, goes through the strand's queue as before, in order. wmu_ orders
  // direct writes against the strand's own writes and against close (the descriptor is never
  // written after it was closed).
  std::mutex wmu_;
  bool direct_ = false;         // guarded by wmu_; set by the strand when idle and streaming
  uint64_t direct_id_ = 0;      // guarded by wmu_; the request the direct path is open for
  uint64_t posted_writes_ = 0;  // guarded by wmu_; byte-writing posts not yet run
  void close_direct() {
    std::lock_guard lock(wmu_);
    direct_ = false;
  }
  void posted_write_ran() {  // first thing in every strand function a byte-writing post runs
    std::lock_guard lock(wmu_);
    posted_writes_--;
  }
  void maybe_open_direct();
  void w_raw(uint64_t id, std::string bytes);

  // Output.
  std::vector<std::string> outbox_;
  std::vector<std::string> inflight_;
  std::size_t inflight_bytes_ = 0;
  bool writing_ = false;

  // Background read while a request is handled: notices the client going away, keeps pipelined
  // bytes, and drains input while lingering on close.
  bool bg_reading_ = false;
  bool want_next_read_ = false;
};

class Writer final : public ResponseWriter {
 public:
  Writer(std::shared_ptr<Session> s, uint64_t id) : s_(std::move(s)), id_(id) {}
  // Posting the abandon notice allocates; if that throws, terminating is right.
  ~Writer() override {  // NOLINT(bugprone-exception-escape)
    if (phase_.load() == kEnded || phase_.load() == kSent) return;
    post([id = id_](Session& s) { s.w_abandon(id); });
  }

  bool send(int status, std::string content_type, std::string body, Headers headers) override {
    if (is_closed() || !advance(kNone, kSent)) return false;
    post([id = id_, status, ct = std::move(content_type), b = std::move(body), h = std::move(headers)](
             Session& s) mutable { s.w_send(id, status, ct, std::move(b), std::move(h)); });
    return true;
  }
  bool start_stream(int status, std::string content_type, Headers headers) override {
    if (is_closed() || !advance(kNone, kStreaming)) return false;
    post([id = id_, status, ct = std::move(content_type), h = std::move(headers)](Session& s) mutable {
      s.w_start(id, status, ct, std::move(h));
    });
    return true;
  }
  bool write(std::string chunk) override {
    if (phase_.load() != kStreaming || is_closed()) return false;
    if (chunk.empty()) return true;
    if (s_->try_direct_write(id_, chunk)) return true;
    s_->note_posted_write();
    post([id = id_, c = std::move(chunk)](Session& s) mutable { s.w_write(id, std::move(c)); });
    return true;
  }
  bool end() override {
    if (!advance(kStreaming, kEnded)) return false;
    s_->note_posted_write();
    post([id = id_](Session& s) { s.w_end(id); });
    return true;
  }
  bool is_closed() const override { return s_->closed_for(id_); }
  void on_close(std::function<void()> cb) override {
    post([id = id_, cb = std::move(cb)](Session& s) mutable { s.w_on_close(id, std::move(cb)); });
  }
  std::size_t queued_bytes() const override { return s_->queued(); }

  // Used by the dispatcher to decide what an escaping exception means.
  int phase() const { return phase_.load(); }
  static constexpr int kNone = 0, kSent = 1, kStreaming = 2, kEnded = 3;

 private:
  bool advance(int from, int to) { return phase_.compare_exchange_strong(from, to); }
  template <typename F>
  void post(F&& f) {
    // After the server stopped nothing runs the io_context; queuing would only leak.
    if (s_->impl()->io_done.load()) return;
    asio::post(s_->executor(), [s = s_, f = std::forward<F>(f)]() mutable { f(*s); });
  }

  std::shared_ptr<Session> s_;
  uint64_t id_;
  std::atomic<int> phase_{kNone};
};

void Session::do_read() {
  if (!socket_open_) return;
  if (impl_->draining.load()) {
    graceful_close();
    return;
  }
  state_ = State::kReadingHead;
  parser_.emplace();
  parser_->body_limit(impl_->opt.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(impl_->opt.max_header_bytes));
  head_started_ = false;
  stream_.expires_after(impl_->opt.idle_timeout);
  parse_more();
}

// The request is read here rather than by http::async_read: Beast's parser waits for a CRLF that
// never comes when a line ends in a bare LF (a chunk-size line "5\n"), so the connection would
// hang until the body timeout. Reading and parsing step by step lets every need-more be checked.
void Session::parse_more() {
  while (true) {
    if (state_ == State::kReadingHead && parser_->is_header_done()) return on_head();
    if (state_ == State::kReadingBody && parser_->is_done()) {
      stream_.expires_never();
      return dispatch();
    }
    if (buffer_.size() == 0) break;
    if (state_ == State::kReadingHead && !head_started_) {
      head_started_ = true;
      stream_.expires_after(impl_->opt.header_timeout);
    }
    error_code ec;
    const std::size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    lf_checked_ = lf_checked_ > used ? lf_checked_ - used : 0;
    if (ec && ec != http::error::need_more) return on_read_error(ec);
    if (ec || used == 0) {
      // The parser wants more than the buffer holds: what it left is an unfinished line of the
      // head or of the chunked framing (chunk data is always taken as it comes).
      if (bare_lf_in_buffer()) {
        impl_->n_bad++;
        return reply_error_and_close(400, "malformed HTTP request: a line ends in a bare LF; use CRLF");
      }
      if (state_ == State::kReadingBody && buffer_.size() > impl_->opt.max_header_bytes) {
        impl_->n_bad++;
        return reply_error_and_close(400, "malformed chunked body: a chunk header longer than " +
                                              std::to_string(impl_->opt.max_header_bytes) + " bytes");
      }
      break;
    }
  }
  read_socket();
}

bool Session::bare_lf_in_buffer() {
  auto data = buffer_.data();
  const char* p = static_cast<const char*>(data.data());
  const std::size_t n = data.size();
  for (std::size_t i = lf_checked_; i < n; ++i) {
    if (p[i] == '\n' && (i == 0 || p[i - 1] != '\r')) return true;
  }
  // A CR at the very end may still get its LF: check that byte again next time.
  lf_checked_ = n > 0 && p[n - 1] == '\r' ? n - 1 : n;
  return false;
}

void Session::read_socket() {
  const std::size_t room = buffer_.capacity() - buffer_.size();
  const std::size_t want = std::clamp<std::size_t>(room, 16384, 65536);
  stream_.async_read_some(
      buffer_.prepare(want),
      [self = shared_from_this()](const error_code& ec, std::size_t n) { self->on_socket_read(ec, n); });
}

void Session::on_socket_read(const error_code& ec, std::size_t n) {
  if (!socket_open_) return;
  if (ec == asio::error::eof) {
    // As Beast's own read: EOF before a byte of the request is the end of the stream; after some,
    // the parser says whether the message is incomplete.
    error_code pec = http::error::end_of_stream;
    if (parser_->got_some()) {
      pec = {};
      parser_->put_eof(pec);
      if (!pec && parser_->is_done()) {
        if (state_ == State::kReadingHead) return on_head();
        stream_.expires_never();
        return dispatch();
      }
      if (!pec) pec = http::error::partial_message;
    }
    return on_read_error(pec);
  }
  if (ec) return on_read_error(ec);
  buffer_.commit(n);
  parse_more();
}

void Session::on_head() {
  state_ = State::kReadingBody;
  auto expect = parser_->get()[http::field::expect];
  if (!parser_->is_done() && iequals(std::string_view(expect.data(), expect.size()), "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(impl_->opt.write_timeout);
    asio::async_write(stream_, asio::buffer(kContinue),
                      [self = shared_from_this()](const error_code& wec, std::size_t) {
                        if (wec) return self->close_socket();
                        self->read_body();
                      });
    return;
  }
  read_body();
}

void Session::read_body() {
  stream_.expires_after(impl_->opt.body_timeout);
  parse_more();
}

void Session::on_read_error(const error_code& ec) {
  if (!socket_open_) return;
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
      ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
    // Client went away or idled out between or during requests: nothing to answer.
    return close_socket();
  }
  if (ec == http::error::body_limit) {
    impl_->n_bad++;
    return reply_error_and_close(
        413, "request body larger than " + std::to_string(impl_->opt.max_body_bytes) + " bytes");
  }
  if (ec == http::error::header_limit) {
    impl_->n_bad++;
    return reply_error_and_close(
        400, "request head larger than " + std::to_string(impl_->opt.max_header_bytes) + " bytes");
  }
  if (&ec.category() == &http::make_error_code(http::error::bad_target).category()) {  // a parse error
    impl_->n_bad++;
    return reply_error_and_close(400, "malformed HTTP request: " + ec.message());
  }
  close_socket();
}

void Session::reply_error_and_close(int status, const std::string& message) {
  state_ = State::kHandling;
  stream_.expires_never();
  current_id_.fetch_add(1);
  keep_alive_ = false;
  close_after_ = true;
  head_request_ = false;
  resp_ = Resp::kWhole;
  std::string body = json_error_body(status, message, "invalid_request_error");
  std::string out = make_head(status, "application/json", {{"Content-Length", std::to_string(body.size())}});
  out += body;
  queue(std::move(out));
}

std::string Session::make_head(int status, std::string_view content_type, const Headers& headers) {
  std::string h;
  h.reserve(256);
  h += "HTTP/1.1 ";
  h += std::to_string(status);
  h += ' ';
  h += status_reason(status);
  h += "\r\nContent-Type: ";
  h += sanitize(content_type);
  h += "\r\n";
  for (const auto& [k, v] : headers) {
    h += sanitize(k);
    h += ": ";
    h += sanitize(v);
    h += "\r\n";
  }
  if (!keep_alive_ || impl_->draining.load()) close_after_ = true;
  if (close_after_) {
    h += "Connection: close\r\n";
  } else if (http10_) {
    h += "Connection: keep-alive\r\n";
  }
  h += "\r\n";
  return h;
}

void Session::dispatch() {
  state_ = State::kHandling;
  impl_->n_requests++;
  auto msg = parser_->release();
  parser_.reset();
  uint64_t id = current_id_.fetch_add(1) + 1;
  resp_ = Resp::kNone;
  keep_alive_ = msg.keep_alive();
  http10_ = msg.version() == 10;
  close_after_ = false;
  chunked_ = false;
  on_close_ = nullptr;

  Request req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  std::size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  req.body = std::move(msg.body());
  req.version = static_cast<int>(msg.version());
  req.remote = remote_;
  head_request_ = req.method == "HEAD";

  auto writer = std::make_shared<Writer>(shared_from_this(), id);
  const Handler* handler = nullptr;
  std::string allow;
  if (auto it = impl_->routes.find(req.path); it != impl_->routes.end()) {
    if (auto m = it->second.find(req.method); m != it->second.end()) {
      handler = &m->second;
    } else {
      for (const auto& [method, h] : it->second) allow += (allow.empty() ? "" : ", ") + method;
    }
  }
  if (!handler && impl_->fallback) handler = &impl_->fallback;
  // Watch the socket while the handler works, so a vanished client is noticed at once. The
  // watch starts after the handler ran: a reply it gave at once is then queued on the strand
  // ahead of the read's completion, and a client that half-closed after its request (EOF
  // already waiting) still gets that reply.
  // bg_read only allocates (a buffer, a completion handler); if that throws, the connection is
  // simply not watched and a vanished client is noticed at its next write instead.
  struct WatchAfter {
    Session* s;
    ~WatchAfter() {
      try {
        s->bg_read();
      } catch (...) {  // see above
      }
    }
  } watch{this};
  if (!handler) {
    if (!allow.empty()) {
      writer->send(405, "application/json",
                   json_error_body(405, "method " + req.method + " not allowed for " + req.path,
                                   "invalid_request_error"),
                   {{"Allow", allow}});
    } else {
      writer->send(
          404, "application/json",
          json_error_body(404, "no route for " + req.method + " " + req.path, "invalid_request_error"), {});
    }
    return;
  }
  std::string what;
  try {
    (*handler)(req, writer);
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown exception";
  }
  impl_->n_exceptions++;
  log::error("event=handler_exception method={} path={} what=\"{}\"", req.method, req.path, what);
  if (writer->phase() == Writer::kNone) {
    writer->send(500, "application/json", json_error_body(500, "internal error: " + what, "server_error"),
                 {});
  }
  // A stream that was started stays the handler's (or its writer's owner's) to finish; if the
  // writer is dropped unfinished, w_abandon closes the connection.
}

void Session::bg_read() {
  if (bg_reading_ || !socket_open_) return;
  // Do not buffer unbounded pipelined input; the next request read will apply the limits.
  if (state_ != State::kClosing && buffer_.size() > impl_->opt.max_header_bytes + impl_->opt.max_body_bytes)
    return;
  bg_reading_ = true;
  stream_.socket().async_read_some(
      buffer_.prepare(4096),
      [self = shared_from_this()](const error_code& ec, std::size_t n) { self->on_bg_read(ec, n); });
}

void Session::on_bg_read(const error_code& ec, std::size_t n) {
  bg_reading_ = false;
  if (state_ == State::kClosed) return;
  if (state_ == State::kClosing) {
    if (ec) return close_socket();
    buffer_.consume(buffer_.size());
    return bg_read();
  }
  if (ec == asio::error::operation_aborted) {
    if (want_next_read_) {
      want_next_read_ = false;
      do_read();
    }
    return;
  }
  if (ec == asio::error::eof && (resp_ == Resp::kWhole || resp_ == Resp::kEnded)) {
    // The client half-closed after its request and the whole response is queued: finish
    // writing it, then close.
    close_after_ = true;
    return;
  }
  if (ec) {
    // EOF or reset while the handler was working or streaming: the client is gone.
    if (resp_ != Resp::kDone) impl_->n_disconnects++;
    return close_socket();
  }
  buffer_.commit(n);
  if (want_next_read_) {
    want_next_read_ = false;
    return do_read();
  }
  bg_read();
}

void Session::w_send(uint64_t id, int status, const std::string& content_type, std::string body,
                     Headers headers) {
  if (id != current_id_.load() || !socket_open_ || resp_ != Resp::kNone) return;
  resp_ = Resp::kWhole;
  headers.emplace_back("Content-Length", std::to_string(body.size()));
  std::string out = make_head(status, content_type, headers);
  if (!head_request_) {
    if (out.size() + body.size() < 16384) {
      out += body;
      queue(std::move(out));
    } else {
      queue(std::move(out));
      queue(std::move(body));
    }
  } else {
    queue(std::move(out));
  }
}

void Session::w_start(uint64_t id, int status, const std::string& content_type, Headers headers) {
  if (id != current_id_.load() || !socket_open_ || resp_ != Resp::kNone) return;
  resp_ = Resp::kStreaming;
  if (content_type.starts_with("text/event-stream")) headers.emplace_back("Cache-Control", "no-cache");
  if (http10_) {
    close_after_ = true;  // no chunked encoding in HTTP/1.0: the end of the body is the close
  } else {
    chunked_ = true;
    headers.emplace_back("Transfer-Encoding", "chunked");
  }
  queue(make_head(status, content_type, headers));
}

bool Session::try_direct_write(uint64_t id, std::string_view chunk) {
  std::lock_guard lock(wmu_);
  if (!direct_ || direct_id_ != id || closed_.load()) return false;
  char hdr[24];
  static constexpr char kCrlf[] = "\r\n";
  iovec iov[3] = {{hdr, chunk_size_line(chunk.size(), hdr)},
                  {const_cast<char*>(chunk.data()), chunk.size()},
                  {const_cast<char*>(kCrlf), 2}};
  const std::size_t total = iov[0].iov_len + iov[1].iov_len + 2;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 3;
  ssize_t n = ::sendmsg(stream_.socket().native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(total)) return true;
  direct_ = false;
  if (n < 0) {
    // Nothing was written. A full buffer, or an error the strand's own write will meet and
    // handle (close, counting the disconnect): either way the chunk goes through the strand.
    return false;
  }
  // Part of it went out: the rest must be next on the wire, ahead of anything later.
  std::string rest;
  rest.reserve(total - static_cast<std::size_t>(n));
  std::size_t skip = static_cast<std::size_t>(n);
  for (const iovec& v : iov) {
    if (skip >= v.iov_len) {
      skip -= v.iov_len;
      continue;
    }
    rest.append(static_cast<const char*>(v.iov_base) + skip, v.iov_len - skip);
    skip = 0;
  }
  posted_writes_++;
  if (!impl_->io_done.load()) {
    asio::post(executor(), [self = shared_from_this(), id, r = std::move(rest)]() mutable {
      self->w_raw(id, std::move(r));
    });
  }
  return true;
}

void Session::maybe_open_direct() {
  if (!socket_open_ || writing_ || !outbox_.empty() || resp_ != Resp::kStreaming || !chunked_ ||
      head_request_)
    return;
  std::lock_guard lock(wmu_);
  if (posted_writes_ != 0) return;
  direct_ = true;
  direct_id_ = current_id_.load();
}

void Session::w_raw(uint64_t id, std::string bytes) {
  posted_write_ran();
  if (id != current_id_.load() || !socket_open_ || resp_ != Resp::kStreaming) return;
  queue(std::move(bytes));
}

void Session::w_write(uint64_t id, std::string chunk) {
  posted_write_ran();
  if (id != current_id_.load() || !socket_open_ || resp_ != Resp::kStreaming || head_request_) return;
  if (chunked_) {
    char hdr[24];
    std::size_t len = chunk_size_line(chunk.size(), hdr);
    std::string framed;
    framed.reserve(chunk.size() + len + 2);
    framed.append(hdr, len);
    framed += chunk;
    framed += "\r\n";
    queue(std::move(framed));
  } else {
    queue(std::move(chunk));
  }
  if (queued_.load() > impl_->opt.max_stream_backlog_bytes) {
    log::warn("event=stream_backlog_exceeded remote={} bytes={}", remote_, queued_.load());
    close_socket();
  }
}

void Session::w_end(uint64_t id) {
  posted_write_ran();
  if (id != current_id_.load() || !socket_open_ || resp_ != Resp::kStreaming) return;
  resp_ = Resp::kEnded;
  if (chunked_ && !head_request_) {
    queue("0\r\n\r\n");
  } else if (!writing_ && outbox_.empty()) {
    response_done();
  }
}

void Session::w_abandon(uint64_t id) {
  if (id != current_id_.load() || !socket_open_) return;
  if (resp_ == Resp::kNone) {
    log::error("event=handler_no_response remote={}", remote_);
    w_send(id, 500, "application/json",
           json_error_body(500, "internal error: handler did not respond", "server_error"), {});
  } else if (resp_ == Resp::kStreaming) {
    log::warn("event=stream_abandoned remote={}", remote_);
    close_socket();
  }
}

void Session::w_on_close(uint64_t id, std::function<void()> cb) {
  if (id != current_id_.load()) return;
  if (!socket_open_ && resp_ != Resp::kDone) {
    try {
      cb();
    } catch (...) {
      log::error("event=on_close_exception remote={}", remote_);
    }
    return;
  }
  on_close_ = std::move(cb);
}

void Session::queue(std::string bytes) {
  close_direct();  // the strand writes now: a direct write in progress finishes first
  queued_.fetch_add(bytes.size());
  outbox_.push_back(std::move(bytes));
  if (!writing_) do_write();
}

void Session::do_write() {
  if (!socket_open_) return;
  writing_ = true;
  inflight_.swap(outbox_);
  std::vector<asio::const_buffer> bufs;
  bufs.reserve(inflight_.size());
  inflight_bytes_ = 0;
  for (const auto& s : inflight_) {
    bufs.emplace_back(asio::buffer(s));
    inflight_bytes_ += s.size();
  }
  stream_.expires_after(impl_->opt.write_timeout);
  asio::async_write(stream_, bufs, [self = shared_from_this()](const error_code& ec, std::size_t n) {
    self->on_write(ec, n);
  });
}

void Session::on_write(const error_code& ec, std::size_t) {
  writing_ = false;
  queued_.fetch_sub(inflight_bytes_);
  inflight_.clear();
  if (!socket_open_) return;
  stream_.expires_never();
  if (ec) {
    if (resp_ != Resp::kDone) impl_->n_disconnects++;
    return close_socket();
  }
  if (!outbox_.empty()) return do_write();
  if (resp_ == Resp::kWhole || resp_ == Resp::kEnded) return response_done();
  maybe_open_direct();
}

void Session::response_done() {
  resp_ = Resp::kDone;
  on_close_ = nullptr;
  if (close_after_ || impl_->draining.load()) return graceful_close();
  if (bg_reading_) {
    // Stop the background read; its completion starts the next request read.
    want_next_read_ = true;
    error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  do_read();
}

void Session::graceful_close() {
  if (!socket_open_ || state_ == State::kClosing) return;
  // Shut down our side, then read and discard until the client closes (bounded), so the
  // client receives our last response instead of a reset caused by unread input.
  state_ = State::kClosing;
  error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  // A connection turned away (503) lingers less: a flood of them must not hold descriptors long.
  linger_timer_.expires_after(counted_ ? std::chrono::milliseconds(2000) : std::chrono::milliseconds(500));
  linger_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (!ec) self->close_socket();
  });
  bg_read();
}

void Session::close_socket() {
  if (!socket_open_) return;
  socket_open_ = false;
  state_ = State::kClosed;
  {
    std::lock_guard lock(wmu_);  // no direct write is in progress, and none starts, from here
    direct_ = false;
    closed_.store(true);
  }
  error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
  linger_timer_.cancel();
  if (resp_ != Resp::kDone) fire_on_close();
  outbox_.clear();
  impl_->socket_closed(counted_);
}

void Session::fire_on_close() {
  if (!on_close_) return;
  auto cb = std::move(on_close_);
  on_close_ = nullptr;
  try {
    cb();
  } catch (...) {
    log::error("event=on_close_exception remote={}", remote_);
  }
}

}  // namespace

void HttpServer::Impl::do_accept() {
  acceptor->async_accept(asio::make_strand(ioc),
                         [self = shared_from_this()](const error_code& ec, tcp::socket s) {
                           self->on_accept(ec, std::move(s));
                         });
}

void HttpServer::Impl::on_accept(const error_code& ec, tcp::socket socket) {
  if (draining.load() || !acceptor || !acceptor->is_open()) return;
  if (ec) {
    if (ec == asio::error::operation_aborted) return;
    // E.g. out of file descriptors: back off instead of spinning, and log once a second at most
    // (with how many errors the line stands for), not once per retry.
    n_accept_errors++;
    uint64_t suppressed = 0;
    if (accept_log.allow(std::chrono::steady_clock::now(), &suppressed)) {
      log::warn("event=accept_error error=\"{}\" suppressed_since_last={} open_connections={}", ec.message(),
                suppressed, stats_open());
    }
    accept_retry->expires_after(std::chrono::milliseconds(50));
    accept_retry->async_wait([self = shared_from_this()](const error_code& tec) {
      if (!tec) self->do_accept();
    });
    return;
  }
  if (uint64_t n = accept_log.take_pending(); n > 0) log::warn("event=accept_errors_ended suppressed={}", n);
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);  // SSE tokens must not wait for Nagle
  bool full = false, linger = false;
  {
    std::lock_guard lock(mu);
    full = serving >= max_connections;
    linger = full && lingering < reject_linger_cap;
  }
  n_accepted++;
  if (full) {
    n_rejected++;
    uint64_t suppressed = 0;
    if (reject_log.allow(std::chrono::steady_clock::now(), &suppressed)) {
      log::warn(
          "event=connection_rejected reason=max_connections max_connections={} suppressed_since_last={}",
          max_connections, suppressed);
    }
  }
  if (full && !linger) {
    // A flood: more turned-away connections lingering would eat the descriptors kept in reserve
    // (and accept would fail with EMFILE). Best effort: the 503 goes out with one non-blocking send
    // and the socket closes at once; a client whose request arrives after that may see a reset.
    const std::string r = too_many_connections_response(max_connections);
    (void)::send(socket.native_handle(), r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    socket.close(ignored);
    return do_accept();
  }
  auto session = std::make_shared<Session>(shared_from_this(), std::move(socket), !full);
  {
    std::lock_guard lock(mu);
    sessions[session.get()] = session;
    ++open_sockets;
    if (full) {
      ++lingering;
    } else {
      ++serving;
    }
  }
  if (full) {
    session->reject(too_many_connections_response(max_connections));
  } else {
    session->start();
  }
  do_accept();
}

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

// NOLINTNEXTLINE(bugprone-exception-escape): see the header.
HttpServer::~HttpServer() { stop(std::chrono::milliseconds(0)); }

void HttpServer::route(std::string method, std::string path, Handler handler) {
  impl_->routes[std::move(path)][std::move(method)] = std::move(handler);
}

void HttpServer::set_fallback(Handler handler) { impl_->fallback = std::move(handler); }

Status HttpServer::start() {
  if (impl_->started.load()) return failed_precondition("HTTP server already started");
  Status s = start_listening();
  if (s.ok()) impl_->started = true;
  return s;
}

Status HttpServer::start_listening() {
  Impl& im = *impl_;
  if (im.opt.io_threads < 1) return invalid_argument("io_threads must be at least 1");
  im.max_connections = im.opt.max_connections > 0 ? im.opt.max_connections : default_max_connections();
  {
    // Half the descriptors the cap leaves over (64 at most) may hold turned-away connections.
    rlimit r{};
    const uint64_t limit = ::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY
                               ? uint64_t(r.rlim_cur)
                               : uint64_t(1) << 20;
    im.reject_linger_cap = limit > im.max_connections
                               ? std::size_t(std::min<uint64_t>(64, (limit - im.max_connections) / 2))
                               : 0;
  }
  error_code ec;
  asio::ip::address addr = asio::ip::make_address(im.opt.host, ec);
  if (ec) {
    tcp::resolver resolver(im.ioc);
    auto results = resolver.resolve(im.opt.host, "", ec);
    if (ec || results.empty()) return invalid_argument("cannot resolve listen host '" + im.opt.host + "'");
    addr = results.begin()->endpoint().address();
  }
  tcp::endpoint ep(addr, im.opt.port);
  im.acceptor.emplace(im.accept_strand);
  im.accept_retry.emplace(im.accept_strand);
  std::string where = im.opt.host + ":" + std::to_string(im.opt.port);
  if (im.acceptor->open(ep.protocol(), ec))
    return io_error("cannot open socket for " + where + ": " + ec.message());
  im.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (im.acceptor->bind(ep, ec)) return io_error("cannot bind " + where + ": " + ec.message());
  if (im.acceptor->listen(im.opt.listen_backlog, ec))
    return io_error("cannot listen on " + where + ": " + ec.message());
  im.bound_port = im.acceptor->local_endpoint().port();
  im.work.emplace(im.ioc.get_executor());
  asio::post(im.accept_strand, [p = impl_] { p->do_accept(); });
  for (int i = 0; i < im.opt.io_threads; ++i) {
    im.threads.emplace_back([p = impl_.get()] {
      // Handlers catch their own exceptions; this only keeps a stray one from killing the process.
      while (true) {
        try {
          p->ioc.run();
          return;
        } catch (const std::exception& e) {
          log::error("event=io_thread_exception what=\"{}\"", e.what());
        }
      }
    });
  }
  log::debug("event=http_listen address={}:{} io_threads={} max_connections={}", im.opt.host,
             im.bound_port.load(), im.opt.io_threads, im.max_connections);
  return Status::Ok();
}

uint16_t HttpServer::port() const { return impl_->bound_port.load(); }

void HttpServer::stop(std::chrono::milliseconds grace) {
  Impl& im = *impl_;
  if (!im.started.load() || im.stopped.exchange(true)) return;
  im.draining = true;
  asio::post(im.accept_strand, [p = impl_] {
    error_code ignored;
    p->acceptor->close(ignored);
    p->accept_retry->cancel();
  });
  for (auto& s : im.live_sessions()) asio::post(s->executor(), [s] { s->drain(); });
  {
    std::unique_lock lock(im.mu);
    im.cv.wait_for(lock, grace, [&] { return im.open_sockets == 0; });
  }
  for (auto& s : im.live_sessions()) asio::post(s->executor(), [s] { s->force_close(); });
  {
    std::unique_lock lock(im.mu);
    im.cv.wait_for(lock, std::chrono::seconds(5), [&] { return im.open_sockets == 0; });
  }
  im.work.reset();
  im.ioc.stop();
  for (auto& t : im.threads) t.join();
  im.threads.clear();
  // Run what the closed sockets left queued, so sessions (which hold impl_) are released.
  im.ioc.restart();
  im.ioc.poll();
  im.io_done = true;
  im.ioc.poll();
}

HttpServerStats HttpServer::stats() const {
  HttpServerStats s;
  s.connections_accepted = impl_->n_accepted.load();
  {
    std::lock_guard lock(impl_->mu);
    s.connections_open = impl_->open_sockets;
  }
  s.requests = impl_->n_requests.load();
  s.bad_requests = impl_->n_bad.load();
  s.handler_exceptions = impl_->n_exceptions.load();
  s.client_disconnects = impl_->n_disconnects.load();
  s.connections_rejected = impl_->n_rejected.load();
  s.accept_errors = impl_->n_accept_errors.load();
  return s;
}

std::size_t max_connections_for_fd_limit(uint64_t nofile_soft_limit) {
  const uint64_t limit = std::min<uint64_t>(nofile_soft_limit, uint64_t(1) << 20);
  const uint64_t reserve = std::min<uint64_t>(128, limit / 2);
  return std::size_t(std::max<uint64_t>(1, limit - reserve));
}

std::size_t default_max_connections() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return max_connections_for_fd_limit(1024);
  return max_connections_for_fd_limit(r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : uint64_t(r.rlim_cur));
}

}  // namespace plumb::net
