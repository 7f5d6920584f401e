// The job journal: what a controller that submits jobs (plumb tune, plumb evaluate, plumb compare run
// and plumb kernels search, each with --executor) records of them, so that a controller killed at any point
// and started again finds its jobs. One JSON object a line, append-only, each with "event" and "at" (UTC):
//   {"event":"submitted","key":K,"job_id":ID,"identity":{...},...}   then, for the same key,
//   {"event":"finished"|"infrastructure_failure"|...,"key":K,...}
// A job whose last event is "submitted" is in flight: the restarted controller polls it by its id
// (Executor::poll reattaches) instead of submitting it again. "identity" says what the job was
// submitted for (the command's arguments that decide its result); a restart with other arguments is
// refused rather than mixing results (check_journal_identity). A study's journal carries no identity
// (its file name holds the study id) but the job's spec and its "seq" and "attempt". One controller
// at a time writes a journal: executor/lock.h.
//
// The window between submit() returning and the "submitted" line: every controller submits through
// submit_journaled, which writes {"event":"submitting","key":K,"job_name":N,...} first, N a scheduler
// name unique to the attempt; a restart looks each unconfirmed "submitting" line up by that name
// (resolve_submission): found, the caller journals the job "submitted" (with "found_by":"name") and
// reattaches to it; not found, the line is closed with "not_submitted" and the work submitted anew.
//
// Thread-safety: none; one controller writes a journal. Errors: IoError naming the file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "executor/executor.h"

namespace plumb::executor {

// Appends `event`, with "at" set to now (UTC), as one line.
Status journal_append(const std::string& path, json::object event);

// The journal's events in order. A missing file has none; a line that does not parse (cut by a kill
// mid-write) is skipped.
std::vector<json::object> journal_read(const std::string& path);

// One job as the journal last knows it.
struct JournaledJob {
  std::string key;         // the job's name, unique in the journal
  std::string job_id;      // the executor's id (a pid, a Slurm job id)
  json::object submitted;  // its "submitted" event
  json::object last;       // its last event ("submitted" itself while in flight)
  std::string last_event() const { return json::string_at(last, "event").value_or(""); }
  bool in_flight() const { return last_event() == "submitted"; }
};
// The jobs of the journal's events, in the order they were submitted (events of a key never
// submitted are ignored).
std::vector<JournaledJob> journal_jobs(const std::vector<json::object>& events);

// Checks that every "submitted" and "submitting" event carries "identity" equal to `identity`.
// InvalidArgument naming the journal, the first field that differs (or that the journal has no identity: an
// older plumb) and `remedy` (what the user can do: another work directory, or removing the journal).
Status check_journal_identity(const std::string& path, const std::vector<json::object>& events,
                              const json::object& identity, const std::string& remedy);

// The attempt number for the next job named `<prefix><n>`: one past the highest n among the journal's
// keys and the files in `dir` named `<prefix><n>.out` or `<prefix><n>.sbatch` (a job submitted by a
// controller killed before it journaled it); 0 when there are none. A name may carry more after the
// number, "-<more>" without a dot (tune's `s<study>-j<n>-a<attempt>`, and its `.out`/`.sbatch` files).
int next_attempt(const std::vector<json::object>& events, const std::string& dir, const std::string& prefix);

// ---- the window between submit() and the "submitted" line -------------------------------------------

// The environment variable of a test-only fault: "1" makes submit_journaled exit the process (code
// kDieAfterSubmitExit) right after the executor accepted the job, before its caller can journal it.
inline constexpr const char* kTestDieAfterSubmit = "PLUMB_TEST_DIE_AFTER_SUBMIT";
inline constexpr int kDieAfterSubmitExit = 86;

// A scheduler name unique to one attempt: `key`-<8 random hex digits>.
std::string unique_scheduler_name(const std::string& key);

// Submits `spec` under a fresh scheduler name (set in spec.scheduler_name), after appending `intent` to
// `journal` with "event":"submitting", "key" (spec.name), "job_name" and "executor" set over it. The
// caller puts in `intent` what a restart needs to rebuild the job from that line alone (its spec, its
// "identity"), and journals the "submitted" line with the returned id and "job_name". A submission the
// executor refuses is closed at once ("not_submitted" with "detail": the error) and its error returned.
Result<std::string> submit_journaled(Executor& e, const std::string& journal, JobSpec& spec,
                                     json::object intent);

// The "submitting" events with no "submitted" or "not_submitted" of the same key after them, in order:
// submissions whose controller stopped between the two lines.
std::vector<json::object> unconfirmed_submissions(const std::vector<json::object>& events);

// Resolves one of them: the id of the job the executor knows by its "job_name"
// (Executor::find_by_name), or nullopt after journaling {"event":"not_submitted","key","job_name"} (the
// executor never accepted it, or it was a local job, dead with its controller). The caller journals a
// found job's "submitted" line (with "found_by":"name") and reattaches to it.
Result<std::optional<std::string>> resolve_submission(Executor& e, const std::string& journal,
                                                      const json::object& submitting);

}  // namespace plumb::executor
