#include "metrics/request_record.h"

namespace plumb::metrics {

std::string_view failure_name(Failure f) {
  switch (f) {
    case Failure::kNone:
      return "ok";
    case Failure::kConnect:
      return "connect";
    case Failure::kTimeout:
      return "timeout";
    case Failure::kHttp4xx:
      return "http_4xx";
    case Failure::kHttp5xx:
      return "http_5xx";
    case Failure::kReset:
      return "reset";
    case Failure::kMalformed:
      return "malformed";
    case Failure::kIncomplete:
      return "incomplete";
    case Failure::kCancelled:
      return "cancelled";
    case Failure::kClient:
      return "client";
  }
  return "unknown";
}

Result<Failure> parse_failure(std::string_view name) {
  if (name == "ok") return Failure::kNone;
  for (Failure f : kAllFailures) {
    if (failure_name(f) == name) return f;
  }
  return invalid_argument("unknown failure category '" + std::string(name) + "'");
}

std::string_view server_clock_name(ServerClock c) {
  return c == ServerClock::kLlamaCpp ? "llama.cpp" : "plumb";
}

}  // namespace plumb::metrics
