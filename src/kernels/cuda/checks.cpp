#include "kernels/cuda/checks.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/random.h"
#include "stats/stats.h"

namespace plumb::kernels::cuda {
namespace {

float nan_pad() {
  float f = 0;
  std::memcpy(&f, &kGuardWord, sizeof(f));
  return f;
}

double rms_bf16(const std::vector<uint16_t>& v, int64_t rows, int64_t cols, int64_t stride) {
  double s = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double x = bf16_value(v[size_t(r * stride + c)]);
      if (std::isfinite(x)) s += x * x;
    }
  return std::sqrt(s / double(std::max<int64_t>(1, rows * cols)));
}

// got/want at one element against the bound; updates m (the first failure is kept).
void check_element(double got, double want, double scale, const Bound& b, int64_t i, Mismatch* m) {
  const double allowed = b.rtol * std::fabs(want) + b.atol_frac * scale;
  double rel = 0;
  if (std::isnan(want) && std::isnan(got)) return;
  if (!std::isfinite(got) && std::isfinite(want)) {
    rel = std::numeric_limits<double>::infinity();
  } else if (got != want) {
    rel = allowed > 0 ? std::fabs(got - want) / allowed : std::numeric_limits<double>::infinity();
  }
  m->max_rel_err = std::max(m->max_rel_err, rel);
  if (rel > 1 && m->ok) {
    m->ok = false;
    m->index = i;
    m->got = got;
    m->want = want;
  }
}

void finish(Mismatch* m, const char* what, int64_t cols, const Bound& b) {
  if (m->ok) return;
  m->message = fmt::format(
      "{} element {} (row {}, col {}) is {} where the reference is {}: beyond the bound |err| <= {:g}·|ref| "
      "+ "
      "{:g}·rms(ref) (worst element at {:.3g}x the bound)",
      what, m->index, m->index / cols, m->index % cols, m->got, m->want, b.rtol, b.atol_frac, m->max_rel_err);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

}  // namespace

std::string_view verdict_name(ScreenVerdict v) {
  static constexpr std::string_view kNames[] = {"pass",
                                                "wrong_output",
                                                "wrong_output_after_timing",
                                                "mutated_input",
                                                "guard_overwritten",
                                                "launch_error",
                                                "measurement_error",
                                                "abi_refused",
                                                "crashed",
                                                "timed_out",
                                                "no_device",
                                                "sanitizer_error"};
  return kNames[int(v)];
}

ScreenVerdict judge(CudaOp op, const HostCase& c, const Readback& r, std::string* reason) {
  const Shape& s = c.shape;
  if (!same_bits(r.in, c.in) || (op == CudaOp::kRmsNormResidual && !same_bits(r.in2, c.in2))) {
    *reason = "the candidate wrote to an input buffer (inputs are const in the ABI)";
    return ScreenVerdict::kMutatedInput;
  }
  if (!r.guard_damage.empty()) {
    *reason = "a write outside a buffer: the guard region " + r.guard_damage + " changed";
    return ScreenVerdict::kGuardOverwritten;
  }
  if (op == CudaOp::kRmsNormResidual) {
    Mismatch m = compare_f32(r.h, c.ref_h, s.rows, s.cols, s.in_stride);
    if (!m.ok) return *reason = "h_out: " + m.message, ScreenVerdict::kWrongOutput;
  }
  Mismatch m = compare_bf16(r.y, c.ref_y, s.rows, s.cols, s.out_stride);
  if (!m.ok) return *reason = "y: " + m.message, ScreenVerdict::kWrongOutput;
  return ScreenVerdict::kPass;
}

Verdict run_correctness(CudaOp op, const std::vector<Shape>& shapes, int draws, uint64_t seed,
                        const CallFn& call) {
  Verdict v;
  for (size_t si = 0; si < shapes.size(); ++si) {
    HostCase first;
    for (int d = 0; d <= draws; ++d) {
      HostCase c = d < draws ? random_case(op, shapes[si], seed++, d % 3) : first;
      if (d < draws) reference(op, &c);
      if (d == 0) first = c;
      const std::string what =
          fmt::format("shape {}, {} (magnitude {})", shapes[si].to_string(),
                      d < draws ? fmt::format("draw {}", d) : "the first draw repeated", d % 3);
      auto rb = call(c, si);
      if (!rb.ok()) return {ScreenVerdict::kLaunchError, what + ": " + rb.status().message(), v.calls};
      ++v.calls;
      std::string why;
      const ScreenVerdict got = judge(op, c, *rb, &why);
      if (got != ScreenVerdict::kPass) return {got, what + ": " + why, v.calls};
    }
  }
  return v;
}

uint16_t bf16_bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

std::string Shape::to_string() const {
  return fmt::format("{}x{} (strides {}, {})", rows, cols, in_stride, out_stride);
}

Result<std::vector<Shape>> shape_range(CudaOp op, int64_t rows_max, int64_t cols) {
  if (rows_max < 1 || cols < 2)
    return invalid_argument(
        fmt::format("shape range needs rows >= 1 and a width >= 2 (got rows {} width {})", rows_max, cols));
  std::set<int64_t> rows;
  for (int64_t r : {int64_t(1), int64_t(2), int64_t(3), rows_max / 2 + 1, rows_max})
    if (r <= rows_max) rows.insert(r);
  std::vector<int64_t> widths = {cols};
  if (cols % 2 == 0) widths.push_back(cols - 1);
  std::vector<Shape> out;
  const int64_t in_mult = op == CudaOp::kSwiglu ? 2 : 1;
  for (int64_t w : widths)
    for (int64_t r : rows) out.push_back({r, w, in_mult * w, w});
  out.push_back({std::min<int64_t>(rows_max, 5), cols, in_mult * cols + 8, cols + 8});  // padded rows
  return out;
}

HostCase random_case(CudaOp op, const Shape& s, uint64_t seed, int magnitude) {
  Rng rng(seed);
  HostCase c;
  c.shape = s;
  const double in_scale = magnitude == 2 ? 1e3 : 1.0;
  const int64_t in_cols = op == CudaOp::kSwiglu ? 2 * s.cols : s.cols;
  c.in.assign(size_t(s.rows * s.in_stride), nan_pad());
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t j = 0; j < in_cols; ++j)
      c.in[size_t(r * s.in_stride + j)] = float((rng.uniform() * 4 - 2) * in_scale);
  if (op == CudaOp::kRmsNormResidual) {
    c.in2.assign(c.in.size(), nan_pad());
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t j = 0; j < s.cols; ++j)
        c.in2[size_t(r * s.in_stride + j)] = float((rng.uniform() * 2 - 1) * in_scale);
    const double w_scale = magnitude == 1 ? 1e-4 : 1.0;
    c.w.resize(size_t(s.cols));
    for (auto& v : c.w) v = float((0.5 + rng.uniform()) * w_scale);
  } else if (magnitude == 1) {
    for (int64_t r = 0; r < s.rows; ++r)  // small up-projection: outputs of order 1e-4
      for (int64_t j = s.cols; j < 2 * s.cols; ++j) c.in[size_t(r * s.in_stride + j)] *= 1e-4f;
  }
  return c;
}

void reference(CudaOp op, HostCase* c) {
  const Shape& s = c->shape;
  c->ref_y.assign(size_t(s.rows * s.out_stride), 0);
  if (op == CudaOp::kSwiglu) {
    for (int64_t t = 0; t < s.rows; ++t)
      for (int64_t i = 0; i < s.cols; ++i) {
        const float g = c->in[size_t(t * s.in_stride + i)], u = c->in[size_t(t * s.in_stride + s.cols + i)];
        c->ref_y[size_t(t * s.out_stride + i)] = bf16_bits(g / (1.0f + std::exp(-g)) * u);
      }
    return;
  }
  c->ref_h.assign(c->in.size(), 0);
  for (int64_t r = 0; r < s.rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < s.cols; ++i) {
      const float h = c->in[size_t(r * s.in_stride + i)] + c->in2[size_t(r * s.in_stride + i)];
      c->ref_h[size_t(r * s.in_stride + i)] = h;
      ss += double(h) * h;
    }
    const float inv = 1.0f / std::sqrt(float(ss / double(s.cols)) + c->eps);
    for (int64_t i = 0; i < s.cols; ++i)
      c->ref_y[size_t(r * s.out_stride + i)] =
          bf16_bits(c->ref_h[size_t(r * s.in_stride + i)] * inv * c->w[size_t(i)]);
  }
}

Mismatch compare_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref, int64_t rows,
                      int64_t cols, int64_t stride, Bound b) {
  Mismatch m;
  if (got.size() < size_t((rows - 1) * stride + cols) || ref.size() < size_t((rows - 1) * stride + cols)) {
    m.ok = false;
    m.message = "output has fewer elements than the shape";
    return m;
  }
  const double scale = rms_bf16(ref, rows, cols, stride);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * stride + c);
      check_element(bf16_value(got[i]), bf16_value(ref[i]), scale, b, r * cols + c, &m);
    }
  finish(&m, "bf16 output", cols, b);
  return m;
}

Mismatch compare_f32(const std::vector<float>& got, const std::vector<float>& ref, int64_t rows, int64_t cols,
                     int64_t stride, Bound b) {
  Mismatch m;
  if (got.size() < size_t((rows - 1) * stride + cols) || ref.size() < size_t((rows - 1) * stride + cols)) {
    m.ok = false;
    m.message = "output has fewer elements than the shape";
    return m;
  }
  double s = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s += double(ref[size_t(r * stride + c)]) * ref[size_t(r * stride + c)];
  const double scale = std::sqrt(s / double(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * stride + c);
      check_element(got[i], ref[i], scale, b, r * cols + c, &m);
    }
  finish(&m, "float32 output", cols, b);
  return m;
}

int64_t guard_damage(const std::vector<uint8_t>& guard, size_t phase) {
  uint8_t word[4];
  std::memcpy(word, &kGuardWord, 4);
  for (size_t i = 0; i < guard.size(); ++i)
    if (guard[i] != word[(phase + i) % 4]) return int64_t(i);
  return -1;
}

int64_t bytes_read(CudaOp op, const Shape& s) {
  if (op == CudaOp::kSwiglu) return s.rows * s.cols * 2 * 4;  // gate and up
  return s.rows * s.cols * (4 + 4) + s.cols * 4;              // x, residual; the weight once
}

std::string roofline_violation(int64_t bytes, double seconds, double copy_bytes_per_s, double slack) {
  if (seconds <= 0) return "a timed rep took no time: the events did not see the kernel";
  const double implied = double(bytes) / seconds;
  if (implied <= copy_bytes_per_s * slack) return {};
  return fmt::format(
      "{:.0f} GB/s implied by {} bytes in {:.3g} us exceeds the measured copy bandwidth "
      "{:.0f} GB/s: a measurement error (work skipped or done outside the timed events), not a "
      "win",
      implied / 1e9, bytes, seconds * 1e6, copy_bytes_per_s / 1e9);
}

Result<TimeSummary> summarize_times(const std::vector<double>& us) {
  if (us.size() < 2) return invalid_argument("timing needs at least 2 reps");
  auto ci = stats::bootstrap_percentile_interval(
      us, [](std::span<const double> x) { return stats::median(x); }, 0.95, 2000, 12345);
  if (!ci.ok()) return ci.status();
  return TimeSummary{stats::median(us), ci->lo, ci->hi, int64_t(us.size())};
}

}  // namespace plumb::kernels::cuda
