// The HTTP server side of the request fuzz targets: a net::HttpServer on loopback, started once per
// process, and one exchange per input over a fresh TCP connection. The server is the real one
// (Beast's request parser and chunked decoder behind plumb's session logic); its handlers answer in
// each way a handler can: a whole response, a stream, and the fallback.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace plumb::fuzz {

// Limits of the harness server, small so that fuzzing-sized inputs reach them.
inline constexpr std::size_t kHttpMaxBody = 4096;
inline constexpr std::size_t kHttpMaxHead = 2048;

struct HttpExchange {
  std::string received;  // every byte the server sent
  bool closed = false;   // the server closed the connection within the limit
};

// Sends `bytes` on a new connection, half-closes (the client has nothing more to say) and reads
// until the server closes or `limit` passes. Routes: POST /echo answers 200 with the request body,
// GET /stream streams three SSE events, anything else 404.
HttpExchange http_exchange(std::string_view bytes,
                           std::chrono::milliseconds limit = std::chrono::seconds(10));

// The status codes of the responses in `received`, parsed in order with net/'s response parser;
// parsing stops at the first response that does not parse. `bodies` gets each response's body.
// first_is_head: the first response answers a HEAD request (a Content-Length but no body).
std::vector<int> http_statuses(std::string_view received, std::vector<std::string>* bodies = nullptr,
                               bool first_is_head = false);

// "" when the exchange of `sent` is acceptable whatever was sent: the server closed, and every
// response it gave is well-formed with a status below 500. Else what is wrong. A HEAD response has
// no body whatever its Content-Length says, so after a HEAD request that is not the first, only the
// first response's status line is checked (the rest cannot be delimited without knowing which
// request each answers).
std::string check_http_exchange(std::string_view sent, const HttpExchange& ex);

}  // namespace plumb::fuzz
