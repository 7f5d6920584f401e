// How a finished job ended, beyond its JobState: the signal that killed it, read from the executor's
// detail ("killed by signal 9 (Killed)" from the local executor, "sacct: 0:9" — exit code:signal —
// from Slurm's accounting). Shared by the commands that run their work as jobs (docs/cluster.md).
#pragma once

#include <string>

#include "executor/executor.h"

namespace plumb::cli {

// The signal that ended the job, 0 when none is known.
inline int job_signal(const executor::JobStatus& st) {
  const std::string& d = st.detail;
  std::string digits;
  if (d.rfind("killed by signal ", 0) == 0) {
    digits = d.substr(17, d.find(' ', 17) - 17);
  } else if (d.rfind("sacct: ", 0) == 0 && d.rfind(':') > 6) {
    digits = d.substr(d.rfind(':') + 1);
  }
  if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  return std::stoi(digits);
}

// Whether a failed job's node never ran it (Slurm's BOOT_FAIL): the cluster's fault, not the job's.
inline bool node_never_ran(const executor::JobStatus& st) {
  return st.scheduler_state.rfind("BOOT_FAIL", 0) == 0;
}

}  // namespace plumb::cli
