// Prometheus text exposition (format 0.0.4) of the server's state, with names following the
// common serving conventions (vLLM's, under the "plumb:" prefix): running/waiting requests, KV
// cache usage, prefix cache hit rate, prompt/generation token counters, preemptions, and TTFT /
// TPOT / E2E latency histograms measured server-side.
//
// Thread-safe: record() from any thread, render() concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/scheduler/serving_engine.h"

namespace plumb::server {

// A cumulative histogram in seconds.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double seconds);
  // "<name>_bucket{<labels>,le="..."} n" lines, then _sum and _count.
  std::string render(const std::string& name, const std::string& labels) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), +Inf last
  double sum_ = 0;
  uint64_t n_ = 0;
};

struct ServerMetrics {
  ServerMetrics();
  // A request that completed (length or stop): TTFT = arrival -> first token, E2E = arrival ->
  // finished, TPOT = decode time / (completion_tokens - 1) when there are at least two tokens.
  void record(const scheduler::RequestTimings& t, int64_t completion_tokens);
  std::string render(const std::string& model, const scheduler::ServingStats& s) const;

  Histogram ttft, tpot, e2e, queue;
  std::atomic<uint64_t> success{0};           // completed requests
  std::atomic<uint64_t> cancelled{0};         // cancelled (client gone, shutdown)
  std::atomic<uint64_t> failed{0};            // backend errors (every reason below)
  std::atomic<uint64_t> nonfinite_logits{0};  // of those: the model's logits held NaN or Inf
  std::atomic<uint64_t> other_errors{0};      // of those: any other backend error
  std::atomic<uint64_t> bad_requests{0};      // 400/404 on completion endpoints
  std::atomic<uint64_t> rejected{0};          // 429 queue full
  std::atomic<uint64_t> disconnects{0};       // clients gone before the response ended
};

}  // namespace plumb::server
