// Reference kernels against naive double-precision computations written independently here.
#include "engine/cpu/reference.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/cpu/test_util.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine {
namespace {

using testing::make_weights;
using testing::max_rel_err;
using testing::random_floats;
using testing::TestCache;

TEST(ReferenceMatmul, MatchesNaiveForEveryDtypeWithAndWithoutBias) {
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (bool with_bias : {false, true}) {
      const int64_t m = 3, n = 5, k = 7;
      auto tw = make_weights(n, k, dt, 11);
      auto x = random_floats(size_t(m * k), 12);  // [m, k]
      auto bias = random_floats(size_t(n), 13);   // [n]
      std::vector<float> expect(size_t(m * n));   // [m, n]
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < k; ++p) acc += double(x[size_t(i * k + p)]) * tw.f32[size_t(j * k + p)];
          if (with_bias) acc += bias[size_t(j)];
          expect[size_t(i * n + j)] = float(acc);
        }
      }
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> y(size_t(m * n), -1.0f);  // [m, n]
        ref::matmul({p, Phase::kPrefill}, x.data(), m, tw.w, with_bias ? bias.data() : nullptr, y.data());
        EXPECT_LE(max_rel_err(y, expect, 1e-6), 1e-6) << dtype_name(dt) << " bias=" << with_bias;
      }
    }
  }
}

TEST(ReferenceMatmul, ExactSmallCase) {
  // x = [[1, 2]], W = [[1, 0], [0, 1], [3, -1]] (bf16-exact), bias = [0.5, 0, 0] -> [1.5, 2, 1].
  std::vector<uint16_t> w;
  for (float f : {1.f, 0.f, 0.f, 1.f, 3.f, -1.f}) w.push_back(f32_to_bf16(f));
  float x[2] = {1, 2}, bias[3] = {0.5f, 0, 0}, y[3];
  ref::matmul({}, x, 1, WeightMatrix{w.data(), DType::kBF16, 3, 2}, bias, y);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[2], 1.0f);
}

TEST(ReferenceRmsNorm, MatchesNaiveAndAllowsAliasing) {
  const int64_t rows = 3, dim = 10;
  auto x = random_floats(size_t(rows * dim), 21, 3.0f);  // [rows, dim]
  auto w = random_floats(size_t(dim), 22);               // [dim]
  std::vector<float> expect(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
    double scale = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (int64_t i = 0; i < dim; ++i)
      expect[size_t(r * dim + i)] = float(x[size_t(r * dim + i)] * scale * w[size_t(i)]);
  }
  std::vector<float> y(x.size());
  ref::rmsnorm({}, x.data(), w.data(), rows, dim, 1e-6f, y.data());
  EXPECT_LE(max_rel_err(y, expect, 1e-6), 1e-6);
  ref::rmsnorm({}, x.data(), w.data(), rows, dim, 1e-6f, x.data());  // in place
  EXPECT_EQ(x, y);
  // A constant row of 2s with eps 0 normalizes to exactly the weights.
  std::vector<float> twos(4, 2.0f), ones(4, 1.0f), out(4);
  ref::rmsnorm({}, twos.data(), ones.data(), 1, 4, 0.0f, out.data());
  EXPECT_EQ(out, ones);
}

TEST(ReferenceRope, RotatesHalvesByPositionTimesFrequency) {
  const int64_t tokens = 3, heads = 2, hd = 8, half = hd / 2;
  auto x = random_floats(size_t(tokens * heads * hd), 31);  // [tokens, heads, hd]
  std::vector<int32_t> pos = {0, 5, 17};
  std::vector<float> inv_freq(half);  // [hd / 2], theta = 10000
  for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = float(1.0 / std::pow(10000.0, double(2 * i) / hd));
  std::vector<float> expect(x.size());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* v = &x[size_t((t * heads + h) * hd)];
      float* e = &expect[size_t((t * heads + h) * hd)];
      for (int64_t i = 0; i < half; ++i) {
        double a = double(float(pos[size_t(t)]) * inv_freq[size_t(i)]);
        e[i] = float(v[i] * std::cos(a) - v[i + half] * std::sin(a));
        e[i + half] = float(v[i + half] * std::cos(a) + v[i] * std::sin(a));
      }
    }
  }
  std::vector<float> y = x;
  ref::rope({}, y.data(), tokens, heads, hd, pos.data(), inv_freq.data());
  EXPECT_LE(max_rel_err(y, expect, 1e-3), 1e-6);
  // Position 0 is the identity.
  for (int64_t i = 0; i < heads * hd; ++i) EXPECT_EQ(y[size_t(i)], x[size_t(i)]);
}

TEST(ReferenceSwiglu, MatchesNaive) {
  auto g = random_floats(37, 41, 6.0f), u = random_floats(37, 42);
  std::vector<float> expect(37), out(37);
  for (size_t i = 0; i < 37; ++i) expect[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
  ref::swiglu({}, g.data(), u.data(), 1, 37, out.data());
  EXPECT_LE(max_rel_err(out, expect, 1e-6), 1e-6);
  ref::swiglu({}, g.data(), u.data(), 37, 1, g.data());  // aliasing out = gate
  EXPECT_EQ(g, out);
}

TEST(ReferenceEmbedding, GathersRowsOfEveryDtype) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto tw = make_weights(6, 5, dt, 51);  // table [vocab 6, dim 5]
    std::vector<int32_t> ids = {4, 0, 4, 5};
    std::vector<float> out(ids.size() * 5);
    ref::embedding({}, ids.data(), int64_t(ids.size()), tw.w.data, dt, 5, out.data());
    for (size_t t = 0; t < ids.size(); ++t) {
      for (size_t i = 0; i < 5; ++i)
        ASSERT_EQ(out[t * 5 + i], tw.f32[size_t(ids[t]) * 5 + i]) << dtype_name(dt);
    }
  }
}

// Naive attention: gathers each sequence's K/V into logical order through its block table, then
// computes causal softmax attention in double.
std::vector<float> naive_attention(const std::vector<float>& q, TestCache& cache,
                                   const std::vector<std::vector<int32_t>>& tables,
                                   const std::vector<AttentionSeq>& seqs, int32_t n_heads, float scale) {
  const int32_t hd = cache.view.head_dim, n_kv = cache.view.n_kv_heads;
  std::vector<float> out(q.size(), 0.0f);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t j = 0; j < seqs[s].n_q; ++j) {
      int64_t row = seqs[s].q_row + j, ctx_len = seqs[s].start_pos + j + 1;
      for (int32_t h = 0; h < n_heads; ++h) {
        int32_t kvh = h * n_kv / n_heads;
        std::vector<double> w(static_cast<size_t>(ctx_len));
        double mx = -1e300, sum = 0;
        for (int64_t p = 0; p < ctx_len; ++p) {
          const float* k = cache.at(cache.k, tables[s], p, kvh);
          double d = 0;
          for (int32_t i = 0; i < hd; ++i) d += double(q[size_t((row * n_heads + h) * hd + i)]) * k[i];
          w[size_t(p)] = d * scale;
          mx = std::max(mx, w[size_t(p)]);
        }
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (int32_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (int64_t p = 0; p < ctx_len; ++p) acc += w[size_t(p)] * cache.at(cache.v, tables[s], p, kvh)[i];
          out[size_t((row * n_heads + h) * hd + i)] = float(acc / sum);
        }
      }
    }
  }
  return out;
}

TEST(ReferenceAttention, PrefillOfTwoSequencesOverScatteredBlocks) {
  const int32_t n_heads = 6, n_kv = 2, hd = 8, bs = 4;
  TestCache cache(10, bs, n_kv, hd, 61);
  std::vector<std::vector<int32_t>> tables = {{7, 2, 9}, {0, 5}};  // non-contiguous physical blocks
  std::vector<AttentionSeq> seqs = {{0, 10, 0, tables[0].data()}, {10, 6, 0, tables[1].data()}};
  auto q = random_floats(size_t(16 * n_heads * hd), 62);  // [16 tokens, n_heads, hd]
  std::vector<float> out(q.size());
  ref::attention({}, q.data(), cache.view, seqs, n_heads, 0.35f, out.data());
  EXPECT_LE(max_rel_err(out, naive_attention(q, cache, tables, seqs, n_heads, 0.35f), 1e-3), 1e-5);
}

TEST(ReferenceAttention, DecodeAfterPrefillAndChunkedContinuation) {
  const int32_t n_heads = 4, n_kv = 1, hd = 16, bs = 3;
  TestCache cache(12, bs, n_kv, hd, 71);
  std::vector<std::vector<int32_t>> tables = {{11, 3, 8, 1}, {6, 4, 10}};
  // Sequence 0 decodes its token at position 10; sequence 1 continues a chunked prefill at 5..8.
  std::vector<AttentionSeq> seqs = {{0, 1, 10, tables[0].data()}, {1, 4, 5, tables[1].data()}};
  auto q = random_floats(size_t(5 * n_heads * hd), 72);
  std::vector<float> out(q.size());
  ref::attention({}, q.data(), cache.view, seqs, n_heads, 0.25f, out.data());
  EXPECT_LE(max_rel_err(out, naive_attention(q, cache, tables, seqs, n_heads, 0.25f), 1e-3), 1e-5);
}

TEST(ReferenceAttention, CausalMaskAndGqaMappingExactly) {
  // All keys equal, so attention is uniform over the visible positions: token j must output the
  // mean of V over positions [0, j] of its KV head. V of KV head g at position p is 100*g + p.
  const int32_t n_heads = 4, n_kv = 2, hd = 2, bs = 2;
  TestCache cache(4, bs, n_kv, hd, 81);
  std::vector<int32_t> table = {3, 1, 2};
  for (int64_t p = 0; p < 5; ++p) {
    for (int32_t g = 0; g < n_kv; ++g) {
      for (int32_t i = 0; i < hd; ++i) {
        cache.at(cache.k, table, p, g)[i] = 1.0f;
        cache.at(cache.v, table, p, g)[i] = float(100 * g + p);
      }
    }
  }
  std::vector<AttentionSeq> seqs = {{0, 5, 0, table.data()}};
  std::vector<float> q(size_t(5 * n_heads * hd), 0.5f), out(q.size());
  ref::attention({}, q.data(), cache.view, seqs, n_heads, 1.0f, out.data());
  for (int32_t j = 0; j < 5; ++j) {
    for (int32_t h = 0; h < n_heads; ++h) {
      float expect = float(100 * (h / 2)) + float(j) / 2.0f;  // mean of 0..j is j/2
      for (int32_t i = 0; i < hd; ++i) EXPECT_FLOAT_EQ(out[size_t((j * n_heads + h) * hd + i)], expect);
    }
  }
}

}  // namespace
}  // namespace plumb::engine
