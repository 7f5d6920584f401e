// The executor kinds, their names, and the local (child process) executor.
#include "executor/executor.h"

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "core/subprocess.h"
#include "executor/slurm_rest.h"

namespace plumb::executor {

std::string state_name(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "pending";
    case JobState::kRunning:
      return "running";
    case JobState::kCompleted:
      return "completed";
    case JobState::kFailed:
      return "failed";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kTimedOut:
      return "timed_out";
    case JobState::kNodeFailed:
      return "node_failed";
    case JobState::kLost:
      return "lost";
  }
  return "lost";
}

bool is_final(JobState s) { return s != JobState::kPending && s != JobState::kRunning; }

Result<JobStatus> wait_until_final(Executor& e, const std::string& job_id, std::chrono::milliseconds interval,
                                   const std::function<void(const JobStatus&)>& on_change) {
  std::optional<JobState> last;
  int failures = 0;
  while (true) {
    auto st = e.poll(job_id);
    if (!st.ok()) {
      if (++failures >= 10) return st.status().with_context("watching job " + job_id);
    } else {
      failures = 0;
      if (on_change && (!last || *last != st->state)) on_change(*st);
      last = st->state;
      if (is_final(st->state)) return *st;
    }
    std::this_thread::sleep_for(interval);
  }
}

std::string output_path(const JobSpec& spec) { return spec.work_dir + "/" + spec.name + ".out"; }

namespace {

// Jobs are children of this process: a job id is the child's pid.
class LocalExecutor : public Executor {
 public:
  std::string kind() const override { return "local"; }

  Result<std::string> submit(const JobSpec& spec) override {
    if (spec.argv.empty()) return invalid_argument("local executor: job '" + spec.name + "' has no command");
    SpawnOptions so;
    so.argv = spec.argv;
    so.env = spec.env;
    set_child_gpu_env(so.env);
    so.cwd = spec.work_dir;
    so.stdout_path = output_path(spec);
    so.stderr_path = "=stdout";
    so.die_with_parent = true;
    PLUMB_ASSIGN_OR_RETURN(Subprocess p, Subprocess::spawn(so));
    std::string id = std::to_string(p.pid());
    jobs_[id] = std::move(p);
    return id;
  }

  Result<JobStatus> poll(const std::string& job_id) override {
    JobStatus st;
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      st.state = JobState::kLost;
      st.detail = "not a child of this controller (a local job dies with the controller that started it)";
      return st;
    }
    st.node = "localhost";
    auto e = it->second.wait_for(std::chrono::milliseconds(0));
    if (!e) {
      st.state = JobState::kRunning;
      return st;
    }
    st.detail = e->to_string();
    auto c = cancelled_.find(job_id);
    if (c != cancelled_.end())
      st.state = JobState::kCancelled;
    else
      st.state = e->exited && e->exit_code == 0 ? JobState::kCompleted : JobState::kFailed;
    return st;
  }

  Status cancel(const std::string& job_id) override {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return Status::Ok();
    cancelled_[job_id] = true;
    it->second.stop(std::chrono::milliseconds(2000));
    return Status::Ok();
  }

  Result<std::optional<std::string>> find_by_name(const std::string& /*name*/) override {
    return std::optional<std::string>();  // the jobs of a dead controller died with it
  }

 private:
  std::map<std::string, Subprocess> jobs_;
  std::map<std::string, bool> cancelled_;
};

}  // namespace

std::unique_ptr<Executor> make_local_executor() { return std::make_unique<LocalExecutor>(); }

Result<std::unique_ptr<Executor>> make_executor(const std::string& kind, const SlurmSettings& slurm) {
  if (kind == "local") return make_local_executor();
  if (kind == "slurm") {
    PLUMB_RETURN_IF_ERROR(validate(slurm));
    if (!slurm.rest_url.empty()) {
      auto t = rest::token(slurm);
      if (!t.ok()) return t.status();
    }
    return make_slurm_executor(slurm);
  }
  return invalid_argument("unknown executor '" + kind + "': use local or slurm");
}

}  // namespace plumb::executor
