// Plain HTTP data types shared by the server and the client. No Boost in here, so that modules
// above net/ compile fast.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace plumb::net {

// Header fields in arrival order; names keep their case, lookups ignore it.
using Headers = std::vector<std::pair<std::string, std::string>>;

// Value of the first header named `name` (ASCII case-insensitive), or "" when absent.
std::string_view find_header(const Headers& headers, std::string_view name);

// True when a and b are equal ignoring ASCII case.
bool iequals(std::string_view a, std::string_view b);

// "OK", "Not Found", ...; "Unknown" for codes without a standard reason.
std::string_view status_reason(int status);

// {"error":{"message":..., "type":..., "code":status}} — the OpenAI-style error body every net/
// error response uses. type is e.g. "invalid_request_error", "server_error".
std::string json_error_body(int status, std::string_view message, std::string_view type);

// Rate limit for a log line that can repeat many times a second (accept errors when out of file
// descriptors): allow() is true at most once per `interval`; the calls refused in between are
// counted and reported to the next allowed call, so the line can say how many it stands for.
// Not thread-safe (one owner, e.g. the accept strand).
class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::steady_clock::duration interval) : interval_(interval) {}
  // True when a line may be logged at `now`; then *suppressed = calls refused since the last
  // allowed one (and the count restarts).
  bool allow(std::chrono::steady_clock::time_point now, uint64_t* suppressed);
  // Calls refused since the last allowed one; take_pending() also resets the count.
  uint64_t pending() const { return refused_; }
  uint64_t take_pending();

 private:
  std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point last_{};
  bool any_ = false;
  uint64_t refused_ = 0;
};

}  // namespace plumb::net
