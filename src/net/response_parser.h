// Incremental HTTP/1.1 response parser used by HttpClient (internal to net/; public only so the
// tests can feed it split input). Handles Content-Length, chunked and read-until-close bodies,
// 1xx interim responses, and responses without a body (HEAD, 204, 304).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "net/http_types.h"

namespace plumb::net {

class ResponseParser {
 public:
  // head_request: the request was HEAD, so the response has no body whatever its headers say.
  explicit ResponseParser(std::size_t max_head_bytes = 64 << 10, bool head_request = false)
      : max_head_bytes_(max_head_bytes), head_request_(head_request) {}

  // Called once when the final (non-1xx) head is parsed, before any body bytes.
  std::function<void()> on_head;
  // Called with each piece of decoded body, in order.
  std::function<void(std::string_view)> on_body;

  // Consumes `data`. Errors (kCorrupt) describe the framing problem; the parser then stays
  // failed. Bytes after the end of the response are not consumed: extra_bytes() says so.
  Status feed(std::string_view data);
  // The peer closed the connection. OK if that completes a read-until-close body (or the
  // response was already done); kFailedPrecondition "closed before end" otherwise.
  Status finish_eof();

  bool head_done() const { return state_ > State::kHead; }
  bool done() const { return state_ == State::kDone; }
  int status() const { return status_; }
  int version_minor() const { return version_minor_; }
  const Headers& headers() const { return headers_; }
  // The connection may carry another request after this response.
  bool keep_alive() const { return keep_alive_ && !until_close_ && !extra_bytes_; }
  // Bytes arrived after the end of the response (the connection must not be reused).
  bool extra_bytes() const { return extra_bytes_; }
  uint64_t body_bytes() const { return body_bytes_; }

 private:
  enum class State {
    kHead,
    kLength,
    kChunkSize,
    kChunkData,
    kChunkCr,
    kChunkLf,
    kTrailers,
    kUntilClose,
    kDone
  };
  // The steps of feed(): each consumes what it can of data[i..] and advances i. Those returning
  // bool return false after fail() (the error is then error_): no Status on the per-chunk path.
  bool feed_head(std::string_view data, std::size_t& i);
  void feed_counted(std::string_view data, std::size_t& i, State next);  // Content-Length or chunk body
  bool feed_line(std::string_view data, std::size_t& i);                 // chunk-size or trailer line
  Status parse_head();
  Status start_body();
  Status fail(std::string msg);
  void body(std::string_view piece);

  std::size_t max_head_bytes_;
  bool head_request_;
  State state_ = State::kHead;
  std::string line_;  // head bytes, or the current chunk-size / trailer line
  int status_ = 0;
  int version_minor_ = 1;
  Headers headers_;
  bool keep_alive_ = true;
  bool until_close_ = false;
  bool extra_bytes_ = false;
  uint64_t remaining_ = 0;  // bytes left in the Content-Length body or the current chunk
  uint64_t body_bytes_ = 0;
  std::size_t trailer_bytes_ = 0;
  Status error_;
};

}  // namespace plumb::net
