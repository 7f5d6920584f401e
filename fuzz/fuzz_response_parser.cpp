// The client's HTTP/1.1 response parser (net/response_parser.h): status line, headers,
// Content-Length, chunked and read-until-close bodies, 1xx interim responses. Invariant: the
// outcome (status, headers, body, done, keep-alive, error or not) is the same whether the bytes
// arrive in one piece, one byte at a time, or cut at a point the input chooses.
#include <string>

#include "fuzz/fuzz_target.h"
#include "net/response_parser.h"

namespace {

struct Outcome {
  bool ok = true;
  bool eof_ok = true;
  bool done = false;
  int status = 0;
  plumb::net::Headers headers;
  std::string body;
  bool keep_alive = false;
  bool extra = false;
  int heads = 0;  // on_head calls
};

Outcome run(std::string_view bytes, std::size_t max_head, bool head_request, std::size_t first,
            std::size_t piece) {
  Outcome o;
  plumb::net::ResponseParser p(max_head, head_request);
  p.on_head = [&] { ++o.heads; };
  p.on_body = [&](std::string_view b) { o.body.append(b); };
  std::size_t i = 0;
  if (first > 0) {
    o.ok = p.feed(bytes.substr(0, first)).ok();
    i = first;
  }
  for (; o.ok && i < bytes.size(); i += piece) o.ok = p.feed(bytes.substr(i, piece)).ok();
  if (o.ok) o.eof_ok = p.finish_eof().ok();
  o.done = p.done();
  o.status = p.head_done() ? p.status() : 0;
  o.headers = p.headers();
  o.keep_alive = p.keep_alive();
  o.extra = p.extra_bytes();
  if (p.body_bytes() != o.body.size()) o.ok = false, o.body = "body_bytes() disagrees with the body";
  return o;
}

std::string compare(const Outcome& a, const Outcome& b, const char* how) {
  std::string w = std::string("whole vs ") + how + ": ";
  if (a.ok != b.ok) return w + "one failed, the other did not";
  if (a.heads != b.heads) return w + "on_head called a different number of times";
  if (!a.ok) return "";  // both failed: what was parsed before the failure may differ
  if (a.status != b.status)
    return w + "status " + std::to_string(a.status) + " vs " + std::to_string(b.status);
  if (a.headers != b.headers) return w + "headers differ";
  if (a.body != b.body) return w + "bodies differ";
  if (a.done != b.done || a.eof_ok != b.eof_ok) return w + "end of response differs";
  if (a.keep_alive != b.keep_alive || a.extra != b.extra) return w + "keep-alive or extra bytes differ";
  return "";
}

}  // namespace

PLUMB_FUZZ_TARGET(response_parser) {
  plumb::fuzz::Reader in(input);
  uint8_t mode = in.byte();
  uint8_t cut = in.byte();
  bool head_request = (mode & 1) != 0;
  std::size_t max_head = (mode & 2) ? 128 : 64 << 10;
  std::string_view bytes = in.rest();
  std::size_t first = bytes.empty() ? 0 : cut % (bytes.size() + 1);
  Outcome whole = run(bytes, max_head, head_request, 0, bytes.size() + 1);
  Outcome bytewise = run(bytes, max_head, head_request, 0, 1);
  Outcome split = run(bytes, max_head, head_request, first, bytes.size() + 1);
  if (std::string d = compare(whole, bytewise, "bytewise"); !d.empty()) return d;
  if (std::string d = compare(whole, split, "cut"); !d.empty())
    return d + " (cut at " + std::to_string(first) + ")";
  if (whole.ok && whole.done && whole.status < 200) return "done with a 1xx status";
  return "";
}
