// The single-job controller (single_job.h): lock, journal, resume, submit, wait, judge, retry.
#include "executor/single_job.h"

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/file.h"
#include "executor/journal.h"
#include "executor/lock.h"

namespace plumb::executor {
namespace {

// What the journal of an earlier controller leaves to this one.
struct Resume {
  int failures = 0;  // infrastructure failures since the journal's last end (finished, failed, gave up)
  int failures_before_finish = 0;
  std::optional<JournaledJob> in_flight;   // the last job, still in flight: reattached
  std::optional<JournaledJob> finished;    // the last job, finished: its result is reported
  std::optional<json::object> submitting;  // the last event, a submission never confirmed
};

Resume read_resume(const std::vector<json::object>& events) {
  Resume r;
  auto jobs = journal_jobs(events);
  for (const auto& j : jobs) {
    const std::string ev = j.last_event();
    if (ev == "infrastructure_failure") {
      ++r.failures;
    } else if (ev == "finished") {
      r.failures_before_finish = r.failures;
      r.failures = 0;
    } else if (ev != "submitted") {
      r.failures = 0;  // the work failed, timed out or the command gave up: a new run gets its own retries
    }
  }
  if (!jobs.empty() && jobs.back().in_flight()) r.in_flight = jobs.back();
  if (!jobs.empty() && jobs.back().last_event() == "finished") r.finished = jobs.back();
  if (!events.empty() && json::string_at(events.back(), "event").value_or("") == "submitting")
    r.submitting = events.back();
  return r;
}

class Controller {
 public:
  Controller(std::unique_ptr<Executor>& e, const SingleJob& j) : e_(e), j_(j) {}

  Result<int> run() {
    PLUMB_ASSIGN_OR_RETURN(auto lock, ControllerLock::acquire(j_.journal, j_.command, j_.lock_remedy));
    if (!lock->took_over().empty())
      say("took over the controller lock " + lock->path() + " of " + lock->took_over() + ", which is gone");
    const auto events = journal_read(j_.journal);
    PLUMB_RETURN_IF_ERROR(check_journal_identity(j_.journal, events, j_.identity, j_.identity_remedy));
    const Resume r = read_resume(events);
    if (r.finished) return report_finished(r);
    std::optional<JobAttempt> first;
    if (r.in_flight) {
      PLUMB_ASSIGN_OR_RETURN(first, attempt(r.in_flight->key));
      first->job_id = r.in_flight->job_id;
      say("reattaching to job " + first->job_id + " (" + first->key + ") of an earlier controller (journal " +
          j_.journal + ")");
    } else if (r.submitting) {
      PLUMB_ASSIGN_OR_RETURN(first, resolve_submitting(*r.submitting));
    }
    int next = next_attempt(events, j_.work_dir, j_.prefix);
    for (int failures = r.failures;;) {
      JobAttempt at;
      if (first) {
        at = std::move(*first);
        first.reset();
      } else {
        PLUMB_ASSIGN_OR_RETURN(at, attempt(j_.prefix + std::to_string(next++)));
        PLUMB_RETURN_IF_ERROR(submit(at));
      }
      PLUMB_ASSIGN_OR_RETURN(JobStatus st, wait(at));
      PLUMB_ASSIGN_OR_RETURN(std::optional<int> rc, settle(at, st, failures));
      if (rc) return *rc;
    }
  }

 private:
  void say(const std::string& m) const { std::fprintf(stderr, "%s: %s\n", j_.command.c_str(), m.c_str()); }

  void journal(json::object event) const {
    if (Status s = journal_append(j_.journal, std::move(event)); !s.ok()) say(s.to_string());
  }

  Result<JobAttempt> attempt(const std::string& key) const {
    JobAttempt at;
    at.key = key;
    PLUMB_ASSIGN_OR_RETURN(at.spec, j_.spec(key));
    at.spec.name = key;
    at.spec.work_dir = j_.work_dir;
    return at;
  }

  // The "submitting" line, the job, the "submitted" line (journal.h: submit_journaled).
  Status submit(JobAttempt& at) {
    if (j_.before_submit) PLUMB_RETURN_IF_ERROR(j_.before_submit(at));
    PLUMB_ASSIGN_OR_RETURN(at.job_id,
                           submit_journaled(*e_, j_.journal, at.spec, {{"identity", j_.identity}}));
    PLUMB_RETURN_IF_ERROR(journal_submitted(at, ""));
    say(e_->kind() + " job " + at.job_id + " (" + at.key + "; output " + output_path(at.spec) + ")" +
        j_.submit_note);
    return Status::Ok();
  }

  Status journal_submitted(const JobAttempt& at, const std::string& found_by) const {
    json::object ev{{"event", "submitted"},   {"key", at.key},
                    {"job_id", at.job_id},    {"job_name", at.spec.scheduler_name},
                    {"executor", e_->kind()}, {"identity", j_.identity}};
    if (!found_by.empty()) ev["found_by"] = found_by;
    return journal_append(j_.journal, std::move(ev));
  }

  // An earlier controller's submission with no job id journaled: its job found by name and
  // reattached, or nullopt (the next attempt is submitted).
  Result<std::optional<JobAttempt>> resolve_submitting(const json::object& intent) {
    const std::string key = json::string_at(intent, "key").value_or("");
    const std::string name = json::string_at(intent, "job_name").value_or("");
    PLUMB_ASSIGN_OR_RETURN(std::optional<std::string> id, resolve_submission(*e_, j_.journal, intent));
    if (!id) {
      say("an earlier controller was submitting " + key + " (job name " + name + ") when it stopped; the " +
          e_->kind() + " executor knows no job of that name, so it is submitted afresh");
      return std::optional<JobAttempt>();
    }
    PLUMB_ASSIGN_OR_RETURN(JobAttempt at, attempt(key));
    at.job_id = *id;
    at.spec.scheduler_name = name;
    PLUMB_RETURN_IF_ERROR(journal_submitted(at, "name"));
    say("reattaching to job " + at.job_id + " (" + key + "), found by its name " + name +
        ": an earlier controller submitted it and stopped before journaling it");
    return std::optional<JobAttempt>(std::move(at));
  }

  Result<JobStatus> wait(const JobAttempt& at) {
    return wait_until_final(*e_, at.job_id, j_.poll, [&](const JobStatus& st) {
      say("  job " + at.job_id + ": " + state_name(st.state) + (st.node.empty() ? "" : " on " + st.node));
    });
  }

  Result<int> report_finished(const Resume& r) {
    PLUMB_ASSIGN_OR_RETURN(JobAttempt at, attempt(r.finished->key));
    at.job_id = r.finished->job_id;
    JobStatus st;
    st.state = JobState::kCompleted;
    st.node = json::string_at(r.finished->last, "node").value_or("");
    return j_.report(at, st, r.failures_before_finish, true);
  }

  static std::string ended(const JobStatus& st) {
    return state_name(st.state) + (st.node.empty() ? "" : " on " + st.node) +
           (st.scheduler_state.empty() ? "" : " (" + st.scheduler_state + ")") +
           (st.detail.empty() ? "" : " [" + st.detail + "]");
  }

  json::object final_event(const std::string& event, const JobAttempt& at, const JobStatus& st) const {
    return {{"event", event},
            {"key", at.key},
            {"job_id", at.job_id},
            {"state", state_name(st.state)},
            {"scheduler_state", st.scheduler_state},
            {"node", st.node},
            {"detail", st.detail}};
  }

  // The outcome of a final job: an exit code when the command ends with it, nullopt to retry.
  Result<std::optional<int>> settle(const JobAttempt& at, const JobStatus& st, int& failures) {
    switch (j_.judge(at, st)) {
      case Verdict::kResult:
        journal({{"event", "finished"}, {"key", at.key}, {"job_id", at.job_id}, {"node", st.node}});
        {
          PLUMB_ASSIGN_OR_RETURN(int rc, j_.report(at, st, failures, false));
          return std::optional<int>(rc);
        }
      case Verdict::kWorkFailed:
        journal(final_event(j_.failed_event, at, st));
        return std::optional<int>(j_.work_failed(at, st));
      case Verdict::kTimedOut:
        journal(final_event("timed_out", at, st));
        return Status(Code::kTimeout, "the " + j_.what + "'s job " + at.job_id + " (" + at.key +
                                          ") ran past its time limit: " + ended(st) +
                                          "; not retried (it would time out again): give it more time " +
                                          "(--slurm-time) or less work. Its output: " + output_path(at.spec));
      case Verdict::kInfrastructure:
        break;
    }
    journal(final_event("infrastructure_failure", at, st));
    say("  INFRASTRUCTURE FAILURE of job " + at.job_id + ": it ended " + ended(st) +
        (j_.infrastructure_note.empty() ? "" : "; " + j_.infrastructure_note));
    if (++failures <= j_.max_retries) {
      if (j_.before_retry) PLUMB_RETURN_IF_ERROR(j_.before_retry(at, st));
      return std::optional<int>();
    }
    journal({{"event", "gave_up"}, {"key", at.key}, {"job_id", at.job_id}});
    return unavailable("the " + j_.what + "'s job failed for infrastructure reasons " +
                       std::to_string(failures) + " time(s) (--max-job-retries " +
                       std::to_string(j_.max_retries) + "); its output: " + output_path(at.spec) +
                       "; run it again when the cluster is healthy");
  }

  std::unique_ptr<Executor>& e_;
  const SingleJob& j_;
};

}  // namespace

Result<int> run_single_job(std::unique_ptr<Executor>& e, const SingleJob& job) {
  return Controller(e, job).run();
}

std::string file_tail(const std::string& path, size_t lines) {
  auto text = read_file(path);
  if (!text.ok()) return "(no output: " + text.status().message() + ")";
  size_t pos = text->size();
  for (size_t n = 0; n <= lines && pos > 0;) {
    pos = text->rfind('\n', pos - 1);
    if (pos == std::string::npos) return *text;
    ++n;
  }
  return text->substr(pos + 1);
}

}  // namespace plumb::executor
