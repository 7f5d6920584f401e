// Every non-reference variant against the reference on seeded random inputs over many shapes.
// Error bounds (stated per test) are for float accumulation against the double reference.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/cpu/reference.h"
#include "engine/cpu/test_util.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine {
namespace {

using testing::make_weights;
using testing::max_rel_err;
using testing::random_floats;
using testing::TestCache;

// Supported variants of op other than the reference; the test fails if none is registered for an
// op that should have one on this CPU, so a registration lost to the linker cannot pass silently.
std::vector<const KernelVariant*> fast_variants(Op op) {
  std::vector<const KernelVariant*> out;
  for (const KernelVariant* v : KernelRegistry::instance().list(op)) {
    // onednn_bf16 (opt-in only) has its own test below.
    if (v->name == "reference" || v->name == "onednn_bf16") continue;
    if (!v->supported || v->supported()) out.push_back(v);
  }
  return out;
}

TEST(Variants, AutoPicksFastVariantsPerPhase) {
  auto& reg = KernelRegistry::instance();
  ASSERT_GE(reg.list(Op::kMatmul).size(), 2u);  // reference + onednn at least, everywhere
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl");
    // amx_bf16 wherever AMX-BF16 is usable (the kernel granted the tile state); else avx512_bf16
    // where VDPBF16PS runs at the FMA rate (AMD; matmul_avx512.cpp).
    const bool amx = reg.find(Op::kMatmul, "amx_bf16").ok();
    const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_is("amd");
    const char* both = amx ? "amx_bf16" : bf16 ? "avx512_bf16" : nullptr;
    EXPECT_EQ(reg.best(Op::kMatmul, Phase::kPrefill)->name, both ? both : "hybrid");
    EXPECT_EQ(reg.best(Op::kMatmul, Phase::kDecode)->name, both ? both : avx512 ? "avx512" : "avx2");
    for (Op op : {Op::kRmsNorm, Op::kRope, Op::kSwiglu}) {
      EXPECT_EQ(reg.best(op, Phase::kDecode)->name, "avx2") << op_name(op);
    }
    for (Phase ph : {Phase::kPrefill, Phase::kDecode})
      EXPECT_EQ(reg.best(Op::kAttention, ph)->name, avx512 ? "avx512" : "avx2") << phase_name(ph);
  } else {
    EXPECT_EQ(reg.best(Op::kMatmul, Phase::kPrefill)->name, "onednn");
  }
}

// Bound: |y - y_ref| <= 1e-5 * (sum_p |x_p w_p| + |bias|) per element: float accumulation of k
// products has error ~k * 2^-24 of that sum, and k <= 300 here. Variants with bf16_activations
// (avx512_bf16, amx_bf16) round x to bf16 for bf16 weights (relative 2^-9 per element): there the
// sum's factor is 2^-8 (the bias stays at 1e-5).
TEST(Variants, MatmulMatchesReferenceOverShapesDtypesAndThreads) {
  ThreadPool pool2(2), pool3(3);
  for (const KernelVariant* v : fast_variants(Op::kMatmul)) {
    auto fn = v->cpu<MatmulFn>();
    uint64_t seed = 100;
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t m : {1, 2, 3, 4, 5, 7, 16, 17}) {
        for (int64_t n : {1, 2, 3, 4, 7, 31, 64}) {
          for (int64_t k : {1, 7, 8, 9, 33, 300}) {
            ++seed;
            auto tw = make_weights(n, k, dt, seed);
            auto x = random_floats(size_t(m * k), seed + 7);  // [m, k]
            auto bias = random_floats(size_t(n), seed + 9);   // [n]
            const float* b = (seed % 2) ? bias.data() : nullptr;
            std::vector<float> expect(size_t(m * n)), got(size_t(m * n));  // [m, n]
            ref::matmul({}, x.data(), m, tw.w, b, expect.data());
            ThreadPool* pool = seed % 3 == 0 ? nullptr : (seed % 3 == 1 ? &pool2 : &pool3);
            fn({pool, Phase::kDecode}, x.data(), m, tw.w, b, got.data());
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                const double rel = v->bf16_activations && dt == DType::kBF16 ? std::ldexp(1.0, -8) : 1e-5;
                double scale = 0.0;
                for (int64_t p = 0; p < k; ++p)
                  scale += std::fabs(x[size_t(i * k + p)] * tw.f32[size_t(j * k + p)]);
                const double bound = rel * scale + (b ? 1e-5 * std::fabs(b[j]) : 0.0) + 1e-30;
                double err = std::fabs(double(got[size_t(i * n + j)]) - expect[size_t(i * n + j)]);
                ASSERT_LE(err, bound) << v->name << " " << dtype_name(dt) << " m=" << m << " n=" << n
                                      << " k=" << k << " i=" << i << " j=" << j;
              }
            }
          }
        }
      }
    }
  }
}

// onednn_bf16 (AVX512_BF16 only): x rounded to bf16 (relative error <= 2^-9 per element), bf16
// weights exact, f32 accumulation. Bound: |y - y_ref| <= 2^-8 * (sum_p |x_p w_p|) + 1e-5 * |bias|.
// f32/f16 weights fall through to the f32 path and keep the 1e-5 bound. Never auto's choice.
TEST(Variants, OneDnnBf16WithinItsBoundAndOptInOnly) {
  auto v = KernelRegistry::instance().find(Op::kMatmul, "onednn_bf16");
  for (Phase ph : {Phase::kPrefill, Phase::kDecode})
    EXPECT_NE(KernelRegistry::instance().best(Op::kMatmul, ph)->name, "onednn_bf16");
  if (!v.ok()) GTEST_SKIP() << "no AVX512_BF16 on this CPU: " << v.status().to_string();
  auto fn = (*v)->cpu<MatmulFn>();
  uint64_t seed = 900;
  for (DType dt : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (int64_t m : {1, 3, 17, 64, 129}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {64, 300}, {96, 896}}) {
        ++seed;
        auto tw = make_weights(n, k, dt, seed);
        auto x = random_floats(size_t(m * k), seed + 7);
        auto bias = random_floats(size_t(n), seed + 9);
        const float* b = (seed % 2) ? bias.data() : nullptr;
        std::vector<float> expect(size_t(m * n)), got(size_t(m * n), NAN);
        ref::matmul({}, x.data(), m, tw.w, b, expect.data());
        fn({nullptr, Phase::kPrefill}, x.data(), m, tw.w, b, got.data());
        const double rel = dt == DType::kBF16 ? std::ldexp(1.0, -8) : 1e-5;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double scale = 0;
            for (int64_t p = 0; p < k; ++p)
              scale += std::fabs(x[size_t(i * k + p)] * tw.f32[size_t(j * k + p)]);
            const double bound = rel * scale + (b ? 1e-5 * std::fabs(b[j]) : 0.0) + 1e-30;
            ASSERT_LE(std::fabs(double(got[size_t(i * n + j)]) - expect[size_t(i * n + j)]), bound)
                << dtype_name(dt) << " m=" << m << " n=" << n << " k=" << k << " i=" << i << " j=" << j;
          }
        }
      }
    }
  }
}

// The register-tiled decode matmuls compute each row of y from its own row of x with the same
// instructions in the same order whatever the tile height, so a row's result does not depend on
// which rows share its call: bitwise equal alone (m = 1) and inside m = 19 (two 8-row tiles and a
// 3-row tail), threaded. A sequence's greedy output then does not depend on its batch.
TEST(Variants, TiledMatmulRowsDoNotDependOnTheirBatch) {
  ThreadPool pool(2);
  int tested = 0;
  for (const char* name : {"avx2", "avx512", "avx512_bf16", "amx_bf16"}) {
    auto v = KernelRegistry::instance().find(Op::kMatmul, name);
    if (!v.ok()) continue;  // not on this CPU
    ++tested;
    auto fn = (*v)->cpu<MatmulFn>();
    for (DType dt : {DType::kBF16, DType::kF32}) {
      const int64_t m = 19, n = 70, k = 330;
      auto tw = make_weights(n, k, dt, 41);
      auto x = random_floats(size_t(m * k), 42);
      auto bias = random_floats(size_t(n), 43);
      std::vector<float> all(size_t(m * n)), one(static_cast<size_t>(n));
      fn({&pool, Phase::kDecode}, x.data(), m, tw.w, bias.data(), all.data());
      for (int64_t i = 0; i < m; ++i) {
        fn({&pool, Phase::kDecode}, x.data() + i * k, 1, tw.w, bias.data(), one.data());
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(one[size_t(j)], all[size_t(i * n + j)]) << name << " " << dtype_name(dt) << " row " << i;
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "no AVX2 on this CPU";
}

TEST(Variants, MatmulLargeShapeOfTheModel) {
  // One real projection shape (Qwen2.5-0.5B q_proj: 896 -> 896) at prefill-like m.
  ThreadPool pool(2);
  const int64_t m = 37, n = 896, k = 896;
  auto tw = make_weights(n, k, DType::kBF16, 5);
  auto x = random_floats(size_t(m * k), 6);
  std::vector<float> expect(size_t(m * n)), got(size_t(m * n));
  ref::matmul({&pool, Phase::kPrefill}, x.data(), m, tw.w, nullptr, expect.data());
  for (const KernelVariant* v : fast_variants(Op::kMatmul)) {
    std::fill(got.begin(), got.end(), NAN);
    v->cpu<MatmulFn>()({&pool, Phase::kPrefill}, x.data(), m, tw.w, nullptr, got.data());
    // Outputs are sums of 896 terms of size ~0.25; 1e-4 absolute is ~30x the expected float error.
    // bf16_activations variants round x to bf16 (relative 2^-9 each): errors of random sign,
    // ~sqrt(896) * 0.25 * 2^-9 ~ 0.015 typical, so 0.06 (a wrong or missing term is ~0.25).
    const double limit = v->bf16_activations ? 0.06 : 1e-4;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - expect[i])));
    EXPECT_LE(worst, limit) << v->name;
  }
}

// Bound: relative 1e-5 (floor 1e-3).
TEST(Variants, RmsNormMatchesReference) {
  ThreadPool pool(2);
  for (const KernelVariant* v : fast_variants(Op::kRmsNorm)) {
    for (int64_t rows : {1, 3, 64}) {
      for (int64_t dim : {1, 7, 8, 17, 64, 896, 1031}) {
        auto x = random_floats(size_t(rows * dim), uint64_t(rows * 1000 + dim), 4.0f);
        auto w = random_floats(size_t(dim), uint64_t(dim));
        std::vector<float> expect(x.size()), got(x.size());
        ref::rmsnorm({}, x.data(), w.data(), rows, dim, 1e-6f, expect.data());
        v->cpu<RmsNormFn>()({&pool, Phase::kPrefill}, x.data(), w.data(), rows, dim, 1e-6f, got.data());
        EXPECT_LE(max_rel_err(got, expect, 1e-3), 1e-5) << v->name << " rows=" << rows << " dim=" << dim;
        v->cpu<RmsNormFn>()({&pool, Phase::kPrefill}, x.data(), w.data(), rows, dim, 1e-6f,
                            x.data());  // in place
        EXPECT_EQ(x, got);
      }
    }
  }
}

// Bound: |err| <= 2e-6 * max(|ref|, 1e-3) (polynomial exp, rel. error < 2e-7).
TEST(Variants, SwigluMatchesReference) {
  ThreadPool pool(2);
  for (const KernelVariant* v : fast_variants(Op::kSwiglu)) {
    for (int64_t rows : {1, 5, 100}) {
      for (int64_t dim : {1, 9, 64, 4864}) {
        auto g = random_floats(size_t(rows * dim), uint64_t(rows + dim), 20.0f);
        auto u = random_floats(size_t(rows * dim), uint64_t(rows + dim + 1), 3.0f);
        std::vector<float> expect(g.size()), got(g.size());
        ref::swiglu({}, g.data(), u.data(), rows, dim, expect.data());
        v->cpu<SwigluFn>()({&pool, Phase::kPrefill}, g.data(), u.data(), rows, dim, got.data());
        EXPECT_LE(max_rel_err(got, expect, 1e-3), 2e-6) << v->name << " rows=" << rows << " dim=" << dim;
      }
    }
  }
}

// Bound: absolute 1e-6 with inputs in [-1, 1]: cos/sin rounded to float, then a float rotation;
// outputs can cancel to near zero, so a relative bound would be meaningless.
TEST(Variants, RopeMatchesReference) {
  ThreadPool pool(2);
  for (const KernelVariant* v : fast_variants(Op::kRope)) {
    for (int64_t tokens : {1, 3, 40}) {
      for (int64_t hd : {2, 16, 64, 80, 128}) {
        const int64_t heads = 3, half = hd / 2;
        auto x = random_floats(size_t(tokens * heads * hd), uint64_t(tokens * 7 + hd));
        std::vector<int32_t> pos(static_cast<size_t>(tokens));
        for (int64_t t = 0; t < tokens; ++t) pos[size_t(t)] = int32_t(t * 37 + 3);
        std::vector<float> inv_freq(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i) inv_freq[size_t(i)] = float(std::pow(1e6, -double(2 * i) / hd));
        auto expect = x, got = x;
        ref::rope({}, expect.data(), tokens, heads, hd, pos.data(), inv_freq.data());
        v->cpu<RopeFn>()({&pool, Phase::kPrefill}, got.data(), tokens, heads, hd, pos.data(),
                         inv_freq.data());
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          double d = std::fabs(double(got[i]) - expect[i]);
          if (!(d <= worst)) worst = d;
        }
        EXPECT_LE(worst, 1e-6) << v->name << " tokens=" << tokens << " hd=" << hd;
      }
    }
  }
}

// Bound: absolute 1e-5 (outputs are convex combinations of V values in [-1, 1]).
TEST(Variants, AttentionMatchesReferenceOverLayouts) {
  ThreadPool pool(2);
  struct Layout {
    int32_t n_heads, n_kv, hd, bs;
  };
  for (const KernelVariant* v : fast_variants(Op::kAttention)) {
    for (Layout L : {Layout{14, 2, 64, 16}, Layout{4, 4, 7, 3}, Layout{8, 1, 33, 5}, Layout{2, 1, 128, 1},
                     Layout{6, 2, 80, 4}}) {
      TestCache cache(40, L.bs, L.n_kv, L.hd, uint64_t(L.hd));
      // Scattered block tables (reversed and interleaved physical ids).
      std::vector<std::vector<int32_t>> tables(3);
      for (int32_t b = 0; b < 13; ++b) {
        tables[0].push_back(39 - 3 * b);
        tables[1].push_back(38 - 3 * b);
        tables[2].push_back(37 - 3 * b);
      }
      const int32_t cap = 13 * L.bs;  // positions a table covers
      // A prefill, a decode and a chunked continuation in one batch, rows out of order.
      std::vector<AttentionSeq> seqs = {{1, std::min(cap, 11), 0, tables[0].data()},
                                        {0, 1, std::min(cap - 1, 40), tables[1].data()},
                                        {1 + std::min(cap, 11), 3, std::min(cap - 3, 5), tables[2].data()}};
      int64_t rows = 1 + std::min(cap, 11) + 3;
      auto q = random_floats(size_t(rows * L.n_heads * L.hd), 9);
      std::vector<float> expect(q.size()), got(q.size(), NAN);
      ref::attention({}, q.data(), cache.view, seqs, L.n_heads, 0.3f, expect.data());
      v->cpu<AttentionFn>()({&pool, Phase::kDecode}, q.data(), cache.view, seqs, L.n_heads, 0.3f, got.data());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        double d = std::fabs(double(got[i]) - expect[i]);
        if (!(d <= worst)) worst = d;
      }
      EXPECT_LE(worst, 1e-5) << v->name << " heads=" << L.n_heads << " kv=" << L.n_kv << " hd=" << L.hd;
    }
  }
}

}  // namespace
}  // namespace plumb::engine
