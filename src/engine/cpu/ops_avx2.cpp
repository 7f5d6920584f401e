// The AVX2 variants of rmsnorm, swiglu, rope and attention, and the avx2 registrations.
#include <cmath>
#include <vector>

#include "engine/cpu/avx2_util.h"
#include "engine/cpu/reference.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine::avx2 {

void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y);  // matmul_avx2.cpp

namespace {

PLUMB_AVX2 void rmsnorm_rows(const float* x, const float* weight, int64_t r0, int64_t r1, int64_t dim,
                             float eps, float* y) {
  const int64_t d8 = dim & ~int64_t(7);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d8; i += 16) {
      __m256 v0 = _mm256_loadu_ps(xr + i), v1 = _mm256_loadu_ps(xr + i + 8);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i < d8; i += 8) {
      __m256 v = _mm256_loadu_ps(xr + i);
      a0 = _mm256_fmadd_ps(v, v, a0);
    }
    float ss = hsum(_mm256_add_ps(a0, a1));
    for (; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = float(1.0 / std::sqrt(double(ss) / double(dim) + double(eps)));
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i < d8; i += 8) {
      _mm256_storeu_ps(
          yr + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vinv), _mm256_loadu_ps(weight + i)));
    }
    for (; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void rmsnorm(const KernelContext& ctx, const float* x, const float* weight, int64_t rows, int64_t dim,
             float eps, float* y) {
  auto part = [&](int64_t b, int64_t e) { rmsnorm_rows(x, weight, b, e, dim, eps, y); };
  if (ctx.pool && rows * dim >= 65536) {
    ctx.pool->parallel_for(rows, part);
  } else {
    part(0, rows);
  }
}

PLUMB_AVX2 void swiglu_range(const float* gate, const float* up, int64_t b, int64_t e, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
  }
  for (; i < e; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void swiglu(const KernelContext& ctx, const float* gate, const float* up, int64_t rows, int64_t dim,
            float* out) {
  const int64_t n = rows * dim;
  auto part = [&](int64_t b, int64_t e) { swiglu_range(gate, up, b, e, out); };
  if (ctx.pool && n >= 65536) {
    ctx.pool->parallel_for(n, part, 8);
  } else {
    part(0, n);
  }
}

// cos/sin are computed once per (token, frequency) in double and applied to every head.
PLUMB_AVX2 void rope_tokens(float* x, int64_t t0, int64_t t1, int64_t n_heads, int64_t head_dim,
                            const int32_t* positions, const float* inv_freq) {
  const int64_t half = head_dim / 2, h8 = half & ~int64_t(7);
  thread_local std::vector<float> cs;  // [2, half]: cos then sin; grows once, no per-call allocation
  if (cs.size() < size_t(2 * half)) cs.resize(size_t(2 * half));
  float* cosv = cs.data();
  float* sinv = cs.data() + half;
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      double a = double(float(positions[t]) * inv_freq[i]);
      cosv[i] = float(std::cos(a));
      sinv[i] = float(std::sin(a));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      int64_t i = 0;
      for (; i < h8; i += 8) {
        __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
        __m256 c = _mm256_loadu_ps(cosv + i), s = _mm256_loadu_ps(sinv + i);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
      }
      for (; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * cosv[i] - b * sinv[i];
        v[i + half] = b * cosv[i] + a * sinv[i];
      }
    }
  }
}

void rope(const KernelContext& ctx, float* x, int64_t tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* positions, const float* inv_freq) {
  auto part = [&](int64_t b, int64_t e) { rope_tokens(x, b, e, n_heads, head_dim, positions, inv_freq); };
  if (ctx.pool && tokens >= 8) {
    ctx.pool->parallel_for(tokens, part);
  } else {
    part(0, tokens);
  }
}

PLUMB_AVX2_INLINE float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

PLUMB_AVX2_INLINE void axpy(float alpha, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

struct AttentionJob {
  const float* q;
  const KvLayerView* kv;
  const AttentionSeq* seqs;
  const int32_t* item_seq;  // [items]: which sequence a (row, head) item belongs to
  int32_t n_heads;
  float scale;
  float* out;
};

// The 8 sums of acc[0..7], in order: [sum(acc[0]), ..., sum(acc[7])].
PLUMB_AVX2_INLINE __m256 hsum8x8(const __m256* acc) {
  const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]), t1 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]), t3 = _mm256_hadd_ps(acc[6], acc[7]);
  // Per 128-bit lane: u0 = acc[0..3] summed over elements 0-3 (low lane) and 4-7 (high lane).
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// One head's K and V rows: position p lives at cache slot slot[p].
struct HeadKv {
  const KvLayerView& kv;
  const int64_t* slot;
  int64_t kvh;
  const float* k_at(int64_t p) const { return kv.k + (slot[size_t(p)] * kv.n_kv_heads + kvh) * kv.head_dim; }
  const float* v_at(int64_t p) const { return kv.v + (slot[size_t(p)] * kv.n_kv_heads + kvh) * kv.head_dim; }
};

// scores[0, context) = q . k_p * scale (8 positions at a time where wide); returns their maximum.
PLUMB_AVX2_INLINE float head_scores(const float* qv, const HeadKv& rk, int64_t hd, int64_t context, bool wide,
                                    float scale, float* scores) {
  float mx = -INFINITY;
  int64_t p = 0;
  if (wide) {
    const __m256 vscale = _mm256_set1_ps(scale);
    __m256 vmx = _mm256_set1_ps(-INFINITY);
    for (; p + 8 <= context; p += 8) {
      const float* kp[8];
      __m256 acc[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) kp[j] = rk.k_at(p + j), acc[j] = _mm256_setzero_ps();
      for (int64_t c = 0; c < hd; c += 8) {
        const __m256 qc = _mm256_loadu_ps(qv + c);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kp[j] + c), acc[j]);
      }
      const __m256 sc = _mm256_mul_ps(hsum8x8(acc), vscale);
      _mm256_storeu_ps(&scores[size_t(p)], sc);
      vmx = _mm256_max_ps(vmx, sc);
    }
    mx = std::max(mx, hmax(vmx));
  }
  for (; p < context; ++p) {
    float sc = dot(qv, rk.k_at(p), hd) * scale;
    scores[size_t(p)] = sc;
    mx = std::max(mx, sc);
  }
  return mx;
}

// scores[0, context) = exp(score - mx), vectorized over the context; returns their sum.
PLUMB_AVX2_INLINE float head_softmax(float* scores, int64_t context, float mx) {
  float denom = 0.0f;
  int64_t i = 0;
  __m256 vm = _mm256_set1_ps(mx), vs = _mm256_setzero_ps();
  for (; i + 8 <= context; i += 8) {
    __m256 ev = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(&scores[size_t(i)]), vm));
    _mm256_storeu_ps(&scores[size_t(i)], ev);
    vs = _mm256_add_ps(vs, ev);
  }
  denom = hsum(vs);
  for (; i < context; ++i) denom += (scores[size_t(i)] = std::exp(scores[size_t(i)] - mx));
  return denom;
}

// o[0, hd) = sum_p scores[p] * v_p * inv: in registers, 64 dimensions per pass, where wide.
PLUMB_AVX2_INLINE void head_output(const float* scores, const HeadKv& rk, int64_t hd, int64_t context,
                                   bool wide, float inv, float* o) {
  int64_t c0 = 0;
  if (wide) {
    const __m256 vinv = _mm256_set1_ps(inv);
    for (; c0 < hd; c0 += 64) {  // up to 8 registers of output per pass over the context
      const int nv = int(std::min<int64_t>(8, (hd - c0) / 8));
      __m256 acc[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
      for (int64_t pp = 0; pp < context; ++pp) {
        const __m256 w = _mm256_set1_ps(scores[size_t(pp)]);
        const float* vp = rk.v_at(pp) + c0;
        if (nv == 8) {
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 8 * i), acc[i]);
        } else {
          for (int i = 0; i < nv; ++i) acc[i] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp + 8 * i), acc[i]);
        }
      }
      for (int i = 0; i < nv; ++i) _mm256_storeu_ps(o + c0 + 8 * i, _mm256_mul_ps(acc[i], vinv));
    }
    return;
  }
  for (int64_t i = 0; i < hd; ++i) o[i] = 0.0f;
  for (int64_t pp = 0; pp < context; ++pp) axpy(scores[size_t(pp)], rk.v_at(pp), o, hd);
  for (int64_t i = 0; i < hd; ++i) o[i] *= inv;
}

// Items are (sequence token, head) pairs: item = row * n_heads + h over the batch's q rows.
// With head_dim a multiple of 8 the scores go 8 positions at a time (8 independent FMA chains, one
// transpose-sum) and the output accumulates in registers, 64 dimensions per pass over the context;
// one dot product per position with its own horizontal sum (the general path) is latency-bound.
PLUMB_AVX2 void attention_items(const AttentionJob& job, int64_t b, int64_t e) {
  const KvLayerView& kv = *job.kv;
  const int64_t hd = kv.head_dim, n_kv = kv.n_kv_heads, bs = kv.block_size;
  const int64_t group = job.n_heads / n_kv;
  const bool wide = hd % 8 == 0;
  thread_local std::vector<float> scores;  // [context]; grows, never shrinks
  thread_local std::vector<int64_t> slot;  // [context]: cache slot of each position of slot_row
  int64_t slot_row = -1;
  for (int64_t item = b; item < e; ++item) {
    const int64_t row = item / job.n_heads, h = item % job.n_heads;
    const int32_t si = job.item_seq[row];
    if (si < 0) continue;  // a row no sequence owns
    const AttentionSeq& s = job.seqs[si];
    const int64_t context = int64_t(s.start_pos) + (row - s.q_row) + 1;
    if (scores.size() < size_t(context)) scores.resize(size_t(context)), slot.resize(size_t(context));
    if (row != slot_row) {  // every head of a row reads the same positions: resolve them once
      for (int64_t p = 0, blk = 0, off = 0; p < context; ++p) {
        slot[size_t(p)] = int64_t(s.block_table[blk]) * bs + off;
        if (++off == bs) off = 0, ++blk;
      }
      slot_row = row;
    }
    const int64_t kvh = h / group;
    const float* qv = job.q + (row * job.n_heads + h) * hd;
    const HeadKv rk{kv, slot.data(), kvh};
    const float mx = head_scores(qv, rk, hd, context, wide, job.scale, scores.data());
    const float inv = 1.0f / head_softmax(scores.data(), context, mx);
    head_output(scores.data(), rk, hd, context, wide, inv, job.out + (row * job.n_heads + h) * hd);
  }
}

}  // namespace

void attention(const KernelContext& ctx, const float* q, const KvLayerView& kv,
               std::span<const AttentionSeq> seqs, int32_t n_heads, float scale, float* out) {
  int64_t rows = 0;
  const int32_t* item_seq = attention_row_owners(seqs, &rows);
  AttentionJob job{q, &kv, seqs.data(), item_seq, n_heads, scale, out};
  auto part = [&](int64_t b, int64_t e) { attention_items(job, b, e); };
  if (ctx.pool) {
    ctx.pool->parallel_for(rows * n_heads, part);
  } else {
    part(0, rows * n_heads);
  }
}

}  // namespace plumb::engine::avx2

namespace plumb::engine::detail {

void register_avx2_kernels(KernelRegistry& r) {
  using namespace avx2;
  r.add(Op::kMatmul, {"avx2",
                      "AVX2/FMA dot-product tiles, weights converted in registers; best for decode (small m)",
                      &cpu_has_avx2,
                      &avx2::matmul,
                      {1, 2}});
  r.add(Op::kRmsNorm, {"avx2", "AVX2 sum of squares and scale", &cpu_has_avx2, &avx2::rmsnorm, {1, 1}});
  r.add(Op::kRope, {"avx2",
                    "cos/sin once per token and frequency, AVX2 rotation of every head",
                    &cpu_has_avx2,
                    &avx2::rope,
                    {1, 1}});
  r.add(Op::kSwiglu,
        {"avx2", "AVX2 with a polynomial exp (rel. error < 2e-7)", &cpu_has_avx2, &avx2::swiglu, {1, 1}});
  r.add(Op::kAttention, {"avx2",
                         "AVX2 dot products and axpy over head_dim, threads over (token, head)",
                         &cpu_has_avx2,
                         &avx2::attention,
                         {1, 1}});
}

}  // namespace plumb::engine::detail
