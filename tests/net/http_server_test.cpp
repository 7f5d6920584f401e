// HttpServer over real loopback sockets, driven by net's own client and by raw sockets.
#include "net/http_server.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <future>
#include <thread>

#include "net/http_client.h"
#include "net/raw_socket.h"
#include "net/sse.h"

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

using testing::raw_exchange;

std::string url(const HttpServer& s, std::string_view path) {
  return "http://127.0.0.1:" + std::to_string(s.port()) + std::string(path);
}

// Registers a few plain handlers used by many tests.
void add_basic_routes(HttpServer& s) {
  s.route("GET", "/hello", [](const Request& req, std::shared_ptr<ResponseWriter> w) {
    w->send(200, "text/plain", "hello " + req.query);
  });
  s.route("POST", "/echo", [](const Request& req, std::shared_ptr<ResponseWriter> w) {
    w->send(200, std::string(req.header("content-type")), req.body, {{"X-Method", req.method}});
  });
}

TEST(HttpServer, StartsOnFreePortAndRoutes) {
  HttpServer s;
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  ASSERT_NE(s.port(), 0);

  auto r = http_request(url(s, "/hello?name=x"), "GET");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello name=x");
  EXPECT_EQ(r->header("content-type"), "text/plain");

  auto e = http_request(url(s, "/echo"), "POST", R"({"a":1})");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->status, 200);
  EXPECT_EQ(e->body, R"({"a":1})");
  EXPECT_EQ(e->header("content-type"), "application/json");
  EXPECT_EQ(e->header("x-method"), "POST");

  auto nf = http_request(url(s, "/nope"), "GET");
  ASSERT_TRUE(nf.ok());
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(nf->body,
            R"({"error":{"message":"no route for GET /nope","type":"invalid_request_error","code":404}})");

  auto na = http_request(url(s, "/echo"), "GET");
  ASSERT_TRUE(na.ok());
  EXPECT_EQ(na->status, 405);
  EXPECT_EQ(na->header("allow"), "POST");
}

TEST(HttpServer, BindErrorIsReported) {
  HttpServer a;
  ASSERT_TRUE(a.start().ok());
  HttpServer b(HttpServerOptions{.port = a.port()});
  Status st = b.start();
  EXPECT_EQ(st.code(), Code::kIoError);
  EXPECT_NE(st.message().find("cannot bind"), std::string::npos);
  HttpServer c(HttpServerOptions{.host = "no such host.invalid"});
  EXPECT_EQ(c.start().code(), Code::kInvalidArgument);
  EXPECT_EQ(a.start().code(), Code::kFailedPrecondition);
}

TEST(HttpServer, KeepAliveReusesOneConnection) {
  HttpServer s;
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  boost::asio::io_context io;
  auto client = HttpClient::create(io, url(s, ""));
  ASSERT_TRUE(client.ok());
  std::vector<std::string> bodies;
  // Sequential requests: each is submitted when the previous one is done.
  std::function<void(int)> next = [&](int i) {
    if (i == 5) return;
    ClientRequest req;
    req.method = "GET";
    req.target = "/hello?" + std::to_string(i);
    (*client)->submit(req, callbacks([&, i](ClientResult&& r) {
                        EXPECT_TRUE(r.ok()) << r.error;
                        EXPECT_EQ(r.reused_connection, i > 0);
                        bodies.push_back(r.body);
                        next(i + 1);
                      }));
  };
  next(0);
  io.run();
  EXPECT_EQ(bodies, (std::vector<std::string>{"hello 0", "hello 1", "hello 2", "hello 3", "hello 4"}));
  EXPECT_EQ((*client)->connections_opened(), 1u);
  EXPECT_EQ((*client)->idle_connections(), 1u);
  EXPECT_EQ(s.stats().connections_accepted, 1u);
  EXPECT_EQ(s.stats().requests, 5u);
}

TEST(HttpServer, PipelinedRequestsOnOneConnection) {
  HttpServer s;
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  std::string out = raw_exchange(s.port(),
                                 "GET /hello?1 HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "GET /hello?2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(out.find("hello 1"), std::string::npos) << out;
  EXPECT_NE(out.find("hello 2"), std::string::npos) << out;
  EXPECT_LT(out.find("hello 1"), out.find("hello 2"));
}

// An "engine" thread that streams n SSE events into a writer it was handed.
void stream_from_thread(std::shared_ptr<ResponseWriter> w, int n, std::chrono::microseconds gap) {
  std::thread([w, n, gap] {
    for (int i = 0; i < n && !w->is_closed(); ++i) {
      w->write(sse_format_data("{\"i\":" + std::to_string(i) + "}"));
      if (gap.count()) std::this_thread::sleep_for(gap);
    }
    w->write(sse_format_data("[DONE]"));
    w->end();
  }).detach();
}

TEST(HttpServer, StreamsSseWrittenFromAnotherThread) {
  HttpServer s;
  s.route("POST", "/stream", [](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/event-stream");
    stream_from_thread(w, 100, 0us);
  });
  ASSERT_TRUE(s.start().ok());
  SseParser parser;
  std::vector<SseEvent> events;
  Status parse_status;
  auto r = http_request(url(s, "/stream"), "POST", "{}", 10s, {},
                        [&](std::string_view b, SteadyTime) { parse_status = parser.feed(b, events); });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(parse_status.ok());
  ASSERT_TRUE(parser.finish(events).ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  EXPECT_EQ(r->header("cache-control"), "no-cache");
  ASSERT_EQ(events.size(), 101u);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(events[static_cast<std::size_t>(i)].data, "{\"i\":" + std::to_string(i) + "}");
  EXPECT_EQ(events.back().data, "[DONE]");
}

// Chunks written on the producing thread go straight to the socket while it is idle; one the
// socket cannot take whole (its buffer is full) continues through the IO strand. Large chunks,
// written faster than the client reads, move the stream from the direct path to the queued one
// (in trial runs with a probe, one partial direct write per run, most runs): every byte must
// still arrive once and in order.
TEST(HttpServer, StreamBytesStayInOrderAcrossDirectAndQueuedWrites) {
  HttpServer s;
  constexpr int kChunks = 120;
  s.route("POST", "/big", [](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/event-stream");
    std::thread([w] {
      for (int i = 0; i < kChunks && !w->is_closed(); ++i) {
        std::string payload(std::size_t(1000 + 4099 * (i % 100)), char('a' + i % 26));
        w->write(sse_format_data(std::to_string(i) + ":" + payload));
        if (i % 4 == 3) std::this_thread::sleep_for(1ms);  // lets the strand drain and reopen direct
      }
      w->write(sse_format_data("[DONE]"));
      w->end();
    }).detach();
  });
  ASSERT_TRUE(s.start().ok());
  SseParser parser;
  std::vector<SseEvent> events;
  Status parse_status;
  auto r = http_request(url(s, "/big"), "POST", "{}", 30s, {}, [&](std::string_view b, SteadyTime) {
    std::this_thread::sleep_for(200us);  // a slow reader: the socket buffer fills
    parse_status = parser.feed(b, events);
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(parse_status.ok()) << parse_status.to_string();
  ASSERT_TRUE(parser.finish(events).ok());
  ASSERT_EQ(events.size(), std::size_t(kChunks + 1));
  for (int i = 0; i < kChunks; ++i) {
    std::string want =
        std::to_string(i) + ":" + std::string(std::size_t(1000 + 4099 * (i % 100)), char('a' + i % 26));
    ASSERT_EQ(events[std::size_t(i)].data, want) << "chunk " << i;
  }
  EXPECT_EQ(events.back().data, "[DONE]");
}

TEST(HttpServer, Http10StreamEndsWithClose) {
  HttpServer s;
  s.route("GET", "/stream", [](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/event-stream");
    w->write("data: a\n\n");
    w->end();
  });
  ASSERT_TRUE(s.start().ok());
  std::string out = raw_exchange(s.port(), "GET /stream HTTP/1.0\r\n\r\n");
  EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
  EXPECT_EQ(out.find("chunked"), std::string::npos) << out;
  EXPECT_TRUE(out.ends_with("\r\n\r\ndata: a\n\n")) << out;
}

TEST(HttpServer, ClientDisconnectMidStreamFiresOnClose) {
  HttpServer s;
  std::promise<void> closed;
  std::promise<std::shared_ptr<ResponseWriter>> got_writer;
  s.route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->on_close([&closed] { closed.set_value(); });
    w->start_stream(200, "text/event-stream");
    w->write("data: first\n\n");
    got_writer.set_value(w);  // the "engine" keeps the writer but writes nothing more
  });
  ASSERT_TRUE(s.start().ok());
  int fd = testing::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  testing::send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got = testing::recv_until(fd, "data: first");
  EXPECT_NE(got.find("data: first"), std::string::npos);
  auto w = got_writer.get_future().get();
  EXPECT_FALSE(w->is_closed());
  ::close(fd);
  // No further write is needed: the server notices the close by itself. (Generous hang guard.)
  ASSERT_EQ(closed.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(w->is_closed());
  EXPECT_FALSE(w->write("data: late\n\n"));
  EXPECT_EQ(s.stats().client_disconnects, 1u);
}

TEST(HttpServer, OnCloseRegisteredAfterCloseStillRuns) {
  HttpServer s;
  std::promise<std::shared_ptr<ResponseWriter>> got_writer;
  s.route("GET", "/x", [&](const Request&, std::shared_ptr<ResponseWriter> w) { got_writer.set_value(w); });
  ASSERT_TRUE(s.start().ok());
  int fd = testing::connect_loopback(s.port());
  testing::send_all(fd, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
  auto w = got_writer.get_future().get();
  ::close(fd);
  while (!w->is_closed()) std::this_thread::sleep_for(1ms);
  std::promise<void> called;
  w->on_close([&] { called.set_value(); });
  EXPECT_EQ(called.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(w->send(200, "text/plain", "too late"));  // closed: refused without effect
}

TEST(HttpServer, BodyLimitGives413) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  HttpServer s(o);
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  auto r = http_request(url(s, "/echo"), "POST", std::string(4096, 'x'));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("larger than 1024"), std::string::npos);
  // Chunked body over the limit.
  std::string out = raw_exchange(s.port(),
                                 "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 "800\r\n" +
                                     std::string(2048, 'y') + "\r\n0\r\n\r\n");
  EXPECT_TRUE(out.starts_with("HTTP/1.1 413 ")) << out.substr(0, 100);
  auto ok = http_request(url(s, "/echo"), "POST", std::string(1024, 'x'));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body.size(), 1024u);
}

TEST(HttpServer, MalformedRequestsGet400AndServerKeepsServing) {
  HttpServer s;
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  std::string garbage;
  for (int i = 0; i < 300; ++i) garbage.push_back(static_cast<char>((i * 37 + 11) & 0xff));
  struct Case {
    std::string name, bytes;
    bool shutdown_write;
  };
  std::vector<Case> corpus = {
      {"garbage request line", "GARBAGE\r\n\r\n", false},
      {"bad version", "GET /hello HTTP/9.9\r\n\r\n", false},
      {"extra token in request line", "GET /hello HTTP/1.1 extra\r\n\r\n", false},
      {"header without colon", "GET /hello HTTP/1.1\r\nBad Header\r\n\r\n", false},
      {"empty header name", "GET /hello HTTP/1.1\r\n: v\r\n\r\n", false},
      {"space in header name", "GET /hello HTTP/1.1\r\nBad Name: v\r\n\r\n", false},
      {"non-numeric content-length", "POST /echo HTTP/1.1\r\nContent-Length: abc\r\n\r\n", false},
      {"conflicting content-length",
       "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", false},
      {"bad chunk size", "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
       false},
      {"body shorter than content-length", "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", true},
      {"huge header", "GET /hello HTTP/1.1\r\nX-Big: " + std::string(100 << 10, 'a') + "\r\n\r\n", false},
      {"binary garbage", garbage + "\r\n\r\n", false},
  };
  for (const auto& c : corpus) {
    std::string out = raw_exchange(s.port(), c.bytes, c.shutdown_write);
    EXPECT_TRUE(out.starts_with("HTTP/1.1 400 Bad Request\r\n")) << c.name << ": " << out.substr(0, 120);
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << c.name;
    EXPECT_NE(out.find("\"type\":\"invalid_request_error\""), std::string::npos) << c.name;
    auto ok = http_request(url(s, "/hello?after"), "GET");
    ASSERT_TRUE(ok.ok()) << c.name;
    EXPECT_EQ(ok->body, "hello after") << c.name;
  }
  EXPECT_EQ(s.stats().bad_requests, corpus.size());
}

TEST(HttpServer, HandlerExceptionGives500) {
  HttpServer s;
  s.route("GET", "/boom",
          [](const Request&, std::shared_ptr<ResponseWriter>) -> void { throw std::runtime_error("boom"); });
  s.route("GET", "/silent", [](const Request&, std::shared_ptr<ResponseWriter>) {});
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  auto r = http_request(url(s, "/boom"), "GET");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->body, R"({"error":{"message":"internal error: boom","type":"server_error","code":500}})");
  auto q = http_request(url(s, "/silent"), "GET");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->status, 500);
  EXPECT_NE(q->body.find("handler did not respond"), std::string::npos);
  auto ok = http_request(url(s, "/hello"), "GET");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(s.stats().handler_exceptions, 1u);
}

TEST(HttpServer, GracefulStopLetsInFlightStreamFinish) {
  HttpServer s;
  std::promise<void> started;
  s.route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/event-stream");
    started.set_value();
    stream_from_thread(w, 20, 10ms);
  });
  ASSERT_TRUE(s.start().ok());
  std::string u = url(s, "/stream");
  auto fut = std::async(std::launch::async, [u] {
    std::string body;
    auto r = http_request(u, "GET", {}, 10s, {}, [&](std::string_view b, SteadyTime) { body.append(b); });
    return std::make_pair(r.ok() ? r->status : -1, body);
  });
  started.get_future().wait();
  s.stop(10s);  // returns once the stream has ended (well before the bound)
  auto [status, body] = fut.get();
  EXPECT_EQ(status, 200);
  SseParser p;
  std::vector<SseEvent> ev;
  ASSERT_TRUE(p.feed(body, ev).ok());
  ASSERT_EQ(ev.size(), 21u);
  EXPECT_EQ(ev.back().data, "[DONE]");
  // Stopped: new connections are refused.
  auto after = http_request("http://127.0.0.1:" + std::to_string(s.port()) + "/stream", "GET", {}, 2s);
  EXPECT_EQ(after.status().code(), Code::kUnavailable);
}

TEST(HttpServer, StopPastGraceClosesStreamsAndFiresOnClose) {
  HttpServer s;
  std::promise<void> started, closed;
  std::shared_ptr<ResponseWriter> keep;
  s.route("GET", "/forever", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->on_close([&] { closed.set_value(); });
    w->start_stream(200, "text/event-stream");
    w->write("data: x\n\n");
    keep = w;
    started.set_value();
  });
  ASSERT_TRUE(s.start().ok());
  std::string u = url(s, "/forever");
  auto fut =
      std::async(std::launch::async, [u] { return http_request(u, "GET", {}, 10s, {}, [](auto, auto) {}); });
  started.get_future().wait();
  s.stop(100ms);
  EXPECT_EQ(closed.get_future().wait_for(0s), std::future_status::ready);
  EXPECT_TRUE(keep->is_closed());
  auto r = fut.get();
  EXPECT_EQ(r.status().code(), Code::kIoError);
  EXPECT_NE(r.status().message().find("closed_before_end"), std::string::npos) << r.status().to_string();
}

// A bare LF as a line ending (RFC 9112 lets a recipient accept it in the head; plumb refuses it,
// in the head and in chunked framing alike) gets 400 at once: before, a chunk-size line "5\n" left
// the parser waiting for a CRLF until the 60 s body timeout. The client keeps its side open, so
// only the server's answer can end the read (its limit, 5 s, is far below the timeouts).
TEST(HttpServer, BareLfLineEndingsGet400AtOnce) {
  HttpServer s;  // default 60 s header and body timeouts
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  const std::string chunked = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> corpus = {
      {"chunk lines end in LF", chunked + "5\nhello\n0\n\n"},
      {"chunk-size line alone", chunked + "5\n"},
      {"data CRLF then LF size line", chunked + "5\r\nhello\r\n0\n\n"},
      {"LF after chunk data", chunked + "5\r\nhello\n"},
      {"trailer line ends in LF", chunked + "5\r\nhello\r\n0\r\nX-T: 1\n\r\n"},
      {"request line ends in LF", "GET /hello HTTP/1.1\nHost: x\r\n\r\n"},
      {"header ends in LF", "GET /hello HTTP/1.1\r\nHost: x\n"},
  };
  for (const auto& [name, bytes] : corpus) {
    std::string out = raw_exchange(s.port(), bytes, /*shutdown_write=*/false);
    EXPECT_TRUE(out.starts_with("HTTP/1.1 400 Bad Request\r\n")) << name << ": " << out.substr(0, 160);
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << name;
    EXPECT_NE(out.find("\"type\":\"invalid_request_error\""), std::string::npos) << name;
  }
  EXPECT_EQ(s.stats().bad_requests, corpus.size());

  // A CR that arrives alone and its LF in the next segment is a proper CRLF.
  int fd = testing::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  testing::send_all(fd, chunked + "5\r");
  std::this_thread::sleep_for(50ms);  // let the server read the lone CR first
  testing::send_all(fd, "\nhello\r\n0\r\n\r\n");
  std::string out = testing::recv_until(fd, "hello");
  ::close(fd);
  EXPECT_TRUE(out.starts_with("HTTP/1.1 200 OK\r\n")) << out;
  EXPECT_NE(out.find("\r\n\r\nhello"), std::string::npos) << out;
}

TEST(HttpServer, IdleTimeoutClosesAConnectionThatSendsNothing) {
  HttpServerOptions o;
  o.idle_timeout = 100ms;  // the header timeout stays 60 s: only the idle one can close these
  HttpServer s(o);
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  // A new connection that never sends a byte.
  int fd = testing::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  EXPECT_EQ(testing::recv_until(fd), "");
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, MSG_DONTWAIT), 0);  // closed by the server, not our poll limit
  ::close(fd);
  // A keep-alive connection after its response.
  fd = testing::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  testing::send_all(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string out = testing::recv_until(fd);
  EXPECT_TRUE(out.starts_with("HTTP/1.1 200 OK\r\n")) << out;
  EXPECT_EQ(out.find("Connection: close"), std::string::npos) << out;
  EXPECT_EQ(::recv(fd, &c, 1, MSG_DONTWAIT), 0);
  ::close(fd);
}

// Waits (bounded) until `pred(stats)` holds.
template <typename P>
bool wait_stats(const HttpServer& s, P pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred(s.stats())) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred(s.stats());
}

TEST(HttpServer, ConnectionCapAnswers503AtOnceAndFreesSlotsOnClose) {
  HttpServerOptions o;
  o.max_connections = 4;
  HttpServer s(o);
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  std::vector<int> idle;
  for (int i = 0; i < 6; ++i) {  // more idle connections than the cap
    int fd = testing::connect_loopback(s.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  ASSERT_TRUE(wait_stats(s, [](const HttpServerStats& st) { return st.connections_accepted == 6; }));
  EXPECT_EQ(s.stats().connections_rejected, 2u);
  // A request on a new connection: 503 with an OpenAI error body, now (the idle timeout is 60 s).
  std::string out = raw_exchange(s.port(), "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(out.starts_with("HTTP/1.1 503 Service Unavailable\r\n")) << out;
  EXPECT_NE(out.find("Retry-After: 1\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\"code\":\"too_many_connections\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"type\":\"server_error\""), std::string::npos) << out;
  EXPECT_EQ(s.stats().connections_rejected, 3u);
  // The idle connections inside the cap still work.
  testing::send_all(idle[0], "GET /hello?kept HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(testing::recv_until(idle[0], "hello kept").find("hello kept"), std::string::npos);
  for (int fd : idle) ::close(fd);
  // Once they are closed the server serves again.
  ASSERT_TRUE(wait_stats(s, [](const HttpServerStats& st) { return st.connections_open == 0; }));
  auto ok = http_request(url(s, "/hello?after"), "GET");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "hello after");
}

TEST(HttpServer, DefaultConnectionCapLeavesAReserveOfDescriptors) {
  EXPECT_EQ(max_connections_for_fd_limit(1024), 896u);
  EXPECT_EQ(max_connections_for_fd_limit(64), 32u);
  EXPECT_EQ(max_connections_for_fd_limit(4), 2u);
  EXPECT_EQ(max_connections_for_fd_limit(1), 1u);
  EXPECT_EQ(max_connections_for_fd_limit(0), 1u);
  EXPECT_EQ(max_connections_for_fd_limit(UINT64_MAX), (1u << 20) - 128u);
  EXPECT_GE(default_max_connections(), 1u);
}

TEST(LogThrottle, AllowsOncePerIntervalAndCountsWhatItHeldBack) {
  LogThrottle t(std::chrono::seconds(1));
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  uint64_t n = 99;
  EXPECT_TRUE(t.allow(t0, &n));
  EXPECT_EQ(n, 0u);
  for (int i = 1; i <= 19; ++i) EXPECT_FALSE(t.allow(t0 + i * 50ms, &n));  // 20 a second
  EXPECT_EQ(t.pending(), 19u);
  EXPECT_TRUE(t.allow(t0 + 1000ms, &n));
  EXPECT_EQ(n, 19u);
  EXPECT_FALSE(t.allow(t0 + 1500ms, &n));
  EXPECT_EQ(t.take_pending(), 1u);
  EXPECT_EQ(t.pending(), 0u);
}

TEST(HttpServer, SlowRequestHeadTimesOut) {
  HttpServerOptions o;
  o.header_timeout = 100ms;
  HttpServer s(o);
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  int fd = testing::connect_loopback(s.port());
  ASSERT_GE(fd, 0);
  testing::send_all(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n");  // never finishes the head
  std::string got = testing::recv_until(fd);
  EXPECT_EQ(got, "");
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, MSG_DONTWAIT), 0);  // closed by the server, not our poll limit
  ::close(fd);
  auto ok = http_request(url(s, "/hello"), "GET");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpServer, ExpectContinue) {
  HttpServer s;
  add_basic_routes(s);
  ASSERT_TRUE(s.start().ok());
  int fd = testing::connect_loopback(s.port());
  testing::send_all(fd,
                    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
                    "Expect: 100-continue\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(testing::recv_until(fd, "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  testing::send_all(fd, "hello");
  std::string rest = testing::recv_until(fd);
  ::close(fd);
  EXPECT_TRUE(rest.starts_with("HTTP/1.1 200 OK\r\n")) << rest;
  EXPECT_TRUE(rest.ends_with("\r\n\r\nhello")) << rest;
}

TEST(HttpServer, HeadResponseHasNoBody) {
  HttpServer s;
  s.route("HEAD", "/hello",
          [](const Request&, std::shared_ptr<ResponseWriter> w) { w->send(200, "text/plain", "hello!"); });
  ASSERT_TRUE(s.start().ok());
  std::string out = raw_exchange(s.port(), "HEAD /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(out.find("Content-Length: 6\r\n"), std::string::npos) << out;
  EXPECT_TRUE(out.ends_with("\r\n\r\n")) << out;
}

TEST(HttpServer, StreamToClientThatDoesNotReadIsClosedPastBacklog) {
  HttpServerOptions o;
  o.max_stream_backlog_bytes = 1 << 20;
  HttpServer s(o);
  std::promise<std::shared_ptr<ResponseWriter>> got_writer;
  std::promise<void> closed;
  s.route("GET", "/flood", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->on_close([&] { closed.set_value(); });
    w->start_stream(200, "text/event-stream");
    got_writer.set_value(w);
  });
  ASSERT_TRUE(s.start().ok());
  int fd = testing::connect_loopback(s.port());
  testing::send_all(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n");  // and never read
  auto w = got_writer.get_future().get();
  const std::string chunk(64 << 10, 'x');
  int writes = 0;
  // Socket buffers absorb a few MB; past them the backlog grows until the server gives up.
  while (w->write(chunk) && writes < 4096) {
    ++writes;
    if (writes % 16 == 0) std::this_thread::sleep_for(1ms);
  }
  EXPECT_LT(writes, 4096);
  ASSERT_EQ(closed.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(w->is_closed());
  ::close(fd);
  auto alive = http_request(url(s, "/other"), "GET");  // the server itself is fine
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive->status, 404);
}

TEST(HttpServer, ManyConcurrentStreamingClients) {
  constexpr int kStreams = 250;
  constexpr int kEvents = 20;
  HttpServer s(HttpServerOptions{.io_threads = 2});
  // One engine thread feeds every stream, round-robin, like a batched decoder.
  std::mutex mu;
  std::vector<std::shared_ptr<ResponseWriter>> writers;
  std::atomic<bool> quit{false};
  s.route("POST", "/v1/completions", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/event-stream");
    std::lock_guard lock(mu);
    writers.push_back(w);
  });
  ASSERT_TRUE(s.start().ok());
  std::thread engine([&] {
    std::vector<std::pair<std::shared_ptr<ResponseWriter>, int>> live;
    int finished = 0;
    while (!quit && finished < kStreams) {
      {
        std::lock_guard lock(mu);
        for (auto& w : writers) live.emplace_back(std::move(w), 0);
        writers.clear();
      }
      for (auto& [w, n] : live) {
        if (!w) continue;
        if (n < kEvents) {
          w->write(sse_format_data("{\"token\":" + std::to_string(n) + "}"));
          ++n;
        } else {
          w->write(sse_format_data("[DONE]"));
          w->end();
          w.reset();
          ++finished;
        }
      }
      std::this_thread::sleep_for(200us);
    }
  });

  boost::asio::io_context io;
  auto client = HttpClient::create(io, url(s, ""));
  ASSERT_TRUE(client.ok());
  struct Stream {
    SseParser parser;
    std::vector<SseEvent> events;
    Status status;
  };
  std::vector<Stream> streams(kStreams);
  int ok = 0;
  for (int i = 0; i < kStreams; ++i) {
    ClientRequest req;
    req.target = "/v1/completions";
    req.body = R"({"stream":true})";
    Stream* st = &streams[static_cast<std::size_t>(i)];
    (*client)->submit(req, callbacks(
                               [&ok](ClientResult&& r) {
                                 EXPECT_TRUE(r.ok()) << failure_name(r.failure) << " " << r.error;
                                 if (r.ok()) ++ok;
                               },
                               [st](std::string_view b, SteadyTime) {
                                 if (st->status.ok()) st->status = st->parser.feed(b, st->events);
                               }));
  }
  io.run();
  quit = true;
  engine.join();
  EXPECT_EQ(ok, kStreams);
  for (auto& st : streams) {
    ASSERT_TRUE(st.status.ok());
    ASSERT_EQ(st.events.size(), static_cast<std::size_t>(kEvents + 1));
    EXPECT_EQ(st.events[5].data, "{\"token\":5}");
    EXPECT_EQ(st.events.back().data, "[DONE]");
  }
  EXPECT_EQ(s.stats().connections_accepted, static_cast<uint64_t>(kStreams));
}

}  // namespace
}  // namespace plumb::net
