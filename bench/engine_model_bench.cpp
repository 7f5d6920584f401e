// Whole-model speed of the reference engine on Qwen2.5-0.5B (models/configs/qwen2.5-0.5b) with
// dummy bf16 weights, each figure next to its ceiling measured in the same run (decode: probed every
// ~0.5 s of the timed loop, each segment's ratio against the probes beside it, the median reported
// as ratio_median; see BM_Decode):
//   decode batch 1:  tokens/s vs the memory roofline  read_bandwidth / bytes read per token
//                    (all linear weights incl. the tied lm_head + the KV cache of the context);
//   decode batch 16: tokens/s vs min(16 * read_bandwidth / bytes per step,
//                                    bf16 matmul peak / flops per token);
//   prefill 512:     tokens/s vs oneDNN alone running the same matmul shapes (m = 512; lm_head m = 1),
//                    the faster of its f32 sgemm and, on AVX512_BF16 CPUs, its bf16 matmul, measured
//                    again after every timed prefill (ratio_median, as for decode);
//   peak RSS vs weights + KV cache.
// Threads: $PLUMB_BENCH_THREADS, else all cores; kernels: $PLUMB_BENCH_KERNELS (selection JSON), else
// auto. Run:
//   build/<dir>/bench/engine_model_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench_util.h"
#include "engine/cpu/ceilings.h"
#include "engine/cpu/observer.h"
#include "engine/model.h"

namespace plumb::engine {
namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kCtxStart = 64;  // decode starts after a prompt of this many tokens
constexpr int32_t kCtxEnd = 320;   // and wraps back to kCtxStart when it reaches this

struct Shared {
  std::unique_ptr<Model> model;
  MachineCeilings ceil;
  double onednn_prefill_seconds = 0;  // oneDNN alone on the prefill-512 matmuls
  int64_t kv_bytes_reserved = 0;
};
Shared* g = nullptr;

// PLUMB_BENCH_PROFILE=1: time every kernel call per phase and module (the observer of `plumb kernels
// profile`) and print, after the benchmarks, where each phase's time goes. Off by default: the
// observer adds two clock reads per call.
class ModuleTimes : public KernelObserver {
 public:
  void before(const KernelCall&) override {}
  void after(const KernelCall& c, int64_t ns) override {
    auto& t = totals_[{c.phase == Phase::kDecode ? "decode" : "prefill", c.module}];
    t.first += ns;
    ++t.second;
  }
  void print() const {
    std::map<std::string, int64_t> forward;
    for (const auto& [key, t] : totals_) {
      if (key.second == "forward") forward[key.first] = t.first;
    }
    for (const auto& [key, t] : totals_) {
      const double share = forward[key.first] > 0 ? double(t.first) / double(forward[key.first]) : 0.0;
      std::printf("  %-8s %-14s %10.1f ms %8lld calls %6.1f%% of forward\n", key.first.c_str(),
                  key.second.c_str(), double(t.first) / 1e6, static_cast<long long>(t.second), 100.0 * share);
    }
  }

 private:
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> totals_;
};

// Peak resident set (VmHWM) of this process in bytes; reset_peak_rss() restarts it (Linux >= 4.0).
double peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) * 1024.0;
  }
  return 0;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// A short read-bandwidth probe (256 MiB, several times a 2-core VM's L3; best of 3 passes) whose buffer is
// not counted in the engine's peak RSS: the peak so far is banked before it and the counter restarted after
// it.
double g_rss_banked = 0;
double bandwidth_probe(int threads) {
  g_rss_banked = std::max(g_rss_banked, peak_rss_bytes());
  const double bw = measure_read_bandwidth_gbs(threads, int64_t(256) << 20, 3);
  reset_peak_rss();
  return bw;
}

constexpr double kSegmentSeconds = 0.5;  // timed decode between two ceiling probes

// The per-segment (decode) or per-iteration (prefill) ratios to their ceilings: count, median, range.
void set_ratio_counters(benchmark::State& state, std::vector<double> ratios) {
  std::sort(ratios.begin(), ratios.end());
  state.counters["segments"] = double(ratios.size());
  state.counters["ratio_median"] = ratios.empty() ? 0.0 : ratios[ratios.size() / 2];
  state.counters["ratio_min"] = ratios.empty() ? 0.0 : ratios.front();
  state.counters["ratio_max"] = ratios.empty() ? 0.0 : ratios.back();
}

// oneDNN alone on the prefill-512 shapes: every layer's seven projections, plus lm_head for the one
// row that wants logits; per shape the faster of its f32 sgemm and (AVX512_BF16 CPUs) its bf16
// matmul (the engine's own prefill rounds x to bf16 there, so oneDNN's bf16 rate is the fair peer).
double onednn_prefill_seconds(const ModelConfig& cfg, int threads) {
  double secs = 0;
  for (const auto& s : plumb::bench::layer_matmuls(plumb::bench::qwen25_05b())) {
    const double gf = std::max(measure_onednn_gemm_gflops(512, s.n, s.k, threads),
                               measure_onednn_bf16_gflops(512, s.n, s.k, threads));
    secs += double(cfg.num_hidden_layers) * 2.0 * 512 * double(s.n) * double(s.k) / (gf * 1e9);
  }
  return secs + 2.0 * double(cfg.vocab_size) * double(cfg.hidden_size) /
                    (measure_onednn_gemm_gflops(1, cfg.vocab_size, cfg.hidden_size, threads) * 1e9);
}

// Decode: `batch` sequences, each prefilled with kCtxStart tokens, then one token per step.
void BM_Decode(benchmark::State& state) {
  Model& m = *g->model;
  const int batch = int(state.range(0));
  const ModelConfig& c = m.config();
  const int32_t blocks_per_seq = (kCtxEnd + kBlock) / kBlock;
  auto cache = KvCache::create(m.kv_config(batch * blocks_per_seq, kBlock));
  if (!cache.ok()) return state.SkipWithError(cache.status().to_string().c_str());
  g->kv_bytes_reserved =
      std::max<int64_t>(g->kv_bytes_reserved, int64_t(batch) * kCtxEnd * m.kv_config(1, 1).bytes());
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int s = 0; s < batch; ++s) {
    tables[size_t(s)].resize(size_t(blocks_per_seq));
    std::iota(tables[size_t(s)].begin(), tables[size_t(s)].end(), s * blocks_per_seq);
  }
  std::vector<int32_t> prompt(kCtxStart);
  for (int i = 0; i < kCtxStart; ++i) prompt[size_t(i)] = (i * 7919) % int32_t(c.vocab_size);
  ForwardOutput out;
  for (int s = 0; s < batch; ++s) {
    SequenceInput in{prompt, 0, tables[size_t(s)], false};
    if (!m.forward(std::span(&in, 1), *cache, &out).ok()) return state.SkipWithError("prefill failed");
  }
  std::vector<int32_t> tok(size_t(batch), 42);
  std::vector<SequenceInput> step(static_cast<size_t>(batch));
  int32_t pos = kCtxStart;
  int64_t ctx_sum = 0, steps = 0;
  // The VM's speed and bandwidth move in phases of seconds (one batch-1 run read 1.24 of a bandwidth
  // measured only at the start), so the timed loop is cut into segments of ~kSegmentSeconds with
  // the ceilings probed between them, the timer paused: a 256 MiB bandwidth read (its buffer kept
  // out of the peak RSS by bandwidth_probe) and, for batch > 1, the compute peak. Each segment's
  // ratio is its tokens/s over the roof from the higher of the probes on either side, so a slow
  // probe can only lower a ratio, never raise it; the figure is the median over segments.
  const double weight_bytes = double(m.weights().bytes());  // linears + embedding/lm_head (tied: once)
  const double kv_bytes_per_token = double(m.kv_config(1, 1).bytes());
  const double params = weight_bytes / double(dtype_size(m.weights().linear_dtype()));
  auto roofs = [&](double bw_gbs, double peak_gflops, double ctx) {
    const double bytes_per_step = weight_bytes + batch * ctx * kv_bytes_per_token;
    const double flops_per_token =
        2.0 * params +  // every weight once per token (a multiply-add)
        4.0 * ctx * double(c.num_attention_heads * c.head_dim) * double(c.num_hidden_layers);
    return std::pair{batch * bw_gbs * 1e9 / bytes_per_step, peak_gflops * 1e9 / flops_per_token};
  };
  struct Probe {
    double bw = 0, peak = 0;
  };
  auto probe = [&] {
    Probe p{bandwidth_probe(g->ceil.threads), 0.0};
    if (batch > 1) p.peak = measure_peak_gflops(DType::kBF16, g->ceil.threads);
    return p;
  };
  Probe before = probe(), best = before;
  best.bw = std::max(best.bw, g->ceil.read_bandwidth_gbs);
  best.peak = std::max(best.peak, g->ceil.peak_gflops_bf16);
  std::vector<double> ratios;
  auto t_seg = std::chrono::steady_clock::now();
  int64_t seg_steps = 0, seg_ctx = 0;
  auto close_segment = [&] {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_seg).count();
    const Probe after = probe();
    const auto [bw_roof, flop_roof] = roofs(std::max(before.bw, after.bw), std::max(before.peak, after.peak),
                                            double(seg_ctx) / double(seg_steps));
    const double roof = batch == 1 ? bw_roof : std::min(bw_roof, flop_roof);
    ratios.push_back(double(batch) * double(seg_steps) / secs / roof);
    best.bw = std::max(best.bw, after.bw);
    best.peak = std::max(best.peak, after.peak);
    before = after;
    seg_steps = seg_ctx = 0;
  };
  for (auto _ : state) {
    for (int s = 0; s < batch; ++s)
      step[size_t(s)] = {std::span(&tok[size_t(s)], 1), pos, tables[size_t(s)], false};
    if (!m.forward(step, *cache, &out).ok()) return state.SkipWithError("decode failed");
    ctx_sum += pos + 1;
    seg_ctx += pos + 1;
    ++steps;
    ++seg_steps;
    pos = pos + 1 >= kCtxEnd ? kCtxStart : pos + 1;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t_seg).count() >= kSegmentSeconds) {
      state.PauseTiming();
      close_segment();
      state.ResumeTiming();
      t_seg = std::chrono::steady_clock::now();
    }
  }
  if (seg_steps > 0) close_segment();  // the timer stopped with the loop
  const double mean_ctx = double(ctx_sum) / double(std::max<int64_t>(steps, 1));
  // Whole-loop roofs from the highest probe of the run (context for the segment ratios).
  const auto [bw_roof, flop_roof] = roofs(best.bw, best.peak, mean_ctx);
  const double roof = batch == 1 ? bw_roof : std::min(bw_roof, flop_roof);
  state.counters["tok_per_s"] =
      benchmark::Counter(double(batch) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["roofline_tok_per_s"] = roof;
  state.counters["bw_roof_tok_per_s"] = bw_roof;
  state.counters["flop_roof_tok_per_s"] = flop_roof;
  state.counters["read_GBps"] = best.bw;
  state.counters["peak_bf16_GFLOPs"] = best.peak;
  set_ratio_counters(state, std::move(ratios));
  state.counters["mean_ctx"] = mean_ctx;
}

void BM_Prefill(benchmark::State& state) {
  Model& m = *g->model;
  const int32_t n = int32_t(state.range(0));
  const int32_t blocks = (n + kBlock - 1) / kBlock;
  auto cache = KvCache::create(m.kv_config(blocks, kBlock));
  if (!cache.ok()) return state.SkipWithError(cache.status().to_string().c_str());
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> prompt(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) prompt[size_t(i)] = (i * 7919) % int32_t(m.config().vocab_size);
  ForwardOutput out;
  // oneDNN alone is measured again after every timed prefill (timer paused, its buffers banked out
  // of the peak RSS), and each prefill is divided by the faster of the measurements on either side:
  // like the decode segments, a slow phase can only lower a ratio. The figure is the median.
  auto alone = [&] {
    g_rss_banked = std::max(g_rss_banked, peak_rss_bytes());
    const double secs = onednn_prefill_seconds(m.config(), g->ceil.threads);
    reset_peak_rss();
    return secs;
  };
  double before = alone(), fastest = std::min(before, g->onednn_prefill_seconds);
  std::vector<double> ratios;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    SequenceInput in{prompt, 0, table, false};
    if (!m.forward(std::span(&in, 1), *cache, &out).ok()) return state.SkipWithError("prefill failed");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.PauseTiming();
    const double after = alone();
    ratios.push_back(std::min(before, after) / secs);
    fastest = std::min(fastest, after);
    before = after;
    state.ResumeTiming();
  }
  state.counters["tok_per_s"] =
      benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["onednn_alone_tok_per_s"] = double(n) / fastest;
  set_ratio_counters(state, std::move(ratios));
}

}  // namespace
}  // namespace plumb::engine

int main(int argc, char** argv) {
  using namespace plumb::engine;
  benchmark::Initialize(&argc, argv);
  const int threads = plumb::bench::bench_threads();
  auto cfg = load_model_config(std::string(PLUMB_SOURCE_DIR) + "/models/configs/qwen2.5-0.5b/config.json");
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().to_string().c_str());
    return 1;
  }
  static Shared shared;
  g = &shared;
  shared.ceil = measure_ceilings(threads);
  shared.onednn_prefill_seconds = onednn_prefill_seconds(*cfg, threads);
  // The ceilings' buffers are freed; count the peak from here: model + KV + workspaces.
  reset_peak_rss();
  ModelOptions o;
  o.threads = threads;
  // PLUMB_BENCH_KERNELS: a kernel selection as JSON text, e.g. '{"matmul": {"prefill": "onednn_bf16"}}'
  // (default: auto everywhere).
  if (const char* sel = std::getenv("PLUMB_BENCH_KERNELS"); sel != nullptr && *sel != '\0') {
    auto ks = KernelSelection::parse_json(sel);
    if (!ks.ok()) {
      std::fprintf(stderr, "PLUMB_BENCH_KERNELS: %s\n", ks.status().to_string().c_str());
      return 1;
    }
    o.kernels = *ks;
    std::printf("kernels %s\n", o.kernels.to_json().c_str());
  }
  auto m = Model::dummy(*cfg, o);  // bf16
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
    return 1;
  }
  shared.model = std::move(m).value();
  std::printf(
      "threads %d, read bandwidth %.1f GB/s, bf16 matmul peak %.1f GFLOP/s (%s), oneDNN prefill-512 alone "
      "%.1f ms\n",
      threads, shared.ceil.read_bandwidth_gbs, shared.ceil.peak_gflops_bf16, shared.ceil.matmul_variant,
      shared.onednn_prefill_seconds * 1e3);
  benchmark::RegisterBenchmark("decode", BM_Decode)
      ->Arg(1)
      ->Arg(16)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("prefill", BM_Prefill)->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond);
  ModuleTimes times;
  const char* prof = std::getenv("PLUMB_BENCH_PROFILE");
  const bool profile = prof != nullptr && std::string(prof) == "1";
  if (profile) set_kernel_observer(&times);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (profile) {
    set_kernel_observer(nullptr);
    std::printf("time per phase and module (PLUMB_BENCH_PROFILE=1; setup prefills included):\n");
    times.print();
  }
  const double rss = std::max(g_rss_banked, peak_rss_bytes());
  const double weights = double(shared.model->weights().bytes());
  std::printf("peak RSS %.0f MB; weights %.0f MB + KV cache %.0f MB = %.0f MB; ratio %.3f\n", rss / 1e6,
              weights / 1e6, double(shared.kv_bytes_reserved) / 1e6,
              (weights + double(shared.kv_bytes_reserved)) / 1e6,
              rss / (weights + double(shared.kv_bytes_reserved)));
  return 0;
}
