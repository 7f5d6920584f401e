#include "net/response_parser.h"

#include <gtest/gtest.h>

namespace plumb::net {
namespace {

struct Parsed {
  Status status;
  int code = 0;
  Headers headers;
  std::string body;
  bool done = false;
  bool keep_alive = false;
  int heads = 0;
};

Parsed parse(const std::vector<std::string_view>& pieces, bool eof = false, bool head_request = false) {
  Parsed r;
  ResponseParser p(64 << 10, head_request);
  p.on_head = [&] {
    r.heads++;
    EXPECT_TRUE(r.body.empty());  // head before any body
  };
  p.on_body = [&](std::string_view b) { r.body.append(b); };
  for (auto piece : pieces) {
    r.status = p.feed(piece);
    if (!r.status.ok()) return r;
  }
  if (eof) r.status = p.finish_eof();
  r.code = p.status();
  r.headers = p.headers();
  r.done = p.done();
  r.keep_alive = p.keep_alive();
  return r;
}

const std::string kChunked =
    "HTTP/1.1 100 Continue\r\n\r\n"
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/event-stream\r\n"
    "Transfer-Encoding: chunked\r\n"
    "\r\n"
    "d\r\ndata: hello\n\n\r\n"
    "f;ext=1\r\ndata: 0123456\n\n\r\n"
    "0\r\n"
    "X-Trailer: t\r\n"
    "\r\n";

TEST(ResponseParser, ChunkedEverySplit) {
  std::string_view s = kChunked;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    Parsed r = parse({s.substr(0, i), s.substr(i)});
    ASSERT_TRUE(r.status.ok()) << i << ": " << r.status.to_string();
    EXPECT_EQ(r.code, 200);
    EXPECT_EQ(r.heads, 1);
    EXPECT_EQ(r.body, "data: hello\n\ndata: 0123456\n\n") << i;
    EXPECT_TRUE(r.done);
    EXPECT_TRUE(r.keep_alive);
    EXPECT_EQ(find_header(r.headers, "content-type"), "text/event-stream");
  }
}

TEST(ResponseParser, ContentLength) {
  Parsed r = parse({"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhel", "lo"});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.code, 404);
  EXPECT_EQ(r.body, "hello");
  EXPECT_TRUE(r.done);
  EXPECT_FALSE(r.keep_alive);
}

TEST(ResponseParser, ReadUntilClose) {
  Parsed r = parse({"HTTP/1.0 200 OK\r\n\r\nabc", "def"}, /*eof=*/true);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.body, "abcdef");
  EXPECT_TRUE(r.done);
  EXPECT_FALSE(r.keep_alive);
}

TEST(ResponseParser, NoBodyForHeadAnd204) {
  Parsed r = parse({"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"}, false, /*head_request=*/true);
  EXPECT_TRUE(r.done);
  Parsed r2 = parse({"HTTP/1.1 204 No Content\r\n\r\n"});
  EXPECT_TRUE(r2.done);
  EXPECT_EQ(r2.code, 204);
}

TEST(ResponseParser, LfOnlyHead) {
  Parsed r = parse({"HTTP/1.1 200 OK\nContent-Length: 2\n\nok"});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.body, "ok");
}

TEST(ResponseParser, ClosedBeforeEnd) {
  Parsed r = parse({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, /*eof=*/true);
  EXPECT_EQ(r.status.code(), Code::kFailedPrecondition);
  Parsed r2 = parse({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"}, true);
  EXPECT_EQ(r2.status.code(), Code::kFailedPrecondition);
  Parsed r3 = parse({}, true);
  EXPECT_EQ(r3.status.code(), Code::kFailedPrecondition);
  EXPECT_NE(r3.status.message().find("before the response"), std::string::npos);
}

TEST(ResponseParser, MalformedInputs) {
  const char* bad[] = {
      "HTTX/1.1 200 OK\r\n\r\n",
      "HTTP/1.1 2x0 OK\r\n\r\n",
      "HTTP/2.0 200 OK\r\n\r\n",
      "HTTP/1.1 200OK\r\n\r\n",
      "HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
      "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
      "HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
      "HTTP/1.1 101 Switching Protocols\r\n\r\n",
  };
  for (const char* b : bad) {
    Parsed r = parse({b});
    EXPECT_EQ(r.status.code(), Code::kCorrupt) << b;
  }
}

TEST(ResponseParser, HeadLimit) {
  ResponseParser p(100);
  std::string big = "HTTP/1.1 200 OK\r\nX: " + std::string(200, 'a') + "\r\n\r\n";
  EXPECT_EQ(p.feed(big).code(), Code::kCorrupt);
  ResponseParser q(100);
  Status s;
  for (char c : big) {
    s = q.feed(std::string_view(&c, 1));
    if (!s.ok()) break;
  }
  EXPECT_EQ(s.code(), Code::kCorrupt);
}

TEST(ResponseParser, ExtraBytesMakeConnectionUnusable) {
  ResponseParser p;
  ASSERT_TRUE(p.feed("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxGARBAGE").ok());
  EXPECT_TRUE(p.done());
  EXPECT_TRUE(p.extra_bytes());
  EXPECT_FALSE(p.keep_alive());
}

}  // namespace
}  // namespace plumb::net
