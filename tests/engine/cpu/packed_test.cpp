// WeightLayout::kPacked16 (engine/cpu/packed.h): the conversions are exact and invertible, in
// place or not; rows and embedding lookups read back the row-major values; the packed path of
// "avx512_bf16" matches the reference within its bound over tile heights, block groups and threads,
// and a row's result does not depend on the rows that share its call.
#include "engine/cpu/packed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "engine/cpu/reference.h"
#include "engine/cpu/test_util.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine {
namespace {

using testing::make_weights;
using testing::random_floats;

TEST(Packed16, ConversionsAreExactInvertibleAndInPlace) {
  ThreadPool pool(3);
  const int64_t rows = 48, cols = 34;
  auto tw = make_weights(rows, cols, DType::kBF16, 3);
  std::vector<uint16_t> out(tw.half.size()), inplace = tw.half;
  pack16(tw.half.data(), rows, cols, out.data(), &pool);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(out[size_t(packed16_index(r, c, cols))], tw.half[size_t(r * cols + c)]) << r << "," << c;
    }
  }
  pack16(inplace.data(), rows, cols, inplace.data(), nullptr);
  EXPECT_EQ(inplace, out);
  EXPECT_NE(inplace, tw.half);  // the layouts differ (16 rows interleave)

  WeightMatrix packed{inplace.data(), DType::kBF16, rows, cols};
  packed.layout = WeightLayout::kPacked16;
  std::vector<uint16_t> row(static_cast<size_t>(cols)), want(static_cast<size_t>(cols));
  for (int64_t r : {0, 1, 15, 16, 47}) {
    read_row_bf16(packed, r, row.data());
    read_row_bf16(tw.w, r, want.data());
    EXPECT_EQ(row, want) << "row " << r;
  }
  const int32_t ids[] = {47, 0, 17, 17};
  std::vector<float> got(4 * size_t(cols)), expect(4 * size_t(cols));
  embedding_bf16_any_layout(ids, 4, packed, got.data());
  ref::embedding({}, ids, 4, tw.half.data(), DType::kBF16, cols, expect.data());
  EXPECT_EQ(got, expect);

  unpack16(inplace.data(), rows, cols, inplace.data(), &pool);
  EXPECT_EQ(inplace, tw.half);
  std::vector<uint16_t> back(out.size());
  unpack16(out.data(), rows, cols, back.data(), nullptr);
  EXPECT_EQ(back, tw.half);
}

TEST(Packed16, OnlyUnquantizedBf16WithWholeGroupsAndEvenColumns) {
  std::vector<uint16_t> buf(64 * 10);
  EXPECT_TRUE(can_pack16(WeightMatrix{buf.data(), DType::kBF16, 64, 10}));
  EXPECT_FALSE(can_pack16(WeightMatrix{buf.data(), DType::kBF16, 60, 10}));  // rows % 16
  EXPECT_FALSE(can_pack16(WeightMatrix{buf.data(), DType::kBF16, 32, 9}));   // odd cols
  EXPECT_FALSE(can_pack16(WeightMatrix{buf.data(), DType::kF16, 64, 10}));
  WeightMatrix q{buf.data(), DType::kBF16, 64, 10};
  q.quant = QuantScheme::kInt8;
  EXPECT_FALSE(can_pack16(q));
}

struct PackedWeights {
  testing::TestWeights row_major;
  std::vector<uint16_t> packed;
  WeightMatrix w;  // the packed view
};

PackedWeights make_packed(int64_t n, int64_t k, uint64_t seed) {
  PackedWeights p{make_weights(n, k, DType::kBF16, seed), {}, {}};
  p.packed.resize(p.row_major.half.size());
  pack16(p.row_major.half.data(), n, k, p.packed.data(), nullptr);
  p.w = WeightMatrix{p.packed.data(), DType::kBF16, n, k};
  p.w.layout = WeightLayout::kPacked16;
  return p;
}

// The supported variants that read kPacked16 ("avx512_bf16"; "amx_bf16" where the CPU has AMX).
std::vector<const KernelVariant*> packed_readers() {
  std::vector<const KernelVariant*> out;
  for (const KernelVariant* v : KernelRegistry::instance().list(Op::kMatmul)) {
    if (v->reads_packed16 && (!v->supported || v->supported())) out.push_back(v);
  }
  return out;
}

// Bound as for the bf16-activation class (variants_test.cpp): x rounded to bf16 (relative 2^-9 per
// element), exact products, f32 accumulation: |y - y_ref| <= 2^-8 * sum_p |x_p w_p| + 1e-5 |bias|.
// Shapes cover every tile height (1..16 and m > 16 with a tail), k = 2 (one pair) to 1088 (amx_bf16:
// k % 32 == 0 on AMX tiles, two k chunks at 1088; other k through its fallback), n large enough for
// several L2 groups of blocks (k = 896: 18 blocks per group), and prefill heights (2x2 tiles, a
// 16-row tail, a row count that is not a multiple of 16).
TEST(Packed16, MatmulMatchesReferenceOverShapesAndThreads) {
  const auto readers = packed_readers();
  if (readers.empty()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  ThreadPool pool2(2), pool3(3);
  for (const KernelVariant* v : readers) {
    EXPECT_TRUE(v->bf16_activations) << v->name;
    auto fn = v->cpu<MatmulFn>();
    uint64_t seed = 500;
    for (auto [n, k] : {std::pair<int64_t, int64_t>{16, 2},
                        {32, 30},
                        {48, 34},
                        {64, 300},
                        {48, 64},
                        {80, 1088},
                        {640, 896}}) {
      for (int64_t m : {1, 2, 3, 5, 8, 13, 15, 16, 17, 31, 33, 48, 70}) {
        if (n * k * m > 640 * 896 * 17) continue;  // keeps the double reference quick
        ++seed;
        PackedWeights pw = make_packed(n, k, seed);
        auto x = random_floats(size_t(m * k), seed + 7);
        auto bias = random_floats(size_t(n), seed + 9);
        const float* b = (seed % 2) ? bias.data() : nullptr;
        std::vector<float> expect(size_t(m * n)), got(size_t(m * n), NAN);
        ref::matmul({}, x.data(), m, pw.row_major.w, b, expect.data());
        ThreadPool* pool = seed % 3 == 0 ? nullptr : (seed % 3 == 1 ? &pool2 : &pool3);
        fn({pool, seed % 2 ? Phase::kDecode : Phase::kPrefill}, x.data(), m, pw.w, b, got.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double scale = 0.0;
            for (int64_t p = 0; p < k; ++p)
              scale += std::fabs(x[size_t(i * k + p)] * pw.row_major.f32[size_t(j * k + p)]);
            const double bound = std::ldexp(1.0, -8) * scale + (b ? 1e-5 * std::fabs(b[j]) : 0.0) + 1e-30;
            ASSERT_LE(std::fabs(double(got[size_t(i * n + j)]) - expect[size_t(i * n + j)]), bound)
                << v->name << " m=" << m << " n=" << n << " k=" << k << " i=" << i << " j=" << j;
          }
        }
      }
    }
  }
}

// Each output element accumulates its inputs in increasing order with one instruction whatever the
// tile height or blocking: a row alone (m = 1) and inside m = 37 (avx512_bf16: two 16-row tiles and
// a 5-row tail, the first tile streaming, the others not; amx_bf16: 2x2 tiles and a padded 16-row
// block) and m = 70 over two k chunks (k = 1088) are bitwise equal, threaded.
TEST(Packed16, MatmulRowsDoNotDependOnTheirBatch) {
  const auto readers = packed_readers();
  if (readers.empty()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  ThreadPool pool(2);
  for (const KernelVariant* v : readers) {
    auto fn = v->cpu<MatmulFn>();
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 640, 896}, {70, 96, 1088}}) {
      PackedWeights pw = make_packed(n, k, 71);
      auto x = random_floats(size_t(m * k), 72);
      auto bias = random_floats(size_t(n), 73);
      std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
      fn({&pool, Phase::kPrefill}, x.data(), m, pw.w, bias.data(), all.data());
      for (int64_t i = 0; i < m; ++i) {
        fn({&pool, Phase::kDecode}, x.data() + i * k, 1, pw.w, bias.data(), one.data());
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(one[size_t(j)], all[size_t(i * n + j)])
              << v->name << " m=" << m << " row " << i << " col " << j;
      }
    }
  }
}

}  // namespace
}  // namespace plumb::engine
