// `plumb kernels accept`: in-model acceptance of screened candidates (docs/architecture.md, idea 3).
//
// For each search folder (search.json from `plumb kernels search`), the best screened candidate
// with u(c, τ) above a floor is patched into a kernel configuration: its library goes into
// "plugins" and its name into the task's op and phase; every other op keeps the base
// configuration's choice. Then the pre-registered paired comparison of docs/protocol.md (§4–5) runs end to
// end (compare/compare.h): arm A = `plumb serve` with the base kernels, arm B = the same engine config with
// the patched kernels (the two configs differ only in `kernels`), on the scenario that loads the candidate's
// phase (decode -> B, prefill -> A, unless one is given), registered before any run, n >= 5 interleaved
// pairs, read out by the fixed rule. The readout and its runs live in the ledger.
//
//   ℓ(c) = L(M[c], W) / L(M, W) = 1 / (objective ratio B/A)   (objectives are higher-is-better)
//
// On CUDA (`device` "cuda"): the search folders are `plumb kernels search --device cuda`'s; each one's
// best (screened under compute-sanitizer) goes into the kernel configuration's "cuda" entries for
// `cuda_phase` (the CUDA runner launches it in place of its own kernel, engine/cuda/cuda_runner.h),
// both arms run `plumb serve --device cuda`, and a group's default scenario is D: on a GPU the
// one-stream scenarios run one-row decode steps, which fold SwiGLU into the GEMV, so D's concurrent
// streams are where a SwiGLU candidate runs at all. The cubin's hash is checked against the one its
// search recorded, and is part of the arm's kernel file name, so the registration names the exact
// cubin measured; each run's provenance names the card and the driver.
//
// With `joint`, all patches form one group and one comparison (default scenario D when they span
// both phases).
// Accepted only if the verdict is `better` (CI of the ratio above 1 + min_effect, i.e. ℓ's CI below
// 1 − min_effect, roughly); then the patched configuration is written to `kernels_out`. Otherwise
// nothing is written and the null result is reported as such.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/cpu/kernels.h"

namespace plumb::kernels {

struct AcceptOptions {
  std::vector<std::string> search_dirs;  // folders with search.json
  std::string base_kernels;              // kernel configuration to patch ("" = auto everywhere)
  std::string kernels_out;               // where the accepted configuration goes
  std::string ledger_path;               // SQLite ledger
  std::string scenario;                  // "" = by phase (decode B, prefill A)
  std::string size = "small";
  int pairs = 5;
  double min_effect = 0.05;
  double delta = 0.05;
  uint64_t seed = 21;
  double min_utility = 1.0;  // patch only candidates with u > this
  std::string model_dir;     // absolute; "" = the shipped plumb-tiny
  std::string plumb_binary;  // the plumb executable for the arms
  std::string work_dir;      // arm configs, engine logs
  int threads = 0;           // engine threads for both arms (0 = plumb serve's default)
  // One comparison of base vs base + every patch (all phases together) instead of one per phase, on
  // `scenario` or, when empty, B (decode patches only), A (prefill only) or D (both): the question
  // "is the whole patched configuration faster on this workload?".
  bool joint = false;
  std::string device = "cpu";  // "cpu" | "cuda" (the arms' --device; the search folders' kind)
  // CUDA: the phase(s) the candidates replace the runner's kernel in: "decode", "prefill" or "both".
  std::string cuda_phase = "decode";
  std::function<void(const std::string&)> progress;
};

struct Patch {
  std::string search_dir, name, so_path, module;
  engine::Op op = engine::Op::kMatmul;
  engine::Phase phase = engine::Phase::kDecode;
  double utility = 0.0;
  // CUDA candidates: the ABI's op name, the cubin (absolute) and what its search recorded.
  std::string cuda_op, cubin_path, cubin_sha256, source_sha256, nvrtc_version, card;
  bool cuda() const { return !cubin_path.empty(); }
};

struct AcceptOutcome {
  std::string phase;     // the phase group compared, or "joint"
  std::string scenario;  // scenario used
  std::vector<Patch> patches;
  int64_t registration_id = 0;
  int64_t readout_id = 0;
  double ratio = 0, ratio_lo = 0, ratio_hi = 0;  // objective B/A
  double ell = 0, ell_lo = 0, ell_hi = 0;        // ℓ(c) and its CI
  std::string verdict;
  bool accepted = false;
  std::string readout_text;
};

// The patch of one search folder (its best passing candidate), NotFound if none passed or u <= floor.
// A CUDA search's folder (search.json "device": "cuda") gives a patch with cubin_path set, its phase
// `cuda_phase` ("decode" or "prefill"); its u is the fraction of the copy bandwidth, not a speedup.
Result<Patch> best_patch(const std::string& search_dir, double min_utility,
                         engine::Phase cuda_phase = engine::Phase::kDecode);
// One comparison's patches: a phase's (label "prefill"/"decode", scenario by default A/B) or, joint,
// all of them (label "joint", scenario by default that phase's, or D when they span both phases).
// A non-empty `scenario` overrides the default.
struct AcceptGroup {
  std::string label;
  std::string scenario;
  std::vector<Patch> patches;
};
// `default_scenario`, when not empty, replaces the by-phase defaults (CUDA: "D").
std::vector<AcceptGroup> accept_groups(const std::vector<Patch>& patches, bool joint,
                                       const std::string& scenario, const std::string& default_scenario = "");
// base + patches as a selection (a CUDA patch as a "cuda" entry of its op and phase).
engine::KernelSelection patched_selection(const engine::KernelSelection& base,
                                          const std::vector<Patch>& patches);

Result<std::vector<AcceptOutcome>> run_accept(const AcceptOptions& options);

}  // namespace plumb::kernels
