// Conversions, registry and kernel selection.
#include "engine/cpu/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

namespace plumb::engine {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Conversions, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 (even) and 1.0078125: ties to even -> 1.0.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);
  // 1.0078125 + half ulp: halfway between 0x3f81 (odd) and 0x3f82 -> 0x3f82.
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);  // just above halfway rounds up
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds to inf, as PyTorch does
  uint16_t nan = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(from_bits(0x7f800001)))));  // signalling NaN not -> inf
}

TEST(Conversions, Bf16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

TEST(Conversions, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // halfway to 2^16 ties to even = infinity
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // halfway to it ties to even = 0
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units ties to even = 2 units
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  // 1 + 2^-11 is halfway between 1.0 and the next half: ties to even -> 1.0.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Conversions, F16RoundTripsEveryValueAndRoundsLikeDouble) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
  // Floats between two adjacent positive halves must round to the nearer one (ties to even).
  for (uint32_t h = 0; h < 0x7bff; h += 37) {
    double lo = f16_to_f32(uint16_t(h)), hi = f16_to_f32(uint16_t(h + 1));
    for (double t : {0.25, 0.49, 0.5, 0.51, 0.75}) {
      float f = float(lo + (hi - lo) * t);
      double dlo = double(f) - lo, dhi = hi - double(f);
      uint16_t expect = dlo < dhi ? uint16_t(h) : dlo > dhi ? uint16_t(h + 1) : uint16_t((h & 1) ? h + 1 : h);
      ASSERT_EQ(f32_to_f16(f), expect) << "h=" << h << " t=" << t;
    }
  }
}

TEST(Registry, EveryOpHasASupportedReference) {
  auto& reg = KernelRegistry::instance();
  for (int i = 0; i < int(Op::kCount); ++i) {
    auto v = reg.find(Op(i), "reference");
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_NE((*v)->host_address(), nullptr);
    ASSERT_NE(reg.best(Op(i)), nullptr);
    ASSERT_NE(reg.best(Op(i), Phase::kPrefill), nullptr);
  }
  auto missing = reg.find(Op::kMatmul, "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("reference"), std::string::npos);
}

bool never_supported() { return false; }
void dummy_rmsnorm(const KernelContext&, const float*, const float*, int64_t, int64_t, float, float*) {}

TEST(Registry, UnsupportedVariantsAreRefusedAndSkippedByAuto) {
  KernelRegistry reg;  // a private registry, so the built-in one is untouched
  RmsNormFn fn = &dummy_rmsnorm;
  ASSERT_TRUE(reg.add(Op::kRmsNorm, {"plain", "always runs", nullptr, fn, {0, 0}}).ok());
  ASSERT_TRUE(reg.add(Op::kRmsNorm, {"future", "needs a CPU we lack", &never_supported, fn, {9, 9}}).ok());
  ASSERT_TRUE(reg.add(Op::kRmsNorm, {"prefill_only", "preferred for prefill", nullptr, fn, {5, -1}}).ok());
  auto f = reg.find(Op::kRmsNorm, "future");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(f.status().message().find("not supported"), std::string::npos);
  EXPECT_EQ(reg.best(Op::kRmsNorm, Phase::kPrefill)->name, "prefill_only");
  EXPECT_EQ(reg.best(Op::kRmsNorm, Phase::kDecode)->name, "plain");
  EXPECT_EQ(reg.best(Op::kRmsNorm)->name, "plain");
  EXPECT_EQ(reg.best(Op::kRope), nullptr);  // nothing registered for rope here
  EXPECT_EQ(reg.list(Op::kRmsNorm).size(), 3u);
}

int gpu_matmul_entry = 0;  // stands in for a device launch handle

TEST(Registry, AGpuVariantIsNeverHandedToTheCpuModel) {
  KernelRegistry reg;
  KernelVariant gpu;
  gpu.name = "gpu_only";
  gpu.fn = DeviceKernel{KernelDevice::kCuda, &gpu_matmul_entry};
  gpu.rank = {99, 99};
  ASSERT_TRUE(reg.add(Op::kMatmul, gpu).ok());
  EXPECT_EQ(gpu.device(), KernelDevice::kCuda);
  // Keyed by device: the CPU's lists, lookups and "auto" do not see it.
  EXPECT_TRUE(reg.list(Op::kMatmul).empty());
  EXPECT_EQ(reg.best(Op::kMatmul, Phase::kDecode), nullptr);
  EXPECT_EQ(reg.find(Op::kMatmul, "gpu_only").status().code(), Code::kNotFound);
  ASSERT_EQ(reg.list(KernelDevice::kCuda, Op::kMatmul).size(), 1u);
  auto found = reg.find(KernelDevice::kCuda, Op::kMatmul, "gpu_only");
  ASSERT_TRUE(found.ok());
  // Typed: a device kernel is no CPU function of any type.
  EXPECT_EQ((*found)->cpu<MatmulFn>(), nullptr);
  EXPECT_EQ((*found)->host_address(), nullptr);
  // The same in the built-in registry that resolve_kernels reads: a selection naming it fails.
  ASSERT_TRUE(KernelRegistry::instance().add(Op::kMatmul, gpu).ok());
  auto sel = KernelSelection::parse_json(R"({"matmul": "gpu_only"})");
  ASSERT_TRUE(sel.ok());
  auto sets = resolve_kernels(*sel);
  EXPECT_EQ(sets.status().code(), Code::kNotFound);
  auto best = resolve_kernels(KernelSelection{});
  ASSERT_TRUE(best.ok());
  EXPECT_NE(best->at(size_t(Phase::kDecode)).names.at(Op::kMatmul), "gpu_only");
}

TEST(Registry, RefusesAFunctionOfTheWrongTypeOrDevice) {
  KernelRegistry reg;
  RmsNormFn norm = &dummy_rmsnorm;
  EXPECT_EQ(reg.add(Op::kMatmul, {"wrong", "an rmsnorm under matmul", nullptr, norm}).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(reg.add(Op::kMatmul, {"empty", "no function", nullptr, {}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(reg.add(Op::kMatmul, {"cpu_handle", "a device kernel said to be the CPU's", nullptr,
                                  DeviceKernel{KernelDevice::kCpu, &gpu_matmul_entry}})
                .code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(reg.list(Op::kMatmul).empty());
  EXPECT_TRUE(reg.add(Op::kRmsNorm, {"right", "an rmsnorm", nullptr, norm}).ok());
}

TEST(Registry, OpNamesRoundTrip) {
  for (int i = 0; i < int(Op::kCount); ++i) {
    auto op = op_from_name(op_name(Op(i)));
    ASSERT_TRUE(op.ok());
    EXPECT_EQ(*op, Op(i));
  }
  EXPECT_FALSE(op_from_name("gemm").ok());
}

TEST(Selection, ParsesStringsAndPerPhaseObjects) {
  auto sel = KernelSelection::parse_json(
      R"({"matmul": "reference", "attention": {"prefill": "reference", "decode": "avx2"}})");
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(sel->prefill.at(Op::kMatmul), "reference");
  EXPECT_EQ(sel->decode.at(Op::kMatmul), "reference");
  EXPECT_EQ(sel->prefill.at(Op::kAttention), "reference");
  EXPECT_EQ(sel->decode.at(Op::kAttention), "avx2");
  EXPECT_EQ(sel->prefill.count(Op::kRope), 0u);
  EXPECT_EQ(sel->to_json(), R"({"attention":{"decode":"avx2","prefill":"reference"},"matmul":"reference"})");
  auto again = KernelSelection::parse_json(sel->to_json());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->prefill, sel->prefill);
  EXPECT_EQ(again->decode, sel->decode);
}

// The "cuda" entries: candidate cubins for the CUDA runner, by op and phase, kept apart from the CPU
// ops and written back in the same form.
TEST(Selection, CudaCandidatesByOpAndPhase) {
  auto sel = KernelSelection::parse_json(
      R"({"rope": "reference", "cuda": {"swiglu": "/k/s.cubin", "rmsnorm_residual": {"decode": "/k/n.cubin"}}})");
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_TRUE(sel->has_cuda());
  EXPECT_EQ(sel->cuda_prefill, (std::map<std::string, std::string>{{"swiglu", "/k/s.cubin"}}));
  EXPECT_EQ(sel->cuda_decode, (std::map<std::string, std::string>{{"rmsnorm_residual", "/k/n.cubin"},
                                                                  {"swiglu", "/k/s.cubin"}}));
  EXPECT_EQ(sel->prefill.at(Op::kRope), "reference");
  EXPECT_EQ(
      sel->to_json(),
      R"({"cuda":{"rmsnorm_residual":{"decode":"/k/n.cubin"},"swiglu":"/k/s.cubin"},"rope":"reference"})");
  auto again = KernelSelection::parse_json(sel->to_json());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cuda_prefill, sel->cuda_prefill);
  EXPECT_EQ(again->cuda_decode, sel->cuda_decode);
  EXPECT_FALSE(KernelSelection::parse_json(R"({"rope": "reference"})")->has_cuda());
  for (const char* bad :
       {R"({"cuda": ["/k/s.cubin"]})", R"({"cuda": {"swiglu": "k/s.cubin"}})",
        R"({"cuda": {"swiglu": {"warmup": "/k/s.cubin"}}})", R"({"cuda": {"swiglu": 1}})"}) {
    auto r = KernelSelection::parse_json(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("cuda"), std::string::npos) << r.status().message();
  }
}

TEST(Selection, BadInputIsAClearError) {
  struct Case {
    const char* text;
    const char* needle;
  };
  for (const Case& c :
       {Case{"[1]", "object"}, Case{"{", "invalid JSON"}, Case{R"({"gemm": "x"})", "gemm"},
        Case{R"({"matmul": 3})", "matmul"}, Case{R"({"matmul": ""})", "matmul"},
        Case{R"({"rope": {"warmup": "x"}})", "warmup"}, Case{R"({"rope": {"decode": 1}})", "rope"}}) {
    auto sel = KernelSelection::parse_json(c.text);
    ASSERT_FALSE(sel.ok()) << c.text;
    EXPECT_EQ(sel.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(sel.status().message().find(c.needle), std::string::npos) << sel.status().message();
  }
}

TEST(Selection, ResolveAllReferenceAndAuto) {
  auto sets = resolve_kernels(KernelSelection::all_reference());
  ASSERT_TRUE(sets.ok()) << sets.status().to_string();
  for (const KernelSet& s : *sets) {
    EXPECT_NE(s.matmul, nullptr);
    EXPECT_NE(s.rmsnorm, nullptr);
    EXPECT_NE(s.rope, nullptr);
    EXPECT_NE(s.swiglu, nullptr);
    EXPECT_NE(s.embedding, nullptr);
    EXPECT_NE(s.attention, nullptr);
    for (int i = 0; i < int(Op::kCount); ++i) EXPECT_EQ(s.names.at(Op(i)), "reference");
  }
  auto autos = resolve_kernels(KernelSelection{});
  ASSERT_TRUE(autos.ok());
  for (Phase p : {Phase::kPrefill, Phase::kDecode}) {
    for (int i = 0; i < int(Op::kCount); ++i) {
      EXPECT_EQ((*autos)[size_t(p)].names.at(Op(i)), KernelRegistry::instance().best(Op(i), p)->name);
    }
  }
}

TEST(Selection, ResolveNamesTheBadVariant) {
  KernelSelection sel;
  sel.decode[Op::kRope] = "quantum";
  auto sets = resolve_kernels(sel);
  ASSERT_FALSE(sets.ok());
  EXPECT_EQ(sets.status().code(), Code::kNotFound);
  EXPECT_NE(sets.status().message().find("decode rope"), std::string::npos) << sets.status().message();
  EXPECT_NE(sets.status().message().find("quantum"), std::string::npos);
}

}  // namespace
}  // namespace plumb::engine
