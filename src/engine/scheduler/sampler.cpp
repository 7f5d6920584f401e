#include "engine/scheduler/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace plumb::engine {

Status validate_sampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0) || !std::isfinite(p.temperature)) {
    return invalid_argument("temperature must be >= 0");
  }
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) return invalid_argument("top_p must be in (0, 1]");
  if (p.top_k < 0) return invalid_argument("top_k must be >= 0 (0 = off)");
  if (p.logprobs > 20) return invalid_argument("logprobs must be <= 20");
  return Status::Ok();
}

namespace {

int32_t argmax(std::span<const float> x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[size_t(best)]) best = int32_t(i);
  }
  return best;
}

// Indices of the k largest values, largest first, ties by lower id.
std::vector<int32_t> top_indices(std::span<const float> x, size_t k) {
  std::vector<int32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, idx.size());
  auto better = [&](int32_t a, int32_t b) {
    return x[size_t(a)] > x[size_t(b)] || (x[size_t(a)] == x[size_t(b)] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(), better);
  idx.resize(k);
  return idx;
}

}  // namespace

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
  if (p.temperature < 1e-6 || p.top_k == 1) return argmax(logits);
  size_t k = p.top_k > 0 ? size_t(p.top_k) : logits.size();
  std::vector<int32_t> cand;
  if (k < logits.size() || p.top_p < 1.0) {
    cand = top_indices(logits, k);
  } else {
    cand.resize(logits.size());
    std::iota(cand.begin(), cand.end(), 0);
  }
  double inv_t = 1.0 / p.temperature;
  float mx = logits[size_t(argmax(logits))];
  std::vector<double> w(cand.size());
  double total = 0;
  for (size_t i = 0; i < cand.size(); ++i) {
    w[i] = std::exp((double(logits[size_t(cand[i])]) - mx) * inv_t);
    total += w[i];
  }
  if (p.top_p < 1.0) {
    // cand is sorted most likely first: keep the shortest head with mass >= top_p.
    double acc = 0;
    size_t keep = cand.size();
    for (size_t i = 0; i < cand.size(); ++i) {
      acc += w[i] / total;
      if (acc >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    cand.resize(keep);
    w.resize(keep);
    total = std::accumulate(w.begin(), w.end(), 0.0);
  }
  double r = rng.uniform() * total;
  for (size_t i = 0; i < cand.size(); ++i) {
    r -= w[i];
    if (r < 0) return cand[i];
  }
  return cand.back();
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t k) {
  float mx = logits[size_t(argmax(logits))];
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  double lse = double(mx) + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = float(double(logits[size_t(token)]) - lse);
  if (k > 0) {
    for (int32_t id : top_indices(logits, size_t(k)))
      out.top.emplace_back(id, float(double(logits[size_t(id)]) - lse));
  }
  return out;
}

}  // namespace plumb::engine
