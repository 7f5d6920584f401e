// The executor flags that `plumb tune`, `plumb compare run`, `plumb evaluate` and `plumb kernels search`
// share (docs/cluster.md): --executor, the [slurm] settings file and flags, retries and the poll interval;
// and what the jobs need to know about the ledger.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "executor/executor.h"

namespace plumb::cli {

struct ExecutorArgs {
  std::string kind = "local";  // local | slurm
  int max_job_retries = 2;     // re-submissions after infrastructure failures
  double poll_s = 2;           // seconds between looks at a job
  std::string slurm_config;    // TOML file with a [slurm] table
  executor::SlurmSettings slurm;
  std::string gpus;         // --gpus 0,1,...: the cards of this host the local executor spreads jobs over
  int gpus_per_trial = -1;  // --gpus-per-trial N (-1 = not given: 1 with --gpus)
};

// Adds the flags to `c` in their own help group; `what` names a job in the help ("trial").
// `local` says what --executor local does for this command (the default: "on this machine").
void add_executor_flags(CLI::App* c, ExecutorArgs& a, const std::string& what,
                        const std::string& local = "on this machine");

// The executor of the flags: the settings file first, the flags given beside it on top (and a
// --nodelist set by the command, kept when called again). Slurm jobs are submitted with --no-requeue
// unless [slurm].extra says --requeue or --no-requeue: Slurm otherwise requeues a batch job whose node
// failed, and the controller would watch it pending again (on whatever node it gets next) instead of
// seeing a node failure it counts against --max-job-retries.
// InvalidArgument naming the file and key, or the flag, for a bad setting.
Result<std::unique_ptr<executor::Executor>> make_executor(ExecutorArgs& a);

// The GPU slots of --gpus/--gpus-per-trial (empty when --gpus is not given). InvalidArgument saying
// what to do: --gpus with --executor slurm (Slurm assigns the cards: --slurm-gpus), --gpus-per-trial
// without --gpus, and what executor::gpu_slots refuses.
Result<std::vector<executor::GpuSlot>> gpu_slots(const ExecutorArgs& a);

// What a job opens: a postgresql:// URL as given, a SQLite file by its absolute path.
std::string ledger_for_jobs(const std::string& path);

}  // namespace plumb::cli
