// `plumb kernels profile`: runs a real workload through the reference engine in process (the
// LlmEngine scheduler over the model, the requests of a protocol scenario or a request-set file,
// at the scenario's concurrency) with the engine's profiling observer installed, and reports the
// time of every module (q_proj, attention, input_norm, sampling, ...) in every phase.
//
// Definitions (docs/kernels.md, "Definitions"):
//   t(m, p)  summed wall time of module m's kernel calls in phase p (steady_clock around each call);
//   T(p)     summed time of the forward passes of phase p, plus sampling for decode; a step that
//            mixes prefill chunks and decodes is a prefill step (its shared ops run with the prefill
//            kernels), but its decode attention is listed under decode;
//   w_p      phase weights: T(p) / (T(prefill) + T(decode)) unless given;
//   s(m)     Σ_p w_p · t(m, p) / T(p), the hotspot score;
//   share    t(m, ·) / end-to-end wall time of the measured requests.
// With capture on, the first calls of layer 0 (and of lm_head/final_norm) for each distinct row
// count are copied, inputs only, for `plumb kernels tasks`; for sampling (always one row) the
// sampling calls 0, 32, 96, ... (logits of different positions) with their parameters.
//
// Thread-safety: one profile at a time per process (the observer is process-wide).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/cpu/kernels.h"

namespace plumb::kernels {

// One captured kernel call: its inputs (what the module read), for a task.
struct CapturedCall {
  engine::Op op = engine::Op::kMatmul;
  engine::Phase phase = engine::Phase::kPrefill;
  std::string module;
  int32_t layer = -1;
  int64_t m = 0, n = 0, k = 0;  // as engine::KernelCall
  engine::DType w_dtype = engine::DType::kF32;
  std::vector<float> x;    // matmul/rmsnorm x [m, k]; rope x [m, n, k]; swiglu gate [m, n]; sample logits [n]
  std::vector<float> x2;   // swiglu up [m, n]; rmsnorm weight [k]; rope inv_freq [k/2]
  std::vector<uint8_t> w;  // matmul weight [n, k] in w_dtype
  std::vector<float> bias;         // matmul bias [n] or empty
  std::vector<int32_t> positions;  // rope [m]
  float eps = 0.0f;                // rmsnorm
  engine::SampleArgs sample;       // sample: temperature, top_k, top_p, u (logits in x, vocab = n)
};

struct ModuleStats {
  std::string module;
  engine::Op op = engine::Op::kMatmul;
  engine::Phase phase = engine::Phase::kPrefill;
  int64_t calls = 0;
  double ms = 0.0;
  int64_t n = 0, k = 0;
  std::map<int64_t, int64_t> m_hist;  // rows per call -> calls
  engine::DType w_dtype = engine::DType::kF32;
  std::string variant;  // the kernel variant the engine used for this op and phase
};

struct Hotspot {
  std::string module;
  engine::Op op = engine::Op::kMatmul;
  std::array<double, 2> ms{};  // t(m, p) by phase
  double s = 0.0;              // hotspot score
  double share = 0.0;          // of end-to-end time
};

struct ProfileOptions {
  std::string workload = "D";    // scenario A..D, or a request-set JSONL file
  std::string size = "small";    // scenario size class
  std::string model_dir;         // "" = the shipped plumb-tiny (engine::shipped_model_dir)
  uint64_t seed = 21;            // request-set seed (scenario) and sampling seeds
  int max_requests = 0;          // 0 = all of the workload's requests; else the first N
  int concurrency = 0;           // 0 = the scenario's (1 for a file)
  int threads = 0;               // kernel threads, 0 = all cores
  std::string kernels = "auto";  // "auto" | "reference" | kernel selection JSON file
  // "cpu" | "cuda" | "cuda:N": where the workload runs. With CUDA the runner's own kernels run
  // (`kernels` must stay "auto"), each op timed with CUDA events on the runner's stream, decode
  // graphs included (engine/cuda/cuda_runner.h); capture (tasks) is not available there.
  std::string device = "cpu";
  std::array<double, 2> weights{-1, -1};             // w_p; negative = measured time shares
  bool capture = false;                              // keep CapturedCalls for tasks
  int max_captures_per_module = 3;                   // distinct row counts kept per (module, phase)
  std::function<void(const std::string&)> progress;  // progress lines; null = silent
};

struct ProfileReport {
  std::string workload, size, model, kernels, hardware;
  std::string device = "cpu";
  int requests = 0;
  int concurrency = 1;
  int threads = 1;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  double e2e_ms = 0.0;
  // CUDA: the same workload run again without the observer, for the overhead of profiling
  // (e2e_ms / unprofiled_e2e_ms - 1); 0 on the CPU (not measured).
  double unprofiled_e2e_ms = 0.0;
  std::array<double, 2> phase_ms{};  // T(p)
  std::array<double, 2> weights{};   // w_p used
  bool weights_given = false;
  double instrumented_ms = 0.0;                 // Σ of all module times
  std::vector<ModuleStats> modules;             // by (module, phase)
  std::vector<Hotspot> hotspots;                // by s desc
  std::map<std::string, std::string> variants;  // "<op>/<phase>" -> variant name
  std::vector<CapturedCall> captures;
};

Result<ProfileReport> run_profile(const ProfileOptions& options);
std::string format_profile(const ProfileReport& r);  // the hotspot table
std::string profile_json(const ProfileReport& r);    // schema_version 1

}  // namespace plumb::kernels
