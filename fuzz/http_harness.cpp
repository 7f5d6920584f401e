#include "fuzz/http_harness.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "net/http_server.h"
#include "net/response_parser.h"

namespace plumb::fuzz {
namespace {

net::HttpServer& server() {
  // Leaked on purpose: the fuzzer exits without running destructors, and a server stopped at
  // static destruction would race the IO threads.
  static net::HttpServer* s = [] {
    net::HttpServerOptions o;
    o.port = 0;
    o.io_threads = 2;
    o.max_body_bytes = kHttpMaxBody;
    o.max_header_bytes = kHttpMaxHead;
    o.header_timeout = std::chrono::seconds(3);
    o.body_timeout = std::chrono::seconds(3);
    o.write_timeout = std::chrono::seconds(3);
    auto* srv = new net::HttpServer(o);
    srv->route("POST", "/echo", [](const net::Request& r, std::shared_ptr<net::ResponseWriter> w) {
      w->send(200, "application/octet-stream", r.body, {{"X-Method", r.method}});
    });
    srv->route("GET", "/stream", [](const net::Request& r, std::shared_ptr<net::ResponseWriter> w) {
      w->start_stream(200, "text/event-stream");
      w->write("data: one\n\n");
      w->write("data: " + r.query + "\n\n");
      w->write("data: [DONE]\n\n");
      w->end();
    });
    srv->set_fallback([](const net::Request&, std::shared_ptr<net::ResponseWriter> w) {
      w->send(404, "application/json", R"({"error":{"message":"no such route"}})");
    });
    if (Status st = srv->start(); !st.ok()) {
      std::fprintf(stderr, "fuzz http harness: cannot start the server: %s\n", st.message().c_str());
      std::abort();
    }
    return srv;
  }();
  return *s;
}

}  // namespace

HttpExchange http_exchange(std::string_view bytes, std::chrono::milliseconds limit) {
  uint16_t port = server().port();
  HttpExchange ex;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return ex;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    std::fprintf(stderr, "fuzz http harness: cannot connect to the server\n");
    std::abort();
  }
  // The server may answer and close before it has read everything (a bad head): stop sending then.
  std::string_view rest = bytes;
  while (!rest.empty()) {
    ssize_t n = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  ::shutdown(fd, SHUT_WR);
  auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[16384];
  while (true) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {  // EOF, or a reset: either way the server closed
      ex.closed = true;
      break;
    }
    ex.received.append(buf, static_cast<std::size_t>(n));
  }
  // Close with RST: thousands of exchanges a second must not fill the port range with TIME_WAIT.
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
  return ex;
}

std::vector<int> http_statuses(std::string_view received, std::vector<std::string>* bodies,
                               bool first_is_head) {
  std::vector<int> out;
  while (!received.empty()) {
    net::ResponseParser p(64 << 10, out.empty() && first_is_head);
    std::string body;
    p.on_body = [&](std::string_view b) { body.append(b); };
    // Byte by byte, to know where this response ends and the next begins.
    std::size_t used = 0;
    bool ok = true;
    while (used < received.size() && !p.done()) {
      ok = p.feed(received.substr(used, 1)).ok();
      if (!ok) break;
      ++used;
    }
    if (ok && !p.done()) ok = p.finish_eof().ok() && p.done();
    if (!ok) break;
    out.push_back(p.status());
    if (bodies) bodies->push_back(std::move(body));
    received.remove_prefix(used);
  }
  return out;
}

std::string check_http_exchange(std::string_view sent, const HttpExchange& ex) {
  if (!ex.closed) {
    // Tell a connection the server forgot from a machine too loaded to answer in time: a fresh
    // request must still be answered at once.
    auto t0 = std::chrono::steady_clock::now();
    HttpExchange probe =
        http_exchange("GET /stream HTTP/1.1\r\nHost: probe\r\n\r\n", std::chrono::seconds(10));
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    std::string head = ex.received.substr(0, std::min<std::size_t>(ex.received.find('\r'), 40));
    return "the server neither closed the connection nor reset it within the limit (it had sent " +
           std::to_string(ex.received.size()) + " bytes, starting '" + head + "'); a fresh request " +
           (probe.closed ? "was answered in " + std::to_string(ms.count()) + " ms" : "got no answer either");
  }
  if (ex.received.empty()) return "";
  std::string_view r = ex.received;
  if (!r.starts_with("HTTP/1.1 ") || r.size() < 12)
    return "the server's answer does not start with a status line";
  bool first_head = sent.starts_with("HEAD ");
  std::size_t last_head = sent.rfind("HEAD");
  if (last_head != std::string_view::npos && !(first_head && last_head == 0)) {
    if (r[9] >= '5') return "the server answered " + std::string(r.substr(9, 3));
    return "";
  }
  std::vector<int> statuses = http_statuses(r, nullptr, first_head);
  if (statuses.empty()) return "the server's first response does not parse";
  for (int s : statuses) {
    if (s >= 500) return "the server answered " + std::to_string(s);
  }
  return "";
}

}  // namespace plumb::fuzz
