// Server-Sent Events (text/event-stream): formatting for servers and an incremental parser for
// clients. Follows the WHATWG "event stream interpretation" rules: lines end in LF, CRLF or CR;
// "data" lines of one event are joined with LF; ":" starts a comment; a blank line dispatches.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plumb::net {

// One dispatched event. Fields that the stream did not set are empty.
struct SseEvent {
  std::string event;                  // "event:" field; empty means the default type "message"
  std::string data;                   // all "data:" lines of the event joined with '\n'
  std::string id;                     // "id:" field of this event (not the sticky last-event-id)
  std::optional<long long> retry_ms;  // "retry:" field in milliseconds, when present and valid

  bool operator==(const SseEvent&) const = default;
};

// "data: <data>\n\n"; a data string with newlines becomes one "data:" line per line, so the
// receiver gets the same string back. CR and CRLF in `data` are normalised to LF.
std::string sse_format_data(std::string_view data);

// Formats all set fields of `ev` (event, id, retry, data) followed by the blank line.
std::string sse_format(const SseEvent& ev);

// ": <text>\n" — a comment line, e.g. a keep-alive ping. Newlines in text are replaced by spaces.
std::string sse_format_comment(std::string_view text);

struct SseParserOptions {
  // Strict mode (the default) reports lines that are not a comment or one of the fields "data",
  // "event", "id", "retry", and a "retry" value that is not all digits, as malformed input. With
  // strict off, they are ignored as the WHATWG rules say.
  bool strict = true;
  // A single line longer than this many bytes is an error (protects against unbounded buffering).
  std::size_t max_line_bytes = 1 << 20;
  // An event whose data grows past this many bytes is an error.
  std::size_t max_event_bytes = 16 << 20;
};

// Incremental parser: feed() arbitrary byte chunks (split anywhere, including between CR and LF)
// and collect the events completed so far. The result does not depend on where the stream is
// split. After an error the parser stays failed and every later call returns the same error.
// Not thread-safe; one parser per stream.
class SseParser {
 public:
  explicit SseParser(SseParserOptions options = {}) : options_(options) {}

  // Appends events completed by `bytes` to `out`. Errors: kCorrupt for malformed input (names
  // the offending line, truncated), kResourceExhausted past the size limits.
  Status feed(std::string_view bytes, std::vector<SseEvent>& out);

  // End of stream. An unterminated last line is processed; an event that was started but not
  // dispatched by a blank line is an error (kCorrupt "stream ended inside an event"), since a
  // sender that stops mid-event has been cut off.
  Status finish(std::vector<SseEvent>& out);

  // Total events dispatched so far.
  std::size_t events() const { return events_; }

 private:
  Status process_line(std::string_view line, std::vector<SseEvent>& out);
  Status fail(Status s);

  SseParserOptions options_;
  std::string line_;          // partial line carried between feeds
  bool last_was_cr_ = false;  // previous byte was CR: a following LF belongs to the same line end
  bool bom_checked_ = false;  // a leading UTF-8 BOM is skipped once
  bool in_event_ = false;     // a field was seen since the last dispatch
  bool has_data_ = false;     // at least one data line since the last dispatch
  SseEvent pending_;
  std::size_t events_ = 0;
  Status error_;
};

}  // namespace plumb::net
