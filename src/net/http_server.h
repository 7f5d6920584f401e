// HTTP/1.1 server on Boost.Asio/Beast (kept out of this header): an IO thread pool, keep-alive,
// request size limits and timeouts, whole or streaming (chunked, e.g. SSE) responses that may be
// written from any thread, client-disconnect notification, and graceful shutdown.
//
// Threading: the server runs its own io_context on `io_threads` threads. Each connection is
// served on its own strand, so a connection's handlers never run concurrently. Handlers run on an
// IO thread and must not block: hand long work (the engine) to another thread and keep the
// ResponseWriter; finish the response from there.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "net/http_types.h"

namespace plumb::net {

// One parsed request. Owned by the server for the duration of the handler call: copy what you
// need to keep.
struct Request {
  std::string method;  // "GET", "POST", ... as sent (upper case by HTTP convention)
  std::string target;  // request target as sent: "/v1/models?x=1"
  std::string path;    // target before '?': "/v1/models"
  std::string query;   // target after '?' (without it), "" when none; not percent-decoded
  Headers headers;     // in arrival order
  std::string body;    // the whole body (Content-Length or chunked), already de-chunked
  int version = 11;    // 10 for HTTP/1.0, 11 for HTTP/1.1
  std::string remote;  // peer "ip:port"

  std::string_view header(std::string_view name) const { return find_header(headers, name); }
};

// Writes the response to one request. Shared with the handler via shared_ptr; every method is
// thread-safe and returns immediately (the write is posted to the connection's strand and
// performed in order). Exactly one of send() or start_stream()..end() should be used; calls
// that break this (a second send, write before start_stream, anything after end) are ignored
// and return false. Calls after the client has gone are no-ops that return false.
//
// If the last reference is dropped without a response, the server answers 500 ("handler did
// not respond"); if it is dropped during a stream without end(), the connection is closed
// without the terminating chunk, so the client sees a truncated stream rather than a clean end.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // Whole response with Content-Length. `headers` are added to the defaults (Content-Type,
  // Content-Length, Connection); CR/LF in names or values are removed.
  virtual bool send(int status, std::string content_type, std::string body, Headers headers = {}) = 0;

  // Streaming response: sends the head with Transfer-Encoding: chunked (for an HTTP/1.0 client:
  // no length, and the connection closes at the end). For SSE pass "text/event-stream"; the
  // server then also sends Cache-Control: no-cache.
  virtual bool start_stream(int status, std::string content_type, Headers headers = {}) = 0;
  // Queues one chunk (empty chunks are skipped: an empty chunk would end the stream). Queued
  // chunks are coalesced into as few socket writes as possible; order is preserved.
  virtual bool write(std::string chunk) = 0;
  // Ends the stream (terminating chunk). The connection then serves the next keep-alive request.
  virtual bool end() = 0;

  // True once the client has disconnected, a write failed or timed out, or the server closed
  // the connection (shutdown past its grace period). Never goes back to false.
  virtual bool is_closed() const = 0;
  // Calls cb once when the connection closes before the response was completely written
  // (client gone, write error, forced shutdown). If that already happened, cb is called soon
  // (posted). Runs on an IO thread: keep it short and non-blocking (e.g. set a cancel flag).
  // A later call replaces an earlier callback. Not called after a response completed normally.
  virtual void on_close(std::function<void()> cb) = 0;
  // Bytes of this stream queued but not yet written to the socket (backpressure signal).
  virtual std::size_t queued_bytes() const = 0;
};

// A handler gets the request and the writer. It may respond before returning or keep the
// writer and respond later from any thread. An exception escaping a handler becomes a 500 with
// a JSON error body (if nothing was sent yet) and is logged; it never stops the server.
using Handler = std::function<void(const Request&, std::shared_ptr<ResponseWriter>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";            // address to bind; "0.0.0.0" or "::" for all interfaces
  uint16_t port = 0;                         // 0: the OS picks a free port; read it back with port()
  int io_threads = 2;                        // threads running the IO loop (not the engine's threads)
  std::size_t max_body_bytes = 8u << 20;     // larger request bodies get 413 and the connection closes
  std::size_t max_header_bytes = 64u << 10;  // larger request heads get 400 and the connection closes
  // How long a connection may wait for the first byte of its next request: a new connection
  // for its first request, a keep-alive one after its last response. Expiry closes it without a
  // response (an idle connection holds one of max_connections).
  std::chrono::milliseconds idle_timeout{60'000};
  // Time allowed for a complete request head, counted from its first byte. Expiry closes the
  // connection without a response.
  std::chrono::milliseconds header_timeout{60'000};
  // Time allowed for the body after the head. Expiry closes the connection.
  std::chrono::milliseconds body_timeout{60'000};
  // Connections served at once. Past it a new connection gets 503 with an OpenAI error body
  // (code "too_many_connections", Retry-After: 1) and is closed, at once, instead of waiting for
  // a slot or failing to accept for want of file descriptors. 0 = default_max_connections().
  std::size_t max_connections = 0;
  // Time allowed for each socket write (a client that stops reading). Expiry closes the
  // connection and marks the writer closed.
  std::chrono::milliseconds write_timeout{30'000};
  // A stream whose unwritten backlog exceeds this is closed (the client cannot keep up).
  std::size_t max_stream_backlog_bytes = 64u << 20;
  int listen_backlog = 1024;  // listen(2) backlog
};

// Malformed framing is answered 400 at once and the connection closed: a parse error, a chunk
// header longer than max_header_bytes, or a bare LF (without CR) as a line ending anywhere in the
// head or the chunked framing. RFC 9112 (2.2) lets a recipient accept a lone LF in the head; plumb
// refuses it there and in chunk lines alike, so no message is framed differently here than by a
// proxy in front (request smuggling), and a client sending one learns at once instead of waiting
// out a timeout.
//
// Counters since start(), for tests and /metrics. Monotonic; read with stats().
struct HttpServerStats {
  uint64_t connections_accepted = 0;  // TCP connections accepted
  uint64_t connections_open = 0;      // currently open (gauge)
  uint64_t requests = 0;              // complete requests handed to handlers or the router
  uint64_t bad_requests = 0;          // malformed requests answered 400 / 413
  uint64_t handler_exceptions = 0;    // handlers that threw (answered 500)
  uint64_t client_disconnects = 0;    // connections closed by the client before the response ended
  uint64_t connections_rejected = 0;  // connections answered 503 because max_connections were open
  uint64_t accept_errors = 0;         // accept() failures (e.g. EMFILE: out of file descriptors)
};

// The default connection cap: the soft RLIMIT_NOFILE minus a reserve for everything else the
// process opens (model files, logs, the listening socket, epoll, pipes, connections being turned
// away): min(128, limit / 2). At
// least 1; an unlimited limit counts as 1,048,576.
std::size_t default_max_connections();
// The same rule for a given soft limit.
std::size_t max_connections_for_fd_limit(uint64_t nofile_soft_limit);

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options = {});
  // Stops with a zero grace period if still running.
  // Only a failed thread join or allocation can throw here; terminating then is right.
  ~HttpServer();  // NOLINT(bugprone-exception-escape)
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Registers a handler for an exact method and path (no query). Call before start(). A path
  // with no handler gets 404; a path registered for other methods gets 405 with Allow. HEAD is
  // not implied by GET: register it if wanted (send() then omits the body).
  void route(std::string method, std::string path, Handler handler);
  // Handles requests that match no route (instead of 404/405). Call before start().
  void set_fallback(Handler handler);

  // Binds, listens and starts the IO threads. Errors: kInvalidArgument for a bad host,
  // kIoError when the address cannot be bound (in use, permission), kFailedPrecondition if
  // already started.
  Status start();
  // The bound port (the real one when options.port was 0); 0 before start().
  uint16_t port() const;

  // Graceful shutdown: stops accepting, closes idle keep-alive connections, lets in-flight
  // requests and streams finish for up to `grace`, then closes what is left (their writers
  // report is_closed() and on_close fires) and joins the IO threads. Idempotent; thread-safe;
  // must not be called from a handler or an IO thread.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds{5000});

  HttpServerStats stats() const;

  struct Impl;

 private:
  Status start_listening();
  std::shared_ptr<Impl> impl_;
};

}  // namespace plumb::net
