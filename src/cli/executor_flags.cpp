// The executor flags shared by plumb tune, compare run, evaluate and kernels search.
#include "cli/executor_flags.h"

#include <algorithm>
#include <filesystem>

namespace plumb::cli {

void add_executor_flags(CLI::App* c, ExecutorArgs& a, const std::string& what, const std::string& local) {
  const char* g = "Executor (where the work runs; docs/cluster.md)";
  c->add_option(
       "--executor", a.kind,
       "local: " + local + "; slurm: each " + what +
           " is a Slurm batch job that launches its engines on its node and writes to the shared --ledger")
      ->check(CLI::IsMember({"local", "slurm"}))
      ->capture_default_str()
      ->group(g);
  c->add_option(
       "--max-job-retries", a.max_job_retries,
       "re-submissions of a " + what +
           " whose job was cancelled, lost its node or vanished (a job past its time limit is not retried: "
           "docs/cluster.md)")
      ->capture_default_str()
      ->group(g);
  c->add_option("--poll-interval", a.poll_s, "seconds between looks at the jobs")
      ->capture_default_str()
      ->group(g);
  c->add_option("--slurm-config", a.slurm_config,
                "TOML file with a [slurm] table: partition, account, time, gpus, cpus_per_task, mem, qos, "
                "constraint, extra, rest_url, rest_api, rest_user, rest_token_file")
      ->group(g);
  c->add_option("--slurm-partition", a.slurm.partition, "sbatch --partition")->group(g);
  c->add_option("--slurm-account", a.slurm.account, "sbatch --account")->group(g);
  c->add_option("--slurm-time", a.slurm.time_limit, "sbatch --time (e.g. 30, 1:00:00)")->group(g);
  c->add_option("--slurm-gpus", a.slurm.gpus, "GPUs per job: sbatch --gres=gpu:N (none when 0)")->group(g);
  c->add_option(
       "--slurm-rest", a.slurm.rest_url,
       "http://host:port of slurmrestd: job states, lookups and cancels through its REST API "
       "instead of squeue and scancel (jobs are still submitted with sbatch); the token is SLURM_JWT "
       "or [slurm].rest_token_file (docs/cluster.md)")
      ->group(g);
  c->add_option("--gpus", a.gpus,
                "local: the cards of this host by index (e.g. 0,1,2,3), split into slots of --gpus-per-trial "
                "cards; one job per slot at a time, with CUDA_VISIBLE_DEVICES = its slot (docs/cluster.md)")
      ->group(g);
  c->add_option("--gpus-per-trial", a.gpus_per_trial,
                "with --gpus: cards per slot, i.e. per " + what + " (default 1; must divide the list)")
      ->group(g);
}

Result<std::vector<executor::GpuSlot>> gpu_slots(const ExecutorArgs& a) {
  if (a.gpus.empty()) {
    if (a.gpus_per_trial != -1)
      return invalid_argument("--gpus-per-trial needs --gpus: list the cards to split, e.g. --gpus 0,1,2,3");
    return std::vector<executor::GpuSlot>();
  }
  if (a.kind == "slurm")
    return invalid_argument(
        "--gpus is for --executor local (the cards of this host); under Slurm the scheduler assigns the "
        "cards: use --slurm-gpus N (sbatch --gres=gpu:N)");
  return executor::gpu_slots(a.gpus, a.gpus_per_trial == -1 ? 1 : a.gpus_per_trial);
}

Result<std::unique_ptr<executor::Executor>> make_executor(ExecutorArgs& a) {
  if (a.max_job_retries < 0) return invalid_argument("--max-job-retries must be >= 0");
  if (!a.slurm_config.empty()) {
    executor::SlurmSettings flags = a.slurm;
    PLUMB_ASSIGN_OR_RETURN(a.slurm, executor::load_slurm_settings(a.slurm_config));
    if (!flags.partition.empty()) a.slurm.partition = flags.partition;
    if (!flags.account.empty()) a.slurm.account = flags.account;
    if (!flags.time_limit.empty()) a.slurm.time_limit = flags.time_limit;
    if (flags.gpus > 0) a.slurm.gpus = flags.gpus;
    if (!flags.nodelist.empty()) a.slurm.nodelist = flags.nodelist;
    if (!flags.rest_url.empty()) a.slurm.rest_url = flags.rest_url;
  }
  if (std::find_if(a.slurm.extra.begin(), a.slurm.extra.end(), [](const std::string& x) {
        return x == "--requeue" || x == "--no-requeue";
      }) == a.slurm.extra.end())
    a.slurm.extra.emplace_back("--no-requeue");
  return executor::make_executor(a.kind, a.slurm);
}

std::string ledger_for_jobs(const std::string& path) {
  if (path.rfind("postgresql://", 0) == 0 || path.rfind("postgres://", 0) == 0) return path;
  return std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace plumb::cli
