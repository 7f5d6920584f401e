#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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

SampledToken Sampler::sample(std::span<const float> logits) {
  SampledToken t;
  const size_t V = logits.size();
  if (p_.temperature == 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < V; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    t.id = int32_t(best);
  } else {
    // Candidates (scaled logit, id), best first, cut to top-k.
    cand_.resize(V);
    for (size_t i = 0; i < V; ++i) cand_[i] = {logits[i] / p_.temperature, int32_t(i)};
    size_t n = V;
    if (p_.top_k > 0 && size_t(p_.top_k) < V) {
      n = size_t(p_.top_k);
      std::partial_sort(cand_.begin(), cand_.begin() + long(n), cand_.end(), better);
      cand_.resize(n);
    } else if (p_.top_p < 1.0f) {
      std::sort(cand_.begin(), cand_.end(), better);
    }
    // Softmax over the candidates (in place: first becomes the probability).
    float m = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) m = std::max(m, cand_[i].first);
    double sum = 0;
    std::vector<double> prob(n);
    for (size_t i = 0; i < n; ++i) {
      prob[i] = std::exp(double(cand_[i].first) - m);
      sum += prob[i];
    }
    if (p_.top_p < 1.0f) {  // candidates are sorted here: keep the smallest prefix reaching top_p
      double cum = 0;
      size_t keep = n;
      for (size_t i = 0; i < n; ++i) {
        cum += prob[i] / sum;
        if (cum >= double(p_.top_p)) {
          keep = i + 1;
          break;
        }
      }
      n = keep;
      sum = 0;
      for (size_t i = 0; i < n; ++i) sum += prob[i];
    }
    const double u = rng_.uniform() * sum;
    double acc = 0;
    t.id = cand_[n - 1].second;
    for (size_t i = 0; i < n; ++i) {
      acc += prob[i];
      if (u < acc) {
        t.id = cand_[i].second;
        break;
      }
    }
  }
  if (p_.logprobs >= 0) {
    t.logprob = logprob_of(logits, t.id);
    t.top = top_logprobs(logits, p_.logprobs);
  }
  return t;
}

}  // namespace plumb::engine
