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
  std::function<void(const std::string&)> progress;
};

struct Patch {
  std::string search_dir, name, so_path, module;
  engine::Op op = engine::Op::kMatmul;
  engine::Phase phase = engine::Phase::kDecode;
  double utility = 0.0;
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
Result<Patch> best_patch(const std::string& search_dir, double min_utility);
// One comparison's patches: a phase's (label "prefill"/"decode", scenario by default A/B) or, joint,
// all of them (label "joint", scenario by default that phase's, or D when they span both phases).
// A non-empty `scenario` overrides the default.
struct AcceptGroup {
  std::string label;
  std::string scenario;
  std::vector<Patch> patches;
};
std::vector<AcceptGroup> accept_groups(const std::vector<Patch>& patches, bool joint,
                                       const std::string& scenario);
// base + patches as a selection.
engine::KernelSelection patched_selection(const engine::KernelSelection& base,
                                          const std::vector<Patch>& patches);

Result<std::vector<AcceptOutcome>> run_accept(const AcceptOptions& options);

}  // namespace plumb::kernels
