// The HTTP/1.1 request side of net/ (request line, headers, Content-Length and chunked bodies,
// Expect: 100-continue, keep-alive and pipelining) on arbitrary bytes sent over a real loopback
// connection to net::HttpServer. Invariants: the server never crashes, always closes a connection
// whose client half-closed (within the limit), and every answer it gives is well-formed HTTP with
// a status below 500.
#include <string>

#include "fuzz/fuzz_target.h"
#include "fuzz/http_harness.h"

PLUMB_FUZZ_TARGET(http_request) {
  return plumb::fuzz::check_http_exchange(input, plumb::fuzz::http_exchange(input));
}
