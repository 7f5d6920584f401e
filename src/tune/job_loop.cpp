// The controller's loop when trials run through an executor: propose, submit, watch, read results
// back from the ledger, retry infrastructure failures, and keep a job journal so that a restarted
// controller reattaches (study.h has the contract).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/file.h"
#include "executor/journal.h"
#include "executor/lock.h"
#include "tune/study.h"
#include "tune/study_internal.h"

namespace plumb::tune {

json::object TrialJob::to_json() const {
  return json::object{{"study_id", study_id},
                      {"key", key},
                      {"executor", executor},
                      {"ledger", ledger_url},
                      {"config", config_to_json(config)},
                      {"stage", stage},
                      {"rationale", rationale},
                      {"notes", notes},
                      {"trial_timeout_s", trial_timeout_s},
                      {"request_timeout_s", int64_t(request_timeout_s)},
                      {"gpus", gpus}};
}

Result<TrialJob> TrialJob::from_json(const SearchSpace& space, const json::object& o) {
  TrialJob j;
  PLUMB_ASSIGN_OR_RETURN(auto study, json::opt_int(o, "study_id"));
  PLUMB_ASSIGN_OR_RETURN(auto key, json::opt_string(o, "key"));
  PLUMB_ASSIGN_OR_RETURN(auto ledger, json::opt_string(o, "ledger"));
  if (!study || !key || !ledger)
    return invalid_argument("trial job spec: study_id, key and ledger are required");
  j.study_id = *study;
  j.key = *key;
  j.ledger_url = *ledger;
  const auto* cfg = o.if_contains("config");
  if (!cfg || !cfg->is_object()) return invalid_argument("trial job spec: 'config' must be an object");
  PLUMB_ASSIGN_OR_RETURN(j.config, config_from_json(space, cfg->as_object()));
  PLUMB_ASSIGN_OR_RETURN(auto exe, json::opt_string(o, "executor"));
  PLUMB_ASSIGN_OR_RETURN(auto stage, json::opt_string(o, "stage"));
  PLUMB_ASSIGN_OR_RETURN(auto why, json::opt_string(o, "rationale"));
  PLUMB_ASSIGN_OR_RETURN(auto notes, json::opt_string(o, "notes"));
  PLUMB_ASSIGN_OR_RETURN(auto tt, json::opt_int(o, "trial_timeout_s"));
  PLUMB_ASSIGN_OR_RETURN(auto rt, json::opt_int(o, "request_timeout_s"));
  PLUMB_ASSIGN_OR_RETURN(auto gpus, json::opt_string(o, "gpus"));
  j.gpus = gpus.value_or("");
  j.executor = exe.value_or("local");
  j.stage = stage.value_or("full");
  if (j.stage != "full" && j.stage != "screen")
    return invalid_argument("trial job spec: stage must be full or screen");
  j.rationale = why.value_or("");
  j.notes = notes.value_or("");
  j.trial_timeout_s = tt.value_or(0);
  j.request_timeout_s = int(rt.value_or(120));
  return j;
}

namespace internal {
namespace {

// A trial job in flight.
struct Job {
  std::string key;  // "s<study>-j<seq>-a<attempt>"
  int64_t seq = 0;  // the proposal's number in the study's journal
  int attempt = 0;  // 0 = first submission
  std::string job_id;
  Proposal proposal;
  executor::JobStatus status;  // as last polled
  bool polled = false;
};

// The controller's state across ticks.
struct Controller {
  Controller(Loop& loop, const RunContext& c) : l(loop), ctx(c) {}
  Loop& l;
  const RunContext& ctx;
  std::string journal;  // work_dir/study-<id>.jobs.jsonl
  std::vector<Job> in_flight;
  // Jobs whose trial row is in but that have not ended yet (a job still stopping its engine): with
  // GPU slots, each holds its slot until it is final.
  std::vector<Job> draining;
  std::optional<executor::GpuSlotPool> slots;
  // Proposals an earlier controller was submitting when it stopped and whose job no one has: submitted
  // again (the next attempt) before any new proposal.
  std::vector<Job> unsubmitted;
  int64_t next_seq = 0;
  int max_parallel = 1;
  StudyRunSummary sum;
  std::map<std::string, size_t> row_of_key;  // trial rows written by jobs, by job key
};

std::string key_for(int64_t study, int64_t seq, int attempt) {
  return "s" + std::to_string(study) + "-j" + std::to_string(seq) + "-a" + std::to_string(attempt);
}

Status journal_append(const Controller& c, json::object o) {
  return executor::journal_append(c.journal, std::move(o));
}

// The job of a "submitted" (or "submitting") line: key, seq, attempt and the proposal of its spec.
Result<Job> job_of(const Controller& c, const json::object& line) {
  Job j;
  j.key = json::string_at(line, "key").value_or("");
  j.seq = int64_t(json::number_at(line, "seq").value_or(0));
  j.attempt = int(json::number_at(line, "attempt").value_or(0));
  j.job_id = json::string_at(line, "job_id").value_or("");
  const auto* spec = line.if_contains("spec");
  if (!spec || !spec->is_object()) return corrupt(c.journal + ": job " + j.key + " without its spec");
  PLUMB_ASSIGN_OR_RETURN(TrialJob tj, TrialJob::from_json(c.l.st.space, spec->as_object()));
  j.proposal = Proposal{tj.config, tj.stage, tj.rationale, tj.notes};
  return j;
}

// Replays the journal (executor/journal.h): the jobs whose last event is "submitted" are in flight.
// Each "submitted" event carries the job's spec, from which its proposal is rebuilt. A submission an
// earlier controller began and never confirmed (killed between sbatch and its journal line) is looked
// up by its job name: found, it is journaled and reattached like any job in flight; not found (sbatch
// never took it, or a local job died with its controller), its proposal is submitted again as the
// next attempt.
Status replay_journal(Controller& c) {
  const std::vector<json::object> events = executor::journal_read(c.journal);
  for (const executor::JournaledJob& jj : executor::journal_jobs(events)) {
    c.next_seq = std::max(c.next_seq, int64_t(json::number_at(jj.submitted, "seq").value_or(0)) + 1);
    if (!jj.in_flight()) continue;
    PLUMB_ASSIGN_OR_RETURN(Job j, job_of(c, jj.submitted));
    c.in_flight.push_back(std::move(j));
  }
  for (const json::object& intent : executor::unconfirmed_submissions(events)) {
    PLUMB_ASSIGN_OR_RETURN(Job j, job_of(c, intent));
    c.next_seq = std::max(c.next_seq, j.seq + 1);
    const std::string name = json::string_at(intent, "job_name").value_or("");
    PLUMB_ASSIGN_OR_RETURN(std::optional<std::string> id,
                           executor::resolve_submission(*c.ctx.executor, c.journal, intent));
    if (!id) {
      c.l.say("an earlier controller was submitting " + j.key + " (job name " + name +
              ") when it stopped; the " + c.ctx.executor->kind() +
              " executor knows no job of that name, so its proposal is submitted again");
      c.unsubmitted.push_back(std::move(j));
      continue;
    }
    j.job_id = *id;
    json::object line = intent;
    line["event"] = "submitted";
    line["job_id"] = *id;
    line["found_by"] = "name";
    line.erase("at");
    PLUMB_RETURN_IF_ERROR(journal_append(c, std::move(line)));
    c.l.say("reattaching to job " + *id + " (" + j.key + "), found by its name " + name +
            ": an earlier controller submitted it and stopped before journaling it");
    c.in_flight.push_back(std::move(j));
  }
  std::sort(c.in_flight.begin(), c.in_flight.end(), [](const Job& a, const Job& b) { return a.seq < b.seq; });
  // A job submitted by a controller killed before it journaled the job left its files
  // (s<study>-j<seq>-a0.out or .sbatch): new proposals are numbered past them, so no key is reused.
  c.next_seq =
      std::max(c.next_seq,
               int64_t(executor::next_attempt(events, c.ctx.work_dir, "s" + std::to_string(c.l.id) + "-j")));
  return Status::Ok();
}

// Submits a proposal as job (seq, attempt) and journals it.
Status submit(Controller& c, const Proposal& p, int64_t seq, int attempt) {
  Loop& l = c.l;
  TrialJob tj;
  tj.study_id = l.id;
  tj.key = key_for(l.id, seq, attempt);
  tj.executor = c.ctx.executor->kind();
  tj.ledger_url = c.ctx.ledger_url;
  tj.config = p.config;
  tj.stage = p.stage;
  tj.rationale = p.rationale.empty() ? "(none)" : p.rationale;
  tj.notes = p.notes;
  tj.trial_timeout_s = int64_t(std::ceil(trial_time_limit(l.st, p.stage)));
  tj.request_timeout_s = l.st.options.request_timeout_s;
  executor::JobSpec js;
  js.env = c.ctx.job_env;
  if (c.slots) {
    PLUMB_ASSIGN_OR_RETURN(std::optional<executor::GpuSlot> slot, c.slots->acquire(tj.key));
    if (!slot) return internal_error("no free GPU slot for job " + tj.key + " although one was counted free");
    tj.gpus = slot->visible_devices();
    js.env["CUDA_VISIBLE_DEVICES"] = tj.gpus;
  }
  std::string spec_path = c.ctx.work_dir + "/" + tj.key + ".json";
  PLUMB_RETURN_IF_ERROR(write_file_atomic(spec_path, json::dump_pretty(tj.to_json())));
  js.name = tj.key;
  js.argv = {c.ctx.plumb_binary, "tune", "--run-trial", spec_path, "--work-dir", c.ctx.work_dir};
  js.work_dir = c.ctx.work_dir;
  // The "submitting" line carries what the "submitted" one does, so that a restart that finds the
  // job by its name rebuilds it from that line alone.
  auto id = executor::submit_journaled(*c.ctx.executor, c.journal, js,
                                       {{"seq", seq}, {"attempt", int64_t(attempt)}, {"spec", tj.to_json()}});
  if (!id.ok()) {
    if (c.slots) c.slots->release(tj.key);
    return id.status();
  }
  PLUMB_RETURN_IF_ERROR(journal_append(c, json::object{{"event", "submitted"},
                                                       {"key", tj.key},
                                                       {"seq", seq},
                                                       {"attempt", int64_t(attempt)},
                                                       {"job_id", *id},
                                                       {"job_name", js.scheduler_name},
                                                       {"executor", tj.executor},
                                                       {"spec", tj.to_json()}}));
  if (attempt == 0) announce(l, p, p.stage == "screen");
  l.say("  submitted: " + tj.executor + " job " + *id + " (key " + tj.key + ", output " +
        executor::output_path(js) + ")" + (tj.gpus.empty() ? "" : " on cards " + tj.gpus));
  c.in_flight.push_back(Job{tj.key, seq, attempt, *id, p, {}, false});
  return Status::Ok();
}

// Reloads the study's trial rows and which job wrote each.
Status reload_trials(Controller& c) {
  Loop& l = c.l;
  PLUMB_ASSIGN_OR_RETURN(auto rows, l.ledger.trials_for(l.id));
  l.st.trials.clear();
  c.row_of_key.clear();
  for (const auto& r : rows) {
    l.st.trials.push_back(decode_trial(l.st.space, r));
    size_t at = r.notes.rfind("(key ");
    if (at == std::string::npos) continue;
    size_t end = r.notes.find(')', at);
    if (end != std::string::npos) c.row_of_key[r.notes.substr(at + 5, end - at - 5)] = l.st.trials.size() - 1;
  }
  return Status::Ok();
}

// Polls every job in flight and reports state changes; a scheduler that cannot answer now is said
// and asked again next tick.
void poll_jobs(Controller& c, std::vector<Job>& jobs) {
  for (Job& j : jobs) {
    auto st = c.ctx.executor->poll(j.job_id);
    if (!st.ok()) {
      c.l.say("  (could not poll job " + j.job_id + ", will retry: " + st.status().message() + ")");
      continue;
    }
    if (!j.polled || st->state != j.status.state)
      c.l.say("  job " + j.key + " (" + j.job_id + "): " + executor::state_name(st->state) +
              (st->node.empty() ? "" : " on " + st->node));
    j.status = *st;
    j.polled = true;
  }
}

void poll_all(Controller& c) {
  poll_jobs(c, c.in_flight);
  poll_jobs(c, c.draining);
}

// Frees the GPU slots of the draining jobs that are final.
void drain(Controller& c) {
  std::vector<Job> keep;
  for (Job& j : c.draining) {
    if (j.polled && executor::is_final(j.status.state)) {
      if (c.slots) c.slots->release(j.key);
    } else {
      keep.push_back(std::move(j));
    }
  }
  c.draining = std::move(keep);
}

// A job past its time limit (Slurm's TIMEOUT) without a trial row: journals "timed_out" and stops the
// study with a Timeout error naming the flag that raises the limit. Not retried: the same trial under
// the same limit would time out again. Not a trial either (the job wrote no row); the study stays
// resumable, and a resumed study proposes again under the limit it is given then.
Status timed_out(Controller& c, const Job& j) {
  const executor::JobStatus& s = j.status;
  if (c.slots) c.slots->release(j.key);
  PLUMB_RETURN_IF_ERROR(journal_append(c, json::object{{"event", "timed_out"},
                                                       {"key", j.key},
                                                       {"job_id", j.job_id},
                                                       {"state", executor::state_name(s.state)},
                                                       {"scheduler_state", s.scheduler_state},
                                                       {"node", s.node},
                                                       {"detail", s.detail}}));
  const std::string ended = executor::state_name(s.state) + (s.node.empty() ? "" : " on " + s.node) +
                            (s.scheduler_state.empty() ? "" : " (" + s.scheduler_state + ")") +
                            (s.detail.empty() ? "" : " [" + s.detail + "]");
  c.l.say("  TIMED OUT: job " + j.key + " (" + j.job_id + ") ran past its time limit: " + ended);
  return timeout_error("trial job " + j.key + " (" + j.job_id + ") ran past its time limit: " + ended +
                       "; not retried (it would time out again): give it more time (--slurm-time, or time "
                       "in the [slurm] table), or a --trial-timeout below that limit, past which a trial is "
                       "recorded as an infeasible timeout. Its output: " +
                       c.ctx.work_dir + "/" + j.key +
                       ".out. The study is kept: resume it with a longer limit");
}

// A job that ended without a trial row: journals the infrastructure failure and submits the same
// proposal again, or gives up past the retry bound (Unavailable; the study stays resumable).
Status infrastructure_failure(Controller& c, const Job& j) {
  const executor::JobStatus& s = j.status;
  if (c.slots) c.slots->release(j.key);  // the job is final: its cards are free
  std::string why = s.state == executor::JobState::kCompleted
                        ? "the job exited without writing its trial row"
                        : "the job ended " + executor::state_name(s.state);
  PLUMB_RETURN_IF_ERROR(journal_append(c, json::object{{"event", "infrastructure_failure"},
                                                       {"key", j.key},
                                                       {"job_id", j.job_id},
                                                       {"state", executor::state_name(s.state)},
                                                       {"scheduler_state", s.scheduler_state},
                                                       {"node", s.node},
                                                       {"detail", s.detail},
                                                       {"why", why}}));
  c.l.say("  INFRASTRUCTURE FAILURE of job " + j.key + " (" + j.job_id + "): " + why +
          (s.detail.empty() ? "" : " [" + s.detail + "]") +
          "; not a result, not an infeasible configuration");
  if (j.attempt >= c.ctx.max_job_retries)
    return unavailable("trial job " + j.key + " failed for infrastructure reasons on attempt " +
                       std::to_string(j.attempt + 1) + " of " + std::to_string(c.ctx.max_job_retries + 1) +
                       " (last: " + why + "); see its output in " + c.ctx.work_dir + "/" + j.key +
                       ".out. The study is kept: resume it when the cluster is healthy");
  c.l.say("  retrying (attempt " + std::to_string(j.attempt + 2) + " of " +
          std::to_string(c.ctx.max_job_retries + 1) + ")");
  return submit(c, j.proposal, j.seq, j.attempt + 1);
}

// Settles the jobs whose row is in the ledger (finished) or that ended without one (failed).
Status settle(Controller& c) {
  std::vector<Job> keep, failed;
  for (Job& j : c.in_flight) {
    auto row = c.row_of_key.find(j.key);
    if (row != c.row_of_key.end()) {
      const Trial& t = c.l.st.trials[row->second];
      PLUMB_RETURN_IF_ERROR(journal_append(
          c,
          json::object{{"event", "finished"}, {"key", j.key}, {"job_id", j.job_id}, {"trial", t.obs.index}}));
      c.l.say("  -> trial " + std::to_string(t.obs.index + 1) + " (job " + j.key + "): " +
              (t.obs.feasible ? "objective " + opt_num(t.obs.objective)
                              : "INFEASIBLE (" + t.obs.status + "): " + t.obs.failure) +
              "  [" + fmt("%.1f", t.elapsed_s) + " s]");
      ++c.sum.trials_run;
      if (c.slots) c.draining.push_back(std::move(j));
    } else if (j.polled && executor::is_final(j.status.state)) {
      failed.push_back(std::move(j));
    } else {
      keep.push_back(std::move(j));
    }
  }
  c.in_flight = std::move(keep);
  for (const Job& j : failed)
    PLUMB_RETURN_IF_ERROR(j.status.state == executor::JobState::kTimedOut ? timed_out(c, j)
                                                                          : infrastructure_failure(c, j));
  return Status::Ok();
}

// Fills free slots with new proposals; sets the stop reason when the budget or the strategy ends.
Status fill(Controller& c) {
  Loop& l = c.l;
  while (!c.unsubmitted.empty() && int(c.in_flight.size() + c.draining.size()) < c.max_parallel) {
    Job j = std::move(c.unsubmitted.front());
    c.unsubmitted.erase(c.unsubmitted.begin());
    PLUMB_RETURN_IF_ERROR(submit(c, j.proposal, j.seq, j.attempt + 1));
  }
  while (c.unsubmitted.empty() && int(c.in_flight.size() + c.draining.size()) < c.max_parallel) {
    std::string stop = budget_stop(l.st, int64_t(c.in_flight.size()));
    if (!stop.empty()) {
      c.sum.stop_reason = stop;
      return Status::Ok();
    }
    std::vector<Observation> pending;
    for (const Job& j : c.in_flight) {
      Observation ob;
      ob.index = int64_t(l.st.trials.size() + pending.size());
      ob.config = j.proposal.config;
      ob.stage = j.proposal.stage;
      ob.status = "pending";
      ob.failure = "in flight";
      pending.push_back(std::move(ob));
    }
    PLUMB_ASSIGN_OR_RETURN(std::optional<Proposal> p, next_proposal(l, pending));
    if (!p) {
      c.sum.stop_reason = l.st.options.strategy == "external" ? "proposer stopped" : "strategy exhausted";
      return Status::Ok();
    }
    PLUMB_RETURN_IF_ERROR(submit(c, *p, c.next_seq++, 0));
  }
  return Status::Ok();
}

}  // namespace

Result<StudyRunSummary> run_study_jobs(Loop& l, const RunContext& ctx) {
  if (ctx.ledger_url.empty() || ctx.plumb_binary.empty() || ctx.work_dir.empty() || ctx.work_dir[0] != '/')
    return invalid_argument(
        "trials through an executor need the ledger's URL or path, the plumb binary and an "
        "absolute work directory (one the jobs can reach)");
  Controller c(l, ctx);
  c.journal = ctx.work_dir + "/study-" + std::to_string(l.id) + ".jobs.jsonl";
  PLUMB_ASSIGN_OR_RETURN(
      auto lock,
      executor::ControllerLock::acquire(
          c.journal, "plumb tune (study " + std::to_string(l.id) + ")",
          "wait for it to end, or stop it and resume the study then (the new controller takes over its "
          "jobs)"));
  if (!lock->took_over().empty())
    l.say("took over the controller lock " + lock->path() + " of " + lock->took_over() + ", which is gone");
  c.max_parallel = std::max(1, ctx.max_parallel_trials);
  const std::string& strategy = l.st.options.strategy;
  if (c.max_parallel > 1 && (strategy == "halving" || strategy == "external")) {
    l.say("strategy " + strategy + " needs every result before its next proposal: one trial job at a time");
    c.max_parallel = 1;
  }
  if (!ctx.gpu_slots.empty()) {
    c.slots.emplace(ctx.gpu_slots);
    c.max_parallel = std::min(c.max_parallel, int(ctx.gpu_slots.size()));
    std::string where;
    for (const auto& s : ctx.gpu_slots) where += (where.empty() ? "" : " | ") + s.visible_devices();
    l.say(std::to_string(ctx.gpu_slots.size()) + " GPU slot(s): " + where + "; up to " +
          std::to_string(c.max_parallel) + " trial job(s) at once");
  }
  PLUMB_RETURN_IF_ERROR(replay_journal(c));
  if (!c.in_flight.empty())
    l.say("reattaching to " + std::to_string(c.in_flight.size()) + " trial job(s) of study " +
          std::to_string(l.id) + " still in flight (journal " + c.journal + ")");
  else if (!l.st.trials.empty())
    l.say("resuming study " + std::to_string(l.id) + " after " + std::to_string(l.st.trials.size()) +
          " finished trials");
  while (true) {
    poll_all(c);
    PLUMB_RETURN_IF_ERROR(reload_trials(c));
    PLUMB_RETURN_IF_ERROR(settle(c));
    drain(c);
    c.sum.stop_reason.clear();
    PLUMB_RETURN_IF_ERROR(fill(c));
    if (c.in_flight.empty() && c.draining.empty() && c.unsubmitted.empty()) break;
    std::this_thread::sleep_for(ctx.poll_interval);
  }
  c.sum.trials_total = int64_t(l.st.trials.size());
  return c.sum;
}

}  // namespace internal
}  // namespace plumb::tune
