#include "net/response_parser.h"

#include <algorithm>

namespace plumb::net {
namespace {

bool is_token_char(char c) {
  if (c >= 'a' && c <= 'z') return true;
  if (c >= 'A' && c <= 'Z') return true;
  if (c >= '0' && c <= '9') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string printable(std::string_view s) {
  std::string r;
  for (char c : s.substr(0, 60)) r.push_back(c >= 32 && c < 127 ? c : '?');
  if (s.size() > 60) r += "...";
  return r;
}

// True if the comma-separated list contains token (case-insensitive).
bool list_has(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    std::size_t comma = list.find(',');
    if (iequals(trim(list.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

Status ResponseParser::fail(std::string msg) {
  error_ = corrupt(std::move(msg));
  return error_;
}

void ResponseParser::body(std::string_view piece) {
  if (piece.empty()) return;
  body_bytes_ += piece.size();
  if (on_body) on_body(piece);
}

namespace {
// The chunk size: hex digits before any ';' extension, at most 15 of them; false if malformed.
bool parse_chunk_size(std::string_view line, uint64_t& size) {
  std::string_view hex = trim(line.substr(0, line.find(';')));
  if (hex.empty() || hex.size() > 15) return false;
  size = 0;
  for (char c : hex) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    size = size * 16 + static_cast<uint64_t>(d);
  }
  return true;
}

}  // namespace

// One state per case; each multi-byte step consumes what it can of data[i..] and advances i.
// The single-byte CRLF states after a chunk stay inline: they run once per chunk.
Status ResponseParser::feed(std::string_view data) {
  if (!error_.ok()) return error_;
  std::size_t i = 0;
  while (i < data.size()) {
    switch (state_) {
      case State::kHead:
        if (!feed_head(data, i)) return error_;
        break;
      case State::kLength:
        feed_counted(data, i, State::kDone);
        break;
      case State::kUntilClose:
        body(data.substr(i));
        i = data.size();
        break;
      case State::kChunkSize:
      case State::kTrailers:
        if (!feed_line(data, i)) return error_;
        break;
      case State::kChunkData:
        feed_counted(data, i, State::kChunkCr);
        break;
      case State::kChunkCr:
        if (data[i] == '\r') {
          state_ = State::kChunkLf;
          ++i;
        } else if (data[i] == '\n') {
          state_ = State::kChunkSize;
          ++i;
        } else {
          return fail("chunk data longer than its declared size (no CRLF after the chunk)");
        }
        break;
      case State::kChunkLf:
        if (data[i] != '\n') return fail("chunk data not followed by CRLF");
        state_ = State::kChunkSize;
        ++i;
        break;
      case State::kDone:
        extra_bytes_ = true;
        return Status::Ok();
    }
    if (!error_.ok()) return error_;
  }
  return Status::Ok();
}

bool ResponseParser::feed_head(std::string_view data, std::size_t& i) {
  // Look for the blank line; it may straddle the previous feed.
  std::size_t old = line_.size();
  std::size_t take = std::min(data.size() - i, max_head_bytes_ + 4 - std::min(old, max_head_bytes_ + 4));
  line_.append(data.substr(i, take));
  std::size_t from = old >= 3 ? old - 3 : 0;
  std::size_t crlf = line_.find("\r\n\r\n", from);
  std::size_t lf = line_.find("\n\n", from);
  std::size_t end = std::string::npos, term = 0;
  if (crlf != std::string::npos && (lf == std::string::npos || crlf < lf)) {
    end = crlf, term = 4;
  } else if (lf != std::string::npos) {
    end = lf, term = 2;
  }
  if (end == std::string::npos) {
    // The last 3 bytes may begin a terminator that ends within the limit (the head itself
    // must fit max_head_bytes_, as checked below); refusing them early would make the
    // outcome depend on where the stream was split.
    if (line_.size() > max_head_bytes_ + 3) {
      fail("response head larger than " + std::to_string(max_head_bytes_) + " bytes");
      return false;
    }
    i += take;
    return true;
  }
  if (end > max_head_bytes_) {
    fail("response head larger than " + std::to_string(max_head_bytes_) + " bytes");
    return false;
  }
  std::size_t used = end + term - old;  // bytes of this feed that belong to the head
  i += used;
  line_.resize(end);
  if (!parse_head().ok()) return false;
  line_.clear();
  if (status_ == 101) {
    fail("unexpected 101 Switching Protocols");
    return false;
  }
  if (status_ >= 100 && status_ < 200) {  // interim response: the real one follows
    headers_.clear();
    return true;
  }
  if (!start_body().ok()) return false;
  if (on_head) on_head();
  return true;
}

[[gnu::always_inline]] inline void ResponseParser::feed_counted(std::string_view data, std::size_t& i,
                                                                State next) {
  std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(remaining_, data.size() - i));
  body(data.substr(i, n));
  i += n;
  remaining_ -= n;
  if (remaining_ == 0) state_ = next;
}

[[gnu::always_inline]] inline bool ResponseParser::feed_line(std::string_view data, std::size_t& i) {
  std::size_t nl = data.find('\n', i);
  std::string_view part = data.substr(i, nl == std::string_view::npos ? std::string_view::npos : nl - i);
  if (line_.size() + part.size() > 4096) {
    fail("chunk-size or trailer line longer than 4096 bytes");
    return false;
  }
  line_.append(part);
  if (nl == std::string_view::npos) {
    i = data.size();
    return true;
  }
  i = nl + 1;
  std::string_view line = line_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (state_ == State::kTrailers) {
    trailer_bytes_ += line.size();
    if (trailer_bytes_ > max_head_bytes_) {
      fail("chunked trailers too large");
      return false;
    }
    if (line.empty()) state_ = State::kDone;
    line_.clear();
    return true;
  }
  uint64_t size = 0;
  if (!parse_chunk_size(line, size)) {
    fail("bad chunk size line '" + printable(line) + "'");
    return false;
  }
  line_.clear();
  if (size == 0) {
    state_ = State::kTrailers;
  } else {
    remaining_ = size;
    state_ = State::kChunkData;
  }
  return true;
}

Status ResponseParser::parse_head() {
  std::string_view head = line_;
  std::size_t eol = head.find('\n');
  std::string_view status_line = trim(head.substr(0, eol));
  // "HTTP/1.1 200 OK"
  if (status_line.size() < 12 || !status_line.starts_with("HTTP/1.") || status_line[8] != ' ' ||
      (status_line.size() > 12 && status_line[12] != ' '))
    return fail("bad status line '" + printable(status_line) + "'");
  char minor = status_line[7];
  if (minor != '0' && minor != '1')
    return fail("unsupported HTTP version in '" + printable(status_line) + "'");
  version_minor_ = minor - '0';
  int code = 0;
  for (int k = 9; k < 12; ++k) {
    char c = status_line[static_cast<std::size_t>(k)];
    if (c < '0' || c > '9') return fail("bad status code in '" + printable(status_line) + "'");
    code = code * 10 + (c - '0');
  }
  if (code < 100) return fail("bad status code in '" + printable(status_line) + "'");
  status_ = code;
  headers_.clear();
  std::string_view rest = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 1);
  while (!rest.empty()) {
    std::size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line[0] == ' ' || line[0] == '\t') return fail("folded header line '" + printable(line) + "'");
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return fail("bad header line '" + printable(line) + "'");
    std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_token_char))
      return fail("bad header name in '" + printable(line) + "'");
    headers_.emplace_back(std::string(name), std::string(trim(line.substr(colon + 1))));
  }
  return Status::Ok();
}

Status ResponseParser::start_body() {
  std::string_view connection = find_header(headers_, "Connection");
  keep_alive_ = version_minor_ == 1 ? !list_has(connection, "close") : list_has(connection, "keep-alive");
  if (status_ == 101) return fail("unexpected 101 Switching Protocols");
  if (head_request_ || status_ == 204 || status_ == 304) {
    state_ = State::kDone;
    return Status::Ok();
  }
  std::string_view te = find_header(headers_, "Transfer-Encoding");
  if (!te.empty()) {
    // Only a final "chunked" coding frames the body; anything else is read until close.
    std::string_view last = te.substr(te.rfind(',') == std::string_view::npos ? 0 : te.rfind(',') + 1);
    if (iequals(trim(last), "chunked")) {
      state_ = State::kChunkSize;
    } else {
      state_ = State::kUntilClose;
      until_close_ = true;
    }
    return Status::Ok();
  }
  bool have_length = false;
  uint64_t length = 0;
  for (const auto& [k, v] : headers_) {
    if (!iequals(k, "Content-Length")) continue;
    std::string_view s = trim(v);
    if (s.empty() || s.size() > 18 ||
        !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fail("bad Content-Length '" + printable(v) + "'");
    uint64_t n = std::stoull(std::string(s));
    if (have_length && n != length) return fail("conflicting Content-Length headers");
    have_length = true;
    length = n;
  }
  if (have_length) {
    remaining_ = length;
    state_ = length == 0 ? State::kDone : State::kLength;
  } else {
    state_ = State::kUntilClose;
    until_close_ = true;
  }
  return Status::Ok();
}

Status ResponseParser::finish_eof() {
  if (!error_.ok()) return error_;
  if (state_ == State::kDone) return Status::Ok();
  if (state_ == State::kUntilClose) {
    state_ = State::kDone;
    return Status::Ok();
  }
  std::string where = state_ == State::kHead
                          ? (line_.empty() ? "before the response" : "inside the response head")
                          : "inside the body";
  return failed_precondition("connection closed " + where);
}

}  // namespace plumb::net
