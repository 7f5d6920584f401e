// Search strategies behind one interface: given the space and the history of finished trials,
// propose the next configuration (or say the search is exhausted).
//
// Strategies are stateless across calls: everything they decide derives from (space, options,
// history), with randomness drawn from Rng(derive_seed(seed, "<strategy>/<history size>")). So a
// resumed study (tune --resume) proposes exactly what the uninterrupted one would have.
//
//   grid    every grid point (space.h enumerate_grid order), each once; exhausted at the end.
//   random  uniform samples (space.h sample_uniform); on a finite space, unmeasured points only.
//   bayes   TPE (tree-structured Parzen estimator; why TPE and not a GP: docs/tuning.md): after
//           `startup` random trials, splits the feasible full-stage trials into good (top
//           `gamma` fraction by objective) and bad (the rest, plus every infeasible trial), models
//           each parameter's density in both groups, and proposes the candidate maximizing
//           l(x)/g(x): on finite spaces over every unmeasured point, else over `candidates` draws
//           from l. Infeasible trials raise g where they were, so the search moves away from them.
//   halving successive halving: brackets of `screen_configs` random configurations measured on the
//           short screen workload (stage "screen"); the best ceil(n/eta) feasible ones of each
//           bracket are then measured on the full workload (stage "full").
//   external see proposer.h: any program that reads a JSON context and prints a JSON proposal.
//
// Thread-safety: a Strategy is used from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "tune/space.h"

namespace plumb::tune {

// A finished trial as strategies see it.
struct Observation {
  int64_t index = 0;                // 0-based trial index in the study
  Config config;                    // what was measured
  std::string stage = "full";       // "full" (the study's workload) | "screen" (halving's short one)
  bool feasible = false;            // started, ran and was valid
  std::optional<double> objective;  // the scenario's objective (higher is better) when measured
  std::string status;               // "ok" | "invalid" | "startup_failed" | "crashed" | "timeout" | "error"
  std::string failure;              // why it is infeasible ("" when feasible)
  json::object metrics;             // e.g. ttft_p50_ms, tpot_p50_ms, request_throughput
  std::string notes;                // what an external proposer asked to remember ("" otherwise)
};

struct BudgetLeft {
  int64_t trials = -1;  // trials still allowed; -1 = no trial limit
  double seconds = -1;  // wall time still allowed; -1 = no time limit
};

struct Proposal {
  Config config;               // valid in the space
  std::string stage = "full";  // "full" | "screen"
  std::string rationale;       // why this configuration (shown and stored)
  std::string notes;           // external proposer's notes to itself (stored; passed back next time)
};

struct StrategyOptions {
  std::string name = "bayes";  // grid | random | bayes | halving | external
  uint64_t seed = 1;           // strategy seed (not the workload seed)
  // bayes
  int startup = 5;       // random trials before the model is used
  double gamma = 0.25;   // good fraction
  int candidates = 256;  // draws from l(x) on infinite spaces
  // halving
  int screen_configs = 9;  // configurations screened per bracket
  int eta = 3;             // keep the best 1/eta
  // external
  std::vector<std::string> proposer_argv;              // the program and its arguments
  std::chrono::milliseconds proposer_timeout{60'000};  // per call
  json::object context_extra;  // merged into the proposer's context (objective, scenario, study id)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // The next proposal; nullopt when the strategy has nothing left to propose (grid exhausted).
  // Errors: the external proposer's failures (see proposer.h).
  virtual Result<std::optional<Proposal>> propose(const std::vector<Observation>& history,
                                                  const BudgetLeft& left) = 0;
};

// InvalidArgument for an unknown name (listing them) or bad options (gamma outside (0,1),
// eta < 2, an external strategy without a program).
Result<std::unique_ptr<Strategy>> make_strategy(const SearchSpace& space, const StrategyOptions& options);

// The names make_strategy accepts.
const std::vector<std::string>& strategy_names();

}  // namespace plumb::tune
