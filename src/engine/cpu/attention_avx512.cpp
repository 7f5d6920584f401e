// attention "avx512": the causal paged attention of kernels.h with AVX-512, the query heads that
// share a KV head (grouped-query attention) taken together.
//
// Work items are (q row, KV head) pairs, not (q row, query head): the `group` query heads of one KV
// head read the same K and V rows, so an item resolves the row's cache slots once, scores each head
// over the context 16 positions at a time (16 independent FMA chains over head_dim, one
// transpose-reduction of the 16 sums), and then accumulates the output of up to 16 / (head_dim / 16)
// heads in registers per pass over V, each V row loaded once for all of them. Decode attention of
// Qwen2.5-0.5B (7 query heads per KV head) is the case it is for; BENCHMARKS.md "Engine kernels".
//
// Numerics: the same softmax as the reference (max subtracted, exp of the AVX2 polynomial,
// normalized at the end), float accumulation in a different order: within the variant test's 1e-5.
// head_dim must be a multiple of 16 up to 128; other shapes go to the "avx2" variant.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cpu/avx2_util.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/thread_pool.h"

#define PLUMB_AVX512_ATT __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define PLUMB_AVX512_ATT_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"), always_inline)) inline

namespace plumb::engine::avx512 {
bool cpu_has_avx512();  // matmul_avx512.cpp
}  // namespace plumb::engine::avx512

namespace plumb::engine::avx2 {
void attention(const KernelContext& ctx, const float* q, const KvLayerView& kv,
               std::span<const AttentionSeq> seqs, int32_t n_heads, float scale, float* out);  // ops_avx2.cpp
}  // namespace plumb::engine::avx2

namespace plumb::engine::avx512_attention {

namespace {

// r[j] = sum of the 16 lanes of a[j], j < 16: pairs of vectors interleaved and added at 32-bit,
// then 64-bit, then 128-bit granularity (45 shuffles and adds for 16 sums).
PLUMB_AVX512_ATT_INLINE __m512 hsum16x16(const __m512* a) {
  __m512 b[8], c[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [x0+x2, y0+y2, x1+x3, y1+y3], x = a[2i], y = a[2i+1]
    b[i] =
        _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: partial sums of a[4i .. 4i+3]
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
    c[i] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));  // float adds of the moved pairs
  }
  // Lanes of c: [l0, l1, l2, l3]; the sum over the four lanes of c[i] is a[4i .. 4i+3]'s sums.
  const __m512 d0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xdd));
  const __m512 d1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, 0x88), _mm512_shuffle_f32x4(d0, d1, 0xdd));
}

struct Job {
  const float* q;
  const KvLayerView* kv;
  const AttentionSeq* seqs;
  const int32_t* row_seq;  // [rows]: which sequence a q row belongs to, -1 if none
  int32_t n_heads;
  float scale;
  float* out;
};

// Scores of the group's heads for one row (16 positions at a time) into scores [group, padded],
// and each head's maximum into mx.
template <int NC>
PLUMB_AVX512_ATT_INLINE void group_scores(const Job& job, int64_t row, int64_t kvh, int64_t group,
                                          int64_t context, int64_t padded, const float* const* krow,
                                          float* scores, float* mx) {
  constexpr int64_t hd = NC * 16;
  const __m512 vscale = _mm512_set1_ps(job.scale);
  for (int64_t g = 0; g < group; ++g) {
    const float* qv = job.q + (row * job.n_heads + kvh * group + g) * hd;
    __m512 qr[NC];
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) qr[c] = _mm512_loadu_ps(qv + 16 * c);
    float* sg = scores + g * padded;
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (int64_t p = 0; p < padded; p += 16) {
      __m512 acc[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        const float* kp = krow[size_t(p + j)];
        __m512 a = _mm512_mul_ps(qr[0], _mm512_loadu_ps(kp));
#pragma GCC unroll 8
        for (int c = 1; c < NC; ++c) a = _mm512_fmadd_ps(qr[c], _mm512_loadu_ps(kp + 16 * c), a);
        acc[j] = a;
      }
      __m512 sc = _mm512_mul_ps(hsum16x16(acc), vscale);
      const int64_t valid = std::min<int64_t>(16, context - p);
      if (valid < 16) sc = _mm512_mask_blend_ps(__mmask16((1u << valid) - 1), _mm512_set1_ps(-INFINITY), sc);
      _mm512_storeu_ps(sg + p, sc);
      vmx = _mm512_max_ps(vmx, sc);
    }
    mx[g] = _mm512_reduce_max_ps(vmx);
  }
}

// exp(score - max) (the AVX2 polynomial, 8 at a time; padding lanes give exp(-inf) = 0) and the
// normalizer of each head.
PLUMB_AVX512_ATT_INLINE void group_softmax(int64_t group, int64_t context, int64_t padded, const float* mx,
                                           float* scores, float* inv) {
  for (int64_t g = 0; g < group; ++g) {
    float* sg = scores + g * padded;
    const __m256 vm = _mm256_set1_ps(mx[g]);
    __m256 vs = _mm256_setzero_ps();
    for (int64_t i = 0; i < padded; i += 8) {
      __m256 ev = avx2::exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sg + i), vm));
      ev = _mm256_and_ps(ev, _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                 _mm256_set1_epi32(int32_t(context - i)),
                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));  // zero the padding
      _mm256_storeu_ps(sg + i, ev);
      vs = _mm256_add_ps(vs, ev);
    }
    inv[g] = 1.0f / avx2::hsum(vs);
  }
}

// Output: up to kHeadsPerPass heads per pass over V, each V row loaded once per pass.
template <int NC>
PLUMB_AVX512_ATT_INLINE void group_output(const Job& job, int64_t row, int64_t kvh, int64_t group,
                                          int64_t context, int64_t padded, const float* const* vrow,
                                          const float* scores, const float* inv) {
  constexpr int64_t hd = NC * 16;
  constexpr int kHeadsPerPass = std::max(1, 16 / NC);  // output accumulators <= 16 registers
  for (int64_t g0 = 0; g0 < group; g0 += kHeadsPerPass) {
    const int nh = int(std::min<int64_t>(kHeadsPerPass, group - g0));
    __m512 acc[kHeadsPerPass][NC];
#pragma GCC unroll 16
    for (int h = 0; h < kHeadsPerPass; ++h) {
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_setzero_ps();
    }
    const float* s0 = scores + g0 * padded;
    for (int64_t p = 0; p < context; ++p) {
      const float* vp = vrow[size_t(p)];
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const __m512 vc = _mm512_loadu_ps(vp + 16 * c);
#pragma GCC unroll 16
        for (int h = 0; h < kHeadsPerPass; ++h) {
          if (h < nh) acc[h][c] = _mm512_fmadd_ps(_mm512_set1_ps(s0[h * padded + p]), vc, acc[h][c]);
        }
      }
    }
    for (int h = 0; h < nh; ++h) {
      float* o = job.out + (row * job.n_heads + kvh * group + g0 + h) * hd;
      const __m512 vinv = _mm512_set1_ps(inv[g0 + h]);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(acc[h][c], vinv));
    }
  }
}

// Items [b, e) of (row, KV head) pairs, item = row * n_kv + kvh; NC = head_dim / 16.
template <int NC>
PLUMB_AVX512_ATT void items(const Job& job, int64_t b, int64_t e) {
  constexpr int64_t hd = NC * 16;
  const KvLayerView& kv = *job.kv;
  const int64_t n_kv = kv.n_kv_heads, bs = kv.block_size, group = job.n_heads / n_kv;
  thread_local std::vector<float> scores;             // [group, context]; grows, never shrinks
  thread_local std::vector<const float*> krow, vrow;  // [context]: this item's K and V rows
  thread_local std::vector<int64_t> slot;             // [context]: cache slot of each position of ready_row
  int64_t ready_row = -1;
  for (int64_t item = b; item < e; ++item) {
    const int64_t row = item / n_kv, kvh = item % n_kv;
    const int32_t si = job.row_seq[row];
    if (si < 0) continue;
    const AttentionSeq& s = job.seqs[si];
    const int64_t context = int64_t(s.start_pos) + (row - s.q_row) + 1;
    const int64_t padded = (context + 15) / 16 * 16;
    if (scores.size() < size_t(group * padded)) scores.resize(size_t(group * padded));
    if (krow.size() < size_t(padded)) krow.resize(size_t(padded)), vrow.resize(size_t(padded));
    if (slot.size() < size_t(context)) slot.resize(size_t(context));
    if (row != ready_row) {  // every KV head of a row reads the same positions: resolve them once
      for (int64_t p = 0, blk = 0, off = 0; p < context; ++p) {
        slot[size_t(p)] = int64_t(s.block_table[blk]) * bs + off;
        if (++off == bs) off = 0, ++blk;
      }
      ready_row = row;
    }
    for (int64_t p = 0; p < context; ++p) {
      const int64_t at = (slot[size_t(p)] * n_kv + kvh) * hd;
      krow[size_t(p)] = kv.k + at;
      vrow[size_t(p)] = kv.v + at;
    }
    // Padding positions read position 0 (any valid row); their scores are never used.
    for (int64_t p = context; p < padded; ++p) krow[size_t(p)] = krow[0], vrow[size_t(p)] = vrow[0];

    float mx[64], inv[64];  // per head of the group (group <= 64 checked by the caller)
    group_scores<NC>(job, row, kvh, group, context, padded, krow.data(), scores.data(), mx);
    group_softmax(group, context, padded, mx, scores.data(), inv);
    group_output<NC>(job, row, kvh, group, context, padded, vrow.data(), scores.data(), inv);
  }
}

using ItemsFn = void (*)(const Job&, int64_t, int64_t);

ItemsFn items_for(int64_t head_dim) {
  switch (head_dim) {
    case 32:
      return &items<2>;
    case 48:
      return &items<3>;
    case 64:
      return &items<4>;
    case 80:
      return &items<5>;
    case 96:
      return &items<6>;
    case 112:
      return &items<7>;
    case 128:
      return &items<8>;
    default:
      return nullptr;
  }
}

}  // namespace

void attention(const KernelContext& ctx, const float* q, const KvLayerView& kv,
               std::span<const AttentionSeq> seqs, int32_t n_heads, float scale, float* out) {
  const ItemsFn fn = items_for(kv.head_dim);
  const int64_t group = kv.n_kv_heads > 0 ? n_heads / kv.n_kv_heads : 0;
  if (!fn || group < 1 || group > 64 || group * kv.n_kv_heads != n_heads) {
    return avx2::attention(ctx, q, kv, seqs, n_heads, scale, out);
  }
  int64_t rows = 0;
  const int32_t* row_seq = attention_row_owners(seqs, &rows);
  const Job job{q, &kv, seqs.data(), row_seq, n_heads, scale, out};
  auto part = [&](int64_t b, int64_t e) { fn(job, b, e); };
  if (ctx.pool) {
    ctx.pool->parallel_for(rows * kv.n_kv_heads, part);
  } else {
    part(0, rows * kv.n_kv_heads);
  }
}

}  // namespace plumb::engine::avx512_attention

namespace plumb::engine::detail {

void register_avx512_attention(KernelRegistry& r) {
  r.add(Op::kAttention, {"avx512",
                         "AVX-512, the query heads sharing a KV head together: 16 positions per score "
                         "pass, each V row loaded once for up to 4 heads (head_dim 64); head_dim not a "
                         "multiple of 16 (or over 128): avx2",
                         &avx512::cpu_has_avx512,
                         &avx512_attention::attention,
                         {2, 2}});
}

}  // namespace plumb::engine::detail
