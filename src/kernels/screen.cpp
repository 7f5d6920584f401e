// Screening: compile, then correctness/safety/timing in a forked child between guard pages.
#include "kernels/screen.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include "core/file.h"
#include "core/random.h"
#include "core/sha256.h"
#include "core/subprocess.h"
#include "engine/cpu/packed.h"
#include "engine/cpu/plugin.h"
#include "engine/cpu/reference.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::kernels {

extern const char* const kPluginAbiHeaderText;  // generated from engine/cpu/plugin_abi.h

using engine::DType;
using engine::Op;

const std::string& plugin_abi_header_text() {
  static const std::string s(kPluginAbiHeaderText);
  return s;
}

std::vector<std::string> compile_command(const std::string& cxx, const std::string& src,
                                         const std::string& so, const std::string& include_dir, bool asan) {
  std::vector<std::string> argv{cxx,       "-std=c++20",          "-O3",   "-march=native",   "-fPIC",
                                "-shared", "-fvisibility=hidden", "-Wall", "-I" + include_dir};
  if (asan) {
    argv.push_back("-fsanitize=address");
    argv.push_back("-fno-omit-frame-pointer");
    argv.push_back("-g");
  }
  argv.insert(argv.end(), {"-o", so, src});
  return argv;
}

ScreenResult compile_candidate(const Candidate& c, const std::string& work_dir, const ScreenOptions& o) {
  ScreenResult r;
  const std::string dir = work_dir + "/" + c.name;
  std::error_code ec;
  std::filesystem::create_directories(dir + "/include/engine/cpu", ec);
  if (ec) {
    r.verdict = "compile_error";
    r.signature = "io";
    r.detail = "cannot create " + dir + ": " + ec.message();
    return r;
  }
  const std::string src = dir + "/" + c.name + ".cpp",
                    so = dir + "/" + c.name + (o.asan ? ".asan.so" : ".so"), log = dir + "/compile.log";
  Status st = write_file_atomic(dir + "/include/engine/cpu/plugin_abi.h", plugin_abi_header_text());
  if (st.ok()) st = write_file_atomic(src, c.source);
  if (!st.ok()) {
    r.verdict = "compile_error";
    r.signature = "io";
    r.detail = st.message();
    return r;
  }
  SpawnOptions so_opts;
  so_opts.argv = compile_command(o.cxx, src, so, dir + "/include", o.asan);
  so_opts.stdout_path = log;
  so_opts.stderr_path = "=stdout";
  auto p = Subprocess::spawn(so_opts);
  if (!p.ok()) {
    r.verdict = "compile_error";
    r.signature = "no_compiler";
    r.detail = "cannot run " + o.cxx + ": " + p.status().message() + " (install g++)";
    return r;
  }
  auto ex = p->wait_for(std::chrono::seconds(120));
  if (!ex) {
    p->stop(std::chrono::milliseconds(100));
    r.verdict = "compile_error";
    r.signature = "compile_timeout";
    r.detail = "the compiler ran longer than 120 s";
    return r;
  }
  if (!ex->exited || ex->exit_code != 0) {
    auto log_text = read_file(log);
    std::string text = log_text.ok() ? *log_text : "";
    size_t cut = 0;
    for (int lines = 0; cut < text.size() && lines < 6; ++lines) {
      size_t nl = text.find('\n', cut);
      cut = nl == std::string::npos ? text.size() : nl + 1;
    }
    r.verdict = "compile_error";
    r.signature = "compile";
    r.detail = "g++ failed (" + log + "): " + text.substr(0, cut);
    return r;
  }
  r.verdict = "compiled";
  r.so_path = so;
  return r;
}

// ---- the child -------------------------------------------------------------------------------

namespace {

// Guard ranges for the fault handler (async-signal-safe reads only).
struct GuardRange {
  uintptr_t lo_begin, lo_end;  // page below the buffer
  uintptr_t hi_begin, hi_end;  // page above
  uintptr_t data, bytes;
  char name[24];
};
constexpr int kMaxGuards = 32;
GuardRange g_guards[kMaxGuards];
std::atomic<int> g_nguards{0};
int g_fd = -1;

void append(char*& p, const char* s) {
  while (*s) *p++ = *s++;
}
void append_num(char*& p, uintptr_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = char('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *p++ = tmp[--n];
}

void on_fault(int sig, siginfo_t* info, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  const int n = g_nguards.load();
  for (int i = 0; i < n; ++i) {
    const GuardRange& g = g_guards[i];
    const bool after = a >= g.hi_begin && a < g.hi_end, before = a >= g.lo_begin && a < g.lo_end;
    if (!after && !before) continue;
    char buf[256];
    char* p = buf;
    append(p, "{\"verdict\":\"unsafe\",\"signature\":\"guard:");
    append(p, g.name);
    append(p, after ? ":after" : ":before");
    if (after) {
      append(p, "\",\"detail\":\"accessed byte offset ");
      append_num(p, a - g.data);
      append(p, " of the ");
      append_num(p, g.bytes);
      append(p, "-byte buffer '");
      append(p, g.name);
      append(p, "': past its end (guard page)\"}\n");
    } else {
      append(p, "\",\"detail\":\"accessed ");
      append_num(p, g.data - a);
      append(p, " bytes before the start of buffer '");
      append(p, g.name);
      append(p, "' (guard page)\"}\n");
    }
    if (write(g_fd, buf, size_t(p - buf)) < 0) {
    }
    _exit(86);
  }
  // Not a guard page: let the default action kill the child so the parent sees the signal.
  signal(sig, SIG_DFL);
}

class Arena {
 public:
  explicit Arena(bool guarded) : guarded_(guarded) {}
  ~Arena() {
    for (auto& [p, len] : maps_) munmap(p, len);
  }
  // A buffer of `bytes`; with guards, flush against the upper guard (align_end) or the lower one.
  void* alloc(const char* name, size_t bytes, bool align_end) {
    if (!guarded_) {
      heap_.emplace_back(bytes + 64, 0);
      return heap_.back().data();
    }
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t body = (bytes + page - 1) / page * page;
    const size_t len = body + 2 * page;
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    maps_.emplace_back(m, len);
    auto* base = static_cast<uint8_t*>(m);
    mprotect(base, page, PROT_NONE);
    mprotect(base + page + body, page, PROT_NONE);
    uint8_t* data = align_end ? base + page + body - bytes : base + page;
    int i = g_nguards.load();
    if (i < kMaxGuards) {
      GuardRange& g = g_guards[i];
      g.lo_begin = uintptr_t(base);
      g.lo_end = uintptr_t(base + page);
      g.hi_begin = uintptr_t(base + page + body);
      g.hi_end = uintptr_t(base + len);
      g.data = uintptr_t(data);
      g.bytes = bytes;
      std::snprintf(g.name, sizeof g.name, "%s", name);
      g_nguards.store(i + 1);
    }
    return data;
  }
  template <typename T>
  T* copy(const char* name, const std::vector<T>& v, bool align_end) {
    auto* p = static_cast<T*>(alloc(name, v.size() * sizeof(T), align_end));
    if (p && !v.empty()) std::memcpy(p, v.data(), v.size() * sizeof(T));
    return p;
  }

 private:
  bool guarded_;
  std::vector<std::pair<void*, size_t>> maps_;
  std::vector<std::vector<uint8_t>> heap_;
};

std::vector<uint8_t> random_weights(Rng& rng, DType dt, size_t count) {
  std::vector<uint8_t> out(count * engine::dtype_size(dt));
  for (size_t i = 0; i < count; ++i) {
    const float f = float(rng.uniform() * 0.2 - 0.1);
    if (dt == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else {
      const uint16_t h = dt == DType::kBF16 ? engine::f32_to_bf16(f) : engine::f32_to_f16(f);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<float> uniform(Rng& rng, size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (auto& x : v) x = float(lo + (hi - lo) * rng.uniform());
  return v;
}

// Fresh random inputs of the task's shapes with `m` rows.
CapturedCall fresh_call(const Task& t, int64_t m, Rng& rng) {
  CapturedCall c;
  c.op = t.op;
  c.phase = t.phase;
  c.module = t.module;
  c.m = m;
  c.n = t.n;
  c.k = t.k;
  c.w_dtype = t.dtype;
  switch (t.op) {
    case Op::kMatmul:
      c.x = uniform(rng, size_t(m * t.k), -1, 1);
      c.w = random_weights(rng, t.dtype, size_t(t.n * t.k));
      if (!t.cases.empty() && !t.cases[0].bias.empty()) c.bias = uniform(rng, size_t(t.n), -1, 1);
      break;
    case Op::kRmsNorm:
      c.x = uniform(rng, size_t(m * t.k), -2, 2);
      c.x2 = uniform(rng, size_t(t.k), 0.5, 1.5);
      c.eps = t.cases.empty() ? 1e-5f : t.cases[0].eps;
      break;
    case Op::kRope: {
      c.x = uniform(rng, size_t(m * t.n * t.k), -1, 1);
      c.x2.resize(size_t(t.k / 2));
      for (size_t i = 0; i < c.x2.size(); ++i)
        c.x2[i] = float(std::pow(10000.0, -2.0 * double(i) / double(t.k)));
      c.positions.resize(size_t(m));
      for (auto& p : c.positions) p = int32_t(rng.uniform_int(0, 511));
      break;
    }
    default:
      c.x = uniform(rng, size_t(m * t.n), -6, 6);
      c.x2 = uniform(rng, size_t(m * t.n), -2, 2);
      break;
  }
  return c;
}

// Sampling draw d: a fresh row of logits and fresh parameters cycling through every path of the
// contract (greedy with a tie at the maximum, plain temperature, top_k, top_p, both), whatever the
// task's own parameters: an accepted kernel serves every request. The vocabulary is the task's on
// most draws and a few entries shorter on every third (vector-tail handling).
CapturedCall fresh_sample_call(const Task& t, int d, Rng& rng) {
  CapturedCall c;
  c.op = Op::kSample;
  c.phase = t.phase;
  c.module = t.module;
  c.m = 1;
  c.n = d % 3 == 2 ? std::max<int64_t>(1, t.n - 1 - rng.uniform_int(0, 14)) : t.n;
  const double spread = d % 2 == 0 ? 4.0 : 12.0;  // flat and peaked distributions
  c.x = uniform(rng, size_t(c.n), -spread, spread);
  engine::SampleArgs& a = c.sample;
  a.vocab = c.n;
  a.temperature = float(0.2 + 1.3 * rng.uniform());
  a.u = rng.uniform();
  switch (d % 5) {
    case 0: {  // greedy; a copy of the maximum at a higher id (the lower id must win)
      a.temperature = 0;
      const auto mx = std::max_element(c.x.begin(), c.x.end()) - c.x.begin();
      if (c.n > 1) c.x[size_t(rng.uniform_int(mx, c.n - 1))] = c.x[size_t(mx)];
      break;
    }
    case 1:
      break;
    case 2:
      a.top_k = int32_t(rng.uniform_int(1, std::min<int64_t>(c.n, 64)));
      break;
    case 3:
      a.top_p = float(0.3 + 0.65 * rng.uniform());
      break;
    default:
      a.top_k = int32_t(rng.uniform_int(1, c.n));
      a.top_p = float(0.5 + 0.45 * rng.uniform());
      break;
  }
  return c;
}

size_t out_elems(const CapturedCall& c) {
  switch (c.op) {
    case Op::kSample:
      return 1;
    case Op::kMatmul:
      return size_t(c.m * c.n);
    case Op::kRmsNorm:
      return size_t(c.m * c.k);
    case Op::kRope:
      return size_t(c.m * c.n * c.k);
    default:
      return size_t(c.m * c.n);
  }
}

// Runs `c` through a plugin (plugin != null) or an engine kernel pointer (fn) on arena buffers.
// Returns the output.
std::vector<float> run_call(const CapturedCall& c, const plumb_kernel_plugin* plugin, void* fn,
                            const engine::KernelContext& ctx, Arena& arena, bool align_end) {
  std::vector<float> out(out_elems(c));
  float* y = nullptr;
  plumb_exec ex = engine::plugin_exec(ctx);
  switch (c.op) {
    case Op::kMatmul: {
      const float* x = arena.copy("x", c.x, align_end);
      const void* w = arena.copy("w", c.w, align_end);
      const float* b = c.bias.empty() ? nullptr : arena.copy("bias", c.bias, align_end);
      y = static_cast<float*>(arena.alloc("y", out.size() * 4, align_end));
      if (plugin) {
        plumb_matmul_args a{x, c.m, c.k, w, int32_t(c.w_dtype), c.n, b, y};
        plugin->run(&ex, &a);
      } else {
        engine::WeightMatrix wm{w, c.w_dtype, c.n, c.k};
        reinterpret_cast<engine::MatmulFn>(fn)(ctx, x, c.m, wm, b, y);
      }
      break;
    }
    case Op::kRmsNorm: {
      const float* x = arena.copy("x", c.x, align_end);
      const float* w = arena.copy("weight", c.x2, align_end);
      y = static_cast<float*>(arena.alloc("y", out.size() * 4, align_end));
      if (plugin) {
        plumb_rmsnorm_args a{x, w, c.m, c.k, c.eps, y};
        plugin->run(&ex, &a);
      } else {
        reinterpret_cast<engine::RmsNormFn>(fn)(ctx, x, w, c.m, c.k, c.eps, y);
      }
      break;
    }
    case Op::kSample: {
      const float* logits = arena.copy("logits", c.x, align_end);
      void* scratch = arena.alloc("scratch", size_t(c.n) * 16, align_end);
      auto* id = static_cast<int32_t*>(arena.alloc("id", 4, align_end));
      *id = -1;
      plumb_sample_args a{
          logits,   c.n, c.sample.temperature, c.sample.top_k, c.sample.top_p, c.sample.u, scratch,
          c.n * 16, id};
      plugin->run(&ex, &a);  // (screening calls plugins only: the engine's kernels are the reference)
      out[0] = float(*id);
      return out;
    }
    case Op::kRope: {
      y = arena.copy("x", c.x, align_end);
      const int32_t* pos = arena.copy("positions", c.positions, align_end);
      const float* inv = arena.copy("inv_freq", c.x2, align_end);
      if (plugin) {
        plumb_rope_args a{y, c.m, c.n, c.k, pos, inv};
        plugin->run(&ex, &a);
      } else {
        reinterpret_cast<engine::RopeFn>(fn)(ctx, y, c.m, c.n, c.k, pos, inv);
      }
      break;
    }
    default: {
      const float* g = arena.copy("gate", c.x, align_end);
      const float* u = arena.copy("up", c.x2, align_end);
      y = static_cast<float*>(arena.alloc("out", out.size() * 4, align_end));
      if (plugin) {
        plumb_swiglu_args a{g, u, c.m, c.n, y};
        plugin->run(&ex, &a);
      } else {
        reinterpret_cast<engine::SwigluFn>(fn)(ctx, g, u, c.m, c.n, y);
      }
      break;
    }
  }
  if (y) std::memcpy(out.data(), y, out.size() * 4);
  return out;
}

double rel_err(const std::vector<float>& y, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = std::fabs(double(y[i]) - double(ref[i]));
    if (!(d <= num)) num = std::isnan(d) ? INFINITY : std::max(num, d);
    den = std::max(den, std::fabs(double(ref[i])));
  }
  return den > 0 ? num / den : num;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void write_line(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += size_t(n);
  }
}

json::object result_json(const ScreenResult& r) {
  return json::object{
      {"verdict", r.verdict},         {"signature", r.signature},       {"detail", r.detail},
      {"max_rel_err", r.max_rel_err}, {"worst_m", r.worst_m},           {"warm_ns", r.warm_ns},
      {"cold_ns", r.cold_ns},         {"base_warm_ns", r.base_warm_ns}, {"base_cold_ns", r.base_cold_ns},
      {"baseline", r.baseline},       {"utility", r.utility},           {"so_path", r.so_path},
      {"warm_calls", r.warm_calls}};
}

ScreenResult result_from_json(const json::object& o) {
  ScreenResult r;
  auto s = [&](const char* k) { return json::string_at(o, k).value_or(""); };
  auto d = [&](const char* k) { return json::number_at(o, k).value_or(0.0); };
  r.verdict = s("verdict");
  r.signature = s("signature");
  r.detail = s("detail");
  r.max_rel_err = d("max_rel_err");
  r.worst_m = int64_t(d("worst_m"));
  r.warm_ns = d("warm_ns");
  r.cold_ns = d("cold_ns");
  r.base_warm_ns = d("base_warm_ns");
  r.base_cold_ns = d("base_cold_ns");
  r.baseline = s("baseline");
  r.utility = d("utility");
  r.so_path = s("so_path");
  r.warm_calls = int64_t(d("warm_calls"));
  return r;
}

// Load errors: a plugin that does not open, implements another op or does not take the task's dtype.
// False with the verdict in r.
bool plugin_fits_task(const Task& t, const Result<engine::PluginInfo>& plugin, ScreenResult& r) {
  if (!plugin.ok()) {
    r.verdict = "load_error";
    r.signature = plugin.status().code() == Code::kFailedPrecondition ? "abi_mismatch" : "load";
    r.detail = plugin.status().message();
    return false;
  }
  if (plugin->op != t.op) {
    r.verdict = "load_error";
    r.signature = "wrong_op";
    r.detail = std::string("the plugin implements ") + engine::op_name(plugin->op) + ", the task is " +
               engine::op_name(t.op);
    return false;
  }
  const plumb_kernel_plugin* p = plugin->desc;
  if (t.op == Op::kMatmul && p->supports && !p->supports(int32_t(t.phase), int32_t(t.dtype))) {
    r.verdict = "incorrect";
    r.signature = "unsupported_dtype";
    r.detail = std::string("the plugin does not support ") + engine::dtype_name(t.dtype) + " weights";
    return false;
  }
  return true;
}

// Correctness and safety of one plugin against the reference outputs, between guard pages.
// Each check returns false with the verdict, signature and detail in r.
class CorrectnessChecker {
 public:
  CorrectnessChecker(const Task& t, const plumb_kernel_plugin* p, const ScreenOptions& o, ScreenResult& r)
      : t_(t), p_(p), o_(o), r_(r) {}

  // Sampling: the id must be one the reference returns for u itself or for u moved by the task's
  // tolerance either way (float arithmetic moves the boundaries between ids by about that much).
  bool check_sample(const CapturedCall& c, int32_t id, const std::vector<float>& ref) {
    const double tol = t_.tolerance;
    const int32_t at_u = int32_t(ref[0]);
    if (id == at_u) return true;
    if (c.sample.temperature != 0) {
      const double lo = std::max(0.0, c.sample.u - tol),
                   hi = std::min(std::nextafter(1.0, 0.0), c.sample.u + tol);
      const int32_t a = reference_sample(c, lo), b = reference_sample(c, hi);
      if (id == a || id == b) return true;
    }
    r_.max_rel_err = 1;
    r_.worst_m = c.m;
    r_.verdict = "incorrect";
    r_.signature = c.sample.temperature == 0 ? "sample:greedy"
                   : c.sample.top_k > 0      ? "sample:top_k"
                   : c.sample.top_p < 1      ? "sample:top_p"
                                             : "sample:draw";
    char buf[240];
    std::snprintf(
        buf, sizeof buf,
        "sampled token %d, the reference %d (vocab %lld, temperature %g, top_k %d, top_p %g, u %.9f)", id,
        at_u, static_cast<long long>(c.n), double(c.sample.temperature), c.sample.top_k,
        double(c.sample.top_p), c.sample.u);
    r_.detail = buf;
    return false;
  }

  // One call on fresh arena buffers (flush against the upper guard when align_end), against ref.
  bool check(const CapturedCall& c, const std::vector<float>& ref, bool align_end, const char* what) {
    Arena arena(o_.guard_pages);
    g_nguards.store(0);
    std::vector<float> y = run_call(c, p_, nullptr, serial_, arena, align_end);
    if (t_.op == Op::kSample) return check_sample(c, int32_t(y[0]), ref);
    const double e = rel_err(y, ref);
    if (!(e <= r_.max_rel_err)) {
      r_.max_rel_err = e;
      r_.worst_m = c.m;
    }
    if (!(e <= t_.tolerance)) {
      r_.verdict = "incorrect";
      r_.signature = std::string("error:") + what;
      char buf[160];
      std::snprintf(buf, sizeof buf, "relative error %.3g > %.3g on %s inputs with %lld rows", e,
                    t_.tolerance, what, static_cast<long long>(c.m));
      r_.detail = buf;
      return false;
    }
    return true;
  }

  // Fresh draws over the shape range, then the captured real inputs; on a pass, r's detail says what held.
  bool check_all() {
    Rng rng(o_.seed);
    // Sampling draws are cheap and the contract has five paths: 10 draws per requested one.
    const int draws = t_.op == Op::kSample ? 10 * o_.draws : o_.draws;
    for (int d = 0; d < draws; ++d) {
      const int64_t m = d == 0 ? t_.m_min : d == 1 ? t_.m_max : rng.uniform_int(t_.m_min, t_.m_max);
      CapturedCall c = t_.op == Op::kSample ? fresh_sample_call(t_, d, rng) : fresh_call(t_, m, rng);
      if (!check(c, reference_output(c), d % 2 == 0, "random")) return false;
    }
    for (size_t i = 0; i < t_.cases.size(); ++i) {
      if (!check(t_.cases[i], t_.ref_outputs[i], i % 2 == 0, "captured")) return false;
    }
    r_.verdict = "pass";
    char buf[200];
    if (t_.op == Op::kSample) {
      std::snprintf(buf, sizeof buf,
                    "the reference's token (u within %.0e) and %s on %d random draws (greedy, temperature, "
                    "top_k, top_p, both) and %zu captured inputs",
                    t_.tolerance, o_.guard_pages ? "guard-page safe" : "unguarded", draws, t_.cases.size());
    } else {
      std::snprintf(buf, sizeof buf,
                    "correct (max rel. error %.3g <= %.3g) and %s on %d random draws (rows %lld..%lld) "
                    "and %zu captured inputs",
                    r_.max_rel_err, t_.tolerance, o_.guard_pages ? "guard-page safe" : "unguarded", o_.draws,
                    static_cast<long long>(t_.m_min), static_cast<long long>(t_.m_max), t_.cases.size());
    }
    r_.detail = buf;
    return true;
  }

 private:
  const Task& t_;
  const plumb_kernel_plugin* p_;
  const ScreenOptions& o_;
  ScreenResult& r_;
  const engine::KernelContext serial_{nullptr, t_.phase};
};

// The engine variant the candidate is timed against: the task's named baseline, else the best one.
const engine::KernelVariant* timing_baseline(const Task& t) {
  const engine::KernelVariant* base = nullptr;
  auto& reg = engine::KernelRegistry::instance();
  if (!t.baseline_variant.empty() && t.baseline_variant != "auto") {
    auto f = reg.find(t.op, t.baseline_variant);
    if (f.ok()) base = *f;
  }
  if (!base) base = reg.best(t.op, t.phase);
  return base;
}

// A call of the candidate (plug) or the baseline (fn) on its own copy of the inputs, prepared once.
struct Prepared {
  CapturedCall c;
  std::vector<float> scratch_x, y;
  plumb_exec ex;
  engine::WeightMatrix wm;
  engine::SampleScratch sample_scratch;
  int32_t id = 0;
};

// Runs the prepared call once through the plugin (plug != null) or the engine kernel fn.
void run_prepared(Prepared& st, const plumb_kernel_plugin* plug, void* fn, const engine::KernelContext& ctx) {
  CapturedCall& c = st.c;
  std::vector<float>& y = st.y;
  std::vector<float>& scratch_x = st.scratch_x;
  const plumb_exec& ex = st.ex;
  const engine::WeightMatrix& wm = st.wm;
  switch (c.op) {
    case Op::kSample: {
      engine::SampleArgs sa = c.sample;
      sa.logits = c.x.data();
      sa.vocab = c.n;
      if (plug) {
        plumb_sample_args a{
            sa.logits, sa.vocab, sa.temperature, sa.top_k, sa.top_p, sa.u, st.sample_scratch.prob.data(),
            c.n * 16,  &st.id};
        plug->run(&ex, &a);
      } else {
        st.id = reinterpret_cast<engine::SampleFn>(fn)(ctx, sa, &st.sample_scratch);
      }
      break;
    }
    case Op::kMatmul:
      if (plug) {
        plumb_matmul_args a{c.x.data(),
                            c.m,
                            c.k,
                            c.w.data(),
                            int32_t(c.w_dtype),
                            c.n,
                            c.bias.empty() ? nullptr : c.bias.data(),
                            y.data()};
        plug->run(&ex, &a);
      } else {
        reinterpret_cast<engine::MatmulFn>(fn)(ctx, c.x.data(), c.m, wm,
                                               c.bias.empty() ? nullptr : c.bias.data(), y.data());
      }
      break;
    case Op::kRmsNorm:
      if (plug) {
        plumb_rmsnorm_args a{c.x.data(), c.x2.data(), c.m, c.k, c.eps, y.data()};
        plug->run(&ex, &a);
      } else {
        reinterpret_cast<engine::RmsNormFn>(fn)(ctx, c.x.data(), c.x2.data(), c.m, c.k, c.eps, y.data());
      }
      break;
    case Op::kRope:  // in place on a scratch copy (angles stay bounded: positions are fixed)
      if (plug) {
        plumb_rope_args a{scratch_x.data(), c.m, c.n, c.k, c.positions.data(), c.x2.data()};
        plug->run(&ex, &a);
      } else {
        reinterpret_cast<engine::RopeFn>(fn)(ctx, scratch_x.data(), c.m, c.n, c.k, c.positions.data(),
                                             c.x2.data());
      }
      break;
    default:
      if (plug) {
        plumb_swiglu_args a{c.x.data(), c.x2.data(), c.m, c.n, y.data()};
        plug->run(&ex, &a);
      } else {
        reinterpret_cast<engine::SwigluFn>(fn)(ctx, c.x.data(), c.x2.data(), c.m, c.n, y.data());
      }
      break;
  }
}

// The call `big` of the candidate (plug) or the baseline variant v, prepared once, as a closure.
// ctx must outlive the closure.
std::function<void()> prepared_call(const CapturedCall& big, const plumb_kernel_plugin* plug,
                                    const engine::KernelVariant* v, const engine::KernelContext& ctx) {
  void* fn = v ? v->host_address() : nullptr;
  auto st = std::make_shared<Prepared>();
  st->c = big;
  st->scratch_x = st->c.x;
  st->y.resize(out_elems(st->c));
  if (st->c.op == Op::kSample) st->sample_scratch.prob.resize(size_t(st->c.n) * 2);  // 16 B per entry
  st->ex = engine::plugin_exec(ctx);
  st->wm = engine::WeightMatrix{st->c.w.data(), st->c.w_dtype, st->c.n, st->c.k};
  // The baseline gets its weights in the layout the model gives it (tasks store them row-major):
  // packed 16 features wide for variants that read that layout (engine/cpu/packed.h).
  if (v && v->reads_packed16 && st->c.op == Op::kMatmul && engine::can_pack16(st->wm)) {
    auto* w16 = reinterpret_cast<uint16_t*>(st->c.w.data());
    engine::pack16(w16, st->c.n, st->c.k, w16, nullptr);
    st->wm.layout = engine::WeightLayout::kPacked16;
  }
  return [st, plug, fn, &ctx] { run_prepared(*st, plug, fn, ctx); };
}

// Mean nanoseconds per call of f over n calls in a row.
double time_n(const std::function<void()>& f, int n) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

// Paired timing: candidate and baseline alternate (AB, BA, AB, ...), so the drift and the
// scheduling noise of a shared machine hit both. Samples come in blocks of two pairs, C B | B C:
// each kernel is timed once right after the other one ran and once right after itself, and the
// two positions differ (on the AMX VM a 40 ns RMSNorm read ~15% slower right after the switch,
// whichever kernel it was). A ratio per pair would then be two clusters (~0.94 and ~1.28 there)
// and their median an arbitrary pick between them; the ratio per block, over both positions,
// cancels the order. u is the median of the block ratios; warm times are medians of block means.
void time_paired(const std::function<void()>& cand, const std::function<void()>& basel,
                 const ScreenOptions& o, ScreenResult& r) {
  std::vector<uint8_t> flush(64u << 20, 1);
  // A warm sample repeats the call `inner` times so that it lasts >= ~20 us (a 60 ns rmsnorm is
  // below the clock's useful resolution); cold samples are single calls after a flush.
  // The repeat count doubles until a sample of the faster kernel lasts >= 20 us (a single first call
  // is cold and carries the clock's overhead: sized from it, a 40 ns kernel's samples were ~7 us).
  int inner = 1;
  while (inner < (1 << 20) && std::min(time_n(cand, inner), time_n(basel, inner)) * inner < 20000.0)
    inner *= 2;
  auto time_one = [&](const std::function<void()>& f) { return time_n(f, inner); };
  // Warm-up, not kept: ~20 ms of alternating samples. Without it about one screening in ten (a fresh
  // child each) times both kernels ~4x slower than the rest (43-46 us against ~10 us for one
  // gate_proj decode call on a Xeon with AMX): the first milliseconds of a forked child and its pool
  // are not its steady state. With it, 0 of 30.
  {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (std::chrono::steady_clock::now() < until) time_one(cand), time_one(basel);
  }
  std::vector<double> cw, bw, cc, bc, ratio;
  for (int i = 0; i < std::max(1, o.warm_reps / 2); ++i) {
    const double c1 = time_one(cand), b1 = time_one(basel);
    const double b2 = time_one(basel), c2 = time_one(cand);
    cw.push_back((c1 + c2) / 2), bw.push_back((b1 + b2) / 2);
    ratio.push_back(c1 + c2 > 0 ? (b1 + b2) / (c1 + c2) : 0);
  }
  for (int i = 0; i < o.cold_reps; ++i) {
    for (size_t j = 0; j < flush.size(); j += 64) flush[j]++;
    cc.push_back(time_n(cand, 1));
    for (size_t j = 0; j < flush.size(); j += 64) flush[j]++;
    bc.push_back(time_n(basel, 1));
  }
  r.warm_ns = median(cw);
  r.cold_ns = median(cc);
  r.base_warm_ns = median(bw);
  r.base_cold_ns = median(bc);
  r.utility = median(ratio);
  r.warm_calls = inner;
}

// Timing on the largest captured case, candidate and baseline, same pool.
void time_against_baseline(const Task& t, const plumb_kernel_plugin* p, const ScreenOptions& o,
                           ScreenResult& r) {
  g_nguards.store(0);
  const CapturedCall* big = &t.cases[0];
  for (const auto& c : t.cases) {
    if (c.m > big->m) big = &c;
  }
  const engine::KernelVariant* base = timing_baseline(t);
  r.baseline = base->name;
  engine::ThreadPool pool(o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency())));
  // Sampling runs on the calling thread in the engine (engine/sampling.cpp): time it that way.
  const engine::KernelContext ctx{t.op == Op::kSample ? nullptr : &pool, t.phase};
  std::function<void()> cand = prepared_call(*big, p, nullptr, ctx),
                        basel = prepared_call(*big, nullptr, base, ctx);
  time_paired(cand, basel, o, r);
}

// The child's checks in order: load, correctness and safety, then (when o.timing) paired timing.
ScreenResult child_checks(const Task& t, const std::string& so, const ScreenOptions& o) {
  ScreenResult r;
  r.so_path = so;
  auto plugin = engine::open_plugin_unscreened(so);
  if (!plugin_fits_task(t, plugin, r)) return r;
  const plumb_kernel_plugin* p = plugin->desc;
  CorrectnessChecker checker(t, p, o, r);
  if (!checker.check_all()) return r;
  if (o.timing) time_against_baseline(t, p, o, r);
  return r;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGKILL:
      return "SIGKILL";
    default:
      return "signal";
  }
}

}  // namespace

int screen_child_main(const std::string& task_dir, const std::string& so_path, const ScreenOptions& o,
                      int fd) {
  g_fd = fd;
  auto task = load_task(task_dir);
  ScreenResult r;
  if (!task.ok()) {
    r.verdict = "load_error";
    r.signature = "task";
    r.detail = task.status().message();
  } else {
    if (o.guard_pages) {
      struct sigaction sa {};
      sa.sa_sigaction = on_fault;
      sa.sa_flags = SA_SIGINFO;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGSEGV, &sa, nullptr);
      sigaction(SIGBUS, &sa, nullptr);
    }
    r = child_checks(*task, so_path, o);
  }
  write_line(fd, json::dump(result_json(r)) + "\n");
  return 0;
}

std::string screen_result_json_text(const ScreenResult& r) { return json::dump(result_json(r)); }

Result<ScreenResult> screen_result_from_json_text(const std::string& text) {
  PLUMB_ASSIGN_OR_RETURN(json::object o, json::parse_object(text));
  if (json::string_at(o, "verdict").value_or("").empty())
    return invalid_argument("a screening result needs a \"verdict\"");
  return result_from_json(o);
}

namespace {

// The path of libasan.so by the compiler ("" when it cannot say).
std::string asan_library(const ScreenOptions& o) {
  std::string asan_lib;
  auto out = run_capture({o.cxx, "-print-file-name=libasan.so"});
  if (out.ok()) {
    asan_lib = out->out;
    while (!asan_lib.empty() && (asan_lib.back() == '\n' || asan_lib.back() == ' ')) asan_lib.pop_back();
  }
  return asan_lib;
}

// In the forked child: the checks, in this process or (asan) in plumb exec'd with libasan preloaded;
// the verdict goes to fd. Never returns.
[[noreturn]] void run_child(const Task& task, const std::string& so_path, const ScreenOptions& o, int fd,
                            const std::string& asan_lib) {
  if (o.asan) {
    // Exec plumb itself with libasan preloaded: an ASan library needs the runtime loaded first.
    const std::string exe = o.plumb_binary.empty() ? "/proc/self/exe" : o.plumb_binary;
    const std::string fd_s = std::to_string(fd);
    setenv("LD_PRELOAD", asan_lib.c_str(), 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1", 1);
    const std::string draws = std::to_string(o.draws), seed = std::to_string(o.seed);
    execl(exe.c_str(), exe.c_str(), "kernels", "screen-child", "--task", task.dir.c_str(), "--so",
          so_path.c_str(), "--fd", fd_s.c_str(), "--draws", draws.c_str(), "--seed", seed.c_str(),
          "--no-timing", (char*)nullptr);
    _exit(127);
  }
  _exit(screen_child_main(task.dir, so_path, o, fd));
}

// Reads the child's output from fd until it closes or the timeout passes; false on timeout.
bool read_until(int fd, std::chrono::milliseconds timeout, std::string& out) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int pr = poll(&pfd, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
    out.append(buf, size_t(n));
  }
}

// The verdict of a child that ended without writing one, from its wait status.
void verdict_from_status(int status, const ScreenOptions& o, ScreenResult& r) {
  if (o.asan && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) {
    // ASAN_OPTIONS=abort_on_error=1: a sanitizer report ends the child with SIGABRT.
    r.verdict = "unsafe";
    r.signature = "asan";
    r.detail =
        "AddressSanitizer reported a memory error (its report is on stderr); plumb itself is unaffected";
  } else if (WIFSIGNALED(status)) {
    r.verdict = "crash";
    r.signature = std::string("signal:") + signal_name(WTERMSIG(status));
    r.detail = std::string("the candidate crashed the screening child with ") +
               signal_name(WTERMSIG(status)) + " (plumb itself is unaffected)";
  } else {
    r.verdict = "crash";
    r.signature = "exit:" + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    r.detail = "the screening child exited with status " +
               std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + " without a verdict" +
               (o.asan ? " (AddressSanitizer report on stderr)" : "");
    if (o.asan) r.signature = "asan";
  }
}

}  // namespace

ScreenResult screen_library(const Task& task, const std::string& so_path, const ScreenOptions& o) {
  ScreenResult r;
  r.so_path = so_path;
  int fds[2];
  if (pipe(fds) != 0) {
    r.verdict = "crash";
    r.signature = "pipe";
    r.detail = "cannot create a pipe for the screening child";
    return r;
  }
  const std::string asan_lib = o.asan ? asan_library(o) : "";
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    r.verdict = "crash";
    r.signature = "fork";
    r.detail = "fork failed";
    return r;
  }
  if (pid == 0) {
    close(fds[0]);
    run_child(task, so_path, o, fds[1], asan_lib);
  }
  close(fds[1]);
  std::string out;
  const bool timed_out = !read_until(fds[0], o.timeout, out);
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    r.verdict = "timeout";
    r.signature = "timeout";
    r.detail = "the candidate ran longer than " + std::to_string(o.timeout.count()) + " ms and was killed";
    return r;
  }
  const size_t nl = out.find('\n');
  if (nl != std::string::npos) {
    auto obj = json::parse_object(out.substr(0, nl));
    if (obj.ok()) {
      r = result_from_json(*obj);
      r.so_path = so_path;
      return r;
    }
  }
  verdict_from_status(status, o, r);
  return r;
}

ScreenResult screen_candidate(const Task& task, const Candidate& c, const std::string& work_dir,
                              const ScreenOptions& o) {
  ScreenResult comp = compile_candidate(c, work_dir, o);
  if (comp.verdict != "compiled") return comp;
  ScreenResult r = screen_library(task, comp.so_path, o);
  if (r.passed() && o.guard_pages && !o.asan) {
    engine::PluginCertificate cert;
    auto sha = sha256_file(comp.so_path);
    cert.sha256 = sha.ok() ? *sha : "";
    cert.verdict = "pass";
    cert.op = engine::op_name(task.op);
    cert.name = c.name;
    cert.task = task.dir;
    cert.utility = r.utility;
    cert.detail = r.detail;
    Status st = engine::write_certificate(comp.so_path, cert);
    if (!st.ok()) r.detail += " (certificate not written: " + st.message() + ")";
  }
  return r;
}

}  // namespace plumb::kernels
