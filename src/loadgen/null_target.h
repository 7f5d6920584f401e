// NullTarget: answers every request at once, in the caller's thread, with no work. Driving it
// measures the load generator's own ceiling: per-request and per-chunk bookkeeping cost.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/clock.h"
#include "loadgen/target.h"

namespace plumb::loadgen {

struct NullTargetOptions {
  int32_t tokens_per_chunk = 1;  // output tokens per chunk; the request's max_tokens in total
  bool report_usage = true;      // report usage (prompt_tokens = request.prompt_tokens)
};

// send() calls on_first_byte, ceil(max_tokens / tokens_per_chunk) on_chunk, on_usage and on_end
// synchronously, every time stamped with clock.now(). Thread-compatible like any Target.
class NullTarget final : public Target {
 public:
  explicit NullTarget(Clock& clock, NullTargetOptions opts = {}) : clock_(clock), opts_(opts) {}
  void send(const workload::Request& request, StreamSink* sink) override;
  void cancel_all() override {}
  void cancel(StreamSink*) override {}
  std::string describe() const override { return "null"; }
  uint64_t events() const { return events_.load(); }  // chunks delivered so far

 private:
  Clock& clock_;
  NullTargetOptions opts_;
  std::atomic<uint64_t> events_{0};
};

}  // namespace plumb::loadgen
