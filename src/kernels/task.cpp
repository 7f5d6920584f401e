#include "kernels/task.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/file.h"
#include "core/json.h"
#include "engine/cpu/reference.h"

namespace plumb::kernels {

using engine::DType;
using engine::Op;
using engine::Phase;

double tolerance_for(Op op, DType dtype) {
  // Float accumulation differs from the reference's order (and its double accumulators) by about
  // k · 2^-24 relative; k <= a few thousand here. Half-precision weights are converted exactly, so
  // they do not loosen the bound; swiglu allows a polynomial exp (rel. error ~1e-6).
  (void)dtype;
  // Sampling: not an output error but how far the draw u may move (plugin_abi.h, sample), 1e-5 too.
  return op == Op::kMatmul ? 1e-4 : 1e-5;
}

std::vector<float> reference_output(const CapturedCall& c) {
  const engine::KernelContext ctx{nullptr, c.phase};
  std::vector<float> y;
  switch (c.op) {
    case Op::kMatmul: {
      engine::WeightMatrix w{c.w.data(), c.w_dtype, c.n, c.k};
      y.assign(size_t(c.m * c.n), 0.0f);
      engine::ref::matmul(ctx, c.x.data(), c.m, w, c.bias.empty() ? nullptr : c.bias.data(), y.data());
      break;
    }
    case Op::kRmsNorm:
      y.assign(size_t(c.m * c.k), 0.0f);
      engine::ref::rmsnorm(ctx, c.x.data(), c.x2.data(), c.m, c.k, c.eps, y.data());
      break;
    case Op::kRope:
      y = c.x;
      engine::ref::rope(ctx, y.data(), c.m, c.n, c.k, c.positions.data(), c.x2.data());
      break;
    case Op::kSwiglu:
      y.assign(size_t(c.m * c.n), 0.0f);
      engine::ref::swiglu(ctx, c.x.data(), c.x2.data(), c.m, c.n, y.data());
      break;
    case Op::kSample:
      y.assign(1, float(reference_sample(c, c.sample.u)));
      break;
    default:
      break;
  }
  return y;
}

int32_t reference_sample(const CapturedCall& c, double u) {
  auto ref = engine::KernelRegistry::instance().find(Op::kSample, "reference");
  engine::SampleArgs a = c.sample;
  a.logits = c.x.data();
  a.vocab = c.n;
  a.u = u;
  engine::SampleScratch scratch;
  const engine::KernelContext ctx{nullptr, Phase::kDecode};
  return (*ref)->cpu<engine::SampleFn>()(ctx, a, &scratch);
}

namespace {

template <typename T>
Status write_bin(const std::string& path, const std::vector<T>& v) {
  return write_file_atomic(path,
                           std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
}

template <typename T>
Result<std::vector<T>> read_bin(const std::string& path, size_t expect_elems) {
  PLUMB_ASSIGN_OR_RETURN(std::string s, read_file(path));
  if (s.size() != expect_elems * sizeof(T)) {
    return invalid_argument("task file " + path + " has " + std::to_string(s.size()) + " bytes, expected " +
                            std::to_string(expect_elems * sizeof(T)) +
                            " (the task folder is damaged: extract it again)");
  }
  std::vector<T> v(expect_elems);
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

Result<DType> dtype_from(std::string_view s) {
  if (s == "f32") return DType::kF32;
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  return invalid_argument("task.json: unknown dtype '" + std::string(s) + "'");
}

bool task_op(Op op) {
  return op == Op::kMatmul || op == Op::kRmsNorm || op == Op::kRope || op == Op::kSwiglu || op == Op::kSample;
}

// Case i's binary files beside task.json: inputs, weights, bias, positions and the reference output.
Status write_case_files(const Task& t, size_t i, const std::string& dir) {
  const CapturedCall& c = t.cases[i];
  const std::string p = dir + "/case-" + std::to_string(i);
  PLUMB_RETURN_IF_ERROR(write_bin(p + ".x.f32", c.x));
  if (!c.x2.empty()) {
    PLUMB_RETURN_IF_ERROR(write_bin(p + ".x2.f32", c.x2));
  }
  if (!c.w.empty()) PLUMB_RETURN_IF_ERROR(write_bin(p + ".w.bin", c.w));
  if (!c.bias.empty()) PLUMB_RETURN_IF_ERROR(write_bin(p + ".bias.f32", c.bias));
  if (!c.positions.empty()) PLUMB_RETURN_IF_ERROR(write_bin(p + ".pos.i32", c.positions));
  std::vector<float> ref = i < t.ref_outputs.size() ? t.ref_outputs[i] : reference_output(c);
  return write_bin(p + ".ref.f32", ref);
}

// Case i's entry of task.json.
json::object case_json(const Task& t, const CapturedCall& c) {
  json::object co{{"m", c.m},
                  {"layer", c.layer},
                  {"eps", double(c.eps)},
                  {"has_x2", !c.x2.empty()},
                  {"has_bias", !c.bias.empty()}};
  if (t.op == Op::kSample) {
    co["temperature"] = double(c.sample.temperature);
    co["top_k"] = c.sample.top_k;
    co["top_p"] = double(c.sample.top_p);
    co["u"] = c.sample.u;
  }
  return co;
}

}  // namespace

Status write_task(const Task& t, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("cannot create task folder " + dir + ": " + ec.message());
  json::object o;
  o["schema_version"] = 1;
  o["module"] = t.module;
  o["op"] = engine::op_name(t.op);
  o["phase"] = engine::phase_name(t.phase);
  o["dtype"] = engine::dtype_name(t.dtype);
  o["n"] = t.n;
  o["k"] = t.k;
  o["m_min"] = t.m_min;
  o["m_max"] = t.m_max;
  json::object hist;
  for (const auto& [m, c] : t.rows_histogram) hist[std::to_string(m)] = c;
  o["rows_histogram"] = std::move(hist);
  o["baseline_variant"] = t.baseline_variant;
  o["hardware"] = t.hardware;
  o["workload"] = t.workload;
  o["tolerance"] = t.tolerance;
  o["share_e2e"] = t.share;
  json::array cases;
  for (size_t i = 0; i < t.cases.size(); ++i) {
    PLUMB_RETURN_IF_ERROR(write_case_files(t, i, dir));
    cases.push_back(case_json(t, t.cases[i]));
  }
  o["cases"] = std::move(cases);
  return write_file_atomic(dir + "/task.json", json::dump_pretty(o) + "\n");
}

namespace {

// A required string field of task.json.
Result<std::string> required_string(const json::object& o, const std::string& dir, const char* k) {
  PLUMB_ASSIGN_OR_RETURN(auto s, json::opt_string(o, k));
  if (!s) return invalid_argument(dir + "/task.json: missing field '" + std::string(k) + "'");
  return *s;
}

// A required integer field of task.json.
Result<int64_t> required_int(const json::object& o, const std::string& dir, const char* k) {
  PLUMB_ASSIGN_OR_RETURN(auto s, json::opt_int(o, k));
  if (!s) return invalid_argument(dir + "/task.json: missing field '" + std::string(k) + "'");
  return *s;
}

// task.json's module, op, phase, dtype and shapes, checked.
Status read_task_shape(const std::string& dir, const json::object& o, Task& t) {
  auto str = [&](const char* k) { return required_string(o, dir, k); };
  auto num = [&](const char* k) { return required_int(o, dir, k); };
  PLUMB_ASSIGN_OR_RETURN(t.module, str("module"));
  PLUMB_ASSIGN_OR_RETURN(std::string op, str("op"));
  PLUMB_ASSIGN_OR_RETURN(t.op, engine::op_from_name(op));
  if (!task_op(t.op)) return invalid_argument(dir + "/task.json: op '" + op + "' has no tasks");
  PLUMB_ASSIGN_OR_RETURN(std::string phase, str("phase"));
  if (phase != "prefill" && phase != "decode")
    return invalid_argument(dir + "/task.json: phase must be prefill|decode");
  t.phase = phase == "prefill" ? Phase::kPrefill : Phase::kDecode;
  PLUMB_ASSIGN_OR_RETURN(std::string dt, str("dtype"));
  PLUMB_ASSIGN_OR_RETURN(t.dtype, dtype_from(dt));
  PLUMB_ASSIGN_OR_RETURN(t.n, num("n"));
  PLUMB_ASSIGN_OR_RETURN(t.k, num("k"));
  PLUMB_ASSIGN_OR_RETURN(t.m_min, num("m_min"));
  PLUMB_ASSIGN_OR_RETURN(t.m_max, num("m_max"));
  if (t.n < 1 || t.k < (t.op == Op::kSample ? 0 : 1) || t.m_min < 1 || t.m_max < t.m_min) {
    return invalid_argument(dir + "/task.json: shapes must satisfy n, k, m_min >= 1 and m_max >= m_min");
  }
  if (t.op == Op::kRope && t.k % 2 != 0)
    return invalid_argument(dir + "/task.json: rope needs an even k (head_dim)");
  return Status::Ok();
}

// task.json's optional fields: rows histogram, baseline variant, hardware, workload, tolerance, share.
Status read_task_extras(const json::object& o, Task& t) {
  if (auto it = o.find("rows_histogram"); it != o.end() && it->value().is_object()) {
    for (const auto& [m, c] : it->value().as_object()) {
      if (c.is_int64()) t.rows_histogram[std::stoll(std::string(m))] = c.as_int64();
    }
  }
  PLUMB_ASSIGN_OR_RETURN(auto bv, json::opt_string(o, "baseline_variant"));
  t.baseline_variant = bv.value_or("auto");
  PLUMB_ASSIGN_OR_RETURN(auto hw, json::opt_string(o, "hardware"));
  t.hardware = hw.value_or("");
  PLUMB_ASSIGN_OR_RETURN(auto wl, json::opt_string(o, "workload"));
  t.workload = wl.value_or("");
  PLUMB_ASSIGN_OR_RETURN(auto tol, json::opt_double(o, "tolerance"));
  t.tolerance = tol.value_or(tolerance_for(t.op, t.dtype));
  PLUMB_ASSIGN_OR_RETURN(auto share, json::opt_double(o, "share_e2e"));
  t.share = share.value_or(0);
  return Status::Ok();
}

// A sampling case's parameters, checked against the sampling contract's ranges.
Status read_sample_params(const std::string& dir, size_t i, const json::object& co, CapturedCall& c) {
  PLUMB_ASSIGN_OR_RETURN(auto temp, json::opt_double(co, "temperature"));
  PLUMB_ASSIGN_OR_RETURN(auto top_k, json::opt_int(co, "top_k"));
  PLUMB_ASSIGN_OR_RETURN(auto top_p, json::opt_double(co, "top_p"));
  PLUMB_ASSIGN_OR_RETURN(auto u, json::opt_double(co, "u"));
  c.sample.temperature = float(temp.value_or(0));
  c.sample.top_k = int32_t(top_k.value_or(0));
  c.sample.top_p = float(top_p.value_or(1));
  c.sample.u = u.value_or(0);
  c.sample.vocab = c.n;
  if (!(c.sample.temperature >= 0) || c.sample.top_k < 0 || !(c.sample.top_p > 0 && c.sample.top_p <= 1) ||
      !(c.sample.u >= 0 && c.sample.u < 1)) {
    return invalid_argument(dir + "/task.json: cases[" + std::to_string(i) +
                            "]: sampling parameters out of range (temperature >= 0, top_k >= 0, "
                            "0 < top_p <= 1, 0 <= u < 1)");
  }
  return Status::Ok();
}

// Element counts of a case's x, x2 and output for the task's op.
struct CaseSizes {
  size_t x = 0, x2 = 0, out = 0;
};
CaseSizes case_sizes(Op op, const CapturedCall& c) {
  switch (op) {
    case Op::kMatmul:
      return {size_t(c.m * c.k), 0, size_t(c.m * c.n)};
    case Op::kRmsNorm:
      return {size_t(c.m * c.k), size_t(c.k), size_t(c.m * c.k)};
    case Op::kRope:
      return {size_t(c.m * c.n * c.k), size_t(c.k / 2), size_t(c.m * c.n * c.k)};
    case Op::kSample:
      return {size_t(c.n), 0, 1};
    default:
      return {size_t(c.m * c.n), size_t(c.m * c.n), size_t(c.m * c.n)};
  }
}

// Case files at stem p: inputs, weights and bias (matmul), positions (rope), the reference output.
Status read_case_files(const std::string& p, const Task& t, bool has_bias, CapturedCall& c,
                       std::vector<float>* ref) {
  const CaseSizes n = case_sizes(t.op, c);
  PLUMB_ASSIGN_OR_RETURN(c.x, read_bin<float>(p + ".x.f32", n.x));
  if (n.x2) {
    PLUMB_ASSIGN_OR_RETURN(c.x2, read_bin<float>(p + ".x2.f32", n.x2));
  }
  if (t.op == Op::kMatmul) {
    PLUMB_ASSIGN_OR_RETURN(
        c.w, read_bin<uint8_t>(p + ".w.bin", size_t(c.n * c.k) * engine::dtype_size(c.w_dtype)));
    if (has_bias) {
      PLUMB_ASSIGN_OR_RETURN(c.bias, read_bin<float>(p + ".bias.f32", size_t(c.n)));
    }
  }
  if (t.op == Op::kRope) {
    PLUMB_ASSIGN_OR_RETURN(c.positions, read_bin<int32_t>(p + ".pos.i32", size_t(c.m)));
  }
  PLUMB_ASSIGN_OR_RETURN(*ref, read_bin<float>(p + ".ref.f32", n.out));
  return Status::Ok();
}

// Case i: its entry of task.json and its binary files; the reference output into *ref.
Result<CapturedCall> read_case(const std::string& dir, const Task& t, size_t i, const json::object& co,
                               std::vector<float>* ref) {
  CapturedCall c;
  c.op = t.op;
  c.phase = t.phase;
  c.module = t.module;
  c.n = t.n;
  c.k = t.k;
  c.w_dtype = t.dtype;
  PLUMB_ASSIGN_OR_RETURN(auto m, json::opt_int(co, "m"));
  if (!m || *m < 1)
    return invalid_argument(dir + "/task.json: cases[" + std::to_string(i) + "].m must be >= 1");
  c.m = *m;
  PLUMB_ASSIGN_OR_RETURN(auto layer, json::opt_int(co, "layer"));
  c.layer = int32_t(layer.value_or(-1));
  PLUMB_ASSIGN_OR_RETURN(auto eps, json::opt_double(co, "eps"));
  c.eps = float(eps.value_or(0));
  PLUMB_ASSIGN_OR_RETURN(auto has_bias, json::opt_bool(co, "has_bias"));
  const std::string p = dir + "/case-" + std::to_string(i);
  if (t.op == Op::kSample) PLUMB_RETURN_IF_ERROR(read_sample_params(dir, i, co, c));
  PLUMB_RETURN_IF_ERROR(read_case_files(p, t, has_bias.value_or(false), c, ref));
  return c;
}

}  // namespace

Result<Task> load_task(const std::string& dir) {
  auto v = json::parse_file(dir + "/task.json");
  if (!v.ok())
    return v.status().with_context("loading task " + dir + " (make one with `plumb kernels tasks`)");
  if (!v->is_object()) return invalid_argument(dir + "/task.json must be an object");
  const json::object& o = v->as_object();
  Task t;
  t.dir = dir;
  PLUMB_RETURN_IF_ERROR(read_task_shape(dir, o, t));
  PLUMB_RETURN_IF_ERROR(read_task_extras(o, t));
  auto cit = o.find("cases");
  if (cit == o.end() || !cit->value().is_array())
    return invalid_argument(dir + "/task.json: missing 'cases' array");
  size_t i = 0;
  for (const auto& cv : cit->value().as_array()) {
    if (!cv.is_object()) return invalid_argument(dir + "/task.json: cases[] must be objects");
    std::vector<float> ref;
    PLUMB_ASSIGN_OR_RETURN(CapturedCall c, read_case(dir, t, i, cv.as_object(), &ref));
    t.cases.push_back(std::move(c));
    t.ref_outputs.push_back(std::move(ref));
    ++i;
  }
  if (t.cases.empty()) return invalid_argument(dir + "/task.json: a task needs at least one case");
  return t;
}

Result<std::vector<std::string>> write_tasks(const ProfileReport& p, const std::string& out_dir, int top,
                                             double min_share) {
  std::vector<const ModuleStats*> hot;
  for (const auto& s : p.modules) {
    if (!task_op(s.op)) continue;
    if (p.e2e_ms > 0 && s.ms / p.e2e_ms < min_share) continue;
    hot.push_back(&s);
  }
  std::sort(hot.begin(), hot.end(), [](const ModuleStats* a, const ModuleStats* b) { return a->ms > b->ms; });
  if (top > 0 && int(hot.size()) > top) hot.resize(size_t(top));
  std::vector<std::string> written;
  for (const ModuleStats* s : hot) {
    Task t;
    t.module = s->module;
    t.op = s->op;
    t.phase = s->phase;
    t.dtype = s->op == Op::kMatmul ? s->w_dtype : DType::kF32;
    t.n = s->n;
    t.k = s->k;
    t.rows_histogram = s->m_hist;
    t.m_min = s->m_hist.empty() ? 1 : s->m_hist.begin()->first;
    t.m_max = s->m_hist.empty() ? 1 : s->m_hist.rbegin()->first;
    t.baseline_variant = s->variant;
    t.hardware = p.hardware;
    t.workload = p.workload + " (" + p.size + ")";
    t.tolerance = tolerance_for(t.op, t.dtype);
    t.share = p.e2e_ms > 0 ? s->ms / p.e2e_ms : 0;
    for (const auto& c : p.captures) {
      if (c.module == s->module && c.phase == s->phase) t.cases.push_back(c);
    }
    if (t.cases.empty()) continue;  // e.g. quantized weights: nothing captured
    const std::string dir = out_dir + "/" + s->module + "." + engine::phase_name(s->phase);
    PLUMB_RETURN_IF_ERROR(write_task(t, dir));
    written.push_back(dir);
  }
  return written;
}

}  // namespace plumb::kernels
