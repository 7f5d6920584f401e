// Per-request records: what the load generator observed for each request, the raw material of
// every metric (docs/metrics.md). Plain data; loadgen/ fills it, metrics/ summarizes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

namespace plumb::metrics {

// Why a request failed. Each category is counted separately; a failed request is kept out of
// every latency statistic and out of completed-request throughput.
enum class Failure {
  kNone,        // completed: a full stream ending with its terminator ([DONE])
  kConnect,     // could not connect (refused, unreachable, connect timeout)
  kTimeout,     // no first byte, a stall, or the whole request past its deadline
  kHttp4xx,     // the server answered 400..499
  kHttp5xx,     // the server answered 500..599
  kReset,       // the connection was reset or closed mid-response
  kMalformed,   // the response was not valid HTTP, SSE or JSON
  kIncomplete,  // the stream ended without its terminator ([DONE] or finish_reason)
  kCancelled,   // cancelled by plumb (end of run)
  kClient,      // plumb's own error (a bug or a local resource limit)
};
inline constexpr Failure kAllFailures[] = {Failure::kConnect,    Failure::kTimeout,   Failure::kHttp4xx,
                                           Failure::kHttp5xx,    Failure::kReset,     Failure::kMalformed,
                                           Failure::kIncomplete, Failure::kCancelled, Failure::kClient};
// "ok", "connect", "timeout", "http_4xx", "http_5xx", "reset", "malformed", "incomplete", "cancelled",
// "client".
std::string_view failure_name(Failure f);
Result<Failure> parse_failure(std::string_view name);

// One content chunk of a streamed response.
struct Chunk {
  Nanos t{0};          // arrival time, relative to the start of the measured phase
  int32_t tokens = 0;  // output tokens in the chunk (the target's local count)
};

// The server's own account of one request's times, read from the timings object it ends the
// response with (docs/metrics.md, "Server timings"): plumb serve's "plumb_timings" {queue_ms,
// prefill_ms, decode_ms, completion_tokens, ...} or llama.cpp's llama-server "timings" {prompt_ms,
// predicted_ms, predicted_n, ...}. Milliseconds of the server's monotonic clock.
enum class ServerClock {
  kPlumb,     // plumb serve: "plumb_timings"
  kLlamaCpp,  // llama.cpp's llama-server: "timings"
};
std::string_view server_clock_name(ServerClock c);  // "plumb" | "llama.cpp"

struct ServerTimings {
  ServerClock source = ServerClock::kPlumb;
  double queue_ms = 0.0;    // arrival to the first model step; 0 where the server reports none (llama.cpp)
  double prefill_ms = 0.0;  // first model step to the first token (llama.cpp: prompt_ms)
  double decode_ms = 0.0;   // first token to the last (llama.cpp: predicted_ms)
  int64_t completion_tokens = -1;  // tokens the decode time covers (llama.cpp: predicted_n); -1 unknown
  // The server's TTFT: queue_ms + prefill_ms.
  double ttft_ms() const { return queue_ms + prefill_ms; }
  // The server's TPOT: decode_ms / (completion_tokens - 1); nullopt below 2 tokens.
  std::optional<double> tpot_ms() const {
    if (completion_tokens < 2) return std::nullopt;
    return decode_ms / double(completion_tokens - 1);
  }
};

// Everything observed for one request. Times are relative to the start of the measured phase
// (the zero of the arrival schedule); warmup requests have negative times. A time that did not
// happen is nullopt.
struct RequestRecord {
  size_t index = 0;                     // position in the request set (warmup: position in the warmup list)
  std::string hash;                     // the request's content hash
  bool warmup = false;                  // true: warmup phase, excluded from every statistic
  int64_t requested_output_tokens = 0;  // the request's max_tokens
  int64_t prompt_tokens = -1;           // input tokens counted when the request was made; -1 unknown

  std::optional<Nanos> scheduled;    // send time from the arrival schedule
  std::optional<Nanos> eligible;     // when it could be sent: max(scheduled, a concurrency slot freed)
  std::optional<Nanos> sent;         // when plumb handed it to the target
  std::optional<Nanos> first_byte;   // first response byte
  std::optional<Nanos> first_token;  // first chunk with tokens > 0
  std::optional<Nanos> end;          // response complete (success) or failure detected
  std::vector<Chunk> chunks;         // every content chunk in arrival order (tokens may be 0)
  // TCP set-up this request waited for because it opened its own connection (a duration, part of
  // its TTFT); nullopt when it went over an already open connection or the target has none.
  std::optional<Nanos> connect;

  int64_t usage_prompt_tokens = -1;  // server-reported usage; -1 not reported
  int64_t usage_output_tokens = -1;  // server-reported usage; -1 not reported
  int64_t local_output_tokens = 0;   // sum of chunk tokens
  // The server's timings object (its final chunk or body); nullopt when it sent none.
  std::optional<ServerTimings> server_timings;

  Failure failure = Failure::kNone;  // kNone: completed
  int http_status = 0;               // HTTP status when there was one; 0 otherwise
  std::string error;                 // human-readable failure detail; empty when completed

  bool completed() const { return failure == Failure::kNone && end.has_value(); }
  // Output tokens: the server's usage when reported, else the local count.
  int64_t output_tokens() const {
    return usage_output_tokens >= 0 ? usage_output_tokens : local_output_tokens;
  }
};

// How the load was offered (copied from the schedule, for reports).
struct LoadInfo {
  std::string arrival = "burst";  // workload::arrival_kind_name
  double rate = 0.0;              // req/s for timed arrivals; 0 otherwise
  double burstiness = 1.0;        // gamma shape
  int max_concurrency = 0;        // in-flight cap; 0 = unlimited
  double ramp_up_s = 0.0;         // ramp-up seconds
  uint64_t seed = 0;              // arrival seed (run seed)
};

// One run of the load generator.
struct RunRecord {
  std::vector<RequestRecord> requests;  // measured phase, in request-set order
  std::vector<RequestRecord> warmup;    // warmup phase, in send order; never in statistics
  std::string request_set_hash;         // workload::RequestSet::set_hash
  std::string target;                   // Target::describe()
  LoadInfo load;                        // the offered load
  Nanos duration{0};                    // measured phase: schedule zero to the last request's end
  int max_in_flight = 0;                // the largest number of requests in flight at once (measured)
  bool realtime_pacing = false;         // the driver's thread ran at real-time priority (DriverOptions)
};

}  // namespace plumb::metrics
