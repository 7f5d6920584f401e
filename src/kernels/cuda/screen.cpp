// The screening child and its parent. The child is the only process that touches the device: an
// illegal address poisons its CUDA context for good, so each candidate gets a fresh process.
#include "kernels/cuda/screen.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "kernels/cuda/child_step.h"
#include "kernels/cuda/cubin.h"
#include "kernels/cuda/device.h"

namespace plumb::kernels::cuda {
namespace {

constexpr int kSchemaVersion = 1;
const std::string kResultFile = "screen.json";

// The device buffers of one shape, allocated once per shape and reused across draws and reps.
struct Buffers {
  GuardedBuffer in, in2, w, h, y;
};

Status alloc(CudaOp op, const Shape& s, Buffers* b) {
  const size_t in_bytes = size_t(s.rows * s.in_stride) * 4, out_bytes = size_t(s.rows * s.out_stride) * 2;
  if (Status st = b->in.alloc(in_bytes); !st.ok()) return st;
  if (Status st = b->y.alloc(out_bytes); !st.ok()) return st;
  if (op == CudaOp::kSwiglu) return Status::Ok();
  if (Status st = b->in2.alloc(in_bytes); !st.ok()) return st;
  if (Status st = b->h.alloc(in_bytes); !st.ok()) return st;
  return b->w.alloc(size_t(s.cols) * 4);
}

Status upload(CudaOp op, const HostCase& c, Buffers* b) {
  if (Status st = b->in.upload(c.in.data(), c.in.size() * 4); !st.ok()) return st;
  if (Status st = b->y.poison(); !st.ok()) return st;
  if (op == CudaOp::kSwiglu) return Status::Ok();
  if (Status st = b->in2.upload(c.in2.data(), c.in2.size() * 4); !st.ok()) return st;
  if (Status st = b->w.upload(c.w.data(), c.w.size() * 4); !st.ok()) return st;
  return b->h.poison();
}

Status launch(const LoadedCandidate& k, const LaunchConfig& cfg, CudaOp op, const HostCase& c, Buffers& b,
              cudaStream_t stream) {
  const Shape& s = c.shape;
  if (op == CudaOp::kSwiglu) {
    plumb_swiglu_args a{static_cast<const float*>(b.in.data()),
                        static_cast<unsigned short*>(b.y.data()),
                        s.rows,
                        s.cols,
                        s.in_stride,
                        s.out_stride};
    return k.launch(&a, grid_blocks(cfg, s.rows * s.cols), stream);
  }
  plumb_rmsnorm_residual_args a{static_cast<const float*>(b.in.data()),
                                static_cast<const float*>(b.in2.data()),
                                static_cast<const float*>(b.w.data()),
                                static_cast<float*>(b.h.data()),
                                static_cast<unsigned short*>(b.y.data()),
                                s.rows,
                                s.cols,
                                s.in_stride,
                                s.out_stride,
                                c.eps};
  return k.launch(&a, grid_blocks(cfg, s.rows), stream);
}

// The first damaged guard of the allocated buffers ("" when all are intact).
Result<std::string> guards(const Buffers& b) {
  for (const GuardedBuffer* g : {&b.in, &b.in2, &b.w, &b.h, &b.y}) {
    if (g->bytes() == 0) continue;
    auto dmg = g->guard_damage();
    if (!dmg.ok() || !dmg->empty()) return dmg;
  }
  return std::string();
}

Status read_back(CudaOp op, const HostCase& c, const Buffers& b, Readback* r) {
  auto dmg = guards(b);
  if (!dmg.ok()) return dmg.status();
  r->guard_damage = *dmg;
  r->y.resize(c.ref_y.size());
  r->in.resize(c.in.size());
  if (Status st = b.y.download(r->y.data(), r->y.size() * 2); !st.ok()) return st;
  if (Status st = b.in.download(r->in.data(), r->in.size() * 4); !st.ok()) return st;
  if (op == CudaOp::kSwiglu) return Status::Ok();
  r->h.resize(c.ref_h.size());
  r->in2.resize(c.in2.size());
  if (Status st = b.h.download(r->h.data(), r->h.size() * 4); !st.ok()) return st;
  return b.in2.download(r->in2.data(), r->in2.size() * 4);
}

struct Screen {
  const ScreenOptions& o;
  const LoadedCandidate& k;
  LaunchConfig cfg;
  cudaStream_t stream = nullptr;
  ScreenResult r;

  // One call: upload (outputs poisoned), launch, wait, read back.
  Result<Readback> call(const HostCase& c, Buffers& b) {
    Readback rb;
    Status st = upload(o.op, c, &b);
    if (st.ok()) st = launch(k, cfg, o.op, c, b, stream);
    if (st.ok()) st = cuda_ok(cudaStreamSynchronize(stream), "running the candidate");
    if (st.ok()) st = read_back(o.op, c, b, &rb);
    if (!st.ok()) return st;
    return rb;
  }

  bool correctness() {
    auto shapes = shape_range(o.op, o.rows_max, o.cols);
    if (!shapes.ok()) return fail(ScreenVerdict::kLaunchError, shapes.status().message());
    std::unique_ptr<Buffers> b;
    size_t b_shape = SIZE_MAX;
    Verdict v = run_correctness(o.op, *shapes, o.draws, o.seed,
                                [&](const HostCase& c, size_t si) -> Result<Readback> {
                                  if (si != b_shape) {  // the buffers of one shape serve its draws
                                    b = std::make_unique<Buffers>();
                                    b_shape = si;
                                    if (Status st = alloc(o.op, c.shape, b.get()); !st.ok()) return st;
                                  }
                                  return call(c, *b);
                                });
    r.calls_checked = v.calls;
    if (v.verdict != ScreenVerdict::kPass) return fail(v.verdict, v.reason);
    return true;
  }

  bool fail(ScreenVerdict v, std::string reason) {
    r.verdict = v;
    r.reason = std::move(reason);
    return false;
  }

  bool timing();
};

bool Screen::timing() {
  const Shape s{o.rows_max, o.cols, o.op == CudaOp::kSwiglu ? 2 * o.cols : o.cols, o.cols};
  r.timed_shape = s.to_string();
  Buffers b;
  L2Flush l2;
  auto bw = copy_bandwidth(stream);
  Status st = bw.ok() ? l2.init() : bw.status();
  if (st.ok()) st = alloc(o.op, s, &b);
  if (!st.ok()) return fail(ScreenVerdict::kLaunchError, st.message());
  r.copy_gb_s = *bw / 1e9;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> us;
  HostCase c;
  for (int i = 0; i < o.reps && st.ok(); ++i) {
    c = random_case(o.op, s, o.seed + 1000003 + uint64_t(i), 0);  // re-randomized every rep
    st = upload(o.op, c, &b);
    if (st.ok()) st = l2.flush(stream);
    if (st.ok()) st = cuda_ok(cudaEventRecord(e0, stream), "cudaEventRecord");
    if (st.ok()) st = launch(k, cfg, o.op, c, b, stream);
    if (st.ok()) st = cuda_ok(cudaEventRecord(e1, stream), "cudaEventRecord");
    if (st.ok()) st = cuda_ok(cudaEventSynchronize(e1), "running the candidate");
    float ms = 0;
    if (st.ok()) st = cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    us.push_back(double(ms) * 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (!st.ok()) return fail(ScreenVerdict::kLaunchError, st.message());
  reference(o.op, &c);  // the last rep's output, checked after the timed reps
  Readback rb;
  std::string why;
  if (Status rs = read_back(o.op, c, b, &rb); !rs.ok())
    return fail(ScreenVerdict::kLaunchError, rs.message());
  if (judge(o.op, c, rb, &why) != ScreenVerdict::kPass)
    return fail(ScreenVerdict::kWrongAfterTiming, "the last timed rep: " + why);
  auto t = summarize_times(us);
  if (!t.ok()) return fail(ScreenVerdict::kLaunchError, t.status().message());
  r.time = *t;
  r.implied_gb_s = double(bytes_read(o.op, s)) / (t->median_us * 1e-6) / 1e9;
  const std::string roof = roofline_violation(bytes_read(o.op, s), t->median_us * 1e-6, *bw);
  if (!roof.empty()) return fail(ScreenVerdict::kMeasurementError, roof);
  return true;
}

ScreenResult run_screen(const std::string& cubin_path, const ScreenOptions& o) {
  ScreenResult r;
  std::string why;
  if (cuda_device_count(&why) == 0) {
    r.verdict = ScreenVerdict::kNoDevice;
    r.reason = "no CUDA device visible (" + why +
               "): screening runs on a GPU; `plumb kernels compile --device cuda` works without one";
    return r;
  }
  auto cubin = read_file(cubin_path);
  auto info = cubin.ok() ? read_cubin(*cubin) : Result<CubinInfo>(cubin.status());
  if (!info.ok()) return r.verdict = ScreenVerdict::kAbiRefused, r.reason = info.status().message(), r;
  if (!info->launch)
    return r.verdict = ScreenVerdict::kAbiRefused, r.reason = "no PLUMB_LAUNCH in the cubin", r;
  if (Status st = check_launch(*info->launch, &o.op); !st.ok())
    return r.verdict = ScreenVerdict::kAbiRefused, r.reason = st.message(), r;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  LoadedCandidate k;
  if (Status st = k.load(*cubin, &*info->launch); !st.ok())
    return r.verdict = ScreenVerdict::kLaunchError, r.reason = st.message(), r;
  Screen s{o, k, *info->launch};
  s.r.device = prop.name;
  // A blocking stream: the synchronous uploads and memsets (legacy default stream) finish before
  // the launches on it start.
  cudaStreamCreate(&s.stream);
  s.r.verdict = ScreenVerdict::kPass;
  if (s.correctness() && o.timing) s.timing();
  cudaStreamDestroy(s.stream);
  return s.r;
}

ScreenVerdict verdict_of(std::string_view name) {
  for (int v = 0; v <= int(ScreenVerdict::kSanitizerError); ++v)
    if (verdict_name(ScreenVerdict(v)) == name) return ScreenVerdict(v);
  return ScreenVerdict::kCrashed;
}

}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = fmt::format("{} ({})", cudaGetErrorName(e), cudaGetErrorString(e));
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "the CUDA runtime sees no device";
  return n;
}

boost::json::object to_json(const ScreenResult& r) {
  return {{"schema_version", kSchemaVersion},
          {"verdict", verdict_name(r.verdict)},
          {"reason", r.reason},
          {"device", r.device},
          {"calls_checked", r.calls_checked},
          {"timed_shape", r.timed_shape},
          {"time_us",
           {{"median", r.time.median_us}, {"lo", r.time.lo_us}, {"hi", r.time.hi_us}, {"reps", r.time.reps}}},
          {"copy_gb_s", r.copy_gb_s},
          {"implied_gb_s", r.implied_gb_s},
          {"log", r.log},
          {"sanitizers", [&] {
             boost::json::array a;
             for (const auto& s : r.sanitizers) a.push_back(to_json(s));
             return a;
           }()}};
}

Result<ScreenResult> screen_result_from_json(const boost::json::object& o) {
  try {
    if (o.at("schema_version").to_number<int>() != kSchemaVersion)
      return corrupt("screen.json has another schema_version: screen again");
    ScreenResult r;
    r.verdict = verdict_of(o.at("verdict").as_string());
    r.reason = o.at("reason").as_string();
    r.device = o.at("device").as_string();
    r.calls_checked = o.at("calls_checked").to_number<int64_t>();
    r.timed_shape = o.at("timed_shape").as_string();
    const auto& t = o.at("time_us").as_object();
    r.time = {t.at("median").to_number<double>(), t.at("lo").to_number<double>(),
              t.at("hi").to_number<double>(), t.at("reps").to_number<int64_t>()};
    r.copy_gb_s = o.at("copy_gb_s").to_number<double>();
    r.implied_gb_s = o.at("implied_gb_s").to_number<double>();
    r.log = o.at("log").as_string();
    if (const auto* s = o.if_contains("sanitizers"); s != nullptr && s->is_array()) {
      for (const auto& x : s->as_array())
        if (x.is_object()) r.sanitizers.push_back(sanitizer_report_from_json(x.as_object()));
    }
    return r;
  } catch (const std::exception& e) {
    return corrupt(std::string("screen.json malformed: ") + e.what());
  }
}

int screen_child_main(const std::string& cubin_path, const std::string& out_dir, const ScreenOptions& o) {
  const ScreenResult r = run_screen(cubin_path, o);
  Status st = write_file_atomic((std::filesystem::path(out_dir) / kResultFile).string(),
                                json::dump_pretty(to_json(r)) + "\n");
  if (!st.ok()) {
    fmt::print(stderr, "screen-cuda-child: {}\n", st.to_string());
    return 2;
  }
  return r.verdict == ScreenVerdict::kPass ? 0 : 1;
}

namespace {

// The child's command line; `draws` and `timing` as given.
std::vector<std::string> child_argv(const std::string& plumb_exe, const std::string& cubin_path,
                                    const std::string& out_dir, const ScreenOptions& o, int draws,
                                    bool timing) {
  std::vector<std::string> argv = {plumb_exe,
                                   "kernels",
                                   "screen-cuda-child",
                                   "--cubin",
                                   cubin_path,
                                   "--out",
                                   out_dir,
                                   "--op",
                                   std::string(op_name(o.op)),
                                   "--rows",
                                   std::to_string(o.rows_max),
                                   "--dim",
                                   std::to_string(o.cols),
                                   "--draws",
                                   std::to_string(draws),
                                   "--reps",
                                   std::to_string(o.reps),
                                   "--seed",
                                   std::to_string(o.seed)};
  if (!timing) argv.emplace_back("--no-timing");
  return argv;
}

// The last `n` bytes of `text`.
std::string tail(const std::string& text, size_t n) {
  return text.size() > n ? text.substr(text.size() - n) : text;
}

// Each tool of o.sanitizers over the passing candidate's correctness draws (one draw per shape, no
// timing); stops at the first tool that reports an error, does not finish, or changes the verdict.
Status sanitize(const std::string& plumb_exe, const std::string& cubin_path, const std::string& out_dir,
                const ScreenOptions& o, ScreenResult& r) {
  auto cs = find_compute_sanitizer();
  if (!cs.ok()) {
    r.verdict = ScreenVerdict::kSanitizerError;
    r.reason = cs.status().message();
    return Status::Ok();
  }
  for (const std::string& tool : o.sanitizers) {
    const std::string dir = (std::filesystem::path(out_dir) / ("sanitize-" + tool)).string();
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return io_error("creating " + dir + ": " + ec.message());
    std::vector<std::string> argv = {*cs, "--tool", tool, "--print-limit", "20"};
    for (auto& a : child_argv(plumb_exe, cubin_path, dir, o, 1, false)) argv.push_back(std::move(a));
    PLUMB_ASSIGN_OR_RETURN(ChildStep step,
                           run_child_step(std::move(argv), dir, kResultFile, "sanitizer.log",
                                          o.sanitizer_timeout_s, "compute-sanitizer " + tool));
    auto full = read_file(dir + "/sanitizer.log");
    const std::string log = full.ok() ? *full : step.log_tail;
    SanitizerReport rep = parse_sanitizer_log(tool, log);
    if (step.timed_out) {
      rep.completed = false;
      rep.first = fmt::format("ran past the {:.0f} s limit and was killed", o.sanitizer_timeout_s);
    }
    std::string under;  // the screening's own verdict under the tool, when it is not a pass
    if (step.result) {
      auto inner = screen_result_from_json(*step.result);
      if (inner.ok() && inner->verdict != ScreenVerdict::kPass)
        under = fmt::format("{}: {}", verdict_name(inner->verdict), inner->reason);
    }
    r.sanitizers.push_back(rep);
    if (rep.completed && rep.errors == 0 && under.empty()) continue;
    r.verdict = ScreenVerdict::kSanitizerError;
    if (!rep.completed) {
      r.reason = fmt::format("compute-sanitizer {} did not finish: {}", tool, rep.first);
    } else if (rep.errors > 0) {
      r.reason = fmt::format("compute-sanitizer {}: {} error(s); first: {}", tool, rep.errors, rep.first);
    } else {
      r.reason = fmt::format("under compute-sanitizer {} the screening read {}", tool, under);
    }
    r.log = tail(log, 8000);
    break;
  }
  return Status::Ok();
}

// Writes the parent's record of the screening.
Status write_record(const std::string& out_dir, const ScreenResult& r) {
  return write_file_atomic((std::filesystem::path(out_dir) / kResultFile).string(),
                           json::dump_pretty(to_json(r)) + "\n")
      .with_context("writing the screening record");
}

}  // namespace

Result<ScreenResult> screen_in_child(const std::string& plumb_exe, const std::string& cubin_path,
                                     const std::string& out_dir, const ScreenOptions& o) {
  PLUMB_ASSIGN_OR_RETURN(
      ChildStep step,
      run_child_step(child_argv(plumb_exe, cubin_path, out_dir, o, o.draws, o.timing), out_dir, kResultFile,
                     "screen-child.log", o.timeout_s, "screening child"));
  if (step.result) {
    PLUMB_ASSIGN_OR_RETURN(ScreenResult r, screen_result_from_json(*step.result));
    if (r.verdict != ScreenVerdict::kPass || o.sanitizers.empty()) return r;
    PLUMB_RETURN_IF_ERROR(sanitize(plumb_exe, cubin_path, out_dir, o, r));
    PLUMB_RETURN_IF_ERROR(write_record(out_dir, r));
    return r;
  }
  ScreenResult r;
  if (step.timed_out) {
    r.verdict = ScreenVerdict::kTimedOut;
    r.reason = fmt::format(
        "the screening child ran past the {:.0f} s limit and was killed (a hanging kernel)", o.timeout_s);
  } else {
    r.verdict = ScreenVerdict::kCrashed;
    r.reason = fmt::format("the screening child died ({}) without a result", step.died);
  }
  r.log = step.log_tail;
  PLUMB_RETURN_IF_ERROR(write_record(out_dir, r));
  return r;
}

}  // namespace plumb::kernels::cuda
