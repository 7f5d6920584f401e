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
  std::map<std::string, int64_t> copied;   // rows written, by table ("runs" counts runs of trials too)
  std::map<std::string, int64_t> already;  // rows the destination held already, by table (not written)
  std::vector<std::string> refused;        // one sentence each: which source row, and why
};

// Copies `from` into `to`: machines, builds, protocols, request sets, ceilings, anchors,
// registrations, runs with their per-request rows and metrics, studies with their trials, scores
// and readouts, in an order that satisfies the rules (a registration before its runs, a study's
// trials by index, scores and readouts after their runs). A run that is not sealed in `from` is not
// copied (it is stored there but unusable); a row the destination refuses is listed with the
// database's message, and rows that depend on it are listed as skipped. Copying is idempotent: a
// row the destination already holds (the same natural key: a run's start, end, configuration hash,
// seed, arm and pair; a registration's creation time and fields; a study's creation time and name;
// a study's trials by index; a score's runs; a readout's time and verdict) is counted in `already`
// and not written again, so copying a file twice copies nothing the second time, and copying it
// again after it grew copies only the new rows.
// An error (not a refusal) stops the copy: what was copied stays, each row in its own transaction.
Result<CopyReport> copy_ledger(Ledger& from, Ledger& to);

}  // namespace plumb::ledger
