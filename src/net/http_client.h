// HTTP/1.1 client for the load generator and tools: keep-alive connections to one host:port,
// requests with a body, responses read whole or streamed to a callback as bytes arrive (SSE),
// per-request timeouts, failures sorted into precise categories, and steady-clock timestamps of
// every step. Asynchronous on an io_context the caller runs; a blocking call for tests and tools.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/status.h"
#include "net/http_types.h"

namespace boost::asio {
class io_context;
}

namespace plumb::net {

// A parsed http:// URL. https is not supported (kUnimplemented).
struct Url {
  std::string host;    // "127.0.0.1", "localhost", "::1" (no brackets)
  uint16_t port = 80;  // explicit port or 80
  std::string target;  // path and query, "/" when the URL has no path
};

// Errors: kInvalidArgument naming what is wrong; kUnimplemented for https.
Result<Url> parse_url(std::string_view url);

// Why a request failed. Each is counted separately by the load generator.
enum class FailureKind {
  kNone = 0,           // success: a complete response with status < 400
  kConnectRefused,     // the server refused the TCP connection (nothing listening)
  kConnectError,       // resolving or connecting failed otherwise (unreachable, ...)
  kConnectTimeout,     // the connect timeout passed
  kFirstByteTimeout,   // no response byte within the first-byte timeout after the request began sending
  kIdleTimeout,        // the response stalled longer than the idle timeout between two reads
  kTotalTimeout,       // the whole exchange took longer than the total timeout
  kReset,              // the connection was reset (RST/EPIPE) while sending or receiving
  kClosedBeforeEnd,    // the server closed the connection cleanly before the response was complete
  kMalformedResponse,  // bad status line, header, Content-Length or chunked framing
  kHttpStatus,         // a complete response with status >= 400; the body is kept
  kCancelled,          // cancelled by the caller or the client was destroyed
  kIoError,            // any other socket error
};
// "connect_refused", "reset", ... (stable names for reports).
std::string_view failure_name(FailureKind kind);

// Per-request limits. Zero means no limit.
struct RequestTimeouts {
  std::chrono::milliseconds connect{10'000};  // TCP connect (only when a new connection is needed)
  // From the start of sending to the first response byte, and on to the first body byte: a
  // streaming server that sends its head at once and then queues the request is still "waiting".
  std::chrono::milliseconds first_byte{60'000};
  std::chrono::milliseconds idle{60'000};  // between two reads once the body has started
  std::chrono::milliseconds total{0};      // from submit() to the end of the response
};

struct ClientRequest {
  std::string method = "POST";                    // request method
  std::string target = "/";                       // path and query
  std::string body;                               // sent with Content-Length (empty: none for GET/HEAD)
  std::string content_type = "application/json";  // Content-Type when body is not empty
  Headers headers;                                // extra headers (Host, Content-Length are added)
  RequestTimeouts timeouts;                       // limits for this request
};

// Steady-clock timestamps of one exchange; a step that did not happen stays SteadyTime{}.
struct RequestTimes {
  SteadyTime start;       // submit() was called
  SteadyTime connected;   // TCP connected (== start's connection reuse time when pooled)
  SteadyTime sent;        // the whole request was written to the socket
  SteadyTime first_byte;  // the first response byte was read
  SteadyTime end;         // the response was complete, or the failure was detected
};

// Status line and headers of a response.
struct ResponseHead {
  int status = 0;   // e.g. 200
  Headers headers;  // in arrival order
};

// What on_done receives (exactly once per request).
struct ClientResult {
  FailureKind failure = FailureKind::kNone;  // kNone on success
  std::string error;                         // human detail for a failure, "" on success
  ResponseHead head;                         // status 0 when no head was received
  std::string body;                          // whole body when not streamed, and always for status >= 400
  RequestTimes times;                        // when each step happened
  uint64_t body_bytes = 0;                   // decoded body bytes received (streamed or not)
  uint64_t reads = 0;                        // socket reads that delivered response bytes
  bool reused_connection = false;            // the request went over a pooled keep-alive connection
  bool retried_on_new_connection = false;    // a pooled connection was found closed; sent again (see below)
  bool ok() const { return failure == FailureKind::kNone; }
};

// Callbacks of one request. All run on the thread running the io_context.
struct ClientCallbacks {
  // The response head arrived (optional).
  std::function<void(const ResponseHead&, SteadyTime at)> on_head;
  // If set and the status is < 400, body bytes are delivered here as they arrive instead of
  // being collected in ClientResult::body. One network read may yield several calls (one per
  // HTTP chunk it completes); all carry that read's arrival time. The view is valid only
  // during the call.
  std::function<void(std::string_view bytes, SteadyTime at)> on_body;
  // Required. Called exactly once, after which no other callback of the request runs.
  std::function<void(ClientResult&&)> on_done;
};

// Timestamps and deadlines use std::chrono::steady_clock directly: they measure the real network.
struct HttpClientOptions {
  std::size_t max_idle_connections = 4096;         // pooled idle keep-alive connections kept at most
  std::size_t read_buffer_bytes = 16 << 10;        // per connection
  std::size_t max_response_head_bytes = 64 << 10;  // larger heads are kMalformedResponse
  std::size_t max_body_bytes = 256u << 20;         // collected (non-streamed) bodies past this fail
};

// Connections to one host:port. Not thread-safe: call every method, and let the io_context run,
// on one thread. Many requests may be in flight at once, each on its own connection (there is no
// pipelining); finished connections return to the idle pool if the response allows keep-alive.
// There is no limit on connections: the caller bounds concurrency. One thing is retried: a request
// whose pooled connection turns out closed by the server (EOF, reset or a broken pipe) before any
// response byte arrived is sent once more on a new connection; its times still start at submit().
// (A server that closes after each response without "Connection: close" makes this race.) Nothing
// else is retried.
// Destroy the client before its io_context. Callbacks must not throw (an exception would leave
// io_context::run()).
class HttpClient {
 public:
  using RequestId = uint64_t;

  // base_url: "http://host:port" (a path, if any, is ignored). The host is resolved once here
  // (blocking). Errors: as parse_url, kUnavailable when the host does not resolve.
  static Result<std::unique_ptr<HttpClient>> create(boost::asio::io_context& io, std::string_view base_url,
                                                    HttpClientOptions options = {});
  // Fails every request still in flight with kCancelled (their on_done runs inside the
  // destructor) and closes all connections.
  // Only an allocation or a socket close failure can throw here; terminating then is right.
  ~HttpClient();  // NOLINT(bugprone-exception-escape)
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Starts a request. Callbacks run later on the io_context thread, never inside submit().
  RequestId submit(ClientRequest request, ClientCallbacks callbacks);
  // Fails the request with kCancelled (on_done runs before cancel returns) if it is in flight.
  void cancel(RequestId id);
  // Opens connections until `idle` are pooled (at most max_idle_connections), all at once, so that
  // later requests need no TCP set-up. `done` runs on the io_context thread, never inside this call,
  // with the number of pooled idle connections once every attempt has succeeded, failed or passed
  // `timeout`. Failures are not reported otherwise: a request that finds no idle connection
  // connects as usual.
  void preconnect(std::size_t idle, std::chrono::milliseconds timeout, std::function<void(std::size_t)> done);
  // Requests in flight.
  std::size_t in_flight() const;
  // Pooled idle connections.
  std::size_t idle_connections() const;
  // Connections opened so far (a measure of keep-alive reuse).
  uint64_t connections_opened() const;

  struct Impl;

 private:
  explicit HttpClient(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// Response of the blocking call.
struct HttpResponse {
  int status = 0;      // HTTP status
  Headers headers;     // response headers
  std::string body;    // whole body
  RequestTimes times;  // timestamps
  uint64_t reads = 0;  // network reads that carried response bytes

  std::string_view header(std::string_view name) const { return find_header(headers, name); }
};

// One request on a fresh connection, blocking the calling thread (own io_context). HTTP error
// statuses are returned as a response, not an error. Transport failures map to a Status:
// kUnavailable (refused, connect error), kTimeout (any timeout), kIoError (reset, closed before
// end), kCorrupt (malformed response); the message starts with failure_name(). on_body, if
// given, receives the body as it arrives (then HttpResponse::body stays empty for status < 400).
Result<HttpResponse> http_request(std::string_view url, std::string_view method, std::string body = {},
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds{30'000},
                                  Headers headers = {},
                                  std::function<void(std::string_view, SteadyTime)> on_body = nullptr);

}  // namespace plumb::net
