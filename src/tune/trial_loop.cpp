// The trial loop of a study (run_study): propose, measure on the dev seed, record, until a budget
// or the strategy stops it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "compare/measure.h"
#include "core/clock.h"
#include "launch/adapter.h"
#include "tune/strategy.h"
#include "tune/study.h"
#include "tune/study_internal.h"

namespace plumb::tune {
namespace {

using internal::decode_trial;
using internal::fmt;
using internal::Loop;
using internal::opt_num;
using internal::StageWorkload;

// The short screen of successive halving: the same shape with a fraction of the requests, and the
// completed-requests minimum scaled with it. Its own scenario id so its runs are never mistaken for the
// protocol scenario's.
protocol::Scenario screen_scenario(const protocol::Scenario& sc, double fraction) {
  protocol::Scenario s = sc;
  s.id = sc.id + "-screen";
  s.requests = std::max(8, int(std::lround(sc.requests * fraction)));
  double f = double(s.requests) / double(sc.requests);
  s.min_completed = std::max(1, int(std::floor(sc.min_completed * f)));
  // A short run's steady window (completions overlapping sends) shrinks faster than its length, so
  // a screen has no steady-window minimum; every other validity rule holds. A screen only filters:
  // survivors are measured on the full workload, where every rule applies.
  s.min_steady_requests = 0;
  return s;
}

json::object metrics_summary(const std::vector<ledger::MetricRow>& ms) {
  json::object o;
  for (const auto& m : ms) {
    std::string n = m.name;
    if (n.rfind("p0.", 0) == 0) n = n.substr(3);
    if (n == "ttft_p50_ms" || n == "tpot_p50_ms" || n == "request_throughput" || n == "output_throughput" ||
        n == "e2e_p50_ms" || n == "objective")
      if (!o.contains(n)) o[n] = m.value;
  }
  return o;
}

// The trial status the ledger stores for a measurement's outcome (ledger.h's list): an engine that
// exited or could not be supervised before it was ready is startup_failed; a target that stopped
// being the launched one mid-run is an invalid run.
std::string trial_status(const compare::Measurement& m) {
  switch (m.outcome) {
    case compare::Outcome::kValid:
      return "ok";
    case compare::Outcome::kInvalid:
      return "invalid";
    case compare::Outcome::kCrashed:
      return m.started ? "crashed" : "startup_failed";
    case compare::Outcome::kTimedOut:
      return "timeout";
    case compare::Outcome::kInfrastructureFailure:
      return m.started ? "invalid" : "startup_failed";
  }
  return "error";
}

}  // namespace

namespace internal {

// Loads the study (with the call's budget overrides), its scenarios, strategy, adapter and token counter.
Result<std::unique_ptr<Loop>> open_loop(ledger::Ledger& ledger, int64_t id, const RunContext& ctx) {
  PLUMB_ASSIGN_OR_RETURN(StudyState st, load_study(ledger, id));
  if (ctx.trials_override) st.options.trials = *ctx.trials_override;
  if (ctx.time_budget_override) st.options.time_budget_s = *ctx.time_budget_override;
  auto loop = std::make_unique<Loop>(ledger, id, std::move(st));
  const StudyOptions& o = loop->st.options;
  PLUMB_ASSIGN_OR_RETURN(loop->full, internal::full_scenario(o));
  const protocol::Scenario& sc = loop->full;
  loop->screen = screen_scenario(sc, o.screen_fraction);
  StrategyOptions so = o.strategy_options;
  so.name = o.strategy;
  so.seed = o.strategy_seed;
  so.context_extra = json::object{
      {"objective", json::object{{"name", std::string(protocol::objective_name(sc.objective))},
                                 {"direction", "higher"},
                                 {"scenario", sc.id},
                                 {"size", o.size}}},
      {"study", json::object{{"id", id}, {"name", loop->st.row.name}, {"adapter", loop->st.space.adapter}}}};
  PLUMB_ASSIGN_OR_RETURN(loop->strategy, make_strategy(loop->st.space, so));
  PLUMB_ASSIGN_OR_RETURN(loop->adapter, launch::resolve_adapter(loop->st.space.adapter));
  PLUMB_ASSIGN_OR_RETURN(loop->counter, compare::make_token_counter(o.tokenizer));
  PLUMB_ASSIGN_OR_RETURN(loop->ids, compare::provenance_ids(ledger));
  loop->mo.plumb_binary = ctx.plumb_binary;
  loop->mo.work_dir = ctx.work_dir;
  loop->mo.request_timeout = std::chrono::seconds(o.request_timeout_s);
  loop->mo.progress = [](const std::string&) {};  // launch chatter stays out of the live view
  loop->say = [progress = ctx.progress](const std::string& m) {
    if (progress) progress(m);
  };
  return loop;
}

std::string budget_stop(const StudyState& st, int64_t in_flight) {
  const StudyOptions& o = st.options;
  int64_t n = int64_t(st.trials.size());
  double used = st.seconds_used();
  if (o.trials > 0 && n + in_flight >= o.trials) return "trial budget";
  if (o.time_budget_s > 0 && n > 0) {
    double mean = used / double(n);
    if (used + mean > o.time_budget_s) return "time budget";
  }
  return "";
}

Result<std::optional<Proposal>> next_proposal(Loop& l, const std::vector<Observation>& pending) {
  const StudyOptions& o = l.st.options;
  int64_t n = int64_t(l.st.trials.size());
  double used = l.st.seconds_used();
  BudgetLeft left;
  left.trials = o.trials > 0 ? o.trials - n - int64_t(pending.size()) : -1;
  left.seconds = o.time_budget_s > 0 ? std::max(0.0, o.time_budget_s - used) : -1;
  std::vector<Observation> hist;
  for (const auto& t : l.st.trials) hist.push_back(t.obs);
  for (const auto& p : pending) hist.push_back(p);
  auto prop = l.strategy->propose(hist, left);
  if (!prop.ok())
    return prop.status().with_context("study " + std::to_string(l.id) + " trial " + std::to_string(n));
  return std::move(*prop);
}

}  // namespace internal

namespace {

// The stage's workload, drawn on the dev seed and stored as a request set on first use.
Result<StageWorkload*> stage_workload(Loop& l, const protocol::Scenario& tsc, bool is_screen) {
  StageWorkload& sw = is_screen ? l.w_screen : l.w_full;
  if (!sw.w) {
    const uint64_t seed = l.st.options.dev_seed;
    PLUMB_ASSIGN_OR_RETURN(auto ww, compare::make_workload(tsc, seed, l.counter));
    sw.w = std::move(ww);
    PLUMB_ASSIGN_OR_RETURN(sw.set_id, compare::insert_request_set(l.ledger, *sw.w, tsc, seed));
  }
  return &sw;
}

}  // namespace

namespace internal {

void announce(const Loop& l, const Proposal& p, bool is_screen) {
  const StudyOptions& o = l.st.options;
  const StudyState& st = l.st;
  int64_t n = int64_t(st.trials.size());
  double used = st.seconds_used();
  std::string total = o.trials > 0 ? std::to_string(o.trials) : "?";
  auto best = st.best();
  std::string best_s = best ? fmt("%.4g", *st.trials[*best].obs.objective) + " (trial " +
                                  std::to_string(st.trials[*best].obs.index + 1) + ")"
                            : std::string("none yet");
  std::string budget_s =
      o.time_budget_s > 0 ? fmt("%.0f", used) + "/" + fmt("%.0f", o.time_budget_s) + " s" : "";
  l.say("trial " + std::to_string(n + 1) + " of " + total + (is_screen ? " [screen]" : "") + "  best " +
        best_s + (budget_s.empty() ? "" : "  time " + budget_s) +
        "\n  config: " + config_summary(st.space, p.config) + "\n  why:    " + p.rationale);
}

double trial_time_limit(const StudyState& st, const std::string& stage) {
  const StudyOptions& o = st.options;
  double limit = o.trial_timeout_s;
  if (limit > 0) return limit;
  std::vector<double> times;
  for (const auto& t : st.trials)
    if (t.obs.stage == stage && t.run_id) times.push_back(t.elapsed_s);
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    return std::max(60.0, 3 * times[times.size() / 2]);
  }
  if (o.time_budget_s > 0) return std::max(60.0, o.time_budget_s - st.seconds_used());
  return limit;
}

}  // namespace internal

namespace {

using internal::budget_stop;
using internal::next_proposal;
using internal::open_loop;

// The engine configuration of a proposal: the space's fixed parameters, then the proposal's.
launch::EngineConfig trial_engine(const Loop& l, const Proposal& p) {
  launch::EngineConfig ec;
  ec.adapter = l.st.space.adapter;
  ec.resolved = l.adapter;
  ec.params = l.st.space.fixed;
  for (const auto& [k, v] : p.config) ec.params[k] = v;
  return ec;
}

// Whether the ledger refused a trial row only because another writer took its index first.
bool index_taken(const Status& s) {
  const std::string& m = s.message();
  return s.code() == Code::kFailedPrecondition &&
         (m.find("index must equal") != std::string::npos || m.find("duplicate key") != std::string::npos ||
          m.find("UNIQUE constraint failed: trials") != std::string::npos);
}

// Inserts the trial row (with its run when given). In a trial job the row takes the study's trial
// count at insert time, and the next one when another job's row got there first.
Result<int64_t> insert_trial_row(Loop& l, ledger::TrialRow& tr, const ledger::RunRow* run,
                                 std::span<const ledger::RequestRow> requests,
                                 std::span<const ledger::MetricRow> metrics) {
  if (!l.job) return l.ledger.insert_trial(tr, run, requests, metrics);
  tr.notes = tr.notes.empty() ? l.job_note : tr.notes + "\n" + l.job_note;
  Status last;
  for (int attempt = 0; attempt < 100; ++attempt) {
    PLUMB_ASSIGN_OR_RETURN(auto rows, l.ledger.trials_for(l.id));
    tr.idx = int64_t(rows.size());
    auto r = l.ledger.insert_trial(tr, run, requests, metrics);
    if (r.ok() || !index_taken(r.status())) return r;
    last = r.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 10 * attempt));
  }
  return last;
}

// Records a trial that was not measured: the configuration could not be rendered (error), or the
// engine did not start.
Result<int64_t> record_unmeasured(Loop& l, const Result<compare::Measurement>& m, ledger::TrialRow& tr) {
  const Status& s = m.ok() ? m->start_error : m.status();
  tr.status = m.ok() ? trial_status(*m) : s.code() == Code::kInvalidArgument ? "error" : "startup_failed";
  tr.failure = s.message().empty() ? "engine did not start" : s.message();
  if (tr.failure.size() > 2000) tr.failure = tr.failure.substr(0, 2000) + "...";
  tr.feasible = false;
  return insert_trial_row(l, tr, nullptr, {}, {});
}

// Records a measured trial with its run, requests and metrics.
Result<int64_t> record_measured(Loop& l, compare::Measurement& m, const protocol::Scenario& tsc,
                                const StageWorkload& sw, ledger::TrialRow& tr) {
  const StudyOptions& o = l.st.options;
  compare::fill_provenance(m.row, l.ids, sw.set_id, tsc, o.dev_seed);
  json::object eff{{"study", l.id},
                   {"trial", l.job ? json::value(l.job->key) : json::value(tr.idx)},
                   {"stage", tr.stage},
                   {"request_set_hash", sw.w->set.set_hash},
                   {"warmup_requests", int64_t(sw.w->warmup.size())},
                   {"request_timeout_s", int64_t(o.request_timeout_s)}};
  if (l.devices) eff["devices"] = l.devices->to_json();
  m.row.effective_settings = compare::effective_settings(l.mo, std::move(eff));
  tr.metrics_json = json::canonical(metrics_summary(m.metrics));
  tr.objective = m.row.objective;
  tr.status = trial_status(m);
  tr.feasible = m.outcome == compare::Outcome::kValid;
  if (!tr.feasible) tr.failure = m.failure.empty() ? "invalid run" : m.failure;
  return insert_trial_row(l, tr, &m.row, m.requests, m.metrics);
}

}  // namespace

// Measures one proposal on its stage's workload and records it as trial n (in a trial job: the
// next free index); returns the stored row.
Result<ledger::TrialRow> internal::measure_trial(Loop& l, const Proposal& p) {
  int64_t n = int64_t(l.st.trials.size());
  bool is_screen = p.stage == "screen";
  const protocol::Scenario& tsc = is_screen ? l.screen : l.full;
  PLUMB_ASSIGN_OR_RETURN(StageWorkload * sw, stage_workload(l, tsc, is_screen));
  announce(l, p, is_screen);
  ledger::TrialRow tr;
  tr.study_id = l.id;
  tr.idx = n;
  tr.stage = p.stage;
  tr.config_json = config_key(p.config);
  tr.rationale = p.rationale.empty() ? "(none)" : p.rationale;
  tr.notes = p.notes;
  double limit = l.job ? double(l.job->trial_timeout_s) : trial_time_limit(l.st, p.stage);
  l.mo.max_duration = std::chrono::seconds(int64_t(std::ceil(limit)));
  tr.started_at = utc_timestamp_now();
  auto t0 = std::chrono::steady_clock::now();
  auto m = compare::measure(trial_engine(l, p), tsc, *sw->w, l.mo);
  tr.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  tr.ended_at = utc_timestamp_now();
  if (tr.ended_at < tr.started_at) tr.ended_at = tr.started_at;
  Result<int64_t> ins =
      (!m.ok() || !m->started) ? record_unmeasured(l, m, tr) : record_measured(l, *m, tsc, *sw, tr);
  if (!ins.ok()) return ins.status().with_context("recording trial " + std::to_string(n));
  tr.id = *ins;
  return tr;
}

namespace {

// Appends the trial as the ledger stored it (its last row, else what was sent) and reports it.
void append_trial(Loop& l, const ledger::TrialRow& tr) {
  ledger::TrialRow stored = tr;
  auto rows = l.ledger.trials_for(l.id);
  if (rows.ok() && !rows->empty()) stored = rows->back();
  l.st.trials.push_back(decode_trial(l.st.space, stored));
  const auto& ob = l.st.trials.back().obs;
  l.say(
      "  -> " +
      (ob.feasible ? "objective " + opt_num(ob.objective) : "INFEASIBLE (" + ob.status + "): " + ob.failure) +
      "  [" + fmt("%.1f", tr.elapsed_s) + " s]");
}

}  // namespace

Result<StudyRunSummary> run_study(ledger::Ledger& ledger, int64_t id, const RunContext& ctx) {
  PLUMB_ASSIGN_OR_RETURN(auto loop, open_loop(ledger, id, ctx));
  Loop& l = *loop;
  if (ctx.executor) return internal::run_study_jobs(l, ctx);
  StudyRunSummary sum;
  if (!l.st.trials.empty())
    l.say("resuming study " + std::to_string(id) + " after " + std::to_string(l.st.trials.size()) +
          " finished trials (" + fmt("%.0f", l.st.seconds_used()) + " s used)");
  while (true) {
    sum.stop_reason = budget_stop(l.st);
    if (!sum.stop_reason.empty()) break;
    PLUMB_ASSIGN_OR_RETURN(std::optional<Proposal> p, next_proposal(l));
    if (!p) {
      sum.stop_reason = l.st.options.strategy == "external" ? "proposer stopped" : "strategy exhausted";
      break;
    }
    PLUMB_ASSIGN_OR_RETURN(ledger::TrialRow tr, internal::measure_trial(l, *p));
    append_trial(l, tr);
    ++sum.trials_run;
  }
  sum.trials_total = int64_t(l.st.trials.size());
  return sum;
}

namespace {

// The search's own top configurations (confirmation trials left out, so a resumed call picks the
// same ones): by their best full-stage objective, highest first, at most `top`.
std::vector<Config> search_top(const StudyState& st, int top) {
  std::map<std::string, std::pair<double, size_t>> best;  // config key -> (objective, trial)
  for (size_t i = 0; i < st.trials.size(); ++i) {
    const auto& t = st.trials[i];
    if (t.obs.stage != "full" || !t.obs.feasible || !t.obs.objective ||
        t.rationale.rfind(kConfirmationRationale, 0) == 0)
      continue;
    auto [it, fresh] = best.try_emplace(config_key(t.obs.config), *t.obs.objective, i);
    if (!fresh && *t.obs.objective > it->second.first) it->second = {*t.obs.objective, i};
  }
  std::vector<std::pair<double, size_t>> ranked;
  ranked.reserve(best.size());
  for (const auto& [key, v] : best) ranked.push_back(v);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<Config> out;
  for (size_t k = 0; k < ranked.size() && int(k) < top; ++k)
    out.push_back(st.trials[ranked[k].second].obs.config);
  return out;
}

}  // namespace

Result<int64_t> confirm_best(ledger::Ledger& ledger, int64_t id, const RunContext& ctx, int top,
                             int repeats) {
  if (ctx.executor) return failed_precondition("confirmation runs in this process, not through an executor");
  if (top <= 0 || repeats <= 0) return int64_t(0);
  PLUMB_ASSIGN_OR_RETURN(auto loop, open_loop(ledger, id, ctx));
  Loop& l = *loop;
  const std::vector<Config> tops = search_top(l.st, top);
  if (tops.size() < 2) return int64_t(0);  // one candidate: nothing to choose between
  l.say("confirmation: the top " + std::to_string(tops.size()) + " configurations, " +
        std::to_string(repeats) +
        " more measurement(s) each on the dev seed; the best is then the highest mean");
  int64_t ran = 0;
  for (size_t k = 0; k < tops.size(); ++k) {
    const std::string key = config_key(tops[k]);
    int64_t have = 0;
    for (const auto& t : l.st.trials)
      have += t.rationale.rfind(kConfirmationRationale, 0) == 0 && config_key(t.obs.config) == key;
    for (int64_t r = have; r < repeats; ++r) {
      Proposal p;
      p.config = tops[k];
      p.rationale = std::string(kConfirmationRationale) + std::to_string(r + 1) + "/" +
                    std::to_string(repeats) + " of search rank " + std::to_string(k + 1);
      PLUMB_ASSIGN_OR_RETURN(ledger::TrialRow tr, internal::measure_trial(l, p));
      append_trial(l, tr);
      ++ran;
    }
  }
  if (auto b = l.st.best_configuration())
    l.say("confirmation: best is trial " + std::to_string(l.st.trials[b->trial].obs.index + 1) + ", mean " +
          fmt("%.4g", b->mean) + " over " + std::to_string(b->measurements) + " measurements");
  return ran;
}

}  // namespace plumb::tune

namespace plumb::tune {

std::string job_key_marker(const std::string& key) { return "(key " + key + ")"; }

namespace {

// The cards' identities for a row's notes: "NVIDIA H100 80GB HBM3 GPU-..., ..." or why unavailable.
std::string gpu_identities(const executor::DeviceProvenance& d) {
  if (!d.unavailable.empty()) return d.unavailable;
  std::string s;
  for (const auto& g : d.gpus) s += (s.empty() ? "" : "; ") + g.name + " " + g.uuid + " driver " + g.driver;
  return s.empty() ? "nvidia-smi listed no card" : s;
}

}  // namespace

Result<ledger::TrialRow> run_trial_job(ledger::Ledger& ledger, const TrialJob& job, const RunContext& ctx) {
  PLUMB_ASSIGN_OR_RETURN(auto loop, internal::open_loop(ledger, job.study_id, ctx));
  Loop& l = *loop;
  l.job = &job;
  const char* job_id = std::getenv("SLURM_JOB_ID");
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  l.devices = executor::device_provenance();
  l.job_note = "executor " + job.executor + (job_id ? std::string(" job ") + job_id : std::string()) +
               " on " + host +
               (l.devices->cuda_visible_devices.empty() ? std::string()
                                                        : " cards " + l.devices->cuda_visible_devices) +
               " [" + gpu_identities(*l.devices) + "] " + job_key_marker(job.key);
  l.mo.request_timeout = std::chrono::seconds(job.request_timeout_s);
  Proposal p;
  p.config = job.config;
  p.stage = job.stage;
  p.rationale = job.rationale;
  p.notes = job.notes;
  PLUMB_RETURN_IF_ERROR(validate_config(l.st.space, p.config).with_context("trial job " + job.key));
  return internal::measure_trial(l, p);
}

}  // namespace plumb::tune
