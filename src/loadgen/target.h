// The Target interface: what the load generator drives. The measurement core never knows what it
// measures (docs/architecture.md, "Design rules"): an OpenAI HTTP server, the in-process NullTarget (zero
// work: the client's own ceiling) and the ScriptedTarget of the tests all look the same from here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "metrics/request_record.h"
#include "workload/request.h"

namespace plumb::loadgen {

using metrics::Failure;

// Token usage as the server reports it; -1 when a field was not reported.
struct Usage {
  int64_t prompt_tokens = -1;      // input tokens
  int64_t completion_tokens = -1;  // output tokens
};

// Receives what happens to one request. The target calls these in this order: on_first_byte at most
// once, then any number of on_chunk / on_usage / on_server_timings, then exactly one of on_end (success) or
// on_failure (the last call). Calls for one request never overlap (they may come from any one thread at a
// time); calls for different requests may run concurrently. Times are from the target's clock (the same clock
// the driver uses) and must be taken as close to the event as possible.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual void on_first_byte(SteadyTime t) = 0;
  // One content chunk (an SSE event with output text). tokens: the target's local count of output
  // tokens in it (0 for an event without content, e.g. a role-only delta); text: its content.
  virtual void on_chunk(SteadyTime t, int32_t tokens, std::string_view text) = 0;
  virtual void on_usage(const Usage& usage) = 0;
  // The server's own timings of the request (metrics::ServerTimings), when its response ended with
  // a timings object; at most once or twice (plumb serve repeats it in the usage chunk: the last
  // wins), before the final call. Default: ignored.
  virtual void on_server_timings(const metrics::ServerTimings& timings) { (void)timings; }
  // The request had to open a connection first, which took `connect` (from taking the request up to
  // TCP established). At most once, before the final call; never for a request sent over an already
  // open connection.
  virtual void on_connect(Nanos connect) { (void)connect; }
  virtual void on_end(SteadyTime t) = 0;
  // failure != kNone. http_status: the HTTP status when one was received, else 0.
  virtual void on_failure(SteadyTime t, Failure failure, int http_status, std::string message) = 0;
  // A name of the request that a target may send along (OpenAiTarget: the X-Request-Id header), so
  // a server's own records can be joined with plumb's; empty: none. The driver's is
  // "m<index>-<first 16 hex digits of the content hash>" for a measured request and "w<index>-..."
  // for a warmup one. Constant while the request is in flight; may be read from any thread.
  virtual std::string request_id() const { return {}; }
};

class Target {
 public:
  virtual ~Target() = default;
  // Starts sending `request` and returns without waiting for the response (it may also complete the
  // whole exchange synchronously, as NullTarget does). `request` is only valid during the call; `sink`
  // must stay valid until its final callback. Called from one thread at a time; may be called while
  // callbacks of earlier requests run on other threads.
  virtual void send(const workload::Request& request, StreamSink* sink) = 0;
  // Ends every request still in flight with on_failure(kCancelled) and returns only after every sink
  // has received its final call; no callback happens after it returns. Used at the end of a run.
  virtual void cancel_all() = 0;
  // Abandons the request whose sink this is, if still in flight (closing its connection, so the
  // server can free its resources); its sink may still get on_failure(kCancelled), from any thread,
  // until cancel_all() returns. A no-op for requests that already ended. The driver calls it for
  // requests it timed out. Thread-safe; must not be called from inside a callback.
  virtual void cancel(StreamSink* sink) = 0;
  // Opens up to `connections` connections to the server and returns once they are open (or failed,
  // or a connect timeout passed), so that connection set-up does not land in the TTFT of the first
  // requests of the measured phase. The driver calls it before the measured phase with the
  // schedule's concurrency cap. Default: nothing (a target without connections). Called by the
  // driver's thread only, with nothing in flight.
  virtual void prepare(size_t connections) { (void)connections; }
  // One line naming what is measured, e.g. "openai http://127.0.0.1:8000 model=x" (for provenance).
  virtual std::string describe() const = 0;
  // The driver's real-time pacing (DriverOptions::realtime_pacing) for the target's own threads:
  // on == true asks for the lowest real-time priority (SCHED_FIFO 1) for the threads that read
  // responses and take their timestamps, for the duration of a run; false restores what they had.
  // Returns whether those threads now run at that priority (false where not permitted, and for a
  // target without threads of its own: the default). Called by the driver's thread only.
  virtual bool set_realtime(bool on) {
    (void)on;
    return false;
  }
};

}  // namespace plumb::loadgen
