// The chunked request-body decoder of net/'s server, on its own: the input is the body of
// "POST /echo" with Transfer-Encoding: chunked. Invariants: those of fuzz_http_request, and a
// differential one: when a plain reference decoder (hex sizes without extensions, CRLF line ends,
// no trailers) finds the input a complete chunked body that fits the body limit, the server must
// answer 200 and echo exactly the decoded bytes.
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "fuzz/http_harness.h"

namespace {

// The strict subset of RFC 9112 §7.1 that every conforming decoder must accept; nullopt when the
// input is outside it (which proves nothing about the server).
std::optional<std::string> reference_decode(std::string_view in) {
  std::string out;
  while (true) {
    std::size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos || eol == 0 || eol > 8) return std::nullopt;
    std::size_t size = 0;
    for (char c : in.substr(0, eol)) {
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (d < 0) return std::nullopt;
      size = size * 16 + static_cast<std::size_t>(d);
    }
    in.remove_prefix(eol + 2);
    if (size == 0) {
      if (in != "\r\n") return std::nullopt;  // no trailers, nothing after the body
      return out;
    }
    if (in.size() < size + 2 || in.substr(size, 2) != "\r\n") return std::nullopt;
    out.append(in.substr(0, size));
    in.remove_prefix(size + 2);
  }
}

}  // namespace

PLUMB_FUZZ_TARGET(http_chunked) {
  std::string request =
      "POST /echo HTTP/1.1\r\nHost: fuzz\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  request.append(input);
  plumb::fuzz::HttpExchange ex = plumb::fuzz::http_exchange(request);
  if (std::string broken = plumb::fuzz::check_http_exchange(request, ex); !broken.empty()) return broken;
  std::optional<std::string> expected = reference_decode(input);
  if (!expected || expected->size() > plumb::fuzz::kHttpMaxBody) return "";
  std::vector<std::string> bodies;
  std::vector<int> statuses = plumb::fuzz::http_statuses(ex.received, &bodies);
  if (statuses.empty()) return "a well-formed chunked body got no response";
  if (statuses[0] != 200) return "a well-formed chunked body got " + std::to_string(statuses[0]);
  if (bodies[0] != *expected) return "the server decoded a well-formed chunked body differently";
  return "";
}
