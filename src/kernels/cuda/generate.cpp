// Each variant is the op's kernel template with its parameters as #defines at the top: one body per
// op to read and review, specialized by the compiler, and a source that states its own parameters.
#include "kernels/cuda/generate.h"

#include <fmt/format.h>

namespace plumb::kernels::cuda {
namespace {

// BLOCK, RPB, VEC (1 or 4) and FUSED are defined before this text.
constexpr const char* kRmsNormBody = R"cuda(
#define GROUP (BLOCK / RPB)
#define GROUP_WARPS (GROUP / 32)

PLUMB_LAUNCH(1, PLUMB_OP_RMSNORM_RESIDUAL, BLOCK, RPB, 1, 0, 0);

// The sum over the GROUP threads of one row; every thread of the group gets it. Called once by
// every thread of the block.
__device__ __forceinline__ float group_sum(float v, float* partial) {
  v = plumb_warp_sum(v);
  if (GROUP_WARPS == 1) return v;
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  const int first = (threadIdx.x / GROUP) * GROUP_WARPS;
  float t = 0.0f;
  for (int i = 0; i < GROUP_WARPS; ++i) t += partial[first + i];
  return t;
}

__device__ __forceinline__ bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0; }

extern "C" __global__ void __launch_bounds__(BLOCK) plumb_candidate(plumb_rmsnorm_residual_args a) {
  __shared__ float partial[BLOCK / 32];
  const long long row = (long long)blockIdx.x * RPB + threadIdx.x / GROUP;
  const int g = threadIdx.x % GROUP;
  const long long r = row < a.rows ? row : 0;
  const long long d = row < a.rows ? a.d : 0;  // inactive threads still join the reduction
  const float* x = a.x + r * a.x_stride;
  const float* res = a.residual + r * a.x_stride;
  float* h = a.h_out + r * a.x_stride;
  unsigned short* y = a.y + r * a.y_stride;
  const bool vec = VEC == 4 && a.d % 4 == 0 && a.x_stride % 4 == 0 && a.y_stride % 4 == 0 && aligned16(a.x) &&
                   aligned16(a.residual) && aligned16(a.h_out) && aligned16(a.w) &&
                   ((unsigned long long)a.y & 7ull) == 0;
  float ss = 0.0f;
  if (vec) {
    for (long long i = 4ll * g; i < d; i += 4ll * GROUP) {
      const float4 xv = *(const float4*)(x + i), rv = *(const float4*)(res + i);
      const float4 hv = make_float4(xv.x + rv.x, xv.y + rv.y, xv.z + rv.z, xv.w + rv.w);
      *(float4*)(h + i) = hv;
      if (FUSED) ss += hv.x * hv.x + hv.y * hv.y + hv.z * hv.z + hv.w * hv.w;
    }
  } else {
    for (long long i = g; i < d; i += GROUP) {
      const float hv = x[i] + res[i];
      h[i] = hv;
      if (FUSED) ss += hv * hv;
    }
  }
  if (!FUSED) {
    __syncthreads();  // the sum reads what other threads of the group wrote
    for (long long i = g; i < d; i += GROUP) ss += h[i] * h[i];
  }
  ss = group_sum(ss, partial);
  const float inv = 1.0f / sqrtf(ss / float(a.d) + a.eps);
  if (vec) {
    for (long long i = 4ll * g; i < d; i += 4ll * GROUP) {
      const float4 hv = *(const float4*)(h + i), wv = *(const float4*)(a.w + i);
      uint2 p;
      p.x = plumb_bf16_bits(hv.x * inv * wv.x) | ((unsigned)plumb_bf16_bits(hv.y * inv * wv.y) << 16);
      p.y = plumb_bf16_bits(hv.z * inv * wv.z) | ((unsigned)plumb_bf16_bits(hv.w * inv * wv.w) << 16);
      *(uint2*)(y + i) = p;
    }
  } else {
    for (long long i = g; i < d; i += GROUP) y[i] = plumb_bf16_bits(h[i] * inv * a.w[i]);
  }
}
)cuda";

// BLOCK, VEC (1, 2 or 4), ITEMS and MAXB are defined before this text.
constexpr const char* kSwigluBody = R"cuda(
PLUMB_LAUNCH(1, PLUMB_OP_SWIGLU, BLOCK, 1, ITEMS * VEC, MAXB, 0);

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  return plumb_bf16_bits(lo) | ((unsigned)plumb_bf16_bits(hi) << 16);
}

extern "C" __global__ void __launch_bounds__(BLOCK) plumb_candidate(plumb_swiglu_args a) {
  const bool vec = VEC > 1 && a.ff % VEC == 0 && a.gu_stride % VEC == 0 && a.out_stride % VEC == 0 &&
                   ((unsigned long long)a.gu & (4ull * VEC - 1)) == 0 &&
                   ((unsigned long long)a.out & (2ull * VEC - 1)) == 0;
  const long long w = vec ? VEC : 1;
  const long long per_row = a.ff / w;
  const long long n = a.T * per_row;
  for (long long c = (long long)blockIdx.x * BLOCK + threadIdx.x; c < n; c += (long long)gridDim.x * BLOCK) {
    const long long t = c / per_row, j = (c - t * per_row) * w;
    const float* gate = a.gu + t * a.gu_stride + j;
    const float* up = gate + a.ff;
    unsigned short* o = a.out + t * a.out_stride + j;
    if (VEC == 4 && vec) {
      const float4 g = *(const float4*)gate, u = *(const float4*)up;
      *(uint2*)o = make_uint2(pack2(silu_mul(g.x, u.x), silu_mul(g.y, u.y)),
                              pack2(silu_mul(g.z, u.z), silu_mul(g.w, u.w)));
    } else if (VEC == 2 && vec) {
      const float2 g = *(const float2*)gate, u = *(const float2*)up;
      *(unsigned*)o = pack2(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
    } else {
      o[0] = plumb_bf16_bits(silu_mul(gate[0], up[0]));
    }
  }
}
)cuda";

std::string rmsnorm_source(const Variant& v) {
  return fmt::format(
      "// plumb built-in candidate {}: rmsnorm_residual, {} threads, {} row(s) per block, vector width {}, "
      "{}.\n#include \"plumb_cuda_abi.h\"\n\n#define BLOCK {}\n#define RPB {}\n#define VEC {}\n#define FUSED "
      "{}\n{}",
      v.name, v.block_threads, v.rows_per_block, v.vector_width, v.fused ? "fused" : "unfused",
      v.block_threads, v.rows_per_block, v.vector_width, v.fused ? 1 : 0, kRmsNormBody);
}

std::string swiglu_source(const Variant& v) {
  return fmt::format(
      "// plumb built-in candidate {}: swiglu, {} threads, vector width {}, {} item(s) per thread, max "
      "blocks {} "
      "(0 = no cap).\n#include \"plumb_cuda_abi.h\"\n\n#define BLOCK {}\n#define VEC {}\n#define ITEMS {}\n"
      "#define MAXB {}\n{}",
      v.name, v.block_threads, v.vector_width, v.items_per_thread, v.max_blocks, v.block_threads,
      v.vector_width, v.items_per_thread, v.max_blocks, kSwigluBody);
}

std::vector<Variant> rmsnorm_variants() {
  std::vector<Variant> out;
  for (int block : {128, 256, 512})
    for (int rpb : {1, 2, 4})
      for (int vec : {1, 4})
        for (bool fused : {true, false}) {
          Variant v;
          v.op = CudaOp::kRmsNormResidual;
          v.block_threads = block;
          v.rows_per_block = rpb;
          v.vector_width = vec;
          v.fused = fused;
          v.name =
              fmt::format("rmsnorm_residual.b{}.r{}.v{}.{}", block, rpb, vec, fused ? "fused" : "unfused");
          v.source = rmsnorm_source(v);
          out.push_back(std::move(v));
        }
  return out;
}

std::vector<Variant> swiglu_variants() {
  std::vector<Variant> out;
  for (int block : {128, 256, 512})
    for (int vec : {1, 2, 4})
      for (int items : {1, 4})
        for (int max_blocks : {0, 1056}) {
          Variant v;
          v.op = CudaOp::kSwiglu;
          v.block_threads = block;
          v.vector_width = vec;
          v.items_per_thread = items;
          v.max_blocks = max_blocks;
          v.name = fmt::format("swiglu.b{}.v{}.i{}.{}", block, vec, items, max_blocks ? "capped" : "full");
          v.source = swiglu_source(v);
          out.push_back(std::move(v));
        }
  return out;
}

}  // namespace

std::vector<Variant> generate_variants(CudaOp op) {
  return op == CudaOp::kRmsNormResidual ? rmsnorm_variants() : swiglu_variants();
}

}  // namespace plumb::kernels::cuda
