#include "engine/sampling.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "engine/kernels/observer.h"

namespace plumb::engine {

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return invalid_argument("sampling: 'temperature' must be >= 0, got " + std::to_string(temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return invalid_argument("sampling: 'top_p' must be in (0, 1], got " + std::to_string(top_p));
  }
  if (max_tokens < 1)
    return invalid_argument("sampling: 'max_tokens' must be >= 1, got " + std::to_string(max_tokens));
  if (logprobs < -1) return invalid_argument("sampling: 'logprobs' must be >= 0 (or -1 for none)");
  return Status::Ok();
}

namespace {

// log(sum(exp(x))) computed stably.
double log_sum_exp(std::span<const float> x) {
  float m = -std::numeric_limits<float>::infinity();
  for (float v : x) m = std::max(m, v);
  double s = 0;
  for (float v : x) s += std::exp(double(v) - m);
  return double(m) + std::log(s);
}

bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first != b.first ? a.first > b.first : a.second < b.second;
}

}  // namespace

float logprob_of(std::span<const float> logits, int32_t id) {
  return float(double(logits[size_t(id)]) - log_sum_exp(logits));
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int32_t k) {
  const double lse = log_sum_exp(logits);
  std::vector<std::pair<float, int32_t>> all(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) all[i] = {logits[i], int32_t(i)};
  const size_t kk = std::min(size_t(std::max(k, 0)), all.size());
  std::partial_sort(all.begin(), all.begin() + long(kk), all.end(), better);
  std::vector<std::pair<int32_t, float>> out;
  for (size_t i = 0; i < kk; ++i) out.emplace_back(all[i].second, float(double(all[i].first) - lse));
  return out;
}

namespace {
std::atomic<SampleFn> g_default_sample{nullptr};
}

void set_default_sample_kernel(SampleFn fn) { g_default_sample.store(fn); }

SampleFn default_sample_kernel() {
  if (SampleFn f = g_default_sample.load()) return f;
  return reinterpret_cast<SampleFn>(KernelRegistry::instance().best(Op::kSample, Phase::kDecode)->fn);
}

Sampler::Sampler(const SamplingParams& p, SampleFn kernel)
    : p_(p), rng_(p.seed), kernel_(kernel ? kernel : default_sample_kernel()) {}

SampledToken Sampler::sample(std::span<const float> logits) {
  SampledToken t;
  SampleArgs a;
  a.logits = logits.data();
  a.vocab = int64_t(logits.size());
  a.temperature = p_.temperature;
  a.top_k = p_.top_k;
  a.top_p = p_.top_p;
  if (p_.temperature != 0.0f) a.u = rng_.uniform();  // one draw per sampled token, none when greedy
  const KernelContext ctx{nullptr, Phase::kDecode};
  KernelObserver* const obs = kernel_observer();
  PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kSample, Phase::kDecode, "sampling", -1, 1, a.vocab, 0, &a}),
                      t.id = kernel_(ctx, a, &scratch_));
  if (p_.logprobs >= 0) {
    t.logprob = logprob_of(logits, t.id);
    t.top = top_logprobs(logits, p_.logprobs);
  }
  return t;
}

}  // namespace plumb::engine
