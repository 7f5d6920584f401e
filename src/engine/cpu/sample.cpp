// Sampling kernels (Op::kSample): the reference rule of engine/sampling.h, and "select", which
// returns the same ids with less work: a two-pass vectorizable argmax for greedy decoding and
// nth_element + a sort of only the top k (instead of a partial sort over the vocabulary).
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/kernels.h"

namespace plumb::engine {

namespace {

bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first != b.first ? a.first > b.first : a.second < b.second;
}

// Softmax over cand[0, n) (scaled logits), top-p cut (cand sorted when top_p < 1), draw with u.
int32_t draw(const SampleArgs& a, SampleScratch* s, size_t n) {
  auto& cand = s->cand;
  auto& prob = s->prob;
  float m = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) m = std::max(m, cand[i].first);
  double sum = 0;
  prob.resize(n);
  for (size_t i = 0; i < n; ++i) {
    prob[i] = std::exp(double(cand[i].first) - m);
    sum += prob[i];
  }
  if (a.top_p < 1.0f) {  // candidates are sorted here: keep the smallest prefix reaching top_p
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i] / sum;
      if (cum >= double(a.top_p)) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    sum = 0;
    for (size_t i = 0; i < n; ++i) sum += prob[i];
  }
  const double u = a.u * sum;
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += prob[i];
    if (u < acc) return cand[i].second;
  }
  return cand[n - 1].second;
}

int32_t sample_reference(const KernelContext&, const SampleArgs& a, SampleScratch* s) {
  const size_t V = size_t(a.vocab);
  const float* logits = a.logits;
  if (a.temperature == 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < V; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return int32_t(best);
  }
  auto& cand = s->cand;
  cand.resize(V);
  for (size_t i = 0; i < V; ++i) cand[i] = {logits[i] / a.temperature, int32_t(i)};
  size_t n = V;
  if (a.top_k > 0 && size_t(a.top_k) < V) {
    n = size_t(a.top_k);
    std::partial_sort(cand.begin(), cand.begin() + long(n), cand.end(), better);
  } else if (a.top_p < 1.0f) {
    std::sort(cand.begin(), cand.end(), better);
  }
  return draw(a, s, n);
}

int32_t sample_select(const KernelContext&, const SampleArgs& a, SampleScratch* s) {
  const size_t V = size_t(a.vocab);
  const float* logits = a.logits;
  if (a.temperature == 0.0f) {
    float m = logits[0];
    for (size_t i = 1; i < V; ++i) m = logits[i] > m ? logits[i] : m;  // vectorizes (max reduction)
    for (size_t i = 0; i < V; ++i) {
      if (logits[i] == m) return int32_t(i);
    }
    return 0;  // NaN at index 0: the reference keeps index 0 as well
  }
  auto& cand = s->cand;
  cand.resize(V);
  const float inv_t = a.temperature;
  for (size_t i = 0; i < V; ++i) cand[i] = {logits[i] / inv_t, int32_t(i)};
  size_t n = V;
  if (a.top_k > 0 && size_t(a.top_k) < V) {
    n = size_t(a.top_k);
    // (value desc, id asc) is a strict total order, so this is the reference's exact prefix.
    std::nth_element(cand.begin(), cand.begin() + long(n - 1), cand.end(), better);
    std::sort(cand.begin(), cand.begin() + long(n), better);
  } else if (a.top_p < 1.0f) {
    std::sort(cand.begin(), cand.end(), better);
  }
  return draw(a, s, n);
}

}  // namespace

namespace detail {
void register_sample_kernels(KernelRegistry& r) {
  r.add(Op::kSample, {"reference",
                      "argmax, or softmax over a partial sort of the top-k (the rule of sampling.h)",
                      nullptr,
                      &sample_reference,
                      {0, 0}});
  r.add(Op::kSample, {"select",
                      "two-pass argmax; nth_element + sort of the top-k only (same ids)",
                      nullptr,
                      &sample_select,
                      {1, 1}});
}
}  // namespace detail

}  // namespace plumb::engine
