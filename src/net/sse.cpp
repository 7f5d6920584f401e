#include "net/sse.h"

#include <charconv>
#include <cstring>

namespace plumb::net {
namespace {

// Position of the first CR or LF in s at or after pos, or npos. Two memchr scans:
// string_view::find_first_of("\r\n") calls memchr once per byte and was the client's hot spot.
std::size_t find_eol(std::string_view s, std::size_t pos) {
  if (pos >= s.size()) return std::string_view::npos;
  const char* b = s.data() + pos;
  std::size_t n = s.size() - pos;
  const char* lf = static_cast<const char*>(std::memchr(b, '\n', n));
  std::size_t lim = lf ? static_cast<std::size_t>(lf - b) : n;
  const char* cr = static_cast<const char*>(std::memchr(b, '\r', lim));
  if (cr) return pos + static_cast<std::size_t>(cr - b);
  if (lf) return pos + lim;
  return std::string_view::npos;
}

// Appends one "<field>: <value>\n" line per line of value (CR, LF and CRLF all end a line).
void append_lines(std::string& out, std::string_view field, std::string_view value) {
  std::size_t start = 0;
  while (true) {
    std::size_t end = find_eol(value, start);
    out.append(field);
    out.append(": ");
    out.append(value.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    out.push_back('\n');
    if (end == std::string_view::npos) break;
    start = end + 1;
    if (value[end] == '\r' && start < value.size() && value[start] == '\n') ++start;
  }
}

std::string single_line(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (c == '\r' || c == '\n') c = ' ';
  return r;
}

std::string excerpt(std::string_view line) {
  constexpr std::size_t kMax = 80;
  std::string r = single_line(line.substr(0, kMax));
  if (line.size() > kMax) r += "...";
  return r;
}

}  // namespace

std::string sse_format_data(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 8);
  append_lines(out, "data", data);
  out.push_back('\n');
  return out;
}

std::string sse_format(const SseEvent& ev) {
  std::string out;
  if (!ev.event.empty()) append_lines(out, "event", single_line(ev.event));
  if (!ev.id.empty()) append_lines(out, "id", single_line(ev.id));
  if (ev.retry_ms) append_lines(out, "retry", std::to_string(*ev.retry_ms));
  append_lines(out, "data", ev.data);
  out.push_back('\n');
  return out;
}

std::string sse_format_comment(std::string_view text) { return ": " + single_line(text) + "\n"; }

Status SseParser::fail(Status s) {
  error_ = s;
  return s;
}

Status SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  if (!error_.ok()) return error_;
  std::size_t pos = 0;
  if (last_was_cr_ && !bytes.empty()) {
    // The CR that ended the previous feed's last line may be the first half of a CRLF.
    last_was_cr_ = false;
    if (bytes[0] == '\n') pos = 1;
  }
  while (pos < bytes.size()) {
    std::size_t end = find_eol(bytes, pos);
    if (end == std::string_view::npos) {
      if (line_.size() + (bytes.size() - pos) > options_.max_line_bytes)
        return fail(
            resource_exhausted("SSE line longer than " + std::to_string(options_.max_line_bytes) + " bytes"));
      line_.append(bytes.substr(pos));
      break;
    }
    std::string_view piece = bytes.substr(pos, end - pos);
    if (line_.size() + piece.size() > options_.max_line_bytes)
      return fail(
          resource_exhausted("SSE line longer than " + std::to_string(options_.max_line_bytes) + " bytes"));
    Status s;
    if (line_.empty()) {
      s = process_line(piece, out);
    } else {
      line_.append(piece);
      s = process_line(line_, out);
      line_.clear();
    }
    if (!s.ok()) return fail(s);
    pos = end + 1;
    if (bytes[end] == '\r') {
      if (pos < bytes.size()) {
        if (bytes[pos] == '\n') ++pos;
      } else {
        last_was_cr_ = true;
      }
    }
  }
  return Status::Ok();
}

Status SseParser::finish(std::vector<SseEvent>& out) {
  if (!error_.ok()) return error_;
  if (!line_.empty()) {
    Status s = process_line(line_, out);
    line_.clear();
    if (!s.ok()) return fail(s);
  }
  if (in_event_)
    return fail(corrupt("SSE stream ended inside an event (no blank line after its last field)"));
  return Status::Ok();
}

Status SseParser::process_line(std::string_view line, std::vector<SseEvent>& out) {
  if (!bom_checked_) {
    bom_checked_ = true;
    if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
  }
  if (line.empty()) {
    // Dispatch. Per WHATWG an event without any data line is not dispatched.
    if (has_data_) {
      out.push_back(std::move(pending_));
      ++events_;
    }
    pending_ = SseEvent{};
    in_event_ = false;
    has_data_ = false;
    return Status::Ok();
  }
  if (line[0] == ':') return Status::Ok();  // comment
  std::string_view field = line;
  std::string_view value;
  if (std::size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (pending_.data.size() + value.size() + 1 > options_.max_event_bytes)
      return resource_exhausted("SSE event data larger than " + std::to_string(options_.max_event_bytes) +
                                " bytes");
    if (has_data_) pending_.data.push_back('\n');
    pending_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    pending_.event.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) pending_.id.assign(value);
  } else if (field == "retry") {
    long long ms = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
    bool digits_only = !value.empty() && value[0] != '-' && value[0] != '+';
    if (ec == std::errc() && p == value.data() + value.size() && digits_only) {
      pending_.retry_ms = ms;
    } else if (options_.strict) {
      return corrupt("SSE retry field is not a number: '" + excerpt(line) + "'");
    }
  } else if (options_.strict) {
    return corrupt("SSE line is not a comment or a known field: '" + excerpt(line) + "'");
  }
  in_event_ = true;
  return Status::Ok();
}

}  // namespace plumb::net
