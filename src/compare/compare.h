// Pre-registered paired comparisons of two engine configurations (docs/protocol.md §4–5), behind
// `plumb compare register|run|readout|list`.
//
// register: loads both arms' engine configs (launch/adapter.h EngineConfig TOML), stores them as
//   canonical JSON with the scenario, size class, primary metric (always the scenario's primary
//   objective, higher is better: the database's noise check recomputes CVs from that column),
//   min_effect, delta, pairs and one seed per pair, and returns the registration id.
// run: for each pair not yet recorded (so an interrupted run resumes), draws one request set from
//   the pair's seed, and measures both arms on it in the order protocol::pair_order(i) (AB, BA, ...);
//   past the registered pairs, while a registration with more seeds than pairs has its sizing rule
//   asking for another (protocol.h more_pairs_reason), one more pair at a time:
//   each arm is compare/measure.h's measure(): a fresh launch through launch/ (verified port owner),
//   a warmup, the scenario's load profiles through loadgen/, metrics/ and validity; every run goes
//   into the ledger with provenance in one transaction, valid or not.
// readout: computes protocol::readout from the stored runs (pairs where both arms are valid), and
//   stores it; the database refuses an invalid readout (NOISY arm, too few valid pairs, changed
//   registration) and that refusal is returned as FailedPrecondition with its message.
//
// Thread-safety: functions use the Ledger they are given from the calling thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "launch/adapter.h"
#include "launch/placement.h"
#include "ledger/ledger.h"
#include "protocol/protocol.h"

namespace plumb::compare {

struct RegisterOptions {
  std::string config_a;             // path of arm A's engine config (TOML)
  std::string config_b;             // path of arm B's engine config
  std::string scenario = "D";       // "A".."D"
  std::string size = "small";       // "small" | "gpu"
  std::string metric;               // "" or the scenario's objective name (the only metric supported)
  double min_effect = 0.05;         // better: CI lo > 1 + min_effect; worse: CI hi < 1 - min_effect
  double delta = 0.05;              // equivalent: CI inside [1 - delta, 1 + delta]
  int pairs = protocol::kMinPairs;  // >= 5
  // 0, or the most pairs the registered sizing rule may add up to (protocol.h more_pairs_reason):
  // pairs <= max_pairs <= kMaxPairs. One seed per pair up to max_pairs is registered, so the pairs a
  // comparison may grow to are fixed before its first run.
  int max_pairs = 0;
  uint64_t seed = 21;  // base seed; pair i runs on pair_seeds(seed, max(pairs, max_pairs))[i]
};
inline constexpr int kMaxPairs = 64;

// Seeds of the pairs: derive_seed(base, "compare/pair/<i>") masked to 31 bits (distinct per pair).
std::vector<int64_t> pair_seeds(uint64_t base, int pairs);

// InvalidArgument for bad options (unknown scenario/size, metric other than the objective, rule out
// of range, pairs < 5, unreadable config); IoError/FailedPrecondition from the ledger.
Result<int64_t> register_comparison(ledger::Ledger& ledger, const RegisterOptions& options);

// An arm's stored configuration back as an EngineConfig (the stored JSON names a built-in adapter
// or an absolute adapter path).
Result<launch::EngineConfig> arm_config(const std::string& stored_json);

struct RunOptions {
  std::string plumb_binary;  // used as the plumb adapter's plumb_binary when an arm does not set it
  std::string work_dir;      // engine logs go here; "" = current directory
  // Prompt sizing (compare/measure.h make_token_counter): a model folder with tokenizer.json; "" = the
  // shipped plumb-tiny; "words" = whitespace words. Both arms of a pair always get the same bytes;
  // resuming a comparison with another tokenizer is refused by the ledger (pair_same_inputs).
  std::string tokenizer;
  std::chrono::seconds request_timeout{600};                       // per request
  std::function<void(const std::string&)> progress;                // progress lines; null = log::info
  launch::PlacementMode placement = launch::PlacementMode::kAuto;  // measure.h MeasureOptions::placement
  // > 0: each pair measures only the first request_limit requests of its set (measure.h
  // limit_workload), recorded as limited; the database then refuses a readout of the comparison.
  // For trying a comparison's mechanics on a slow device, never for a verdict.
  size_t request_limit = 0;
  // Where the runs execute (executor::DeviceProvenance::to_json(): host, cards and their identity),
  // stored as "devices" in each run's effective settings so a readout can tell runs on different
  // cards or nodes apart; empty = not recorded.
  json::object devices;
  // > 0: measure at most this many pairs in this call, then return (RunSummary::unfinished); the
  // next call resumes where it stopped. For comparisons longer than one time-limited command.
  int64_t pairs_this_call = 0;
};

struct RunSummary {
  int64_t runs_recorded = 0;   // runs inserted by this call
  int64_t runs_invalid = 0;    // of which invalid (docs/protocol.md §3)
  int64_t pairs_skipped = 0;   // pairs already complete in the ledger
  int64_t pairs_measured = 0;  // pairs this call measured (one arm or both)
  bool unfinished = false;     // stopped by pairs_this_call with pairs still to measure
};

// Measures every pair not yet complete. An engine that fails to start is an error (nothing is
// recorded for that pair); a run that starts but is invalid is recorded as invalid.
Result<RunSummary> run_comparison(ledger::Ledger& ledger, int64_t registration_id, const RunOptions& options);

struct ReadoutResult {
  ledger::Registration registration;  // what was registered
  protocol::Readout readout;          // the computation
  ledger::ReadoutRow row;             // what was (or would be) stored
  int64_t readout_id = 0;             // > 0 when stored
  int64_t pairs_registered = 0;       // registration.pairs
  int64_t pairs_allowed = 0;          // registration.seeds.size(): what the sizing rule may grow to
  int64_t pairs_measured = 0;         // 1 + the highest pair index with a run (valid or not)
  int64_t pairs_complete = 0;         // pairs with both arms valid (used)
  // The registered sizing rule still asks for another pair and a seed is left for it: the
  // comparison is not finished (`plumb compare run` measures it), and a readout is not stored.
  std::string more_pairs_by_rule;
  int64_t runs_invalid = 0;  // invalid runs of the comparison (excluded)
  // Runs that measured a slice of their set (--request-limit): > 0 means the readout is no verdict,
  // and the ledger refuses to store it.
  int64_t runs_limited = 0;
  // Where the runs' engine and client ran, from the first valid run's stored settings and engine
  // config ("engine on CPU 1 (1 thread), client on CPU 0"); "" when not recorded (older runs).
  std::string placement;
  // "" when every valid run that recorded its devices ran on the same host and cards; else which
  // pairs ran where ("pairs 0-2: host n1 cards GPU-a | pairs 3-4: host n1 cards GPU-b", and any pair
  // whose two arms ran apart). Appended to the readout's reason: such pairs are not one population.
  std::string devices_note;
};

// Computes the readout; stores it when `store`. NotFound for an unknown id; FailedPrecondition
// with the database's message when the ledger refuses the readout, or when the registered sizing rule
// still asks for pairs that are not measured yet (the result is not returned then).
Result<ReadoutResult> readout_comparison(ledger::Ledger& ledger, int64_t registration_id, bool store = true);

// The placement line of a run from its stored effective settings and engine config JSON; "" when the
// settings hold no placement.
std::string placement_of_run(const std::string& effective_settings, const std::string& engine_config);
// Where a run executed, from its stored effective settings' "devices": "host H cards U1,U2" (card
// UUIDs, or CUDA_VISIBLE_DEVICES when the identity was unavailable); "" when not recorded.
std::string devices_of_run(const std::string& effective_settings);

// Human-readable readout: ratio B/A with CI, per-arm CV, the pair spread (SD of the per-pair log
// ratios), verdict, pairs still needed, the sizing rule's state, placement.
std::string format_readout(const ReadoutResult& r);

}  // namespace plumb::compare
