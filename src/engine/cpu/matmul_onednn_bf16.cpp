// matmul "onednn_bf16": oneDNN's matmul primitive in bf16 on CPUs with AVX512_BF16.
//
// The weights are used as stored (bf16, [n, k] row-major, read by oneDNN as the transposed [k, n]
// operand: no copy, no per-panel conversion); the activations are rounded to bf16 (round to nearest
// even) into a per-thread buffer; products accumulate in f32 and y is f32. Rounding x to bf16 is
// what makes this a different numeric class from every other matmul variant (those keep x in f32):
// its bound is |y - y_ref| <= 2^-8 · Σ_p |x_p w_p| (tests/engine/cpu/variants_test.cpp), the
// same trade PyTorch's bf16 inference makes. That is why `auto` does not pick it (greedy outputs
// would then depend on which rows shared a batch) and a kernel selection file opts in, per phase:
// {"matmul": {"prefill": "onednn_bf16"}}.
//
// One primitive per (n, k) with the row count m as a runtime dimension, created on first use and
// kept per thread (a model has a handful of distinct shapes). oneDNN threads with its own OpenMP
// runtime (OMP_NUM_THREADS), not ctx.pool, as the f32 "onednn" variant does.
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "engine/cpu/reference.h"

namespace plumb::engine::onednn {
void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y);
}  // namespace plumb::engine::onednn

namespace plumb::engine::avx512 {
bool cpu_has_avx512_bf16();
void round_to_bf16(const float* x, int64_t count, uint16_t* out);  // nearest even
}  // namespace plumb::engine::avx512

namespace plumb::engine::onednn_bf16 {

namespace {

struct Plan {
  dnnl::matmul prim;
  dnnl::memory::desc src, weights, dst;  // src/dst with m a runtime dimension
};

struct State {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<std::pair<int64_t, int64_t>, Plan> plans;  // by (n, k)
  std::vector<uint16_t> xb;                           // x rounded to bf16, [m, k]
};

State& state() {
  thread_local State s;
  return s;
}

const Plan& plan_for(State& s, int64_t n, int64_t k) {
  auto it = s.plans.find({n, k});
  if (it != s.plans.end()) return it->second;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::dim rt = DNNL_RUNTIME_DIM_VAL;
  Plan p;
  p.src = dnnl::memory::desc({rt, k}, dt::bf16, {k, 1});
  p.weights = dnnl::memory::desc({k, n}, dt::bf16, {1, k});  // W [n, k] row-major read as Wᵀ
  p.dst = dnnl::memory::desc({rt, n}, dt::f32, {n, 1});
  dnnl::matmul::desc d(p.src, p.weights, p.dst);
  p.prim = dnnl::matmul(dnnl::matmul::primitive_desc(d, s.eng));
  return s.plans.emplace(std::make_pair(n, k), std::move(p)).first->second;
}

}  // namespace

void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  if (w.dtype != DType::kBF16 || m <= 0) return onednn::matmul(ctx, x, m, w, bias, y);  // f32/f16 weights
  const int64_t n = w.rows, k = w.cols;
  try {
    State& s = state();  // the engine and stream are created on a thread's first call
    const Plan& p = plan_for(s, n, k);
    if (s.xb.size() < size_t(m * k)) s.xb.resize(size_t(m * k));
    avx512::round_to_bf16(x, m * k, s.xb.data());
    using dt = dnnl::memory::data_type;
    dnnl::memory src({{m, k}, dt::bf16, {k, 1}}, s.eng, s.xb.data());
    dnnl::memory wts(p.weights, s.eng, const_cast<void*>(w.data));  // read only
    dnnl::memory dst({{m, n}, dt::f32, {n, 1}}, s.eng, y);
    p.prim.execute(s.strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}});
    s.strm.wait();
  } catch (const dnnl::error&) {
    // This oneDNN build cannot create or run a bf16 matmul for the shape: the f32 panel path
    // computes y whole (and adds the bias) instead; nothing above has been added to y yet.
    return onednn::matmul(ctx, x, m, w, bias, y);
  }
  if (bias) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += bias[j];
    }
  }
}

}  // namespace plumb::engine::onednn_bf16

namespace plumb::engine::detail {

void register_onednn_bf16_kernels(KernelRegistry& r) {
  r.add(Op::kMatmul, {"onednn_bf16",
                      "oneDNN bf16 matmul (AVX512_BF16): bf16 weights as stored, activations rounded to "
                      "bf16, f32 accumulation; opt-in (not auto: a coarser numeric class), prefill",
                      &avx512::cpu_has_avx512_bf16,
                      &onednn_bf16::matmul,
                      {-1, -1},  // below reference: auto never picks it
                      /*reads_packed16=*/false,
                      /*bf16_activations=*/true});
}

}  // namespace plumb::engine::detail
