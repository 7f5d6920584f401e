// The external proposer: any program (an LLM agent, a script, another optimizer) that chooses
// the next configuration. plumb runs it once per trial:
//
//   stdin  one JSON object, the context:
//     {"schema_version": 1,
//      "space": {... space_to_json ...},
//      "objective": {"name": "general_geomean", "direction": "higher", "scenario": "D", "size": "small"},
//      "history": [{"index": 0, "stage": "full", "config": {...}, "feasible": true, "objective": 12.3,
//                   "status": "ok", "failure": "", "metrics": {"ttft_p50_ms": ...}}, ...],
//      "budget_left": {"trials": 7, "seconds": 212.5},        // -1 = no limit
//      "notes": ["what this program wrote in earlier proposals", ...]}
//   stdout one JSON object, the proposal:
//     {"config": {"max_num_seqs": 8, ...}, "rationale": "why", "notes": "remember this",
//      "stage": "full"}                                        // stage optional: "full" | "screen"
//     or {"stop": true, "rationale": "why"} to end the search.
//
// Failures are errors that stop the study with a message naming the program and what to fix:
// it cannot be started; it runs longer than the timeout (its process group is killed); it exits
// non-zero (with its stderr tail); its stdout is not one JSON object; the proposal lacks "config"
// or names a configuration outside the space (validate_config's message). The program runs in
// its own process group with the study's working directory; stderr is kept for error messages.
//
// Thread-safety: one call at a time per strategy.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "tune/space.h"
#include "tune/strategy.h"

namespace plumb::tune {

inline constexpr int kProposerSchemaVersion = 1;

// The context object written to the proposer's stdin.
json::object proposer_context(const SearchSpace& space, const std::vector<Observation>& history,
                              const BudgetLeft& left, const json::object& extra);

// Parses a proposal ("stop" gives nullopt). InvalidArgument for garbage, naming what was wrong.
Result<std::optional<Proposal>> parse_proposal(const SearchSpace& space, const std::string& stdout_text);

Result<std::unique_ptr<Strategy>> make_external_strategy(const SearchSpace& space,
                                                         const StrategyOptions& options);

}  // namespace plumb::tune
