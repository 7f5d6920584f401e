// ScriptedTarget: a fake server for tests. Each request follows a Script (timings and a fault) on
// injected Timers, so the load generator's bookkeeping, pacing and fault handling can be checked
// exactly in virtual time (SimClock) or in real time (ThreadTimers).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "loadgen/target.h"
#include "loadgen/timers.h"

namespace plumb::loadgen {

enum class Fault {
  kNone,       // complete normally
  kRefuse,     // connection refused at send time (Failure::kConnect)
  kHttpError,  // answer `http_status` at first-byte time (kHttp4xx / kHttp5xx)
  kReset,      // connection reset after `fault_after_chunks` chunks (kReset)
  kMalformed,  // malformed event after `fault_after_chunks` chunks (kMalformed)
  kNoDone,     // all chunks, then the stream closes without its terminator (kIncomplete)
  kStall,      // after `fault_after_chunks` chunks nothing more ever happens (the driver's timeout)
};

// How one request is answered. Times are from the send() call.
struct Script {
  Nanos first_byte{0};               // first response byte (<= ttft)
  Nanos ttft{0};                     // first chunk
  Nanos chunk_gap{0};                // between consecutive chunks
  Nanos end_after_last{0};           // from the last chunk to the end of the stream
  int32_t tokens_per_chunk = 1;      // output tokens per chunk (the last chunk may carry fewer)
  int64_t output_tokens = -1;        // tokens to produce; -1 = the request's max_tokens
  int64_t usage_output_tokens = -2;  // completion_tokens to report: -2 = the true count, -1 = none
  Fault fault = Fault::kNone;        // what goes wrong
  int32_t fault_after_chunks = 0;    // chunks delivered before the fault (kReset, kMalformed, kStall)
  int http_status = 500;             // for kHttpError
};

// Chooses the script of the n-th send() call (0-based, in send order).
using ScriptFn = std::function<Script(size_t call, const workload::Request& request)>;

// Thread-safe. Callbacks run on the Timers' thread (SimClock: the thread that advances it).
class ScriptedTarget final : public Target {
 public:
  ScriptedTarget(Timers& timers, ScriptFn script) : timers_(timers), script_(std::move(script)) {}
  void send(const workload::Request& request, StreamSink* sink) override;
  void cancel_all() override;
  void cancel(StreamSink* sink) override;
  size_t cancelled() const;  // requests ended by cancel() or cancel_all()
  std::string describe() const override { return "scripted"; }
  size_t calls() const;

 private:
  // Shared with pending timers, so a timer that fires after the target is gone does nothing.
  struct State {
    std::mutex mu;  // held while a callback runs, so cancel_all waits for it
    size_t calls = 0;
    size_t cancelled = 0;
    std::map<uint64_t, StreamSink*> live;  // requests not yet ended
  };
  // Runs fn for request id unless it already ended; fn returns true if it ended the request.
  static void step(State& st, uint64_t id, const std::function<bool(StreamSink*)>& fn);

  Timers& timers_;
  ScriptFn script_;
  std::shared_ptr<State> st_ = std::make_shared<State>();
};

}  // namespace plumb::loadgen
