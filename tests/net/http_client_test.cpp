// HttpClient against small scripted raw-socket servers: each fault gets its own category.
#include "net/http_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <thread>

#include "net/raw_socket.h"

namespace plumb::net {
namespace {

using namespace std::chrono_literals;

// Callbacks with only on_done (and optionally on_body) set.
ClientCallbacks callbacks(std::function<void(ClientResult&&)> done,
                          std::function<void(std::string_view, SteadyTime)> body = nullptr) {
  ClientCallbacks c;
  c.on_body = std::move(body);
  c.on_done = std::move(done);
  return c;
}

using testing::RawServer;

std::string base(uint16_t port) { return "http://127.0.0.1:" + std::to_string(port); }

// Runs one streaming request against port with the given timeouts and returns its result and
// the streamed bytes.
struct Outcome {
  ClientResult result;
  std::string streamed;
  int heads = 0;
};
Outcome run_one(uint16_t port, RequestTimeouts timeouts = {}, bool stream = true) {
  boost::asio::io_context io;
  auto client = HttpClient::create(io, base(port));
  EXPECT_TRUE(client.ok());
  Outcome out;
  ClientRequest req;
  req.target = "/v1/chat/completions";
  req.body = R"({"stream":true})";
  req.timeouts = timeouts;
  ClientCallbacks cb;
  cb.on_head = [&](const ResponseHead&, SteadyTime) { out.heads++; };
  if (stream) cb.on_body = [&](std::string_view b, SteadyTime) { out.streamed.append(b); };
  cb.on_done = [&](ClientResult&& r) { out.result = std::move(r); };
  (*client)->submit(std::move(req), std::move(cb));
  io.run();
  return out;
}

const char* kStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

TEST(ParseUrl, Forms) {
  auto u = parse_url("http://127.0.0.1:8000/v1/models?x=1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->target, "/v1/models?x=1");
  auto d = parse_url("http://localhost");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 80);
  EXPECT_EQ(d->target, "/");
  auto v6 = parse_url("http://[::1]:9/");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(parse_url("https://x/").status().code(), Code::kUnimplemented);
  EXPECT_EQ(parse_url("ftp://x/").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parse_url("not a url").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parse_url("http://x:0/").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(failure_name(FailureKind::kReset), "reset");
}

TEST(HttpClient, Success) {
  RawServer srv([](int fd) {
    std::string req = testing::read_request(fd);
    EXPECT_NE(req.find("POST /v1/chat/completions HTTP/1.1\r\n"), std::string::npos);
    EXPECT_NE(req.find("Content-Length: 15\r\n"), std::string::npos);
    EXPECT_NE(req.find("Content-Type: application/json\r\n"), std::string::npos);
    EXPECT_TRUE(req.ends_with("\r\n\r\n{\"stream\":true}"));
    testing::send_all(fd, std::string(kStreamHead) + "9\r\ndata: a\n\n\r\n");
    std::this_thread::sleep_for(5ms);
    testing::send_all(fd, "9\r\ndata: b\n\n\r\n0\r\n\r\n");
    testing::recv_until(fd, {}, 2000ms);  // wait for the client to close
    ::close(fd);
  });
  Outcome o = run_one(srv.port());
  EXPECT_TRUE(o.result.ok()) << o.result.error;
  EXPECT_EQ(o.result.head.status, 200);
  EXPECT_EQ(o.streamed, "data: a\n\ndata: b\n\n");
  EXPECT_TRUE(o.result.body.empty());
  EXPECT_EQ(o.result.body_bytes, 18u);
  EXPECT_EQ(o.heads, 1);
  EXPECT_GE(o.result.reads, 2u);
  const RequestTimes& t = o.result.times;
  EXPECT_LE(t.start, t.connected);
  EXPECT_LE(t.connected, t.sent);
  EXPECT_LE(t.sent, t.first_byte);
  EXPECT_LE(t.first_byte, t.end);
}

TEST(HttpClient, ConnectionRefused) {
  Outcome o = run_one(testing::closed_port());
  EXPECT_EQ(o.result.failure, FailureKind::kConnectRefused) << o.result.error;
  EXPECT_EQ(o.result.head.status, 0);
}

TEST(HttpClient, ResetMidStream) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, std::string(kStreamHead) + "9\r\ndata: a\n\n\r\n");
    std::this_thread::sleep_for(20ms);
    testing::close_with_reset(fd);
  });
  Outcome o = run_one(srv.port());
  EXPECT_EQ(o.result.failure, FailureKind::kReset) << o.result.error;
  EXPECT_EQ(o.result.head.status, 200);
  EXPECT_EQ(o.streamed, "data: a\n\n");  // what arrived before the reset was delivered
}

TEST(HttpClient, StallPastIdleTimeout) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, std::string(kStreamHead) + "9\r\ndata: a\n\n\r\n");
    testing::recv_until(fd, {}, 3000ms);  // stall until the client gives up and closes
    ::close(fd);
  });
  RequestTimeouts t;
  t.idle = 100ms;
  Outcome o = run_one(srv.port(), t);
  EXPECT_EQ(o.result.failure, FailureKind::kIdleTimeout) << o.result.error;
  EXPECT_EQ(o.streamed, "data: a\n\n");
}

// A server that sends the SSE head at once and the first event only after a queue wait longer
// than the idle limit: the wait is bounded by first_byte, not idle.
TEST(HttpClient, SilenceAfterTheHeadIsTheFirstByteWait) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, kStreamHead);
    std::this_thread::sleep_for(300ms);  // queued
    testing::send_all(fd, "9\r\ndata: a\n\n\r\n0\r\n\r\n");
    testing::recv_until(fd, {}, 1000ms);
    ::close(fd);
  });
  RequestTimeouts t;
  t.idle = 100ms;
  t.first_byte = 5000ms;
  Outcome o = run_one(srv.port(), t);
  EXPECT_EQ(o.result.failure, FailureKind::kNone) << o.result.error;
  EXPECT_EQ(o.streamed, "data: a\n\n");

  // And past first_byte it fails as a first-byte timeout.
  RawServer silent([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, kStreamHead);
    testing::recv_until(fd, {}, 3000ms);
    ::close(fd);
  });
  t.first_byte = 200ms;
  o = run_one(silent.port(), t);
  EXPECT_EQ(o.result.failure, FailureKind::kFirstByteTimeout) << o.result.error;
  EXPECT_EQ(o.result.head.status, 200);
}

TEST(HttpClient, NoResponsePastFirstByteTimeout) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::recv_until(fd, {}, 3000ms);
    ::close(fd);
  });
  RequestTimeouts t;
  t.first_byte = 100ms;
  Outcome o = run_one(srv.port(), t);
  EXPECT_EQ(o.result.failure, FailureKind::kFirstByteTimeout) << o.result.error;
  EXPECT_EQ(o.result.reads, 0u);
}

TEST(HttpClient, TrickleStopsAtTotalTimeout) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, kStreamHead);
    for (int i = 0; i < 100; ++i) {
      if (!testing::send_all(fd, "9\r\ndata: a\n\n\r\n")) break;
      std::this_thread::sleep_for(20ms);
    }
    ::close(fd);
  });
  RequestTimeouts t;
  t.idle = 1000ms;
  t.total = 200ms;
  Outcome o = run_one(srv.port(), t);
  EXPECT_EQ(o.result.failure, FailureKind::kTotalTimeout) << o.result.error;
  EXPECT_FALSE(o.streamed.empty());
}

TEST(HttpClient, ServerErrorKeepsBody) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    std::string body = R"({"error":{"message":"engine failed"}})";
    testing::send_all(
        fd, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
    testing::recv_until(fd, {}, 2000ms);
    ::close(fd);
  });
  Outcome o = run_one(srv.port());
  EXPECT_EQ(o.result.failure, FailureKind::kHttpStatus);
  EXPECT_EQ(o.result.head.status, 500);
  EXPECT_EQ(o.result.body, R"({"error":{"message":"engine failed"}})");
  EXPECT_TRUE(o.streamed.empty());  // error bodies are not streamed
}

TEST(HttpClient, MalformedChunkedEncoding) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, std::string(kStreamHead) + "9\r\ndata: a\n\n\r\nnot-hex\r\n");
    testing::recv_until(fd, {}, 2000ms);
    ::close(fd);
  });
  Outcome o = run_one(srv.port());
  EXPECT_EQ(o.result.failure, FailureKind::kMalformedResponse) << o.result.error;
  EXPECT_NE(o.result.error.find("chunk size"), std::string::npos);
}

TEST(HttpClient, MalformedStatusLine) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    ::close(fd);
  });
  Outcome o = run_one(srv.port());
  EXPECT_EQ(o.result.failure, FailureKind::kMalformedResponse) << o.result.error;
}

TEST(HttpClient, CloseBeforeEnd) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, std::string(kStreamHead) + "9\r\ndata: a\n\n\r\n");  // no terminating chunk
    ::close(fd);
  });
  Outcome o = run_one(srv.port());
  EXPECT_EQ(o.result.failure, FailureKind::kClosedBeforeEnd) << o.result.error;
  EXPECT_EQ(o.streamed, "data: a\n\n");

  RawServer srv2([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort");
    ::close(fd);
  });
  Outcome o2 = run_one(srv2.port(), {}, /*stream=*/false);
  EXPECT_EQ(o2.result.failure, FailureKind::kClosedBeforeEnd) << o2.result.error;

  RawServer srv3([](int fd) {
    testing::read_request(fd);
    ::close(fd);  // accepts, reads, answers nothing
  });
  Outcome o3 = run_one(srv3.port());
  EXPECT_EQ(o3.result.failure, FailureKind::kClosedBeforeEnd) << o3.result.error;
  EXPECT_EQ(o3.result.reads, 0u);
}

TEST(HttpClient, CancelAndDestroy) {
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::recv_until(fd, {}, 3000ms);
    ::close(fd);
  });
  boost::asio::io_context io;
  auto client = HttpClient::create(io, base(srv.port()));
  ASSERT_TRUE(client.ok());
  std::vector<FailureKind> kinds;
  ClientRequest req;
  req.method = "GET";
  auto id = (*client)->submit(req, callbacks([&](ClientResult&& r) { kinds.push_back(r.failure); }));
  EXPECT_EQ((*client)->in_flight(), 1u);
  (*client)->cancel(id);
  EXPECT_EQ(kinds, std::vector<FailureKind>{FailureKind::kCancelled});
  (*client)->submit(req, callbacks([&](ClientResult&& r) { kinds.push_back(r.failure); }));
  io.run_for(50ms);
  client->reset();  // destroying the client fails what is in flight
  EXPECT_EQ(kinds, (std::vector<FailureKind>{FailureKind::kCancelled, FailureKind::kCancelled}));
  io.run();  // leftover handlers complete harmlessly
}

TEST(HttpClient, StaleKeepAliveConnectionIsNotReused) {
  // The server answers one request per connection but claims keep-alive, then closes.
  RawServer srv([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    ::shutdown(fd, SHUT_WR);
    testing::recv_until(fd, {}, 500ms);
    ::close(fd);
  });
  boost::asio::io_context io;
  auto client = HttpClient::create(io, base(srv.port()));
  ASSERT_TRUE(client.ok());
  int done = 0;
  ClientRequest req;
  req.method = "GET";
  (*client)->submit(req, callbacks([&](ClientResult&& r) {
                      EXPECT_TRUE(r.ok()) << r.error;
                      ++done;
                    }));
  io.run();
  io.restart();
  std::this_thread::sleep_for(20ms);  // let the FIN arrive
  (*client)->submit(req, callbacks([&](ClientResult&& r) {
                      EXPECT_TRUE(r.ok()) << r.error;
                      EXPECT_FALSE(r.reused_connection);
                      ++done;
                    }));
  io.run();
  EXPECT_EQ(done, 2);
  EXPECT_EQ((*client)->connections_opened(), 2u);
}

// Two requests in turn from one client to `port` (the second may reuse the first's connection); their
// results, and the connections the client opened.
struct TwoInTurn {
  std::vector<ClientResult> got;
  uint64_t opened = 0;
};
TwoInTurn two_requests_in_turn(uint16_t port, const ClientRequest& req) {
  boost::asio::io_context io;
  auto client = HttpClient::create(io, base(port));
  EXPECT_TRUE(client.ok());
  TwoInTurn out;
  if (!client.ok()) return out;
  for (int i = 0; i < 2; ++i) {
    (*client)->submit(req, callbacks([&](ClientResult&& r) { out.got.push_back(std::move(r)); }));
    io.run();
    io.restart();
  }
  out.opened = (*client)->connections_opened();
  return out;
}

const char* kOk = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

// A server that answers keep-alive but closes a connection once the next request has arrived on
// it (a keep-alive limit, or a close after each stream that raced the pool's check): nothing of a
// response came, so the request goes again, once, on a new connection. `reset`: RST instead of FIN.
void expect_closed_pooled_connection_retried(bool reset) {
  std::atomic<int> conns{0};
  RawServer srv([&](int fd) {
    int n = conns++;
    testing::read_request(fd);
    testing::send_all(fd, kOk);
    if (n == 0) {
      testing::read_request(fd);  // the second request came over the pooled connection
      if (reset) return testing::close_with_reset(fd);
    }
    ::close(fd);
  });
  ClientRequest req;
  req.body = R"({"n":1})";
  TwoInTurn t = two_requests_in_turn(srv.port(), req);
  const auto& got = t.got;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].ok()) << got[0].error;
  EXPECT_FALSE(got[0].retried_on_new_connection);
  EXPECT_TRUE(got[1].ok()) << (reset ? "reset: " : "fin: ") << got[1].error;
  EXPECT_TRUE(got[1].retried_on_new_connection);
  EXPECT_FALSE(got[1].reused_connection);
  EXPECT_EQ(got[1].body, "ok");
  // Its times start at submit(), so the lost attempt is inside its connect time.
  EXPECT_LE(got[1].times.start, got[1].times.connected);
  EXPECT_EQ(t.opened, 2u);
  EXPECT_EQ(conns.load(), 2);
}

TEST(HttpClient, APooledConnectionClosedUnderTheRequestIsRetriedOnceOnANewOne) {
  expect_closed_pooled_connection_retried(/*reset=*/false);
  expect_closed_pooled_connection_retried(/*reset=*/true);
}

// The retry is once, and never after a response began: a retried request whose new connection is
// closed unanswered too fails (a new connection closed without an answer is CloseBeforeEnd's case),
// and a pooled connection closed in the middle of its answer fails as it failed.
TEST(HttpClient, TheRetryIsOnceAndNeverAfterAResponseBegan) {
  ClientRequest req;
  req.method = "GET";
  std::atomic<int> conns{0};
  RawServer twice([&](int fd) {
    int n = conns++;
    testing::read_request(fd);
    if (n == 0) {
      testing::send_all(fd, kOk);
      testing::read_request(fd);
    }
    ::close(fd);  // the second connection is closed before any answer too
  });
  TwoInTurn t = two_requests_in_turn(twice.port(), req);
  ASSERT_EQ(t.got.size(), 2u);
  EXPECT_EQ(t.got[1].failure, FailureKind::kClosedBeforeEnd) << t.got[1].error;
  EXPECT_TRUE(t.got[1].retried_on_new_connection);
  EXPECT_EQ(t.opened, 2u);

  RawServer partial([](int fd) {
    testing::read_request(fd);
    testing::send_all(fd, kOk);
    testing::read_request(fd);
    testing::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npar");
    ::close(fd);
  });
  t = two_requests_in_turn(partial.port(), req);
  ASSERT_EQ(t.got.size(), 2u);
  EXPECT_EQ(t.got[1].failure, FailureKind::kClosedBeforeEnd) << t.got[1].error;
  EXPECT_FALSE(t.got[1].retried_on_new_connection);
  EXPECT_EQ(t.opened, 1u);
}

TEST(HttpClient, PreconnectPoolsConnectionsAheadOfRequests) {
  // A listening socket that never accepts: the kernel completes the handshakes on its own.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 16), 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  boost::asio::io_context io;
  auto client = HttpClient::create(io, base(ntohs(a.sin_port)));
  ASSERT_TRUE(client.ok());
  std::vector<std::size_t> pooled;
  (*client)->preconnect(3, 2000ms, [&](std::size_t n) { pooled.push_back(n); });
  EXPECT_TRUE(pooled.empty());  // never inside the call
  io.run();
  io.restart();
  (*client)->preconnect(2, 2000ms, [&](std::size_t n) { pooled.push_back(n); });  // enough already
  io.run();
  EXPECT_EQ(pooled, (std::vector<std::size_t>{3, 3}));
  EXPECT_EQ((*client)->idle_connections(), 3u);
  EXPECT_EQ((*client)->connections_opened(), 3u);
  ::close(lfd);
}

TEST(HttpClient, PreconnectToAClosedPortPoolsNothing) {
  uint16_t port = 0;
  {
    RawServer srv([](int fd) { ::close(fd); });
    port = srv.port();
  }
  boost::asio::io_context io;
  auto client = HttpClient::create(io, base(port));
  ASSERT_TRUE(client.ok());
  std::size_t pooled = 99;
  (*client)->preconnect(2, 2000ms, [&](std::size_t n) { pooled = n; });
  io.run();
  EXPECT_EQ(pooled, 0u);
  EXPECT_EQ((*client)->idle_connections(), 0u);
}

TEST(HttpRequest, BlockingErrorsMapToStatus) {
  auto r = http_request(base(testing::closed_port()) + "/x", "GET");
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_TRUE(r.status().message().starts_with("connect_refused")) << r.status().message();
  EXPECT_EQ(http_request("https://127.0.0.1/", "GET").status().code(), Code::kUnimplemented);
}

}  // namespace
}  // namespace plumb::net
