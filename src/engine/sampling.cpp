#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "engine/cpu/observer.h"

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
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0)
      return invalid_argument("sampling: 'logit_bias' token id " + std::to_string(id) + " is negative");
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return invalid_argument("sampling: 'logit_bias' values must be in [-100, 100], got " +
                              std::to_string(bias));
    }
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return invalid_argument("sampling: 'presence_penalty' must be in [-2, 2], got " +
                            std::to_string(presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return invalid_argument("sampling: 'frequency_penalty' must be in [-2, 2], got " +
                            std::to_string(frequency_penalty));
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return invalid_argument("sampling: 'repetition_penalty' must be > 0 and finite, got " +
                            std::to_string(repetition_penalty));
  }
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return invalid_argument("sampling: 'min_tokens' must be in [0, max_tokens = " +
                            std::to_string(max_tokens) + "], got " + std::to_string(min_tokens));
  }
  return Status::Ok();
}

bool SamplingParams::processes_logits() const {
  return !logit_bias.empty() || presence_penalty != 0.0f || frequency_penalty != 0.0f ||
         repetition_penalty != 1.0f || min_tokens > 0;
}

bool SamplingParams::is_stop_id(int32_t id) const {
  return std::find(stop_token_ids.begin(), stop_token_ids.end(), id) != stop_token_ids.end() ||
         (!ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end());
}

bool SamplingParams::ends_sequence(int32_t id, int32_t generated) const {
  return generated > min_tokens && is_stop_id(id);
}

namespace {
constexpr std::string_view kNonFinite = "non-finite logits: ";
}

bool is_nonfinite_logits(const Status& s) {
  return s.code() == Code::kCorrupt && std::string_view(s.message()).starts_with(kNonFinite);
}

int64_t first_nonfinite(std::span<const float> x) {
  // An exponent of all ones is an infinity or a NaN. The count is a branch-free integer reduction
  // (it vectorizes), so the check costs a fraction of the sampling kernel's own pass over the row.
  const size_t n = x.size();
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], sizeof b);
    bad |= uint32_t((b & 0x7f800000u) == 0x7f800000u);
  }
  if (bad == 0) return -1;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return int64_t(i);
  }
  return -1;
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

SampleFn default_sample_kernel() {
  return KernelRegistry::instance().best(Op::kSample, Phase::kDecode)->cpu<SampleFn>();
}

Sampler::Sampler(const SamplingParams& p, SampleFn kernel, std::span<const int32_t> prompt)
    : p_(p),
      rng_(p.seed),
      kernel_(kernel ? kernel : default_sample_kernel()),
      processing_(p.processes_logits()) {
  if (p_.repetition_penalty != 1.0f) {
    seen_.assign(prompt.begin(), prompt.end());
    std::sort(seen_.begin(), seen_.end());
    seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
  }
}

void Sampler::process(std::span<const float> logits) {
  work_.assign(logits.begin(), logits.end());
  const auto vocab = int32_t(work_.size());
  auto at = [&](int32_t id) -> float* { return id >= 0 && id < vocab ? &work_[size_t(id)] : nullptr; };
  for (const auto& [id, bias] : p_.logit_bias) {
    if (float* v = at(id)) *v += bias;
  }
  if (generated_ < p_.min_tokens) {
    for (int32_t id : p_.stop_token_ids) {
      if (float* v = at(id)) *v = -std::numeric_limits<float>::infinity();
    }
    if (!p_.ignore_eos) {
      for (int32_t id : p_.eos_ids) {
        if (float* v = at(id)) *v = -std::numeric_limits<float>::infinity();
      }
    }
  }
  if (p_.repetition_penalty != 1.0f) {
    const float r = p_.repetition_penalty;
    auto penalize = [&](int32_t id) {
      if (float* v = at(id)) *v = *v > 0.0f ? *v / r : *v * r;
    };
    // Every id of the prompt or the output once (seen_ and counts_ are both sorted by id).
    size_t i = 0, j = 0;
    while (i < seen_.size() || j < counts_.size()) {
      if (j == counts_.size() || (i < seen_.size() && seen_[i] < counts_[j].first)) {
        penalize(seen_[i++]);
      } else {
        if (i < seen_.size() && seen_[i] == counts_[j].first) ++i;
        penalize(counts_[j++].first);
      }
    }
  }
  if (p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f) {
    for (const auto& [id, n] : counts_) {
      if (float* v = at(id)) *v -= p_.frequency_penalty * float(n) + p_.presence_penalty;
    }
  }
}

namespace {
// sample()'s error for a row whose logit `id` is `what` ("nan", "inf", "not finite").
Status nonfinite_logit(int64_t id, const std::string& what) {
  return corrupt(std::string(kNonFinite) + "the model's logit for token " + std::to_string(id) + " is " +
                 what + "; the weights may hold NaN or Inf (check them with --check-weights)");
}
}  // namespace

Result<SampledToken> Sampler::take(int32_t id) {
  if (id < 0) return nonfinite_logit(-1 - int64_t(id), "not finite");
  generated_++;  // greedy_only(): no penalty counts to keep
  SampledToken t;
  t.id = id;
  return t;
}

Result<SampledToken> Sampler::sample(std::span<const float> logits) {
  if (int64_t bad = first_nonfinite(logits); bad >= 0) {
    return nonfinite_logit(bad, std::to_string(logits[size_t(bad)]));
  }
  SampledToken t;
  SampleArgs a;
  std::span<const float> row = logits;
  if (processing_) {
    process(logits);
    row = work_;
  }
  a.logits = row.data();
  a.vocab = int64_t(row.size());
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
  generated_++;
  if (p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f || p_.repetition_penalty != 1.0f) {
    auto it = std::lower_bound(counts_.begin(), counts_.end(), std::make_pair(t.id, int32_t(0)));
    if (it != counts_.end() && it->first == t.id) {
      it->second++;
    } else {
      counts_.insert(it, {t.id, 1});
    }
  }
  return t;
}

}  // namespace plumb::engine
