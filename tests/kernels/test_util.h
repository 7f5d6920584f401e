// Shared helpers of the kernels tests: temp folders, a synthetic task, candidate sources.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "core/random.h"
#include "kernels/screen.h"
#include "kernels/task.h"

namespace plumb::kernels::testing {

inline std::string temp_dir(const std::string& name) {
  auto p =
      std::filesystem::temp_directory_path() / ("plumb_kernels_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// Writes `t` to `dir` and loads it back, as a search would see it.
inline Task written_and_loaded(const Task& t, const std::string& dir) {
  Status st = write_task(t, dir);
  if (!st.ok()) throw std::runtime_error(st.to_string());
  auto back = load_task(dir);
  if (!back.ok()) throw std::runtime_error(back.status().to_string());
  return *back;
}

// An rmsnorm task of dim 256 over rows 1..8 with two captured cases, written to `dir`.
inline Task rmsnorm_task(const std::string& dir) {
  Task t;
  t.module = "post_attention_norm";
  t.op = engine::Op::kRmsNorm;
  t.phase = engine::Phase::kDecode;
  t.n = 256;
  t.k = 256;
  t.m_min = 1;
  t.m_max = 8;
  t.rows_histogram = {{1, 100}, {8, 3}};
  t.baseline_variant = "reference";
  t.tolerance = tolerance_for(t.op, t.dtype);
  Rng rng(5);
  for (int64_t m : {1, 8}) {
    CapturedCall c;
    c.op = t.op;
    c.phase = t.phase;
    c.module = t.module;
    c.m = m;
    c.n = t.n;
    c.k = t.k;
    c.eps = 1e-5f;
    c.x.resize(size_t(m * t.k));
    for (auto& v : c.x) v = float(rng.uniform() * 4 - 2);
    c.x2.resize(size_t(t.k));
    for (auto& v : c.x2) v = float(rng.uniform() + 0.5);
    t.cases.push_back(c);
  }
  return written_and_loaded(t, dir);
}

// A task of another v1 op with random captured inputs: matmul (bf16 weights, n=96, k=72: tails on
// purpose), swiglu (dim 100), rope (2 heads of 64).
inline Task op_task(engine::Op op, const std::string& dir) {
  Task t;
  t.module = "test";
  t.op = op;
  t.phase = engine::Phase::kDecode;
  t.m_min = 1;
  t.m_max = 5;
  t.baseline_variant = "reference";
  Rng rng(9);
  auto fill = [&](std::vector<float>& v, size_t n, double lo, double hi) {
    v.resize(n);
    for (auto& x : v) x = float(lo + (hi - lo) * rng.uniform());
  };
  if (op == engine::Op::kMatmul) {
    t.n = 96, t.k = 72, t.dtype = engine::DType::kBF16;
  } else if (op == engine::Op::kSwiglu) {
    t.n = 100, t.k = 100;
  } else {
    t.n = 2, t.k = 64;
  }
  t.tolerance = tolerance_for(op, t.dtype);
  for (int64_t m : {1, 5}) {
    CapturedCall c;
    c.op = op;
    c.phase = t.phase;
    c.module = t.module;
    c.m = m;
    c.n = t.n;
    c.k = t.k;
    c.w_dtype = t.dtype;
    if (op == engine::Op::kMatmul) {
      fill(c.x, size_t(m * t.k), -1, 1);
      c.w.resize(size_t(t.n * t.k) * 2);
      for (size_t i = 0; i < size_t(t.n * t.k); ++i) {
        uint16_t h = engine::f32_to_bf16(float(rng.uniform() * 0.2 - 0.1));
        std::memcpy(c.w.data() + 2 * i, &h, 2);
      }
    } else if (op == engine::Op::kSwiglu) {
      fill(c.x, size_t(m * t.n), -5, 5);
      fill(c.x2, size_t(m * t.n), -1, 1);
    } else {
      fill(c.x, size_t(m * t.n * t.k), -1, 1);
      c.x2.resize(size_t(t.k / 2));
      for (size_t i = 0; i < c.x2.size(); ++i)
        c.x2[i] = float(std::pow(10000.0, -2.0 * double(i) / double(t.k)));
      for (int64_t j = 0; j < m; ++j) c.positions.push_back(int32_t(rng.uniform_int(0, 500)));
    }
    t.cases.push_back(c);
  }
  return written_and_loaded(t, dir);
}

// A sampling task over a vocabulary of 1000 (not a multiple of any vector width) with three captured
// rows: temperature 0.7 (the common path), greedy, and top_k 40 with top_p 0.9. Baseline "select".
inline Task sample_task(const std::string& dir) {
  Task t;
  t.module = "sampling";
  t.op = engine::Op::kSample;
  t.phase = engine::Phase::kDecode;
  t.n = 1000;
  t.k = 0;
  t.rows_histogram = {{1, 50}};
  t.baseline_variant = "select";
  t.tolerance = tolerance_for(t.op, t.dtype);
  Rng rng(11);
  for (int i = 0; i < 3; ++i) {
    CapturedCall c;
    c.op = t.op;
    c.phase = t.phase;
    c.module = t.module;
    c.m = 1;
    c.n = t.n;
    c.x.resize(size_t(t.n));
    for (auto& v : c.x) v = float(rng.uniform() * 16 - 8);
    c.sample.vocab = t.n;
    c.sample.temperature = i == 1 ? 0.0f : 0.7f;
    c.sample.top_k = i == 2 ? 40 : 0;
    c.sample.top_p = i == 2 ? 0.9f : 1.0f;
    c.sample.u = rng.uniform();
    t.cases.push_back(c);
  }
  return written_and_loaded(t, dir);
}

// A sampling plugin in plain loops, correct on every path unless `flaw` is set:
//  "ignore_cuts": draws from all ids whatever top_k/top_p say;
//  "last_tie":    greedy returns the highest id among equal maxima;
//  "read_past":   reads logits[vocab] (one past the end) while finding the maximum.
inline std::string sample_source(const std::string& name, const std::string& flaw = "") {
  auto on = [&](const char* f) { return flaw == f ? "1" : "0"; };
  return std::string(R"(#include "engine/cpu/plugin_abi.h"
#include <algorithm>
#include <cmath>
#define IGNORE_CUTS )") +
         on("ignore_cuts") + "\n#define LAST_TIE " + on("last_tie") + "\n#define READ_PAST " +
         on("read_past") + R"(
struct C { float v; int32_t id; };
static bool better(const C& a, const C& b) { return a.v != b.v ? a.v > b.v : a.id < b.id; }
static int32_t pick(const plumb_sample_args* a) {
  const int64_t V = a->vocab;
  const float* l = a->logits;
  float m = l[0];
  for (int64_t i = 1; i < V + READ_PAST; ++i) m = std::max(m, l[i]);
  if (a->temperature == 0.0f) {
    int32_t best = -1;
    for (int64_t i = 0; i < V; ++i)
      if (l[i] == m && (best < 0 || LAST_TIE)) best = int32_t(i);
    return best;
  }
  C* c = static_cast<C*>(a->scratch);
  double* p = reinterpret_cast<double*>(c + V);
  for (int64_t i = 0; i < V; ++i) c[i] = C{l[i] / a->temperature, int32_t(i)};
  int64_t n = V;
  const bool cut_k = !IGNORE_CUTS && a->top_k > 0 && a->top_k < V;
  const bool cut_p = !IGNORE_CUTS && a->top_p < 1.0f;
  if (cut_k) { n = a->top_k; std::partial_sort(c, c + n, c + V, better); }
  else if (cut_p) std::sort(c, c + V, better);
  double mx = c[0].v, sum = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(c[i].v));
  for (int64_t i = 0; i < n; ++i) sum += (p[i] = std::exp(double(c[i].v) - mx));
  if (cut_p) {
    double cum = 0;
    for (int64_t i = 0; i < n; ++i) { cum += p[i] / sum; if (cum >= double(a->top_p)) { n = i + 1; break; } }
    sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += p[i];
  }
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) { acc += p[i]; if (a->u * sum < acc) return c[i].id; }
  return c[n - 1].id;
}
static void run(const plumb_exec*, const void* args) {
  const plumb_sample_args* a = static_cast<const plumb_sample_args*>(args);
  *a->id = pick(a);
}
static const plumb_kernel_plugin kDesc = {PLUMB_KERNEL_ABI_VERSION, sizeof(plumb_kernel_plugin), PLUMB_OP_SAMPLE, ")" +
         name + R"(", "test sampling plugin", nullptr, run};
PLUMB_KERNEL_EXPORT const plumb_kernel_plugin* plumb_kernel_plugin_entry(void) { return &kDesc; }
)";
}

// An rmsnorm plugin. `body` is inserted in the row loop after y is written (r, d, x, y in scope);
// `abi` overrides the descriptor's version.
inline std::string rmsnorm_source(const std::string& name, const std::string& body = "",
                                  const std::string& abi = "PLUMB_KERNEL_ABI_VERSION") {
  return R"(#include "engine/cpu/plugin_abi.h"
#include <cmath>
static void run(const plumb_exec*, const void* args) {
  const plumb_rmsnorm_args* a = static_cast<const plumb_rmsnorm_args*>(args);
  const int64_t d = a->dim;
  for (int64_t r = 0; r < a->rows; ++r) {
    const float* x = a->x + r * d;
    float* y = a->y + r * d;
    double s = 0;
    for (int64_t i = 0; i < d; ++i) s += double(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(s / double(d) + a->eps);
    for (int64_t i = 0; i < d; ++i) y[i] = float(x[i] * inv * a->weight[i]);
    )" + body +
         R"(
  }
}
static const plumb_kernel_plugin kDesc = {)" +
         abi + R"(, sizeof(plumb_kernel_plugin), PLUMB_OP_RMSNORM, ")" + name +
         R"(", "test plugin", nullptr, run};
PLUMB_KERNEL_EXPORT const plumb_kernel_plugin* plumb_kernel_plugin_entry(void) { return &kDesc; }
)";
}

inline Candidate candidate(const std::string& name, const std::string& source) {
  Candidate c;
  c.name = name;
  c.family = "test";
  c.origin = "file";
  c.source = source;
  return c;
}

inline ScreenOptions fast_screen() {
  ScreenOptions o;
  o.timing = false;
  o.draws = 3;
  o.timeout = std::chrono::milliseconds(60'000);
  return o;
}

}  // namespace plumb::kernels::testing
