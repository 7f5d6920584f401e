// A controller for work that runs as one job at a time (`plumb evaluate --executor`, `plumb compare
// run --executor`): it submits the job, journals it (executor/journal.h), holds the journal's
// controller lock (executor/lock.h) and, killed and started again with the same work directory,
// resumes instead of submitting twice:
//   - the journal's last job finished: its result is reported again (the caller's report hook with
//     `again` set), nothing is submitted;
//   - the last job is in flight: the controller reattaches to it by its id (Executor::poll);
//   - the last job was being submitted (an "submitting" line, no "submitted" after it: a controller
//     killed between the scheduler accepting the job and the journal's next line): the job is looked
//     up by the name unique to that attempt (Executor::find_by_name); found, it is journaled and
//     reattached; not found, the next attempt is submitted.
// Attempts are named `<prefix><n>` (next_attempt), each submitted under a scheduler name of its own,
// `<prefix><n>-<8 hex>`, written to the journal before the job is submitted.
//
// What a final job means is the caller's (the judge hook); the controller journals it and acts:
//   kResult          "finished": the report hook's exit code;
//   kWorkFailed      "<failed_event>" (the work's own error): the work_failed hook's exit code, no retry;
//   kTimedOut        "timed_out" with the scheduler's state: a Timeout error naming it, no retry (the same
//                    work under the same limit would time out again);
//   kInfrastructure  "infrastructure_failure": submitted again up to max_retries times (the
//                    before_retry hook first), then "gave_up" and an Unavailable error.
//
// PLUMB_TEST_DIE_AFTER_SUBMIT=1 (for tests only; journal.h) makes the controller exit (code 86) right
// after the scheduler accepted a job, before the "submitted" line: the window the "submitting" line covers.
//
// Thread-safety: one thread. Errors: FailedPrecondition (another controller holds the lock),
// InvalidArgument (the journal was written for other work), IoError (the journal), Timeout and
// Unavailable as above, and the executor's own.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/json.h"
#include "core/status.h"
#include "executor/executor.h"
#include "executor/journal.h"

namespace plumb::executor {

// What the caller makes of a final job.
enum class Verdict { kResult, kWorkFailed, kTimedOut, kInfrastructure };

// One attempt: its key (`<prefix><n>`), its job id once submitted, its spec (spec.name = key).
struct JobAttempt {
  std::string key;
  std::string job_id;
  JobSpec spec;
};

struct SingleJob {
  std::string command;          // "plumb evaluate": the messages' prefix and the lock's holder
  std::string what;             // "evaluation": "the evaluation's job failed ..."
  std::string work_dir;         // absolute and existing: the journal, the jobs' scripts and outputs
  std::string journal;          // the journal's path
  std::string prefix;           // attempt keys: prefix + n
  json::object identity;        // what decides the result (check_journal_identity)
  std::string identity_remedy;  // what to do when the journal was written for other work
  std::string lock_remedy;      // what to do when another controller holds the lock
  std::string failed_event = "work_failed";
  std::string infrastructure_note;  // said after an infrastructure failure ("nothing of it is scored")
  std::string submit_note;          // said after each submission (" on cards 2,3")
  int max_retries = 2;
  std::chrono::milliseconds poll{2000};

  // The spec of attempt `key`: argv and env; name and work_dir are set by the controller.
  std::function<Result<JobSpec>(const std::string& key)> spec;
  // Before a fresh submission (may be null): e.g. removing a stale result file of the same name.
  std::function<Status(const JobAttempt&)> before_submit;
  std::function<Verdict(const JobAttempt&, const JobStatus&)> judge;
  // A result: the command's exit code. `failures`: infrastructure failures before it; `again`: read
  // from the journal of a finished job, nothing submitted.
  std::function<Result<int>(const JobAttempt&, const JobStatus&, int failures, bool again)> report;
  // The work's own failure: the command's exit code (say why; the job's output is there).
  std::function<int(const JobAttempt&, const JobStatus&)> work_failed;
  // Before an infrastructure failure's retry (may be null): e.g. pinning the next job to a node, by
  // replacing the executor run() was given.
  std::function<Status(const JobAttempt&, const JobStatus&)> before_retry;
};

// Runs `job` to its end on `*e` (see above); the command's exit code from the hooks, or an error.
Result<int> run_single_job(std::unique_ptr<Executor>& e, const SingleJob& job);

// The last lines of a file (a job's output), for an error message.
std::string file_tail(const std::string& path, size_t lines);

}  // namespace plumb::executor
