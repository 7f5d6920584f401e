// Kernel benchmarks on Qwen2.5-0.5B shapes, each reporting its ratio to a ceiling measured in the
// same process right before it (a shared machine's bandwidth swings, so only same-run ratios mean
// anything).
//
//   BM_DecodeMatmulModel/<batch>   every matmul of the model (24 layers x 7 projections + lm_head,
//                                  bf16 weights, 988 MB) for `batch` rows: one decode step's GEMVs.
//       weight_GBps     weight bytes / time
//       bw_GBps         measure_read_bandwidth_gbs(threads), measured before the timed loop
//       peak_GFLOPs     measure_peak_gflops(bf16, threads), ditto
//       roofline_ratio  max(bytes / bw, flops / peak) / time   (1.0 = at the roof)
//       bw_ratio        weight_GBps / bw_GBps
//   BM_PrefillMatmulLayer/<variant>/512   one layer's 7 projections at m = 512 with bf16 weights
//       onednn_alone_GFLOPs  dnnl_sgemm on f32 copies of the same shapes (no conversion, no bias)
//       ratio_vs_onednn_alone  our rate / that rate
//   BM_MatmulShape/<n>/<k>/<m>      one projection, for diagnosis.
//   BM_DecodeAttention/<variant>/<batch>/<context>   one layer's decode attention, for diagnosis.
#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "bench_util.h"
#include "engine/cpu/ceilings.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::bench {
namespace {

using engine::DType;
using engine::KernelContext;
using engine::KernelRegistry;
using engine::MatmulFn;
using engine::Op;
using engine::Phase;
using engine::ThreadPool;

ThreadPool& pool() {
  static ThreadPool p(bench_threads());
  return p;
}

// The model's bf16 matrices in the layout `v` reads, as the model gives them to it (packed 16
// features wide for variants with reads_packed16).
const DummyMatmulWeights& model_weights(const engine::KernelVariant* v) {
  const DecoderShapes s = qwen25_05b();
  if (v->reads_packed16) {
    static const DummyMatmulWeights packed = make_dummy_weights(s, DType::kBF16, s.layers, true);
    return packed;
  }
  static const DummyMatmulWeights row_major = make_dummy_weights(s, DType::kBF16, s.layers);
  return row_major;
}

const engine::KernelVariant* matmul_variant(const std::string& name) {
  auto v = KernelRegistry::instance().find(Op::kMatmul, name);
  return v.ok() ? *v : nullptr;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_DecodeMatmulModel(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const DecoderShapes s = qwen25_05b();
  const auto* best = KernelRegistry::instance().best(Op::kMatmul, Phase::kDecode);
  const DummyMatmulWeights& w = model_weights(best);
  state.SetLabel(best->name);  // which variant auto picks on this CPU (avx512 or avx2)
  MatmulFn fn = best->cpu<MatmulFn>();
  KernelContext ctx{&pool(), Phase::kDecode};
  std::vector<float> x(size_t(batch * s.intermediate), 0.01f);  // [batch, max k]
  std::vector<float> y(size_t(batch * s.vocab));                // [batch, max n]
  auto step = [&] {
    for (const auto& layer : w.layers) {
      for (size_t i = 0; i < layer.size(); ++i) {
        const bool biased = i < 3 && s.qkv_bias;
        fn(ctx, x.data(), batch, layer[i], biased ? w.bias.data() : nullptr, y.data());
      }
    }
    fn(ctx, x.data(), batch, w.lm_head, nullptr, y.data());
  };
  step();  // first touch of the weights outside the timing
  const double bw = engine::measure_read_bandwidth_gbs(pool().size(), int64_t(512) << 20, 3);
  const double peak = batch > 1 ? engine::measure_peak_gflops(DType::kBF16, pool().size()) : 0.0;
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) step();
  const double per_step = seconds_since(t0) / double(std::max<int64_t>(state.iterations(), 1));
  const double bytes = double(w.total_params) * 2.0, flops = 2.0 * double(w.total_params) * double(batch);
  const double bw_roof = bytes / (bw * 1e9), flop_roof = peak > 0 ? flops / (peak * 1e9) : 0.0;
  state.counters["roofline_ratio"] = std::max(bw_roof, flop_roof) / per_step;
  state.counters["bw_ratio"] = bytes / per_step / (bw * 1e9);
  state.counters["weight_GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bw_GBps"] = bw;
  if (peak > 0) state.counters["peak_GFLOPs"] = peak;
  state.counters["tokens_per_s"] =
      benchmark::Counter(double(batch), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_PrefillMatmulLayer(benchmark::State& state, const char* variant) {
  const int64_t m = state.range(0);
  const DecoderShapes s = qwen25_05b();
  const engine::KernelVariant* v = matmul_variant(variant);
  if (!v) {
    state.SkipWithError("variant not available");
    return;
  }
  const DummyMatmulWeights& w = model_weights(v);
  auto fn = v->cpu<MatmulFn>();
  KernelContext ctx{&pool(), Phase::kPrefill};
  const auto& layer = w.layers[0];
  std::vector<float> x(size_t(m * s.intermediate), 0.01f), y(size_t(m * s.intermediate));
  double flops = 0;
  for (const auto& mat : layer) flops += 2.0 * double(m) * double(mat.rows) * double(mat.cols);
  // oneDNN alone: the same shapes with f32 weights (converted once, outside the timing), no bias.
  // (Values in the packed order where the weights are packed: the same work for the timing.)
  std::vector<std::vector<float>> w32;
  for (const auto& mat : layer) {
    w32.emplace_back(size_t(mat.rows * mat.cols));
    const auto* src = static_cast<const uint16_t*>(mat.data);
    for (size_t i = 0; i < w32.back().size(); ++i) w32.back()[i] = engine::bf16_to_f32(src[i]);
  }
  auto alone = [&] {
    for (size_t i = 0; i < layer.size(); ++i) {
      dnnl_sgemm('N', 'T', m, layer[i].rows, layer[i].cols, 1.0f, x.data(), layer[i].cols, w32[i].data(),
                 layer[i].cols, 0.0f, y.data(), layer[i].rows);
    }
  };
  alone();
  double alone_best = 1e30;
  for (int pass = 0; pass < 3; ++pass) {
    auto t0 = std::chrono::steady_clock::now();
    alone();
    alone_best = std::min(alone_best, seconds_since(t0));
  }
  auto ours = [&] {
    for (size_t i = 0; i < layer.size(); ++i) {
      fn(ctx, x.data(), m, layer[i], i < 3 ? w.bias.data() : nullptr, y.data());
    }
  };
  ours();
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) ours();
  const double per_iter = seconds_since(t0) / double(std::max<int64_t>(state.iterations(), 1));
  state.counters["ratio_vs_onednn_alone"] = alone_best / per_iter;
  state.counters["GFLOPs"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["onednn_alone_GFLOPs"] = flops / alone_best / 1e9;
  state.counters["tokens_per_s_layer"] =
      benchmark::Counter(double(m), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MatmulShape(benchmark::State& state, const char* variant) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const engine::KernelVariant* v = matmul_variant(variant);
  if (!v) {
    state.SkipWithError("variant not available");
    return;
  }
  auto fn = v->cpu<MatmulFn>();
  std::vector<uint16_t> w(size_t(n * k), engine::f32_to_bf16(0.01f));  // every element alike: no packing
  std::vector<float> x(size_t(m * k), 0.5f), y(size_t(m * n));
  engine::WeightMatrix wm{w.data(), DType::kBF16, n, k};
  if (v->reads_packed16 && engine::can_pack16(wm)) wm.layout = engine::WeightLayout::kPacked16;
  KernelContext ctx{&pool(), m > 16 ? Phase::kPrefill : Phase::kDecode};
  for (auto _ : state) fn(ctx, x.data(), m, wm, nullptr, y.data());
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * double(m * n * k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GBps"] =
      benchmark::Counter(2.0 * double(n * k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Decode attention of one Qwen2.5-0.5B layer (14 heads over 2 KV heads, head_dim 64) for `batch`
// sequences of `context` positions each, paged in blocks of 16 (block tables interleaved across
// sequences, as a running server's are).
void BM_DecodeAttention(benchmark::State& state, const char* variant) {
  const int32_t batch = int32_t(state.range(0)), context = int32_t(state.range(1));
  const int32_t n_heads = 14, n_kv = 2, hd = 64, bs = 16;
  auto v = KernelRegistry::instance().find(Op::kAttention, variant);
  if (!v.ok()) return state.SkipWithError("variant not available");
  auto fn = (*v)->cpu<engine::AttentionFn>();
  const int32_t blocks_per_seq = (context + bs - 1) / bs;
  const size_t kv_floats = size_t(batch) * size_t(blocks_per_seq) * bs * n_kv * hd;
  std::vector<float> k(kv_floats), vv(kv_floats), q(size_t(batch) * n_heads * hd), out(q.size());
  for (size_t i = 0; i < kv_floats; ++i) k[i] = float(i % 17) * 0.01f, vv[i] = float(i % 13) * 0.02f;
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(i % 11) * 0.03f;
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  std::vector<engine::AttentionSeq> seqs;
  for (int32_t s = 0; s < batch; ++s) {
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(b * batch + s);
    seqs.push_back({s, 1, context - 1, tables[size_t(s)].data()});
  }
  const engine::KvLayerView kv{k.data(), vv.data(), bs, n_kv, hd};
  const KernelContext ctx{&pool(), Phase::kDecode};
  for (auto _ : state) fn(ctx, q.data(), kv, seqs, n_heads, 0.125f, out.data());
  // q·k and p·v: 2 multiply-adds per (head, position, dimension).
  state.counters["GFLOPs"] = benchmark::Counter(4.0 * batch * n_heads * double(context) * hd / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_DecodeMatmulModel)->Arg(1)->Arg(16)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK_CAPTURE(BM_PrefillMatmulLayer, onednn, "onednn")
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PrefillMatmulLayer, onednn_bf16, "onednn_bf16")  // AVX512_BF16 only (else skipped)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PrefillMatmulLayer, avx512_bf16, "avx512_bf16")  // AVX512_BF16 only (else skipped)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PrefillMatmulLayer, avx2, "avx2")
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MatmulShape, avx512, "avx512")
    ->Args({1024, 1024, 16})  // the compute ceiling's shapes (ceilings.h)
    ->Args({1024, 1024, 64})
    ->Args({2048, 2048, 16})  // Llama-3.2-1B's q/o_proj
    ->Args({4864, 896, 32})   // hybrid's threshold (matmul_onednn.cpp), against the onednn rows below
    ->Args({4864, 896, 64})
    ->Args({4864, 896, 128})
    ->Args({4864, 896, 1})
    ->Args({4864, 896, 16})
    ->Args({151936, 896, 1})
    ->Args({151936, 896, 16})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatmulShape, avx512_bf16, "avx512_bf16")  // AVX512_BF16 only (else skipped)
    ->Args({256, 256, 1})
    ->Args({768, 256, 1})
    ->Args({256, 768, 1})
    ->Args({4096, 256, 1})
    ->Args({128, 896, 16})
    ->Args({896, 896, 16})
    ->Args({1024, 1024, 16})
    ->Args({1024, 1024, 64})
    ->Args({4864, 896, 1})
    ->Args({4864, 896, 16})
    ->Args({896, 4864, 16})
    ->Args({151936, 896, 1})
    ->Args({151936, 896, 16})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PrefillMatmulLayer, amx_bf16, "amx_bf16")  // AMX-BF16 only (else skipped)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MatmulShape, amx_bf16, "amx_bf16")  // AMX-BF16 only (else skipped)
    ->Args({1024, 1024, 16})
    ->Args({1024, 1024, 64})
    ->Args({4864, 896, 1})
    ->Args({4864, 896, 16})
    ->Args({896, 4864, 16})
    ->Args({4864, 896, 512})
    ->Args({896, 4864, 512})
    ->Args({128, 896, 16})  // k/v_proj: per-call overhead
    ->Args({896, 896, 16})
    ->Args({256, 256, 1})  // plumb-tiny's decode shapes: per-call overhead dominates
    ->Args({768, 256, 1})
    ->Args({256, 768, 1})
    ->Args({4096, 256, 1})
    ->Args({151936, 896, 1})
    ->Args({151936, 896, 16})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatmulShape, avx2, "avx2")
    ->Args({896, 896, 1})
    ->Args({4864, 896, 1})
    ->Args({896, 4864, 1})
    ->Args({4864, 896, 16})
    ->Args({896, 4864, 16})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_MatmulShape, onednn, "onednn")  // bf16 weights converted on every call
    ->Args({4864, 896, 32})
    ->Args({4864, 896, 64})
    ->Args({4864, 896, 128})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_DecodeAttention, avx2, "avx2")
    ->Args({1, 128})
    ->Args({16, 85})
    ->Args({16, 320})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DecodeAttention, avx512, "avx512")  // AVX-512 only (else skipped)
    ->Args({1, 128})
    ->Args({16, 85})
    ->Args({16, 320})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_DecodeAttention, reference, "reference")
    ->Args({16, 85})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace plumb::bench

BENCHMARK_MAIN();
