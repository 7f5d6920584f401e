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
  Status st = write_task(t, dir);
  if (!st.ok()) throw std::runtime_error(st.to_string());
  auto back = load_task(dir);
  if (!back.ok()) throw std::runtime_error(back.status().to_string());
  return *back;
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
  Status st = write_task(t, dir);
  if (!st.ok()) throw std::runtime_error(st.to_string());
  auto back = load_task(dir);
  if (!back.ok()) throw std::runtime_error(back.status().to_string());
  return *back;
}

// An rmsnorm plugin. `body` is inserted in the row loop after y is written (r, d, x, y in scope);
// `abi` overrides the descriptor's version.
inline std::string rmsnorm_source(const std::string& name, const std::string& body = "",
                                  const std::string& abi = "PLUMB_KERNEL_ABI_VERSION") {
  return R"(#include "engine/kernels/plugin_abi.h"
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
