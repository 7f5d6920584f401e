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
// The window between submit() returning and the "submitted" line: a single-job controller
// (executor/single_job.h) writes {"event":"submitting","key":K,"job_name":N} first, N a scheduler name
// unique to the attempt, and a restart finds the job by that name. tune and kernels search do not:
// a controller of theirs killed in that window leaves a job the journal does not name;
// next_attempt() skips the names its files took, so a restart never reuses them, but the job itself
// is not reattached.
//
// Thread-safety: none; one controller writes a journal. Errors: IoError naming the file.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"

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

}  // namespace plumb::executor
