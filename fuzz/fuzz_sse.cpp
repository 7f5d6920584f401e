// The client's SSE parser (net/sse.h) on arbitrary bytes. Invariant (the header's contract): the
// events and the outcome do not depend on where the stream is split, so the input fed whole must
// give what it gives fed one byte at a time. Also: a formatted event parses back to itself.
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "net/sse.h"

namespace {

using plumb::net::SseEvent;
using plumb::net::SseParser;
using plumb::net::SseParserOptions;

struct Outcome {
  std::vector<SseEvent> events;
  plumb::Status status;
};

Outcome run(std::string_view bytes, SseParserOptions opt, std::size_t piece) {
  Outcome o;
  SseParser p(opt);
  for (std::size_t i = 0; i < bytes.size() && o.status.ok(); i += piece) {
    o.status = p.feed(bytes.substr(i, piece), o.events);
  }
  if (o.status.ok()) o.status = p.finish(o.events);
  return o;
}

}  // namespace

PLUMB_FUZZ_TARGET(sse) {
  plumb::fuzz::Reader in(input);
  uint8_t mode = in.byte();
  SseParserOptions opt;
  opt.strict = (mode & 1) != 0;
  if (mode & 2) {  // small limits, so that inputs of fuzzing size reach them
    opt.max_line_bytes = 64;
    opt.max_event_bytes = 256;
  }
  std::string_view stream = in.rest();
  Outcome whole = run(stream, opt, stream.size() + 1);
  Outcome bytewise = run(stream, opt, 1);
  if (whole.status.code() != bytewise.status.code()) {
    return "fed whole: '" + whole.status.message() + "', fed bytewise: '" + bytewise.status.message() + "'";
  }
  if (whole.events != bytewise.events) {
    return "the events differ between feeding whole (" + std::to_string(whole.events.size()) +
           ") and bytewise (" + std::to_string(bytewise.events.size()) + ")";
  }
  // Round trip: every event parsed back from its own formatting.
  for (const SseEvent& ev : whole.events) {
    SseEvent norm = ev;
    Outcome back = run(plumb::net::sse_format(norm), SseParserOptions{}, 1 << 20);
    if (!back.status.ok()) return "sse_format output does not parse: " + back.status.message();
    if (back.events.size() != 1)
      return "sse_format output gives " + std::to_string(back.events.size()) + " events";
    if (back.events[0].data != ev.data || back.events[0].event != ev.event) {
      return "an event does not survive sse_format and parsing";
    }
  }
  return "";
}
