// Private to tune/: helpers that study.cpp, trial_loop.cpp, revalidate.cpp and study_report.cpp share.
// Not part of the module's face (tune/study.h); nothing outside src/tune includes it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compare/measure.h"
#include "core/status.h"
#include "executor/executor.h"
#include "launch/adapter.h"
#include "ledger/ledger.h"
#include "protocol/protocol.h"
#include "tune/strategy.h"
#include "tune/study.h"

namespace plumb::tune::internal {

// The protocol scenario of the study's options (scenario id and size class).
Result<protocol::Scenario> full_scenario(const StudyOptions& o);

// v printed with the printf format f (one double).
std::string fmt(const char* f, double v);

// v printed with f, or "-" when absent or not finite.
std::string opt_num(const std::optional<double>& v, const char* f = "%.4g");

// A stored trial as the study sees it; a configuration the space no longer accepts is kept as stored.
Trial decode_trial(const SearchSpace& sp, const ledger::TrialRow& t);

// One stage's workload on the dev seed, drawn and stored on first use.
struct StageWorkload {
  std::optional<compare::Workload> w;
  int64_t set_id = 0;
};

// What a study's run holds from one trial to the next (trial_loop.cpp), in the controller and in a
// trial job alike.
struct Loop {
  Loop(ledger::Ledger& l, int64_t i, StudyState s) : ledger(l), id(i), st(std::move(s)) {}
  ledger::Ledger& ledger;
  int64_t id;
  StudyState st;
  protocol::Scenario full, screen;
  std::unique_ptr<Strategy> strategy;
  launch::Adapter adapter;
  workload::TokenCounter counter;
  compare::ProvenanceIds ids;
  StageWorkload w_full, w_screen;
  compare::MeasureOptions mo;
  std::function<void(const std::string&)> say;
  const TrialJob* job = nullptr;  // set in a trial job: the row takes the next free index
  std::string job_note;           // appended to the row's notes in a trial job
  // Where a trial job runs (host, cards and their identity), stored in its run's effective settings
  // as "devices"; nullopt in the in-process loop.
  std::optional<executor::DeviceProvenance> devices;
};

// Loads the study (with the call's budget overrides), its scenarios, strategy, adapter and token counter.
Result<std::unique_ptr<Loop>> open_loop(ledger::Ledger& ledger, int64_t id, const RunContext& ctx);
// Why the loop stops before another trial ("" while the budget allows one): the trial budget
// (finished plus in-flight trials), or a time budget that one more trial of the mean length would
// overrun.
std::string budget_stop(const StudyState& st, int64_t in_flight = 0);
// The strategy's next proposal given every finished trial and the pending (in-flight) ones; nullopt
// when it stops.
Result<std::optional<Proposal>> next_proposal(Loop& l, const std::vector<Observation>& pending = {});
// The live view's line for a trial about to run: its number, the best so far, the time used, the
// configuration and the strategy's rationale.
void announce(const Loop& l, const Proposal& p, bool is_screen);
// The trial's time limit: the option, else 3x the median of the stage's measured trials (at least
// 60 s), else what is left of the time budget (at least 60 s); 0 = none.
double trial_time_limit(const StudyState& st, const std::string& stage);
// Measures one proposal on its stage's workload and records it (trial_loop.cpp).
Result<ledger::TrialRow> measure_trial(Loop& l, const Proposal& p);

// The controller's loop when trials run through an executor (job_loop.cpp).
Result<StudyRunSummary> run_study_jobs(Loop& l, const RunContext& ctx);

}  // namespace plumb::tune::internal
