#include "net/http_client.h"

#include <poll.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/url/parse.hpp>
#include <optional>
#include <unordered_map>
#include <vector>

#include "net/response_parser.h"

namespace plumb::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using std::chrono::steady_clock;

Result<Url> parse_url(std::string_view text) {
  auto parsed = boost::urls::parse_uri(text);
  if (!parsed) return invalid_argument("bad URL '" + std::string(text) + "': " + parsed.error().message());
  const auto& u = *parsed;
  std::string scheme = u.scheme();
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme == "https") return unimplemented("https is not supported: '" + std::string(text) + "'");
  if (scheme != "http") return invalid_argument("URL scheme must be http: '" + std::string(text) + "'");
  Url out;
  out.host = u.encoded_host_address();  // IPv6 without brackets
  if (out.host.empty()) return invalid_argument("URL has no host: '" + std::string(text) + "'");
  if (u.has_port()) {
    if (u.port().empty() || u.port_number() == 0)
      return invalid_argument("bad port in URL '" + std::string(text) + "'");
    out.port = u.port_number();
  }
  out.target = u.encoded_path().empty() ? "/" : std::string(u.encoded_path());
  if (u.has_query()) out.target += "?" + std::string(u.encoded_query());
  return out;
}

std::string_view failure_name(FailureKind kind) {
  switch (kind) {
    case FailureKind::kNone:
      return "none";
    case FailureKind::kConnectRefused:
      return "connect_refused";
    case FailureKind::kConnectError:
      return "connect_error";
    case FailureKind::kConnectTimeout:
      return "connect_timeout";
    case FailureKind::kFirstByteTimeout:
      return "first_byte_timeout";
    case FailureKind::kIdleTimeout:
      return "idle_timeout";
    case FailureKind::kTotalTimeout:
      return "total_timeout";
    case FailureKind::kReset:
      return "reset";
    case FailureKind::kClosedBeforeEnd:
      return "closed_before_end";
    case FailureKind::kMalformedResponse:
      return "malformed_response";
    case FailureKind::kHttpStatus:
      return "http_status";
    case FailureKind::kCancelled:
      return "cancelled";
    case FailureKind::kIoError:
      return "io_error";
  }
  return "unknown";
}

namespace {

struct Conn {
  explicit Conn(asio::io_context& io, std::size_t buf) : sock(io), rbuf(buf) {}
  tcp::socket sock;
  std::vector<char> rbuf;
};

// A pooled connection is usable if the server has not closed it or sent anything unasked.
bool still_usable(Conn& c) {
  if (!c.sock.is_open()) return false;
  pollfd p{};
  p.fd = c.sock.native_handle();
  p.events = POLLIN | POLLRDHUP;
  return ::poll(&p, 1, 0) == 0;
}

}  // namespace

struct Exchange;

struct HttpClient::Impl : std::enable_shared_from_this<HttpClient::Impl> {
  Impl(asio::io_context& i, HttpClientOptions o) : io(i), opt(o) {}
  asio::io_context& io;
  HttpClientOptions opt;
  std::string host_header;
  std::vector<tcp::endpoint> endpoints;
  std::vector<std::unique_ptr<Conn>> idle;
  std::unordered_map<RequestId, std::shared_ptr<Exchange>> active;
  RequestId next_id = 1;
  uint64_t opened = 0;

  std::unique_ptr<Conn> take_idle() {
    while (!idle.empty()) {
      auto c = std::move(idle.back());
      idle.pop_back();
      if (still_usable(*c)) return c;
      error_code ignored;
      c->sock.close(ignored);
    }
    return nullptr;
  }
  void give_back(std::unique_ptr<Conn> c) {
    if (idle.size() >= opt.max_idle_connections) {
      error_code ignored;
      c->sock.close(ignored);
      return;
    }
    idle.push_back(std::move(c));
  }
};

struct Exchange : std::enable_shared_from_this<Exchange> {
  enum class Phase { kConnect, kFirstByte, kRecv, kDone };

  Exchange(std::shared_ptr<HttpClient::Impl> c, HttpClient::RequestId i, ClientRequest r, ClientCallbacks cb)
      : client(std::move(c)),
        id(i),
        req(std::move(r)),
        cbs(std::move(cb)),
        timer(client->io),
        parser(client->opt.max_response_head_bytes, req.method == "HEAD") {}

  std::shared_ptr<HttpClient::Impl> client;
  HttpClient::RequestId id;
  ClientRequest req;
  ClientCallbacks cbs;
  asio::steady_timer timer;
  ResponseParser parser;
  std::unique_ptr<Conn> conn;
  std::unique_ptr<Conn> stale;  // the pooled connection a retried request left (its handlers may still run)
  unsigned attempt = 0;         // handlers of an earlier attempt's socket are ignored
  ClientResult result;
  Phase phase = Phase::kConnect;
  SteadyTime phase_start;  // start of the current phase (connect, or sending)
  SteadyTime last_read;
  std::string head;  // serialized request head
  bool write_done = false;
  bool streaming = false;  // body goes to on_body
  bool body_seen = false;  // a body byte arrived (from then on the idle limit applies)

  static SteadyTime now() { return steady_clock::now(); }

  void start() {
    conn = client->take_idle();
    if (conn) {
      result.reused_connection = true;
      result.times.connected = result.times.start;
      phase_start = result.times.start;
      phase = Phase::kFirstByte;
      arm_timer();
      send();
      return;
    }
    connect();
  }

  void connect() {
    conn = std::make_unique<Conn>(client->io, client->opt.read_buffer_bytes);
    client->opened++;
    phase = Phase::kConnect;
    phase_start = result.times.start;
    arm_timer();
    asio::async_connect(conn->sock, client->endpoints,
                        [self = shared_from_this(), a = attempt](const error_code& ec, const tcp::endpoint&) {
                          if (a == self->attempt) self->on_connect(ec);
                        });
  }

  // A pooled connection that the server closed after its last response without saying so: the
  // close (FIN or RST) was still on its way when the pool's check passed, and the request met it
  // before any response byte. The server answered nothing, so the request is sent once more on a
  // new connection; its times still start at submit(), so the lost attempt is in them.
  bool retry_on_new_connection() {
    if (!result.reused_connection || result.reads != 0 || attempt != 0) return false;
    ++attempt;
    error_code ignored;
    conn->sock.close(ignored);  // the old socket's pending handlers complete, and are ignored
    stale = std::move(conn);
    result.reused_connection = false;
    result.retried_on_new_connection = true;
    head.clear();
    write_done = false;
    connect();
    return true;
  }

  void on_connect(const error_code& ec) {
    if (phase == Phase::kDone) return;
    if (ec) {
      if (ec == asio::error::connection_refused)
        return finish(FailureKind::kConnectRefused, "connection refused: " + ec.message());
      return finish(FailureKind::kConnectError, "connect failed: " + ec.message());
    }
    error_code ignored;
    conn->sock.set_option(tcp::no_delay(true), ignored);
    result.times.connected = now();
    phase = Phase::kFirstByte;
    phase_start = result.times.connected;
    arm_timer();
    send();
  }

  void send() {
    head.reserve(128 + req.target.size());
    head += req.method;
    head += ' ';
    head += req.target;
    head += " HTTP/1.1\r\nHost: ";
    head += client->host_header;
    head += "\r\n";
    bool has_body = !req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    if (!req.body.empty()) {
      head += "Content-Type: ";
      head += req.content_type;
      head += "\r\n";
    }
    if (has_body) {
      head += "Content-Length: ";
      head += std::to_string(req.body.size());
      head += "\r\n";
    }
    for (const auto& [k, v] : req.headers) {
      head += k;
      head += ": ";
      head += v;
      head += "\r\n";
    }
    head += "\r\n";
    std::array<asio::const_buffer, 2> bufs{asio::buffer(head), asio::buffer(req.body)};
    asio::async_write(conn->sock, bufs,
                      [self = shared_from_this(), a = attempt](const error_code& ec, std::size_t) {
                        if (a == self->attempt) self->on_sent(ec);
                      });
    // Read concurrently: a server may answer (413, 400) before it has read the whole body.
    read();
  }

  void on_sent(const error_code& ec) {
    if (phase == Phase::kDone) return;
    if (ec) return fail_io(ec, "sending the request");
    write_done = true;
    result.times.sent = now();
  }

  void read() {
    conn->sock.async_read_some(asio::buffer(conn->rbuf),
                               [self = shared_from_this(), a = attempt](const error_code& ec, std::size_t n) {
                                 if (a == self->attempt) self->on_read(ec, n);
                               });
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (phase == Phase::kDone) return;
    SteadyTime t = now();
    if (ec) {
      if (ec == asio::error::eof) {
        if (retry_on_new_connection()) return;
        Status s = parser.finish_eof();
        if (s.ok()) return complete();
        return finish(FailureKind::kClosedBeforeEnd, s.message());
      }
      return fail_io(ec, "reading the response");
    }
    result.reads++;
    last_read = t;
    if (result.reads == 1) {
      result.times.first_byte = t;
      phase = Phase::kRecv;
      arm_timer();  // the idle deadline may be earlier than the first-byte one; later reads only move it
                    // later
    }
    read_time = t;
    Status s = parser.feed(std::string_view(conn->rbuf.data(), n));
    if (phase == Phase::kDone) return;  // a callback cancelled the request
    if (!s.ok()) return finish(FailureKind::kMalformedResponse, s.message());
    if (parser.done()) return complete();
    read();
  }

  SteadyTime read_time;

  void on_head() {
    if (phase == Phase::kDone) return;
    result.head.status = parser.status();
    result.head.headers = parser.headers();
    streaming = cbs.on_body && parser.status() < 400;
    if (cbs.on_head) cbs.on_head(result.head, read_time);
  }

  void on_body(std::string_view piece) {
    if (phase == Phase::kDone) return;
    if (!body_seen && !piece.empty()) {
      body_seen = true;
      arm_timer();  // the idle deadline replaces the (later) first-byte one
    }
    result.body_bytes += piece.size();
    if (streaming) {
      cbs.on_body(piece, read_time);
      return;
    }
    if (result.body.size() + piece.size() > client->opt.max_body_bytes) {
      finish(FailureKind::kMalformedResponse,
             "response body larger than " + std::to_string(client->opt.max_body_bytes) + " bytes");
      return;
    }
    result.body.append(piece);
  }

  void complete() {
    bool reusable = parser.keep_alive() && write_done;
    if (parser.status() >= 400) {
      finish(FailureKind::kHttpStatus, "HTTP " + std::to_string(parser.status()), reusable);
    } else {
      finish(FailureKind::kNone, "", reusable);
    }
  }

  void fail_io(const error_code& ec, const char* what) {
    if (ec == asio::error::operation_aborted) return;  // cancel/timeout already finished us
    const bool reset = ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
                       ec == asio::error::connection_aborted;
    if ((reset || ec == asio::error::eof) && retry_on_new_connection()) return;
    if (reset)
      return finish(FailureKind::kReset, std::string("connection reset ") + what + ": " + ec.message());
    if (ec == asio::error::eof)
      return finish(FailureKind::kClosedBeforeEnd, std::string("connection closed ") + what);
    return finish(FailureKind::kIoError, std::string("socket error ") + what + ": " + ec.message());
  }

  // Earliest deadline that applies now, or nullopt.
  std::optional<SteadyTime> deadline(FailureKind* which) const {
    std::optional<SteadyTime> best;
    auto consider = [&](std::chrono::milliseconds limit, SteadyTime from, FailureKind k) {
      if (limit.count() <= 0) return;
      SteadyTime d = from + limit;
      if (!best || d < *best) {
        best = d;
        *which = k;
      }
    };
    const RequestTimeouts& to = req.timeouts;
    if (phase == Phase::kConnect) consider(to.connect, phase_start, FailureKind::kConnectTimeout);
    if (phase == Phase::kFirstByte) consider(to.first_byte, phase_start, FailureKind::kFirstByteTimeout);
    // A streaming server may send its head at once and then queue the request: until the first
    // body byte the wait is still the first-byte wait, not a stall.
    if (phase == Phase::kRecv && !body_seen)
      consider(to.first_byte, phase_start, FailureKind::kFirstByteTimeout);
    if (phase == Phase::kRecv && body_seen) consider(to.idle, last_read, FailureKind::kIdleTimeout);
    consider(to.total, result.times.start, FailureKind::kTotalTimeout);
    return best;
  }

  void arm_timer() {
    FailureKind which = FailureKind::kNone;
    auto d = deadline(&which);
    if (!d) return;
    timer.expires_at(*d);
    timer.async_wait([self = shared_from_this()](const error_code& ec) { self->on_timer(ec); });
  }

  void on_timer(const error_code& ec) {
    if (ec || phase == Phase::kDone) return;
    FailureKind which = FailureKind::kNone;
    auto d = deadline(&which);
    if (!d) return;
    if (now() >= *d) {
      std::string what(failure_name(which));
      return finish(which,
                    what + " after " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           now() - (which == FailureKind::kTotalTimeout  ? result.times.start
                                                    : which == FailureKind::kIdleTimeout ? last_read
                                                                                         : phase_start))
                                           .count()) +
                        " ms");
    }
    // Reads moved the idle deadline (we do not re-arm on every read): wait for the new one.
    arm_timer();
  }

  void finish(FailureKind kind, std::string error, bool reusable = false) {
    if (phase == Phase::kDone) return;
    phase = Phase::kDone;
    auto self = shared_from_this();  // the map entry may be the last owner
    timer.cancel();
    result.times.end = now();
    result.failure = kind;
    result.error = std::move(error);
    if (conn) {
      if (reusable) {
        client->give_back(std::move(conn));
      } else {
        error_code ignored;
        conn->sock.close(ignored);  // pending operations complete with operation_aborted
      }
    }
    client->active.erase(id);
    if (cbs.on_done) cbs.on_done(std::move(result));
    cbs = {};
  }
};

Result<std::unique_ptr<HttpClient>> HttpClient::create(asio::io_context& io, std::string_view base_url,
                                                       HttpClientOptions options) {
  PLUMB_ASSIGN_OR_RETURN(Url url, parse_url(base_url));
  auto impl = std::make_shared<Impl>(io, options);
  error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec || results.empty())
    return unavailable("cannot resolve host '" + url.host + "': " + (ec ? ec.message() : "no addresses"));
  for (const auto& r : results) impl->endpoints.push_back(r.endpoint());
  bool v6 = url.host.find(':') != std::string::npos;
  impl->host_header = (v6 ? "[" + url.host + "]" : url.host) + ":" + std::to_string(url.port);
  return std::unique_ptr<HttpClient>(new HttpClient(std::move(impl)));
}

HttpClient::~HttpClient() {  // NOLINT(bugprone-exception-escape): see the header
  // Finishing removes entries from the map; take them out first.
  auto active = std::move(impl_->active);
  impl_->active.clear();
  for (auto& [id, ex] : active) ex->finish(FailureKind::kCancelled, "client destroyed");
  for (auto& c : impl_->idle) {
    error_code ignored;
    c->sock.close(ignored);
  }
  impl_->idle.clear();
}

HttpClient::RequestId HttpClient::submit(ClientRequest request, ClientCallbacks callbacks) {
  RequestId id = impl_->next_id++;
  auto ex = std::make_shared<Exchange>(impl_, id, std::move(request), std::move(callbacks));
  ex->parser.on_head = [p = ex.get()] { p->on_head(); };
  ex->parser.on_body = [p = ex.get()](std::string_view b) { p->on_body(b); };
  impl_->active.emplace(id, ex);
  // Started here, not posted, so an open-loop sender's schedule is not delayed by a loop turn.
  // Nothing in start() completes synchronously, so callbacks still never run inside submit().
  ex->result.times.start = Exchange::now();
  ex->start();
  return id;
}

void HttpClient::cancel(RequestId id) {
  auto it = impl_->active.find(id);
  if (it == impl_->active.end()) return;
  auto ex = it->second;
  ex->finish(FailureKind::kCancelled, "cancelled");
}

namespace {
// One round of HttpClient::preconnect: counts the attempts still open.
struct Preconnect {
  Preconnect(asio::io_context& io, std::function<void(std::size_t)> d) : timer(io), done(std::move(d)) {}
  asio::steady_timer timer;
  std::function<void(std::size_t)> done;
  std::size_t pending = 0;
  std::vector<std::shared_ptr<Conn>> conns;
};
}  // namespace

void HttpClient::preconnect(std::size_t idle, std::chrono::milliseconds timeout,
                            std::function<void(std::size_t)> done) {
  auto impl = impl_;
  auto round = std::make_shared<Preconnect>(impl->io, std::move(done));
  const std::size_t want = std::min(idle, impl->opt.max_idle_connections);
  const std::size_t have = impl->idle.size();
  auto finish_one = [impl, round] {
    if (--round->pending > 0) return;
    round->timer.cancel();
    round->conns.clear();
    if (round->done) round->done(impl->idle.size());
    round->done = nullptr;
  };
  if (want <= have) {
    asio::post(impl->io, [impl, round] {
      if (round->done) round->done(impl->idle.size());
    });
    return;
  }
  round->pending = want - have;
  for (std::size_t i = have; i < want; ++i) {
    auto c = std::make_shared<Conn>(impl->io, impl->opt.read_buffer_bytes);
    round->conns.push_back(c);
    impl->opened++;
    asio::async_connect(c->sock, impl->endpoints,
                        [impl, c, finish_one](const error_code& ec, const tcp::endpoint&) {
                          if (!ec && c->sock.is_open()) {
                            error_code ignored;
                            c->sock.set_option(tcp::no_delay(true), ignored);
                            auto owned = std::make_unique<Conn>(std::move(*c));
                            impl->give_back(std::move(owned));
                          }
                          finish_one();
                        });
  }
  round->timer.expires_after(timeout);
  round->timer.async_wait([round](const error_code& ec) {
    if (ec) return;
    // Attempts still open are abandoned: closing them completes their handlers with an error.
    for (auto& c : round->conns) {
      error_code ignored;
      c->sock.close(ignored);
    }
  });
}

std::size_t HttpClient::in_flight() const { return impl_->active.size(); }
std::size_t HttpClient::idle_connections() const { return impl_->idle.size(); }
uint64_t HttpClient::connections_opened() const { return impl_->opened; }

Result<HttpResponse> http_request(std::string_view url, std::string_view method, std::string body,
                                  std::chrono::milliseconds timeout, Headers headers,
                                  std::function<void(std::string_view, SteadyTime)> on_body) {
  PLUMB_ASSIGN_OR_RETURN(Url u, parse_url(url));
  asio::io_context io;
  auto base = "http://" + (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host) + ":" +
              std::to_string(u.port);
  PLUMB_ASSIGN_OR_RETURN(auto client, HttpClient::create(io, base));
  ClientRequest req;
  req.method = std::string(method);
  req.target = u.target;
  req.body = std::move(body);
  req.headers = std::move(headers);
  req.timeouts.connect = timeout;
  req.timeouts.first_byte = timeout;
  req.timeouts.idle = timeout;
  req.timeouts.total = timeout;
  std::optional<ClientResult> out;
  ClientCallbacks cbs;
  cbs.on_body = std::move(on_body);
  cbs.on_done = [&](ClientResult&& r) { out = std::move(r); };
  client->submit(std::move(req), std::move(cbs));
  io.run();
  if (!out) return internal_error("http_request: no result");
  ClientResult& r = *out;
  if (r.failure != FailureKind::kNone && r.failure != FailureKind::kHttpStatus) {
    std::string msg = std::string(failure_name(r.failure)) + ": " + r.error + " (" + std::string(url) + ")";
    switch (r.failure) {
      case FailureKind::kConnectRefused:
      case FailureKind::kConnectError:
        return unavailable(msg);
      case FailureKind::kConnectTimeout:
      case FailureKind::kFirstByteTimeout:
      case FailureKind::kIdleTimeout:
      case FailureKind::kTotalTimeout:
        return timeout_error(msg);
      case FailureKind::kMalformedResponse:
        return corrupt(msg);
      case FailureKind::kCancelled:
        return cancelled(msg);
      default:
        return io_error(msg);
    }
  }
  HttpResponse resp;
  resp.status = r.head.status;
  resp.headers = std::move(r.head.headers);
  resp.body = std::move(r.body);
  resp.times = r.times;
  resp.reads = r.reads;
  return resp;
}

}  // namespace plumb::net
