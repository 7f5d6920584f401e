#include "engine/scheduler/synthetic_engine.h"

#include <algorithm>
#include <cmath>

#include "core/json.h"
#include "core/random.h"

namespace plumb::scheduler {

Result<DelayDistribution::Kind> parse_delay_kind(const std::string& name) {
  if (name == "constant") return DelayDistribution::Kind::kConstant;
  if (name == "uniform") return DelayDistribution::Kind::kUniform;
  if (name == "normal") return DelayDistribution::Kind::kNormal;
  if (name == "lognormal") return DelayDistribution::Kind::kLognormal;
  return invalid_argument("unknown delay distribution '" + name + "' (constant|uniform|normal|lognormal)");
}

const char* delay_kind_name(DelayDistribution::Kind k) {
  switch (k) {
    case DelayDistribution::Kind::kConstant:
      return "constant";
    case DelayDistribution::Kind::kUniform:
      return "uniform";
    case DelayDistribution::Kind::kNormal:
      return "normal";
    case DelayDistribution::Kind::kLognormal:
      return "lognormal";
  }
  return "unknown";
}

namespace {

double sample(const DelayDistribution& d, Rng& rng) {
  double v = d.mean_ms;
  switch (d.kind) {
    case DelayDistribution::Kind::kConstant:
      break;
    case DelayDistribution::Kind::kUniform:
      v = d.mean_ms + (2.0 * rng.uniform() - 1.0) * d.jitter_ms;
      break;
    case DelayDistribution::Kind::kNormal:
      v = d.mean_ms + rng.normal() * d.jitter_ms;
      break;
    case DelayDistribution::Kind::kLognormal:
      if (d.mean_ms > 0) v = d.mean_ms * std::exp(rng.normal() * d.jitter_ms / d.mean_ms);
      break;
  }
  return std::max(0.0, v);
}

Nanos to_nanos(double ms) { return Nanos(int64_t(std::llround(ms * 1e6))); }

}  // namespace

struct SyntheticEngine::Stream {
  RequestId id = 0;
  GenerationRequest req;
  SyntheticPlan plan;
  size_t next_chunk = 0;   // index into plan
  int64_t emitted = 0;     // tokens sent
  bool cancelled = false;  // cancel() arrived
  RequestTimings timings;
};

SyntheticPlan SyntheticEngine::plan(const SyntheticConfig& config, uint64_t index, int32_t max_tokens) {
  SyntheticPlan p;
  Rng rng(derive_seed(config.seed, "synthetic/" + std::to_string(index)));
  double t = sample(config.ttft, rng);
  int32_t left = std::max(max_tokens, 0);
  while (left > 0) {
    int32_t n = std::min(left, config.tokens_per_chunk);
    p.offsets_ms.push_back(t);
    p.tokens.push_back(n);
    left -= n;
    if (left > 0) t += sample(config.itl, rng);
  }
  return p;
}

Result<std::unique_ptr<SyntheticEngine>> SyntheticEngine::create(SyntheticConfig config) {
  for (const DelayDistribution* d : {&config.ttft, &config.itl}) {
    if (!(d->mean_ms >= 0) || !(d->jitter_ms >= 0)) {
      return invalid_argument("synthetic engine: delays and jitter must be >= 0 ms");
    }
  }
  if (config.tokens_per_chunk < 1) return invalid_argument("synthetic engine: tokens_per_chunk must be >= 1");
  if (config.max_queue < 1) return invalid_argument("synthetic engine: max_queue must be >= 1");
  if (config.max_context < 2) return invalid_argument("synthetic engine: max_context must be >= 2");
  return std::unique_ptr<SyntheticEngine>(new SyntheticEngine(std::move(config)));
}

SyntheticEngine::SyntheticEngine(SyntheticConfig config) : config_(std::move(config)) {
  thread_ = std::thread([this] { run(); });
}

SyntheticEngine::~SyntheticEngine() { stop(); }

Result<RequestId> SyntheticEngine::submit(GenerationRequest request) {
  if (!request.sink) return invalid_argument("request has no token sink");
  if (request.prompt.empty()) return invalid_argument("the prompt is empty");
  if (request.sampling.max_tokens < 1) return invalid_argument("max_tokens must be >= 1");
  int64_t need = int64_t(request.prompt.size()) + request.sampling.max_tokens;
  if (need > config_.max_context) {
    return invalid_argument("prompt (" + std::to_string(request.prompt.size()) +
                            " tokens) plus max_tokens (" + std::to_string(request.sampling.max_tokens) +
                            ") exceeds the context of " + std::to_string(config_.max_context) + " tokens");
  }
  SteadyTime now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  if (stopping_) return unavailable("the server is shutting down");
  if (int64_t(streams_.size()) >= config_.max_queue) {
    counters_.requests_rejected++;
    return resource_exhausted("queue full: " + std::to_string(streams_.size()) + " requests in flight");
  }
  auto s = std::make_unique<Stream>();
  uint64_t index = next_index_++;
  s->id = index + 1;
  s->plan = plan(config_, index, request.sampling.max_tokens);
  s->req = std::move(request);
  s->timings.arrival = now;
  s->timings.first_scheduled = now;
  s->timings.prompt_tokens = int64_t(s->req.prompt.size());
  counters_.prompt_tokens += s->timings.prompt_tokens;
  RequestId id = s->id;
  due_.emplace(now + to_nanos(s->plan.offsets_ms[0]), id);
  streams_.emplace(id, std::move(s));
  cv_.notify_one();
  return id;
}

void SyntheticEngine::cancel(RequestId id) {
  std::lock_guard lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second->cancelled) return;
  it->second->cancelled = true;
  // Deliver the cancellation on the timing thread, now.
  due_.emplace(SteadyTime{}, id);
  cv_.notify_one();
}

bool SyntheticEngine::next_event(Stream& s, SteadyTime now, TokenEvent& ev) {
  if (s.cancelled) {
    ev.finished = true;
    ev.reason = FinishReason::kCancelled;
  } else {
    int32_t n = s.plan.tokens[s.next_chunk++];
    for (int32_t k = 0; k < n; ++k) {
      int32_t tok = config_.token_cycle.empty()
                        ? int32_t(s.emitted % 1000003)
                        : config_.token_cycle[size_t(s.emitted) % config_.token_cycle.size()];
      ev.tokens.push_back(tok);
      s.emitted++;
      if (config_.honour_stop_tokens && s.req.sampling.ends_sequence(tok, int32_t(s.emitted))) {
        ev.finished = true;
        ev.reason = FinishReason::kStop;
        break;
      }
    }
    if (s.req.sampling.logprobs >= 0) {
      for (int32_t t : ev.tokens) ev.logprobs.push_back(TokenLogprob{t, 0.0f, {}});
    }
    if (s.timings.first_token == SteadyTime{}) s.timings.first_token = now;
    counters_.generation_tokens += int64_t(ev.tokens.size());
    if (!ev.finished && s.next_chunk >= s.plan.tokens.size()) {
      ev.finished = true;
      ev.reason = FinishReason::kLength;
    }
  }
  if (ev.finished) {
    s.timings.finished = now;
    s.timings.completion_tokens = s.emitted;
    ev.timings = s.timings;
    if (ev.reason == FinishReason::kCancelled) {
      counters_.requests_cancelled++;
    } else {
      counters_.requests_finished++;
    }
  }
  return ev.finished;
}

void SyntheticEngine::run() {
  std::unique_lock lock(mu_);
  std::vector<std::pair<TokenSink*, TokenEvent>> ready;
  std::vector<std::unique_ptr<Stream>> done;
  while (true) {
    if (stopping_ && streams_.empty()) break;
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    SteadyTime now = std::chrono::steady_clock::now();
    if (due_.begin()->first > now) {
      cv_.wait_until(lock, due_.begin()->first);
      continue;
    }
    while (!due_.empty() && due_.begin()->first <= now) {
      RequestId id = due_.begin()->second;
      due_.erase(due_.begin());
      auto it = streams_.find(id);
      if (it == streams_.end()) continue;  // a stale entry (cancelled and already finished)
      Stream& s = *it->second;
      TokenEvent ev;
      bool last = next_event(s, now, ev);
      if (last) {
        done.push_back(std::move(it->second));
        streams_.erase(it);
        ready.emplace_back(&done.back()->req.sink, std::move(ev));
      } else {
        due_.emplace(s.timings.arrival + to_nanos(s.plan.offsets_ms[s.next_chunk]), id);
        ready.emplace_back(&s.req.sink, std::move(ev));
      }
    }
    // Sinks run outside the lock so they may call cancel(). A stream still in streams_ is only
    // destroyed by this thread, so the sink pointers stay valid.
    lock.unlock();
    for (auto& [sink, ev] : ready) (*sink)(std::move(ev));
    ready.clear();
    done.clear();
    lock.lock();
  }
}

ServingStats SyntheticEngine::stats() const {
  std::lock_guard lock(mu_);
  ServingStats s = counters_;
  s.running = int64_t(streams_.size());
  s.waiting = 0;
  return s;
}

std::string SyntheticEngine::describe() const {
  json::object o;
  o["engine"] = "synthetic";
  auto dist = [](const DelayDistribution& d) {
    json::object j;
    j["kind"] = delay_kind_name(d.kind);
    j["mean_ms"] = d.mean_ms;
    j["jitter_ms"] = d.jitter_ms;
    return j;
  };
  o["ttft"] = dist(config_.ttft);
  o["itl"] = dist(config_.itl);
  o["tokens_per_chunk"] = config_.tokens_per_chunk;
  o["max_context"] = config_.max_context;
  o["max_queue"] = config_.max_queue;
  o["seed"] = config_.seed;
  return json::dump(o);
}

void SyntheticEngine::stop() {
  {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    for (auto& [id, s] : streams_) {
      if (!s->cancelled) {
        s->cancelled = true;
        due_.emplace(SteadyTime{}, id);
      }
    }
    cv_.notify_one();
  }
  thread_.join();
}

}  // namespace plumb::scheduler
