// Calibration of the comparison protocol on this machine: how often a configuration compared with
// itself reads `better` or `worse` (false positives), and how often a configuration made known-slower
// reads `worse` (power). Behind `plumb compare calibrate`; docs/protocol.md "False positives and power".
//
// Each comparison is a full paired protocol run (compare.h): registered before it runs, its pairs
// measured AB/BA with fresh launches, read out by the registered rule and stored in the ledger. The
// A-vs-A and A-vs-slow comparisons alternate, and so do the scenarios, so drift of the machine falls
// on both kinds alike. The slow arm is arm A's configuration with plumb's engine knob
// `debug_step_slowdown` = x (plumb serve --debug-step-slowdown: waits and nothing else), so B/A is
// 1/(1+x) by construction.
//
// A noisy comparison (an arm's CV over the cap) is kept and counted as such: it reads neither
// `better` nor `worse`, so it counts against power and not as a false positive; the result says how
// many there were, since a machine that reads noisy most of the time calibrates nothing.
//
// Thread-safety: as compare.h (one thread per Ledger; starts engine processes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compare/compare.h"
#include "core/status.h"
#include "ledger/ledger.h"

namespace plumb::compare {

// An exact (Clopper-Pearson) two-sided binomial confidence interval for k successes of n.
struct BinomialCi {
  int64_t k = 0, n = 0;
  double share = 0;  // k / n (0 when n == 0)
  double lo = 0, hi = 1;
};
// Clopper-Pearson at `level` (e.g. 0.95): lo solves P(X >= k | lo) = (1-level)/2 (0 when k == 0), hi
// solves P(X <= k | hi) = (1-level)/2 (1 when k == n). n == 0 gives [0, 1].
BinomialCi clopper_pearson(int64_t k, int64_t n, double level = 0.95);
// "0/20 = 0.0% (95% CI 0.0%-16.8%)".
std::string format_binomial(const BinomialCi& ci);

struct CalibrateOptions {
  std::string config;                            // arm A's engine config (TOML, plumb adapter)
  double slowdown = 0.10;                        // the slow arm's debug_step_slowdown (> 0)
  int comparisons = 20;                          // of each kind (A-vs-A and A-vs-slow), >= 1
  std::vector<std::string> scenarios{"B", "D"};  // alternated over the comparisons
  std::string size = "small";
  int pairs = 5;             // per comparison (>= 5)
  int max_pairs = 0;         // > pairs: each comparison's registered sizing rule may grow it to this
  double min_effect = 0.05;  // the registered rule of every comparison
  double delta = 0.05;
  uint64_t seed = 1;     // comparison i of each kind registers seed derive_seed(seed, "<kind>/<i>")
  std::string work_dir;  // the two arms' configs and the engine logs go here; "" = current dir
  RunOptions run;        // how pairs run (plumb_binary, tokenizer, timeout, progress)
};

struct CalibrationComparison {
  std::string kind;  // "a_vs_a" | "a_vs_slow"
  std::string scenario;
  int64_t registration_id = 0;
  std::string verdict;  // protocol verdict name; "error" when it could not be read out
  double ratio = 0, lo = 0, hi = 0, cv_a = 0, cv_b = 0;
  bool stored = false;  // the ledger accepted the readout (it refuses noisy ones)
  std::string error;    // why not read out
};

struct CalibrationResult {
  std::vector<CalibrationComparison> comparisons;  // in the order run
  std::string config_a, config_slow;               // the arms' config files as written
  BinomialCi false_positives;  // A-vs-A comparisons read better or worse, of all A-vs-A run
  BinomialCi power;            // A-vs-slow comparisons read worse, of all A-vs-slow run
  int64_t noisy = 0;           // comparisons (either kind) that read noisy
  std::string placement;       // from the first readout
};

// Writes the two arm configs, then registers, runs and reads out the comparisons, alternating kinds
// and scenarios. InvalidArgument for bad options (a config not on the plumb adapter, slowdown <= 0,
// comparisons < 1); the first error of a comparison's run (e.g. an engine that will not start) is
// returned, with the comparisons done so far already in the ledger.
Result<CalibrationResult> calibrate(ledger::Ledger& ledger, const CalibrateOptions& options);

// The table of comparisons and the two shares with their exact CIs.
std::string format_calibration(const CalibrationResult& r, const CalibrateOptions& options);

}  // namespace plumb::compare
