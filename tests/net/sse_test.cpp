#include "net/sse.h"

#include <gtest/gtest.h>

namespace plumb::net {
namespace {

// A stream with CRLF, LF and lone-CR line ends, a comment, a multi-line event, event/id/retry
// fields and a leading BOM.
const std::string kSample =
    "\xEF\xBB\xBF: keep-alive\r\n"
    "event: add\r\n"
    "data: line one\r\n"
    "data: line two\r\n"
    "id: 7\r\n"
    "retry: 1500\r\n"
    "\r\n"
    "data:x\n"
    "\n"
    "data: {\"a\":1}\r"
    "\r"
    "event: ignored-without-data\n"
    "\n"
    "data\n"
    "\n"
    "data: [DONE]\n\n";

std::vector<SseEvent> expected_sample() {
  SseEvent a;
  a.event = "add";
  a.data = "line one\nline two";
  a.id = "7";
  a.retry_ms = 1500;
  SseEvent b;
  b.data = "x";
  SseEvent c;
  c.data = "{\"a\":1}";
  SseEvent d;  // "data" with no colon: a data line with an empty value
  SseEvent e;
  e.data = "[DONE]";
  return {a, b, c, d, e};
}

std::vector<SseEvent> parse_pieces(const std::vector<std::string_view>& pieces) {
  SseParser p;
  std::vector<SseEvent> out;
  for (auto piece : pieces) EXPECT_TRUE(p.feed(piece, out).ok());
  EXPECT_TRUE(p.finish(out).ok());
  return out;
}

TEST(SseParser, WholeStream) { EXPECT_EQ(parse_pieces({kSample}), expected_sample()); }

TEST(SseParser, EverySplitPositionGivesTheSameEvents) {
  const auto want = expected_sample();
  std::string_view s = kSample;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    EXPECT_EQ(parse_pieces({s.substr(0, i), s.substr(i)}), want) << "split at " << i;
  }
  for (std::size_t i = 0; i <= s.size(); i += 3) {
    for (std::size_t j = i; j <= s.size(); j += 5) {
      EXPECT_EQ(parse_pieces({s.substr(0, i), s.substr(i, j - i), s.substr(j)}), want) << i << "," << j;
    }
  }
}

TEST(SseParser, ByteByByte) {
  std::vector<std::string_view> pieces;
  std::string_view s = kSample;
  for (std::size_t i = 0; i < s.size(); ++i) pieces.push_back(s.substr(i, 1));
  EXPECT_EQ(parse_pieces(pieces), expected_sample());
}

TEST(SseParser, CrThenLfInNextChunkIsOneLineEnd) {
  // "data: a\r" | "\n\n": must be one event, not an event followed by a stray blank line.
  SseParser p;
  std::vector<SseEvent> out;
  ASSERT_TRUE(p.feed("data: a\r", out).ok());
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(p.feed("\n", out).ok());
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(p.feed("\r\ndata: b\n\n", out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].data, "a");
  EXPECT_EQ(out[1].data, "b");
  EXPECT_EQ(p.events(), 2u);
}

TEST(SseParser, StrictRejectsUnknownLinesAndStaysFailed) {
  SseParser p;
  std::vector<SseEvent> out;
  Status s = p.feed("data: ok\n\nthis is not sse\n\n", out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("this is not sse"), std::string::npos);
  ASSERT_EQ(out.size(), 1u);  // the event before the bad line was delivered
  EXPECT_EQ(p.feed("data: more\n\n", out).code(), Code::kCorrupt);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(p.finish(out).code(), Code::kCorrupt);
}

TEST(SseParser, StrictRejectsBadRetry) {
  SseParser p;
  std::vector<SseEvent> out;
  EXPECT_EQ(p.feed("retry: 12x\n", out).code(), Code::kCorrupt);
  SseParser q;
  EXPECT_EQ(q.feed("retry: -5\n", out).code(), Code::kCorrupt);
}

TEST(SseParser, LenientIgnoresUnknownFields) {
  SseParser p(SseParserOptions{.strict = false});
  std::vector<SseEvent> out;
  ASSERT_TRUE(p.feed("foo: bar\nretry: nope\ndata: x\n\n", out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "x");
  EXPECT_FALSE(out[0].retry_ms.has_value());
}

TEST(SseParser, LineLimit) {
  SseParser p(SseParserOptions{.max_line_bytes = 16});
  std::vector<SseEvent> out;
  EXPECT_TRUE(p.feed("data: 0123456789", out).ok());  // 16 bytes, still within
  Status s = p.feed("a", out);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
}

TEST(SseParser, EventSizeLimit) {
  SseParser p(SseParserOptions{.max_event_bytes = 10});
  std::vector<SseEvent> out;
  EXPECT_EQ(p.feed("data: 12345\ndata: 67890\n", out).code(), Code::kResourceExhausted);
}

TEST(SseParser, EndInsideEventIsAnError) {
  SseParser p;
  std::vector<SseEvent> out;
  ASSERT_TRUE(p.feed("data: a\n\ndata: cut", out).ok());
  Status s = p.finish(out);
  EXPECT_EQ(s.code(), Code::kCorrupt);
  ASSERT_EQ(out.size(), 1u);
  SseParser q;
  std::vector<SseEvent> out2;
  ASSERT_TRUE(q.feed("data: a\n\n: trailing comment", out2).ok());
  EXPECT_TRUE(q.finish(out2).ok());
  EXPECT_EQ(out2.size(), 1u);
}

TEST(SseParser, BinaryGarbageIsAnErrorNotACrash) {
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>((i * 131 + 7) & 0xff));
  SseParser p;
  std::vector<SseEvent> out;
  Status s = p.feed(junk, out);
  if (s.ok()) s = p.finish(out);
  EXPECT_FALSE(s.ok());
}

TEST(SseFormat, DataLines) {
  EXPECT_EQ(sse_format_data("hello"), "data: hello\n\n");
  EXPECT_EQ(sse_format_data("a\nb\r\nc"), "data: a\ndata: b\ndata: c\n\n");
  EXPECT_EQ(sse_format_data(""), "data: \n\n");
  EXPECT_EQ(sse_format_comment("ping\nx"), ": ping x\n");
}

TEST(SseFormat, RoundTrip) {
  SseEvent ev;
  ev.event = "delta";
  ev.id = "42";
  ev.retry_ms = 10;
  ev.data = "{\"x\": \"multi\nline\"}\n";
  std::string wire = sse_format(ev);
  EXPECT_EQ(wire, "event: delta\nid: 42\nretry: 10\ndata: {\"x\": \"multi\ndata: line\"}\ndata: \n\n");
  SseParser p;
  std::vector<SseEvent> out;
  ASSERT_TRUE(p.feed(wire, out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], ev);
}

}  // namespace
}  // namespace plumb::net
