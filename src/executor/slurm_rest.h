// slurmrestd, the Slurm executor's watcher where SlurmSettings::rest_url is set: a job's state comes
// from GET /slurm/<api>/job/<id>, a job is found by name in GET /slurm/<api>/jobs, and cancelled with
// DELETE /slurm/<api>/job/<id>, authenticated with a JSON Web Token (headers X-SLURM-USER-NAME and
// X-SLURM-USER-TOKEN). Jobs are still submitted with sbatch: a job's script, output and environment
// come from its #SBATCH lines, which slurmrestd's submit endpoint does not read. A job the controller
// has forgotten (past MinJobAge) is looked up in accounting with sacct, as without slurmrestd.
//
// The answers' shapes: API v0.0.38 (Slurm 22.05; the default) gives job_state as a word and exit_code
// as a wait status; v0.0.40 and later give job_state as a list of words and exit_code as an object
// with a return code. Both are read.
//
// Errors: Unavailable for a slurmrestd that does not answer, refuses the token (its message says how
// to make a new one) or reports an error; InvalidArgument for settings that cannot work (no token).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "executor/executor.h"

namespace plumb::executor::rest {

// The token: the first line of s.rest_token_file, read again on every call (so a token renewed in
// place is picked up by a long study), else the SLURM_JWT environment variable (the variable Slurm's
// `scontrol token` prints). InvalidArgument saying how to make one when neither is there.
Result<std::string> token(const SlurmSettings& s);

// The user the token was made for: s.rest_user, else the user running plumb.
std::string user(const SlurmSettings& s);

// One call to slurmrestd: `method` on s.rest_url + "/slurm/" + s.rest_api + path. Returns the body
// whatever the HTTP status (slurmrestd reports errors in it, with status 500); Unavailable when it
// does not answer, or answers 401 (the token was refused).
struct Reply {
  int status = 0;
  std::string body;
};
Result<Reply> call(const SlurmSettings& s, std::string_view method, const std::string& path);

// The job in the answer to GET /job/<id> as a JobStatus (scheduler_state is the state word, detail
// "slurmrestd: " the reason and the exit code), nullopt when the controller does not know the job
// (error 2017, "Invalid job id"). Unavailable for any other error the answer reports, InvalidArgument
// for an answer that is not slurmrestd's.
Result<std::optional<JobStatus>> job_status(std::string_view body, const std::string& job_id);

// The highest job id named `name` in the answer to GET /jobs, nullopt when none has that name.
Result<std::optional<std::string>> job_named(std::string_view body, const std::string& name);

// Whether the answer to DELETE /job/<id> means the job is stopped or stopping: no error, or the
// job is already finished or unknown (as scancel's own messages are taken). Unavailable otherwise.
Status cancelled(std::string_view body, const std::string& job_id);

}  // namespace plumb::executor::rest
