#include "server/metrics.h"

#include <fmt/format.h>

namespace plumb::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double seconds) {
  std::lock_guard l(mu_);
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += seconds;
  n_++;
}

uint64_t Histogram::count() const {
  std::lock_guard l(mu_);
  return n_;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::lock_guard l(mu_);
  std::string out;
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cum);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum_);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, n_);
  return out;
}

ServerMetrics::ServerMetrics()
    : ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
            40.0, 80.0}),
      tpot({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}),
      e2e({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0}),
      queue({0.001, 0.005, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}) {}

void ServerMetrics::record(const scheduler::RequestTimings& t, int64_t completion_tokens) {
  success++;
  if (t.first_token != SteadyTime{}) ttft.observe(seconds_between(t.arrival, t.first_token));
  if (t.finished != SteadyTime{}) e2e.observe(seconds_between(t.arrival, t.finished));
  queue.observe(t.queue_ms() / 1000.0);
  if (completion_tokens >= 2) tpot.observe(t.decode_ms() / 1000.0 / double(completion_tokens - 1));
}

std::string ServerMetrics::render(const std::string& model, const scheduler::ServingStats& s) const {
  std::string labels = fmt::format("model_name=\"{}\"", model);
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    out += fmt::format("# HELP plumb:{} {}\n# TYPE plumb:{} {}\nplumb:{}{{{}}} {}\n", name, help, name, type,
                       name, labels, value);
  };
  metric("num_requests_running", "gauge", "Requests in the running batch.", s.running);
  metric("num_requests_waiting", "gauge", "Requests waiting to be scheduled (including preempted).",
         s.waiting);
  metric("kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use by requests (1 = full).",
         s.kv_usage());
  metric("kv_cache_blocks_total", "gauge", "KV cache blocks.", s.kv_blocks_total);
  metric("kv_cache_blocks_used", "gauge", "KV cache blocks referenced by requests.", s.kv_blocks_used);
  metric("kv_cache_blocks_cached", "gauge", "Unreferenced KV blocks kept for prefix reuse.",
         s.kv_blocks_cached);
  double hit_rate =
      s.prefix_cache_queries > 0 ? double(s.prefix_cache_hits) / double(s.prefix_cache_queries) : 0.0;
  metric("prefix_cache_hit_rate", "gauge",
         "Prompt tokens served from the prefix cache / prompt tokens looked up.", hit_rate);
  metric("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
         s.prefix_cache_queries);
  metric("prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         s.prefix_cache_hits);
  metric("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", s.prompt_tokens);
  metric("generation_tokens_total", "counter", "Generated tokens.", s.generation_tokens);
  metric("num_preemptions_total", "counter", "Preemptions by recompute.", s.preemptions);
  metric("engine_steps_total", "counter", "Engine steps (forward passes).", s.steps);
  metric("request_success_total", "counter", "Requests completed (length or stop).", success.load());
  metric("request_cancelled_total", "counter", "Requests cancelled (client gone, shutdown).",
         cancelled.load());
  metric("request_failed_total", "counter", "Requests failed in the backend.", failed.load());
  out += fmt::format(
      "# HELP plumb:request_errors_total Requests failed in the backend, by reason.\n"
      "# TYPE plumb:request_errors_total counter\n"
      "plumb:request_errors_total{{{},reason=\"nonfinite_logits\"}} {}\n"
      "plumb:request_errors_total{{{},reason=\"other\"}} {}\n",
      labels, nonfinite_logits.load(), labels, other_errors.load());
  metric("request_rejected_total", "counter", "Requests refused because the queue was full (429).",
         rejected.load());
  metric("request_bad_total", "counter", "Completion requests refused as malformed (400/404).",
         bad_requests.load());
  metric("client_disconnects_total", "counter", "Clients gone before their response ended.",
         disconnects.load());
  auto hist = [&](const char* name, const char* help, const Histogram& h) {
    out += fmt::format("# HELP plumb:{} {}\n# TYPE plumb:{} histogram\n", name, help, name);
    out += h.render(std::string("plumb:") + name, labels);
  };
  hist("time_to_first_token_seconds", "Server-side time from arrival to the first token.", ttft);
  hist("time_per_output_token_seconds", "Server-side decode time per output token after the first.", tpot);
  hist("e2e_request_latency_seconds", "Server-side time from arrival to the last token.", e2e);
  hist("request_queue_time_seconds", "Time from arrival to the first schedule.", queue);
  return out;
}

}  // namespace plumb::server
