// Recording a gate run in the ledger: one run row with gate_status "pass"/"fail" (so the database
// refuses a score from a failed run), the constraints as validity_json, and each evaluated value as
// a metric "gate.<gate>.<constraint>". Ledger must be used from the calling thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "gates/gate.h"
#include "ledger/ledger.h"

namespace plumb::gates {

struct GateRunInfo {
  std::string target_url;                    // the server judged
  std::string target_model;                  // its model name ("unknown" if none)
  std::string reference;                     // reference URL/config ("" if none)
  std::string dataset_path;                  // the multiple-choice set ("" for integrity only)
  std::string dataset_sha256;                // its SHA-256 ("" if none)
  int64_t items = 0;                         // questions / requests judged (>= 1 recorded)
  uint64_t seed = 0;                         // the gate seed
  bool strict = false;                       // not-evaluated constraints fail
  std::optional<double> reference_accuracy;  // measured on the reference in this run, if any
  std::string started_at;                    // core utc timestamp
  std::string ended_at;                      // core utc timestamp
};

// Inserts machine/build/protocol/request-set rows as needed and the run; returns the run id.
Result<int64_t> record_gate_run(ledger::Ledger& ledger, const GateReport& report, const GateRunInfo& info);

// The request-set hash of a gate run: SHA-256 of "plumb-gate/<dataset sha256>" with a dataset,
// else of "plumb-gate/seed/<seed>".
std::string gate_set_hash(const GateRunInfo& info);

// The latest reference accuracy (metric "gate.quality.reference_accuracy") recorded for the same
// dataset and model on this machine; nullopt if none.
Result<std::optional<double>> ledger_baseline_accuracy(ledger::Ledger& ledger,
                                                       const std::string& dataset_sha256,
                                                       const std::string& model);

}  // namespace plumb::gates
