// Weight-only quantization (engine/cpu/quant.h): the formats' error bounds, the reference
// matmul_quant against float weights, and every fast matmul_quant variant against the reference
// over odd shapes and thread counts.
//
// Bounds, all computed per element from the stored scales (never a fixed number):
//  - format: |W - dequant(W)| <= quant_error_bound(W, r, c) = scale/2 (+1e-5 relative slack for the
//    quantizer's division, + float rounding of scale*q + min), scale of the element's channel (int8)
//    or group (int4);
//  - reference matmul_quant vs the float matmul over the original W:
//    |y_q - y_f| <= sum_p |x_p| * quant_error_bound(j, p) + 1e-6 * sum_p |x_p W_p|;
//  - fast variants vs the reference (both over the same dequantized values; only float
//    accumulation order differs): |y - y_ref| <= 1e-5 * (sum_p |x_p dequant_p| + |bias|), k <= 300.
#include "engine/cpu/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/cpu/reference.h"
#include "engine/cpu/test_util.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine {
namespace {

using testing::random_floats;

// A quantized copy of float weights w [rows, cols], with its storage.
struct QuantWeights {
  std::vector<unsigned char> codes;
  std::vector<float> scales, mins;
  WeightMatrix w;
};

QuantWeights quantize(const std::vector<float>& f, int64_t rows, int64_t cols, Quantization q) {
  QuantWeights t;
  const int64_t rb = quant_row_bytes(q.scheme, cols), g = quant_groups_per_row(q.scheme, cols, q.group_size);
  t.codes.assign(size_t(rows * rb), 0xAB);  // garbage: quantize_row must write every byte
  t.scales.resize(size_t(rows * g));
  if (q.scheme == QuantScheme::kInt4) t.mins.resize(size_t(rows * g));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(q.scheme, q.group_size, f.data() + r * cols, cols, t.codes.data() + r * rb,
                 t.scales.data() + r * g, t.mins.empty() ? nullptr : t.mins.data() + r * g);
  }
  t.w.data = t.codes.data();
  t.w.rows = rows;
  t.w.cols = cols;
  t.w.quant = q.scheme;
  t.w.scales = t.scales.data();
  t.w.mins = t.mins.empty() ? nullptr : t.mins.data();
  t.w.group_size = q.scheme == QuantScheme::kInt4 ? q.group_size : 0;
  return t;
}

const Quantization kSchemes[] = {{QuantScheme::kInt8, 0}, {QuantScheme::kInt4, 32}, {QuantScheme::kInt4, 64}};

TEST(Quant, ParseNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_quantization("none")->scheme, QuantScheme::kNone);
  EXPECT_EQ(parse_quantization("int8")->scheme, QuantScheme::kInt8);
  EXPECT_EQ(parse_quantization("int4")->group_size, 32);
  EXPECT_EQ(parse_quantization("int4-g32")->group_size, 32);
  EXPECT_EQ(parse_quantization("int4-g64")->group_size, 64);
  EXPECT_EQ(parse_quantization("int4-g64")->name(), "int4-g64");
  EXPECT_EQ(parse_quantization("int4")->name(), "int4");
  auto bad = parse_quantization("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int8"), std::string::npos) << bad.status().to_string();
}

TEST(Quant, SizesOfTheFormats) {
  EXPECT_EQ(quant_row_bytes(QuantScheme::kInt8, 33), 33);
  EXPECT_EQ(quant_row_bytes(QuantScheme::kInt4, 32), 16);
  EXPECT_EQ(quant_row_bytes(QuantScheme::kInt4, 33), 32);  // a short last block is padded
  EXPECT_EQ(quant_groups_per_row(QuantScheme::kInt4, 65, 64), 2);
  WeightMatrix w;
  w.rows = 10;
  w.cols = 896;
  w.quant = QuantScheme::kInt4;
  w.group_size = 32;
  EXPECT_EQ(quant_matrix_bytes(w), 10 * (448 + 28 * 8));  // 0.75 bytes per weight at groups of 32
  w.quant = QuantScheme::kInt8;
  EXPECT_EQ(quant_matrix_bytes(w), 10 * (896 + 4));
}

// Every element within its computed bound; the bound is not vacuous (the worst element uses a
// good part of it, and the mean error is what round-to-nearest gives: about a quarter step).
TEST(Quant, RoundTripWithinTheFormatBound) {
  for (const Quantization& q : kSchemes) {
    for (int64_t cols : {1, 7, 31, 32, 33, 63, 64, 65, 100, 300}) {
      const int64_t rows = 5;
      auto f = random_floats(size_t(rows * cols), uint64_t(cols) * 7 + uint64_t(q.group_size), 0.5f);
      for (int64_t c = 0; c < cols; ++c) f[size_t(2 * cols + c)] = 0.0f;    // an all-zero row
      for (int64_t c = 0; c < cols; ++c) f[size_t(3 * cols + c)] = -0.25f;  // a constant row
      f[size_t(4 * cols)] = 40.0f;                                          // an outlier
      QuantWeights t = quantize(f, rows, cols, q);
      double worst_ratio = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float want = f[size_t(r * cols + c)], got = dequant_weight(t.w, r, c);
          const float bound = quant_error_bound(t.w, r, c);
          ASSERT_LE(std::fabs(got - want), bound)
              << q.name() << " cols " << cols << " at (" << r << ", " << c << "): " << want << " -> " << got;
          if (r == 2 || (r == 3 && q.scheme == QuantScheme::kInt4)) {
            EXPECT_EQ(got, want) << "zero and (int4) constant rows are exact";
          }
          if (bound > 0 && r < 2) worst_ratio = std::max(worst_ratio, double(std::fabs(got - want) / bound));
        }
      }
      if (cols >= 32) {
        EXPECT_GT(worst_ratio, 0.5) << q.name() << " cols " << cols;
      }
    }
  }
}

TEST(Quant, Int4PaddingNibblesAreZeroAndCodesInRange) {
  const int64_t cols = 40;  // one full block + 8 columns of a second
  auto f = random_floats(size_t(cols), 3, 1.0f);
  QuantWeights t = quantize(f, 1, cols, {QuantScheme::kInt4, 32});
  // Second block: bytes 16..31; columns 32..39 are the low nibbles of bytes 16..23; everything
  // else is padding.
  for (int i = 16; i < 32; ++i) {
    EXPECT_EQ(t.codes[size_t(i)] >> 4, 0) << i;
    if (i >= 24) {
      EXPECT_EQ(t.codes[size_t(i)] & 0x0f, 0) << i;
    }
  }
  QuantWeights t8 = quantize(f, 1, cols, {QuantScheme::kInt8, 0});
  int seen127 = 0;
  for (int64_t c = 0; c < cols; ++c) {
    const int v = int(reinterpret_cast<const int8_t*>(t8.codes.data())[c]);
    EXPECT_GE(v, -127);
    EXPECT_LE(v, 127);
    seen127 += std::abs(v) == 127;
  }
  EXPECT_EQ(seen127, 1) << "the largest magnitude maps to +-127";
}

TEST(Quant, ReferenceMatmulWithinQuantizationBoundOfFloat) {
  ThreadPool pool(3);
  uint64_t seed = 1;
  for (const Quantization& q : kSchemes) {
    for (int64_t m : {1, 3}) {
      for (int64_t n : {1, 5, 17}) {
        for (int64_t k : {1, 33, 100, 300}) {
          ++seed;
          auto f = random_floats(size_t(n * k), seed, 0.5f);
          auto x = random_floats(size_t(m * k), seed + 3);
          auto bias = random_floats(size_t(n), seed + 5);
          QuantWeights t = quantize(f, n, k, q);
          WeightMatrix fw{f.data(), DType::kF32, n, k};
          std::vector<float> yf(size_t(m * n)), yq(size_t(m * n));
          ref::matmul({}, x.data(), m, fw, bias.data(), yf.data());
          ref::matmul_quant({&pool, Phase::kDecode}, x.data(), m, t.w, bias.data(), yq.data());
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double bound = 0, mag = 0;
              for (int64_t p = 0; p < k; ++p) {
                bound += std::fabs(x[size_t(i * k + p)]) * quant_error_bound(t.w, j, p);
                mag += std::fabs(x[size_t(i * k + p)] * f[size_t(j * k + p)]);
              }
              EXPECT_LE(std::fabs(yq[size_t(i * n + j)] - yf[size_t(i * n + j)]), bound + 1e-6 * mag + 1e-6)
                  << q.name() << " m " << m << " n " << n << " k " << k;
            }
          }
        }
      }
    }
  }
}

std::vector<const KernelVariant*> fast_quant_variants() {
  std::vector<const KernelVariant*> out;
  for (const KernelVariant* v : KernelRegistry::instance().list(Op::kMatmulQuant)) {
    if (v->name != "reference" && (!v->supported || v->supported())) out.push_back(v);
  }
  return out;
}

TEST(Quant, RegistryHasReferenceAndPicksFastVariantsPerPhase) {
  auto& reg = KernelRegistry::instance();
  ASSERT_TRUE(reg.find(Op::kMatmulQuant, "reference").ok());
  EXPECT_EQ(op_name(Op::kMatmulQuant), std::string("matmul_quant"));
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    EXPECT_EQ(reg.best(Op::kMatmulQuant, Phase::kDecode)->name, "avx2");
    EXPECT_EQ(reg.best(Op::kMatmulQuant, Phase::kPrefill)->name, "hybrid");
    EXPECT_EQ(fast_quant_variants().size(), 2u);
  }
  auto sel = KernelSelection::parse_json(R"({"matmul_quant": {"prefill": "reference", "decode": "avx2"}})");
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  auto sets = resolve_kernels(*sel);
  ASSERT_TRUE(sets.ok()) << sets.status().to_string();
  EXPECT_EQ((*sets)[0].matmul_quant, reinterpret_cast<MatmulFn>(&ref::matmul_quant));
}

TEST(Quant, FastVariantsMatchReferenceOverShapesAndThreads) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (const KernelVariant* v : fast_quant_variants()) {
    auto fn = v->cpu<MatmulFn>();
    uint64_t seed = 500;
    for (const Quantization& q : kSchemes) {
      for (int64_t m : {1, 2, 3, 4, 5, 8, 17, 33}) {  // 33: the hybrid's dequantize + sgemm path
        for (int64_t n : {1, 2, 3, 4, 5, 7, 31, 64}) {
          for (int64_t k : {1, 7, 8, 9, 31, 32, 33, 64, 65, 100, 300}) {
            ++seed;
            auto f = random_floats(size_t(n * k), seed, 0.5f);
            auto x = random_floats(size_t(m * k), seed + 7);
            auto bias = random_floats(size_t(n), seed + 9);
            const float* b = (seed % 2) ? bias.data() : nullptr;
            QuantWeights t = quantize(f, n, k, q);
            std::vector<float> expect(size_t(m * n)), got(size_t(m * n));
            ref::matmul_quant({}, x.data(), m, t.w, b, expect.data());
            ThreadPool* pools[] = {nullptr, &pool1, &pool2, &pool3};
            ThreadPool* pool = pools[seed % 4];
            fn({pool, m > 1 ? Phase::kPrefill : Phase::kDecode}, x.data(), m, t.w, b, got.data());
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                double mag = b ? std::fabs(b[j]) : 0.0;
                for (int64_t p = 0; p < k; ++p)
                  mag += std::fabs(x[size_t(i * k + p)] * dequant_weight(t.w, j, p));
                const float e = expect[size_t(i * n + j)], g = got[size_t(i * n + j)];
                ASSERT_LE(std::fabs(g - e), 1e-5 * mag + 1e-7)
                    << v->name << " " << q.name() << " m " << m << " n " << n << " k " << k << " threads "
                    << (pool ? pool->size() : 0) << ": " << g << " vs " << e;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace plumb::engine
