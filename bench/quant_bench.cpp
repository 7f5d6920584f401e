// Decode speed of weight-only quantization on Qwen2.5-0.5B (models/configs/qwen2.5-0.5b, dummy
// weights): bf16 vs int8 vs int4 linears (embedding/lm_head bf16 in all three), whole-model
// forward passes through the engine (plumb_engine: Model::forward with the "auto" kernels).
//
// For each batch size, every configuration decodes `steps` steps per round; rounds interleave the
// configurations (the order rotates each round) and each round first measures the read bandwidth
// (engine/cpu/ceilings.h, 512 MiB, best of 3), because the machine is shared and its bandwidth
// drifts. Reported per (configuration, batch): median tokens/s over rounds (and min..max), the
// median of the per-round ratios to bf16, bytes read per step (linear weights + lm_head + the KV
// cache at the mean context) and per token, and the median of per-round "achieved read GB/s /
// measured read GB/s" (1.0 = at the memory roofline). Prints a markdown table, then one JSON line.
//
//   build/<dir>/bench/quant_bench [--rounds 5] [--steps 16] [--batches 1,8] [--threads N]
//   build/<dir>/bench/quant_bench --rounds 7 --kernels-only THREADS   (see kernels_only below)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench_util.h"
#include "engine/cpu/ceilings.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model.h"

namespace plumb::engine {
namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kPrompt = 64;  // each sequence is prefilled with this many tokens first

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Config {
  std::string name;  // "bf16", "int8", "int4"
  std::unique_ptr<Model> model;
};

struct Session {  // one configuration at one batch size: its cache and position
  KvCache cache;
  std::vector<std::vector<int32_t>> tables;
  int32_t pos = kPrompt;
  int32_t max_pos = 0;
};

Session open_session(Model& m, int batch, int steps_total) {
  const int32_t ctx = kPrompt + steps_total + 1;
  const int32_t per_seq = (ctx + kBlock - 1) / kBlock;
  Session s{std::move(KvCache::create(m.kv_config(batch * per_seq, kBlock))).value(), {}, kPrompt, ctx - 1};
  s.tables.resize(size_t(batch));
  std::vector<int32_t> prompt(kPrompt);
  for (int i = 0; i < kPrompt; ++i) prompt[size_t(i)] = (i * 7919) % int32_t(m.config().vocab_size);
  ForwardOutput out;
  for (int b = 0; b < batch; ++b) {
    s.tables[size_t(b)].resize(size_t(per_seq));
    std::iota(s.tables[size_t(b)].begin(), s.tables[size_t(b)].end(), b * per_seq);
    SequenceInput in{prompt, 0, s.tables[size_t(b)], false};
    if (!m.forward(std::span(&in, 1), s.cache, &out).ok()) std::abort();
  }
  return s;
}

// Seconds for `steps` decode steps of the whole batch.
double decode(Model& m, Session& s, int steps) {
  const size_t batch = s.tables.size();
  std::vector<int32_t> tok(batch, 42);
  std::vector<SequenceInput> step(batch);
  ForwardOutput out;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    for (size_t b = 0; b < batch; ++b) step[b] = {std::span(&tok[b], 1), s.pos, s.tables[b], false};
    if (!m.forward(step, s.cache, &out).ok()) std::abort();
    s.pos = std::min(s.pos + 1, s.max_pos);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --kernels-only: one gate_proj-shaped matmul [4864, 896] (bf16 via Op::kMatmul's decode choice,
// int8/int4 via Op::kMatmulQuant's), weights small enough to stay mostly in the last-level cache, so
// the rate is the kernel's compute rate per weight rather than DRAM's: if int4 is slower per
// weight than bf16 here, its DRAM-bound speedup is capped by compute on this CPU.
int kernels_only(int threads, int rounds) {
  const int64_t n = 4864, k = 896;
  std::vector<float> f(size_t(n * k));
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(int64_t(i * 2654435761u % 2001) - 1000) * 2e-5f;
  std::vector<uint16_t> bf(f.size());
  for (size_t i = 0; i < f.size(); ++i) bf[i] = f32_to_bf16(f[i]);
  struct Q {
    std::string name;
    WeightMatrix w;
    std::vector<unsigned char> codes;
    std::vector<float> scales, mins;
  };
  std::vector<Q> qs(3);
  qs[0].name = "bf16";
  qs[0].w = {bf.data(), DType::kBF16, n, k};
  for (int i = 1; i < 3; ++i) {
    Quantization q = *parse_quantization(i == 1 ? "int8" : "int4");
    Q& t = qs[size_t(i)];
    t.name = q.name();
    const int64_t rb = quant_row_bytes(q.scheme, k), g = quant_groups_per_row(q.scheme, k, q.group_size);
    t.codes.resize(size_t(n * rb));
    t.scales.resize(size_t(n * g));
    t.mins.resize(size_t(n * g));
    for (int64_t r = 0; r < n; ++r) {
      quantize_row(q.scheme, q.group_size, f.data() + r * k, k, t.codes.data() + r * rb,
                   t.scales.data() + r * g, t.mins.data() + r * g);
    }
    t.w = {t.codes.data(),
           DType::kF32,
           n,
           k,
           q.scheme,
           t.scales.data(),
           q.scheme == QuantScheme::kInt4 ? t.mins.data() : nullptr,
           q.scheme == QuantScheme::kInt4 ? 32 : 0};
  }
  ThreadPool pool(threads);
  const auto& reg = KernelRegistry::instance();
  auto mm = reg.best(Op::kMatmul, Phase::kDecode)->cpu<MatmulFn>();
  auto mq = reg.best(Op::kMatmulQuant, Phase::kDecode)->cpu<MatmulFn>();
  std::printf("| m | weights | ns per weight per row of x (median) | ratio to bf16 |\n|---|---|---|---|\n");
  for (int64_t m : {1, 8}) {
    std::vector<float> x(size_t(m * k), 0.01f), y(size_t(m * n));
    std::vector<std::vector<double>> ns(3);
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < 3; ++i) {
        MatmulFn fn = i == 0 ? mm : mq;
        fn({&pool, Phase::kDecode}, x.data(), m, qs[i].w, nullptr, y.data());
        const int reps = 20;
        const auto t0 = std::chrono::steady_clock::now();
        for (int j = 0; j < reps; ++j) fn({&pool, Phase::kDecode}, x.data(), m, qs[i].w, nullptr, y.data());
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ns[i].push_back(sec * 1e9 / reps / double(n * k * m));
      }
    }
    for (size_t i = 0; i < 3; ++i) {
      std::printf("| %ld | %s | %.4f | %.2f |\n", long(m), qs[i].name.c_str(), median(ns[i]),
                  median(ns[0]) / median(ns[i]));
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  int rounds = 5, steps = 16, threads = bench::bench_threads();
  std::vector<int> batches = {1, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rounds") {
      rounds = std::atoi(v.c_str());
    } else if (k == "--steps") {
      steps = std::atoi(v.c_str());
    } else if (k == "--threads") {
      threads = std::atoi(v.c_str());
    } else if (k == "--kernels-only") {
      return kernels_only(std::atoi(v.c_str()) > 0 ? std::atoi(v.c_str()) : threads, rounds);
    } else if (k == "--batches") {
      batches.clear();
      for (size_t p = 0; p < v.size();) {
        size_t e = v.find(',', p);
        batches.push_back(std::atoi(v.substr(p, e - p).c_str()));
        p = e == std::string::npos ? v.size() : e + 1;
      }
    } else {
      std::fprintf(stderr, "unknown option %s (use --rounds, --steps, --batches, --threads)\n", k.c_str());
      return 2;
    }
  }
  auto cfg = load_model_config(std::string(PLUMB_SOURCE_DIR) + "/models/configs/qwen2.5-0.5b/config.json");
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().to_string().c_str());
    return 3;
  }
  std::vector<Config> configs;
  for (const char* q : {"none", "int8", "int4"}) {
    ModelOptions o;
    o.threads = threads;
    o.quantization = *parse_quantization(q);
    std::fprintf(stderr, "generating dummy Qwen2.5-0.5B weights, quantization %s ...\n", q);
    auto m = Model::dummy(*cfg, o);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
      return 3;
    }
    configs.push_back({std::string(q) == "none" ? "bf16" : q, std::move(m).value()});
  }
  const int64_t kv_token_bytes = configs[0].model->kv_config(1, 1).bytes();

  std::printf(
      "| batch | linears | weight MB read/step | tok/s median (min..max) | ratio to bf16 | "
      "bytes/token MB | achieved / measured read GB/s |\n|---|---|---|---|---|---|---|\n");
  std::string json =
      "{\"schema_version\":1,\"bench\":\"quant_bench\",\"model\":\"qwen2.5-0.5b dummy\",\"threads\":" +
      std::to_string(threads) + ",\"rounds\":" + std::to_string(rounds) +
      ",\"steps\":" + std::to_string(steps) + ",\"results\":[";
  bool first = true;
  for (int batch : batches) {
    std::vector<Session> sessions;
    for (auto& c : configs) sessions.push_back(open_session(*c.model, batch, rounds * steps + 2));
    for (size_t i = 0; i < configs.size(); ++i) decode(*configs[i].model, sessions[i], 2);  // warm up
    std::vector<std::vector<double>> tps(configs.size()), ratio(configs.size()), bw_frac(configs.size());
    std::vector<double> bws;
    for (int r = 0; r < rounds; ++r) {
      const double bw = measure_read_bandwidth_gbs(threads, int64_t(512) << 20, 3);
      bws.push_back(bw);
      std::vector<double> this_round(configs.size());
      for (size_t j = 0; j < configs.size(); ++j) {
        const size_t i = (j + size_t(r)) % configs.size();  // rotate the order
        const double mean_ctx = sessions[i].pos + steps / 2.0;
        const double sec = decode(*configs[i].model, sessions[i], steps);
        this_round[i] = double(batch) * steps / sec;
        const double bytes_step =
            double(configs[i].model->weights().bytes()) + batch * mean_ctx * double(kv_token_bytes);
        bw_frac[i].push_back(bytes_step * steps / sec / 1e9 / bw);
      }
      for (size_t i = 0; i < configs.size(); ++i) {
        tps[i].push_back(this_round[i]);
        ratio[i].push_back(this_round[i] / this_round[0]);
      }
    }
    for (size_t i = 0; i < configs.size(); ++i) {
      const double wmb = double(configs[i].model->weights().bytes()) / 1e6;
      const double mean_ctx = kPrompt + rounds * steps / 2.0;
      const double bpt = (wmb * 1e6 + batch * mean_ctx * double(kv_token_bytes)) / batch / 1e6;
      const auto [mn, mx] = std::minmax_element(tps[i].begin(), tps[i].end());
      std::printf("| %d | %s | %.0f | %.2f (%.2f..%.2f) | %.2f | %.1f | %.2f |\n", batch,
                  configs[i].name.c_str(), wmb, median(tps[i]), *mn, *mx, median(ratio[i]), bpt,
                  median(bw_frac[i]));
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "%s{\"batch\":%d,\"linears\":\"%s\",\"weight_mb\":%.1f,\"tok_per_s_median\":%.3f,"
                    "\"tok_per_s_min\":%.3f,\"tok_per_s_max\":%.3f,\"ratio_to_bf16_median\":%.3f,"
                    "\"bytes_per_token_mb\":%.2f,\"bw_fraction_median\":%.3f}",
                    first ? "" : ",", batch, configs[i].name.c_str(), wmb, median(tps[i]), *mn, *mx,
                    median(ratio[i]), bpt, median(bw_frac[i]));
      json += buf;
      first = false;
    }
    std::printf("| %d | (measured read bandwidth, GB/s, median of rounds) | %.2f | | | | |\n", batch,
                median(bws));
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace plumb::engine

int main(int argc, char** argv) { return plumb::engine::run(argc, argv); }
