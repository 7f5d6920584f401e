// The in-process profile run: workload -> LlmEngine(thread mode) with the observer installed.
#include "kernels/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "core/file.h"
#include "core/json.h"
#include "core/random.h"
#include "engine/cpu/observer.h"
#include "engine/cpu/packed.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/scheduler/llm_engine.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "protocol/protocol.h"
#include "protocol/provenance.h"
#include "workload/request.h"
#include "workload/sources.h"

namespace plumb::kernels {

using engine::KernelCall;
using engine::Op;
using engine::Phase;

namespace {

bool capturable(Op op) {
  return op == Op::kMatmul || op == Op::kRmsNorm || op == Op::kRope || op == Op::kSwiglu || op == Op::kSample;
}

// Accumulates per (module, phase); captures inputs on request. Called from the engine thread only.
class Recorder final : public engine::KernelObserver {
 public:
  Recorder(bool capture, int max_captures) : capture_(capture), max_captures_(max_captures) {}

  void before(const KernelCall& c) override {
    if (!capture_ || !capturable(c.op) || !c.args) return;
    if (c.layer > 0) return;  // layer 0 stands for every layer (same shapes, same kernel)
    auto& seen = captured_m_[key(c)];
    if (c.op == Op::kSample) {
      // Always one row: keep calls 0, 32, 96, 224, ... instead, logits of different positions.
      if (int(seen.size()) >= max_captures_ || sample_calls_++ != 32 * ((int64_t(1) << seen.size()) - 1))
        return;
      seen.push_back(c.m);
    } else {
      if (int(seen.size()) >= max_captures_ || std::find(seen.begin(), seen.end(), c.m) != seen.end()) return;
      seen.push_back(c.m);
    }
    CapturedCall cc;
    cc.op = c.op;
    cc.phase = c.phase;
    cc.module = c.module;
    cc.layer = c.layer;
    cc.m = c.m;
    cc.n = c.n;
    cc.k = c.k;
    switch (c.op) {
      case Op::kMatmul: {
        const auto* a = static_cast<const engine::MatmulCallArgs*>(c.args);
        if (a->w->quant != engine::WeightMatrix{}.quant) return;  // quantized weights: not a v1 task
        cc.x.assign(a->x, a->x + c.m * c.k);
        cc.w_dtype = a->w->dtype;
        const size_t wb = size_t(a->w->rows * a->w->cols) * engine::dtype_size(a->w->dtype);
        const auto* wp = static_cast<const uint8_t*>(a->w->data);
        cc.w.assign(wp, wp + wb);
        if (a->w->layout == engine::WeightLayout::kPacked16) {  // tasks carry row-major weights
          auto* w16 = reinterpret_cast<uint16_t*>(cc.w.data());
          engine::unpack16(w16, a->w->rows, a->w->cols, w16, nullptr);
        }
        if (a->bias) cc.bias.assign(a->bias, a->bias + c.n);
        break;
      }
      case Op::kRmsNorm: {
        const auto* a = static_cast<const engine::RmsNormCallArgs*>(c.args);
        cc.x.assign(a->x, a->x + c.m * c.k);
        cc.x2.assign(a->weight, a->weight + c.k);
        cc.eps = a->eps;
        break;
      }
      case Op::kRope: {
        const auto* a = static_cast<const engine::RopeCallArgs*>(c.args);
        cc.x.assign(a->x, a->x + c.m * c.n * c.k);
        cc.x2.assign(a->inv_freq, a->inv_freq + c.k / 2);
        cc.positions.assign(a->positions, a->positions + c.m);
        break;
      }
      case Op::kSwiglu: {
        const auto* a = static_cast<const engine::SwigluCallArgs*>(c.args);
        cc.x.assign(a->gate, a->gate + c.m * c.n);
        cc.x2.assign(a->up, a->up + c.m * c.n);
        break;
      }
      case Op::kSample: {
        const auto* a = static_cast<const engine::SampleArgs*>(c.args);
        cc.x.assign(a->logits, a->logits + a->vocab);
        cc.sample = *a;
        cc.sample.logits = nullptr;  // the copy in x is the input
        break;
      }
      default:
        return;
    }
    captures.push_back(std::move(cc));
  }

  void after(const KernelCall& c, int64_t ns) override {
    const double ms = double(ns) / 1e6;
    if (c.op == Op::kCount) {
      forward_ms[size_t(c.phase)] += ms;
      return;
    }
    ModuleStats& s = stats_[key(c)];
    if (s.calls == 0) {
      s.module = c.module;
      s.op = c.op;
      s.phase = c.phase;
      s.n = c.n;
      s.k = c.k;
      if (c.op == Op::kMatmul && c.args)
        s.w_dtype = static_cast<const engine::MatmulCallArgs*>(c.args)->w->dtype;
    }
    s.calls++;
    s.ms += ms;
    s.m_hist[c.m]++;
  }

  std::map<std::string, ModuleStats> take_stats() { return std::move(stats_); }

  std::array<double, 2> forward_ms{};
  std::vector<CapturedCall> captures;

 private:
  static std::string key(const KernelCall& c) {
    return std::string(c.module) + "/" + engine::phase_name(c.phase);
  }
  bool capture_;
  int max_captures_;
  int64_t sample_calls_ = 0;
  std::map<std::string, ModuleStats> stats_;
  std::map<std::string, std::vector<int64_t>> captured_m_;
};

struct Job {
  std::vector<int32_t> prompt;
  engine::SamplingParams sampling;
};

// The workload's requests and how many run at once.
struct Workload {
  std::vector<workload::Request> requests;
  int concurrency = 0;
};

// A protocol scenario's synthetic request set for this seed, lengths counted by the model's
// tokenizer (so every request fits its context), as `plumb compare` draws them.
Result<Workload> scenario_requests(const ProfileOptions& o, const std::string& model_dir) {
  Workload w;
  w.concurrency = o.concurrency;
  PLUMB_ASSIGN_OR_RETURN(auto size, protocol::parse_size_class(o.size));
  PLUMB_ASSIGN_OR_RETURN(protocol::Scenario sc, protocol::find_scenario(o.workload, size));
  PLUMB_ASSIGN_OR_RETURN(std::shared_ptr<engine::Tokenizer> counting_tok, engine::Tokenizer::load(model_dir));
  workload::TokenCounter counter = [counting_tok](std::string_view text) -> Result<int64_t> {
    return int64_t(counting_tok->encode(text, false).size());
  };
  workload::SyntheticSpec spec{.seed = o.seed,
                               .num_requests = size_t(sc.requests),
                               .input_len = sc.input_len,
                               .output_len = sc.output_len,
                               .temperature = sc.temperature};
  PLUMB_ASSIGN_OR_RETURN(w.requests, workload::synthetic_requests(spec, counter));
  if (w.concurrency <= 0) w.concurrency = sc.profiles.empty() ? 1 : sc.profiles[0].concurrency;
  return w;
}

// Requests: a protocol scenario drawn from the seed (as `plumb compare` draws them), or a file;
// cut to max_requests.
Result<Workload> load_workload(const ProfileOptions& o, const std::string& model_dir) {
  Workload w;
  if (o.workload.size() == 1 && o.workload[0] >= 'A' && o.workload[0] <= 'D') {
    PLUMB_ASSIGN_OR_RETURN(w, scenario_requests(o, model_dir));
  } else {
    auto set = workload::read_request_set(o.workload);
    if (!set.ok()) {
      return invalid_argument(
          "--workload '" + o.workload +
          "' is neither a scenario id (A, B, C, D) nor a readable request-set JSONL file: " +
          set.status().message());
    }
    w.requests = std::move(set->requests);
    w.concurrency = o.concurrency <= 0 ? 1 : o.concurrency;
  }
  if (o.max_requests > 0 && size_t(o.max_requests) < w.requests.size())
    w.requests.resize(size_t(o.max_requests));
  if (w.requests.empty()) return invalid_argument("the workload has no requests");
  return w;
}

// The model's options: threads and the kernel selection ("auto", "reference" or a selection file).
Result<engine::ModelOptions> model_options(const ProfileOptions& o) {
  engine::ModelOptions mo;
  mo.threads = o.threads;
  if (o.kernels == "reference") {
    mo.kernels = engine::KernelSelection::all_reference();
  } else if (o.kernels != "auto" && !o.kernels.empty()) {
    PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(o.kernels));
    auto sel = engine::KernelSelection::parse_json(text);
    if (!sel.ok()) return sel.status().with_context(o.kernels);
    mo.kernels = *sel;
  }
  return mo;
}

// Model, tokenizer and engine, ready to take requests.
struct Engine {
  std::unique_ptr<engine::Tokenizer> tok;
  std::optional<engine::ChatTemplate> chat;
  std::unique_ptr<scheduler::LlmEngine> eng;
  int64_t ctx_len = 0;
};

// Loads the model with the chosen kernels (recording each op's variant per phase in r) under an
// LlmEngine in thread mode.
Result<Engine> start_engine(const ProfileOptions& o, const std::string& model_dir,
                            const std::function<void(const std::string&)>& say, ProfileReport& r) {
  Engine e;
  PLUMB_ASSIGN_OR_RETURN(e.tok, engine::Tokenizer::load(model_dir));
  PLUMB_ASSIGN_OR_RETURN(e.chat, engine::ChatTemplate::for_tokenizer(*e.tok));
  PLUMB_ASSIGN_OR_RETURN(const scheduler::Device dev, scheduler::parse_device(o.device));
  PLUMB_ASSIGN_OR_RETURN(scheduler::LlmEngineConfig cfg, scheduler::llm_engine_preset("default", dev.name()));
  cfg.threads = o.threads;
  cfg.kernels = o.kernels;
  r.device = dev.name();
  const bool cpu = dev.kind == scheduler::Device::Kind::kCpu;
  if (!cpu && o.kernels != "auto") {
    return invalid_argument("--kernels chooses CPU kernels; with --device " + r.device +
                            " the CUDA runner's own kernels run (leave --kernels at auto)");
  }
  PLUMB_ASSIGN_OR_RETURN(engine::ModelOptions mo, model_options(o));
  mo.upload_only = !cpu;  // row-major host weights to upload (the host sampler keeps its fast kernel)
  say("loading " + model_dir);
  PLUMB_ASSIGN_OR_RETURN(auto model, engine::Model::load(model_dir, mo));
  r.threads = model->pool().size();
  for (Phase p : {Phase::kPrefill, Phase::kDecode}) {
    for (const auto& [op, name] : model->kernel_sets()[size_t(p)].names) {
      // On a GPU the CUDA runner's built-in kernels run (not registry variants); sampling rows that
      // are not greedy still run the CPU's sampling kernel.
      r.variants[std::string(engine::op_name(op)) + "/" + engine::phase_name(p)] =
          cpu || op == Op::kSample ? name : std::string("cuda");
    }
  }
  e.ctx_len = model->config().max_context();
  PLUMB_ASSIGN_OR_RETURN(auto eff, scheduler::normalize(cfg, e.ctx_len));
  // The CPU kernels are what the CPU loop profiles and swaps; with a CUDA device the runner times
  // its own kernels with CUDA events (engine/cuda/cuda_runner.h).
  PLUMB_ASSIGN_OR_RETURN(auto runner, scheduler::make_runner(dev, std::move(model), "profile"));
  if (!cpu) r.hardware = runner->describe();
  PLUMB_ASSIGN_OR_RETURN(
      e.eng, scheduler::LlmEngine::create(eff, std::move(runner), scheduler::LlmEngine::Mode::kThread));
  return e;
}

// Each request as prompt tokens and sampling parameters; every one must fit the model's context.
Result<std::vector<Job>> make_jobs(const std::vector<workload::Request>& requests, const Engine& e,
                                   uint64_t seed, ProfileReport& r) {
  std::vector<Job> jobs;
  for (size_t i = 0; i < requests.size(); ++i) {
    const workload::Request& q = requests[i];
    Job j;
    if (q.is_chat()) {
      std::vector<engine::ChatMessage> msgs;
      for (const auto& m : q.messages) msgs.push_back({m.role, m.content});
      PLUMB_ASSIGN_OR_RETURN(std::string text, e.chat->apply(msgs, true));
      j.prompt = e.tok->encode(text, false);
    } else {
      j.prompt = e.tok->encode(*q.prompt, true);
    }
    j.sampling.temperature = float(q.temperature);
    j.sampling.max_tokens = int32_t(q.max_tokens);
    j.sampling.ignore_eos = q.ignore_eos;
    j.sampling.seed = derive_seed(seed, "kernels/profile/" + std::to_string(i));
    if (int64_t(j.prompt.size()) + j.sampling.max_tokens > e.ctx_len) {
      return invalid_argument("request " + std::to_string(i) + " needs " +
                              std::to_string(j.prompt.size() + size_t(j.sampling.max_tokens)) +
                              " tokens, more than the model's context of " + std::to_string(e.ctx_len) +
                              ": use a smaller workload (e.g. the small size class)");
    }
    r.prompt_tokens += int64_t(j.prompt.size());
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// Submits jobs to the engine and counts what is in flight and what came back.
class Driver {
 public:
  explicit Driver(scheduler::LlmEngine& eng) : eng_(eng) {}

  Status submit(const Job& j) {
    scheduler::GenerationRequest g;
    g.prompt = j.prompt;
    g.sampling = j.sampling;
    g.sink = [this](scheduler::TokenEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      generated_ += int64_t(ev.tokens.size());
      if (ev.finished) {
        if (ev.reason == scheduler::FinishReason::kError && failure_.ok())
          failure_ = internal_error("a request failed");
        --in_flight_;
        cv_.notify_all();
      }
    };
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++in_flight_;
    }
    auto id = eng_.submit(std::move(g));
    if (!id.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      return id.status();
    }
    return Status::Ok();
  }
  // Blocks until at most `limit` requests are in flight.
  void drain_until(int limit) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return in_flight_ <= limit; });
  }
  // Call with nothing in flight.
  int64_t generated() const { return generated_; }
  void reset_generated() { generated_ = 0; }
  const Status& failure() const { return failure_; }

 private:
  scheduler::LlmEngine& eng_;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  int64_t generated_ = 0;
  Status failure_;
};

// Drive: `concurrency` requests in flight, the next submitted when one finishes (burst), with `obs`
// installed (null: none); a warmup request before it, not observed (first-touch of weights and
// workspaces). Returns the wall time of the observed part in ms; adds the tokens generated to
// *generated.
Result<double> drive(Engine& e, const std::vector<Job>& jobs, int concurrency, engine::KernelObserver* obs,
                     const std::function<void(const std::string&)>& say, int64_t* generated) {
  Driver d(*e.eng);
  {
    Job w = jobs[0];
    w.sampling.max_tokens = std::min<int32_t>(w.sampling.max_tokens, 8);
    PLUMB_RETURN_IF_ERROR(d.submit(w));
    d.drain_until(0);
    d.reset_generated();
  }
  engine::set_kernel_observer(obs);
  const auto t0 = std::chrono::steady_clock::now();
  size_t done_reported = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    d.drain_until(concurrency - 1);
    Status st = d.submit(jobs[i]);
    if (!st.ok()) {
      d.drain_until(0);
      engine::set_kernel_observer(nullptr);
      return st.with_context("submitting request " + std::to_string(i));
    }
    if (i + 1 - done_reported >= std::max<size_t>(1, jobs.size() / 8)) {
      say(fmt::format("  {}/{} requests submitted", i + 1, jobs.size()));
      done_reported = i + 1;
    }
  }
  d.drain_until(0);
  const auto t1 = std::chrono::steady_clock::now();
  engine::set_kernel_observer(nullptr);
  PLUMB_RETURN_IF_ERROR(d.failure());
  *generated += d.generated();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// Per-module stats, phase times and weights, and the hotspot scores s(m), sorted; the captures.
void summarize(Recorder& rec, const ProfileOptions& o, ProfileReport& r) {
  auto stats = rec.take_stats();
  double sampling_ms = 0;
  for (auto& [k, s] : stats) {
    s.variant = r.variants[std::string(engine::op_name(s.op)) + "/" + engine::phase_name(s.phase)];
    if (s.op == Op::kSample) sampling_ms += s.ms;
    r.instrumented_ms += s.ms;
    r.modules.push_back(s);
  }
  r.phase_ms = rec.forward_ms;
  r.phase_ms[size_t(Phase::kDecode)] += sampling_ms;
  const double total = r.phase_ms[0] + r.phase_ms[1];
  r.weights_given = o.weights[0] >= 0 && o.weights[1] >= 0;
  for (size_t p = 0; p < 2; ++p)
    r.weights[p] = r.weights_given ? o.weights[p] : (total > 0 ? r.phase_ms[p] / total : 0);
  std::map<std::string, Hotspot> hs;
  for (const auto& s : r.modules) {
    Hotspot& h = hs[s.module];
    h.module = s.module;
    h.op = s.op;
    h.ms[size_t(s.phase)] += s.ms;
  }
  for (auto& [name, h] : hs) {
    for (size_t p = 0; p < 2; ++p) {
      if (r.phase_ms[p] > 0) h.s += r.weights[p] * h.ms[p] / r.phase_ms[p];
    }
    h.share = r.e2e_ms > 0 ? (h.ms[0] + h.ms[1]) / r.e2e_ms : 0;
    r.hotspots.push_back(h);
  }
  std::sort(r.hotspots.begin(), r.hotspots.end(),
            [](const Hotspot& a, const Hotspot& b) { return a.s > b.s; });
  std::sort(r.modules.begin(), r.modules.end(),
            [](const ModuleStats& a, const ModuleStats& b) { return a.ms > b.ms; });
  r.captures = std::move(rec.captures);
}

}  // namespace

Result<ProfileReport> run_profile(const ProfileOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  std::string model_dir = o.model_dir;
  if (model_dir.empty()) {
    PLUMB_ASSIGN_OR_RETURN(model_dir, engine::shipped_model_dir());
  }
  ProfileReport r;
  r.workload = o.workload;
  r.size = o.size;
  r.model = model_dir;
  r.kernels = o.kernels;
  if (o.capture && o.device != "cpu") {
    return unimplemented(
        "plumb kernels tasks --device " + o.device +
        ": tasks captured from a CUDA run (inputs, shapes, the paged-KV block tables) are not "
        "built yet; profile with --device cuda, or capture tasks on the CPU");
  }
  PLUMB_ASSIGN_OR_RETURN(Workload w, load_workload(o, model_dir));
  r.concurrency = w.concurrency;
  PLUMB_ASSIGN_OR_RETURN(Engine e, start_engine(o, model_dir, say, r));
  PLUMB_ASSIGN_OR_RETURN(std::vector<Job> jobs, make_jobs(w.requests, e, o.seed, r));
  Recorder rec(o.capture, o.max_captures_per_module);
  const auto run = drive(e, jobs, w.concurrency, &rec, say, &r.generated_tokens);
  Result<double> again = 0.0;
  if (run.ok() && r.device != "cpu") {  // the cost of the events, which sit between the kernels
    say("the same workload again, not profiled (the overhead of profiling)");
    int64_t generated = 0;
    again = drive(e, jobs, w.concurrency, nullptr, say, &generated);
  }
  e.eng->stop();
  PLUMB_RETURN_IF_ERROR(run.status());
  PLUMB_RETURN_IF_ERROR(again.status());
  r.e2e_ms = *run;
  r.unprofiled_e2e_ms = *again;
  r.requests = int(jobs.size());
  summarize(rec, o, r);
  if (r.hardware.empty()) {
    auto machine = protocol::capture_machine();
    r.hardware = machine.ok() ? machine->cpu_model + ", " + std::to_string(machine->cores) + " logical CPUs"
                              : "unknown";
  }
  return r;
}

std::string format_profile(const ProfileReport& r) {
  std::string out;
  out += fmt::format("workload {} ({}), {} requests at concurrency {}, model {}, kernels {}, {} threads\n",
                     r.workload, r.size, r.requests, r.concurrency, r.model, r.kernels, r.threads);
  out += fmt::format("hardware: {}\n", r.hardware);
  if (r.unprofiled_e2e_ms > 0) {
    out += fmt::format("profiling overhead: {:+.1f}% (end-to-end {:.1f} ms profiled, {:.1f} ms not)\n",
                       100.0 * (r.e2e_ms / r.unprofiled_e2e_ms - 1.0), r.e2e_ms, r.unprofiled_e2e_ms);
  }
  out += fmt::format(
      "end-to-end {:.1f} ms; T(prefill) {:.1f} ms, T(decode) {:.1f} ms (incl. sampling); "
      "{} prompt + {} generated tokens\n",
      r.e2e_ms, r.phase_ms[0], r.phase_ms[1], r.prompt_tokens, r.generated_tokens);
  out += fmt::format("phase weights: w_prefill {:.3f}, w_decode {:.3f} ({})\n", r.weights[0], r.weights[1],
                     r.weights_given ? "given" : "measured time shares");
  out += fmt::format("instrumented kernels explain {:.1f}% of end-to-end time\n\n",
                     r.e2e_ms > 0 ? 100.0 * r.instrumented_ms / r.e2e_ms : 0.0);
  out += fmt::format("{:<22} {:<10} {:>8} {:>11} {:>11} {:>9} {:>8}\n", "module", "op", "s(m)", "prefill ms",
                     "decode ms", "e2e %", "");
  for (const auto& h : r.hotspots) {
    out += fmt::format("{:<22} {:<10} {:>8.4f} {:>11.2f} {:>11.2f} {:>8.2f}%\n", h.module,
                       engine::op_name(h.op), h.s, h.ms[0], h.ms[1], 100.0 * h.share);
  }
  out += "\nper module and phase (rows per call = observed shape range):\n";
  out += fmt::format("{:<22} {:<8} {:<10} {:>8} {:>10} {:>12} {:>7} {:>7} {:<6}\n", "module", "phase",
                     "variant", "calls", "ms", "rows", "n", "k", "dtype");
  for (const auto& s : r.modules) {
    const int64_t lo = s.m_hist.empty() ? 0 : s.m_hist.begin()->first;
    const int64_t hi = s.m_hist.empty() ? 0 : s.m_hist.rbegin()->first;
    out += fmt::format("{:<22} {:<8} {:<10} {:>8} {:>10.2f} {:>12} {:>7} {:>7} {:<6}\n", s.module,
                       engine::phase_name(s.phase), s.variant, s.calls, s.ms, fmt::format("{}..{}", lo, hi),
                       s.n, s.k, s.op == Op::kMatmul ? engine::dtype_name(s.w_dtype) : "f32");
  }
  return out;
}

std::string profile_json(const ProfileReport& r) {
  json::object o;
  o["schema_version"] = 1;
  o["workload"] = r.workload;
  o["size"] = r.size;
  o["model"] = r.model;
  o["kernels"] = r.kernels;
  o["hardware"] = r.hardware;
  o["device"] = r.device;
  if (r.unprofiled_e2e_ms > 0) {
    o["unprofiled_e2e_ms"] = r.unprofiled_e2e_ms;
    o["profiling_overhead"] = r.e2e_ms / r.unprofiled_e2e_ms - 1.0;
  }
  o["requests"] = r.requests;
  o["concurrency"] = r.concurrency;
  o["threads"] = r.threads;
  o["prompt_tokens"] = r.prompt_tokens;
  o["generated_tokens"] = r.generated_tokens;
  o["e2e_ms"] = r.e2e_ms;
  o["phase_ms"] = json::object{{"prefill", r.phase_ms[0]}, {"decode", r.phase_ms[1]}};
  o["weights"] = json::object{{"prefill", r.weights[0]}, {"decode", r.weights[1]}};
  o["weights_source"] = r.weights_given ? "given" : "measured";
  o["instrumented_ms"] = r.instrumented_ms;
  json::array hs;
  for (const auto& h : r.hotspots) {
    hs.push_back(json::object{{"module", h.module},
                              {"op", engine::op_name(h.op)},
                              {"s", h.s},
                              {"prefill_ms", h.ms[0]},
                              {"decode_ms", h.ms[1]},
                              {"share_e2e", h.share}});
  }
  o["hotspots"] = std::move(hs);
  json::array ms;
  for (const auto& s : r.modules) {
    json::object hist;
    for (const auto& [m, c] : s.m_hist) hist[std::to_string(m)] = c;
    ms.push_back(json::object{{"module", s.module},
                              {"op", engine::op_name(s.op)},
                              {"phase", engine::phase_name(s.phase)},
                              {"variant", s.variant},
                              {"calls", s.calls},
                              {"ms", s.ms},
                              {"n", s.n},
                              {"k", s.k},
                              {"dtype", s.op == Op::kMatmul ? engine::dtype_name(s.w_dtype) : "f32"},
                              {"rows_histogram", std::move(hist)}});
  }
  o["modules"] = std::move(ms);
  return json::dump_pretty(o) + "\n";
}

}  // namespace plumb::kernels
