#include "loadgen/scripted_target.h"

#include <algorithm>

namespace plumb::loadgen {

size_t ScriptedTarget::calls() const {
  std::lock_guard<std::mutex> l(st_->mu);
  return st_->calls;
}

void ScriptedTarget::step(State& st, uint64_t id, const std::function<bool(StreamSink*)>& fn) {
  std::lock_guard<std::mutex> l(st.mu);
  auto it = st.live.find(id);
  if (it == st.live.end()) return;
  if (fn(it->second)) st.live.erase(it);
}

void ScriptedTarget::send(const workload::Request& request, StreamSink* sink) {
  Script s;
  uint64_t id;
  {
    std::lock_guard<std::mutex> l(st_->mu);
    id = st_->calls;
    s = script_(st_->calls++, request);
    st_->live[id] = sink;
  }
  Clock& clock = timers_.clock();
  const SteadyTime t0 = clock.now();
  auto fail_at = [&](SteadyTime t, Failure f, int status, std::string msg) {
    timers_.at(t, [st = st_, id, t, f, status, msg] {
      step(*st, id, [&](StreamSink* k) {
        k->on_failure(t, f, status, msg);
        return true;
      });
    });
  };
  if (s.fault == Fault::kRefuse) {
    fail_at(t0, Failure::kConnect, 0, "connection refused (scripted)");
    return;
  }
  timers_.at(t0 + s.first_byte, [st = st_, id, t = t0 + s.first_byte] {
    step(*st, id, [&](StreamSink* k) {
      k->on_first_byte(t);
      return false;
    });
  });
  if (s.fault == Fault::kHttpError) {
    fail_at(t0 + s.first_byte, s.http_status >= 500 ? Failure::kHttp5xx : Failure::kHttp4xx, s.http_status,
            "HTTP " + std::to_string(s.http_status) + " (scripted)");
    return;
  }
  const int64_t total = s.output_tokens >= 0 ? s.output_tokens : request.max_tokens;
  const int32_t per = std::max<int32_t>(1, s.tokens_per_chunk);
  const int64_t nchunks = (total + per - 1) / per;
  const bool cut = s.fault == Fault::kReset || s.fault == Fault::kMalformed || s.fault == Fault::kStall;
  const int64_t delivered = cut ? std::min<int64_t>(nchunks, s.fault_after_chunks) : nchunks;
  SteadyTime t = t0 + s.ttft;
  for (int64_t c = 0; c < delivered; ++c) {
    int32_t k = int32_t(std::min<int64_t>(per, total - c * per));
    timers_.at(t, [st = st_, id, t, k] {
      step(*st, id, [&](StreamSink* out) {
        out->on_chunk(t, k, {});
        return false;
      });
    });
    if (c + 1 < delivered) t += s.chunk_gap;
  }
  if (delivered == 0) t = t0 + s.first_byte;
  switch (s.fault) {
    case Fault::kReset:
      fail_at(t + s.chunk_gap, Failure::kReset, 200, "connection reset (scripted)");
      return;
    case Fault::kMalformed:
      fail_at(t + s.chunk_gap, Failure::kMalformed, 200, "malformed SSE (scripted)");
      return;
    case Fault::kStall:
      return;
    case Fault::kNoDone:
      fail_at(t + s.end_after_last, Failure::kIncomplete, 200, "stream ended without [DONE] (scripted)");
      return;
    default:
      break;
  }
  const SteadyTime end = t + s.end_after_last;
  const Usage usage{request.prompt_tokens, s.usage_output_tokens == -2 ? total : s.usage_output_tokens};
  timers_.at(end, [st = st_, id, end, usage] {
    step(*st, id, [&](StreamSink* k) {
      if (usage.completion_tokens >= 0) k->on_usage(usage);
      k->on_end(end);
      return true;
    });
  });
}

size_t ScriptedTarget::cancelled() const {
  std::lock_guard<std::mutex> l(st_->mu);
  return st_->cancelled;
}

void ScriptedTarget::cancel(StreamSink* sink) {
  std::lock_guard<std::mutex> l(st_->mu);
  for (auto it = st_->live.begin(); it != st_->live.end(); ++it) {
    if (it->second != sink) continue;
    ++st_->cancelled;
    sink->on_failure(timers_.clock().now(), Failure::kCancelled, 0, "cancelled");
    st_->live.erase(it);
    return;
  }
}

void ScriptedTarget::cancel_all() {
  std::lock_guard<std::mutex> l(st_->mu);
  SteadyTime now = timers_.clock().now();
  for (auto& [id, sink] : st_->live)
    sink->on_failure(now, Failure::kCancelled, 0, "cancelled at the end of the run");
  st_->live.clear();
}

}  // namespace plumb::loadgen
