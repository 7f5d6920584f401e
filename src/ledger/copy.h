// Copying one ledger into another (`plumb ledger migrate FILE.db postgresql://...`): every row with
// its provenance, through the Ledger interface, so the destination's validator judges each row as
// it would judge a new one. Ids are the destination's (rows that refer to others are remapped);
// runs are sealed again into the destination's chain.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "ledger/ledger.h"

namespace plumb::ledger {

struct CopyReport {
  std::map<std::string, int64_t> copied;  // rows written, by table ("runs" counts runs of trials too)
  std::vector<std::string> refused;       // one sentence each: which source row, and why
};

// Copies `from` into `to`: machines, builds, protocols, request sets, ceilings, anchors,
// registrations, runs with their per-request rows and metrics, studies with their trials, scores
// and readouts, in an order that satisfies the rules (a registration before its runs, a study's
// trials by index, scores and readouts after their runs). A run that is not sealed in `from` is not
// copied (it is stored there but unusable); a row the destination refuses is listed with the
// database's message, and rows that depend on it are listed as skipped. Reference rows are
// idempotent; other rows are appended, so copying the same file twice copies its runs twice.
// An error (not a refusal) stops the copy: what was copied stays, each row in its own transaction.
Result<CopyReport> copy_ledger(Ledger& from, Ledger& to);

}  // namespace plumb::ledger
