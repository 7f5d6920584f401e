// The Slurm executor: sbatch scripts, job states from squeue and sacct, scancel; and its settings.
#include <toml++/toml.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/subprocess.h"
#include "executor/executor.h"
#include "executor/slurm_rest.h"
#include "net/http_client.h"

namespace plumb::executor {
namespace {

// A word the shell reads back as exactly this string.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

// Runs a scheduler client to completion; its stdout and stderr together.
struct ToolOutput {
  bool ok = false;  // exited 0
  std::string out;
  std::string how;  // how it ended
};
Result<ToolOutput> run_tool(const std::vector<std::string>& argv) {
  char tmpl[] = "/tmp/plumb_slurm_XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) return io_error("cannot create a temporary file for " + argv[0] + "'s output");
  ::close(fd);
  std::string path = tmpl;
  SpawnOptions so;
  so.argv = argv;
  so.stdout_path = path;
  so.stderr_path = "=stdout";
  so.new_process_group = false;
  auto p = Subprocess::spawn(so);
  if (!p.ok()) {
    std::remove(path.c_str());
    return unavailable("cannot run " + argv[0] +
                       " (is the Slurm client installed and on PATH?): " + p.status().message());
  }
  ExitInfo e = p->wait();
  auto text = read_file(path);
  std::remove(path.c_str());
  ToolOutput o;
  o.ok = e.exited && e.exit_code == 0;
  o.out = text.ok() ? *text : std::string();
  o.how = e.to_string();
  if (e.exited && e.exit_code == 127)
    return unavailable(argv[0] + " not found (install the Slurm client: scripts/setup.sh, or set its path)");
  return o;
}

// The first line of a scheduler's answer, split on '|'.
std::vector<std::string> fields(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  std::vector<std::string> f;
  size_t start = 0;
  while (true) {
    size_t bar = line.find('|', start);
    f.push_back(trim(line.substr(start, bar == std::string::npos ? std::string::npos : bar - start)));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  return f;
}

class SlurmExecutor : public Executor {
 public:
  explicit SlurmExecutor(SlurmSettings s) : s_(std::move(s)) {}
  std::string kind() const override { return "slurm"; }

  Result<std::string> submit(const JobSpec& spec) override {
    if (spec.argv.empty()) return invalid_argument("slurm executor: job '" + spec.name + "' has no command");
    std::string script = spec.work_dir + "/" + spec.name + ".sbatch";
    PLUMB_RETURN_IF_ERROR(write_file_atomic(script, render_sbatch_script(spec, s_)));
    PLUMB_ASSIGN_OR_RETURN(ToolOutput o, run_tool({s_.sbatch, "--parsable", script}));
    std::string id = trim(o.out.substr(0, o.out.find(';')));
    if (!o.ok || id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
      return unavailable("sbatch refused job '" + spec.name + "' (" + o.how + "): " + trim(o.out) +
                         "\n  the script is " + script);
    return id;
  }

  Result<JobStatus> poll(const std::string& job_id) override {
    if (!s_.rest_url.empty()) return poll_rest(job_id);
    PLUMB_ASSIGN_OR_RETURN(ToolOutput q,
                           run_tool({s_.squeue, "-h", "-t", "all", "-j", job_id, "-o", "%T|%N|%r"}));
    if (q.ok && !trim(q.out).empty()) return from_fields(fields(q.out), "squeue");
    bool unknown = trim(q.out).empty() || q.out.find("Invalid job id") != std::string::npos;
    if (!q.ok && !unknown)
      return unavailable("squeue could not report job " + job_id + " (" + q.how + "): " + trim(q.out));
    return from_accounting(job_id, "squeue");
  }

  Status cancel(const std::string& job_id) override {
    if (!s_.rest_url.empty()) {
      PLUMB_ASSIGN_OR_RETURN(rest::Reply r, rest::call(s_, "DELETE", "/job/" + job_id));
      return rest::cancelled(r.body, job_id);
    }
    PLUMB_ASSIGN_OR_RETURN(ToolOutput o, run_tool({s_.scancel, job_id}));
    if (!o.ok && o.out.find("Invalid job id") == std::string::npos &&
        o.out.find("already completing or completed") == std::string::npos)
      return unavailable("scancel " + job_id + " failed (" + o.how + "): " + trim(o.out));
    return Status::Ok();
  }

  Result<std::optional<std::string>> find_by_name(const std::string& name) override {
    if (!s_.rest_url.empty()) {
      PLUMB_ASSIGN_OR_RETURN(rest::Reply r, rest::call(s_, "GET", "/jobs"));
      PLUMB_ASSIGN_OR_RETURN(std::optional<std::string> id, rest::job_named(r.body, name));
      if (id) return id;
    } else {
      PLUMB_ASSIGN_OR_RETURN(ToolOutput q,
                             run_tool({s_.squeue, "-h", "-t", "all", "--name=" + name, "-o", "%i"}));
      if (!q.ok)
        return unavailable("squeue could not look up job name " + name + " (" + q.how + "): " + trim(q.out));
      if (auto id = last_id(q.out)) return id;
    }
    // Past the controller's memory (MinJobAge): accounting, where the cluster keeps it.
    auto a = run_tool({s_.sacct, "-n", "-X", "-P", "-S", "now-7days", "--name=" + name, "-o", "JobID"});
    // Beside slurmrestd the Slurm clients may be missing: then there is no accounting to ask.
    if (!a.ok() && s_.rest_url.empty()) return a.status();
    if (a.ok() && a->ok) return last_id(a->out);
    return std::optional<std::string>();  // no accounting on this cluster: the job is not known
  }

 private:
  Result<JobStatus> poll_rest(const std::string& job_id) {
    PLUMB_ASSIGN_OR_RETURN(rest::Reply r, rest::call(s_, "GET", "/job/" + job_id));
    PLUMB_ASSIGN_OR_RETURN(std::optional<JobStatus> st, rest::job_status(r.body, job_id));
    if (st) return *st;
    return from_accounting(job_id, "slurmrestd");
  }

  // A job the controller no longer knows (past MinJobAge): accounting, where the cluster keeps it;
  // else the job is lost. `first` names what was asked first (squeue or slurmrestd).
  Result<JobStatus> from_accounting(const std::string& job_id, const std::string& first) {
    auto a = run_tool({s_.sacct, "-n", "-X", "-P", "-j", job_id, "-o", "State,NodeList,ExitCode"});
    // Beside slurmrestd the Slurm clients may be missing: then there is no accounting to ask.
    if (!a.ok() && s_.rest_url.empty()) return a.status();
    if (a.ok() && a->ok && !trim(a->out).empty()) return from_fields(fields(a->out), "sacct");
    JobStatus st;
    st.state = JobState::kLost;
    st.detail = "neither " + first + " nor sacct knows job " + job_id;
    if (!a.ok())
      st.detail += " (" + a.status().message() + ")";
    else if (!a->ok)
      st.detail += ": " + trim(a->out);
    return st;
  }

  // The last line of a scheduler's answer that is a job id, nullopt when none.
  static std::optional<std::string> last_id(const std::string& text) {
    std::optional<std::string> id;
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      std::string line = trim(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      if (!line.empty() && line.find_first_not_of("0123456789") == std::string::npos) id = line;
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    return id;
  }
  // squeue: state|nodes|reason; sacct: State|NodeList|ExitCode.
  static JobStatus from_fields(const std::vector<std::string>& f, const std::string& source) {
    JobStatus st;
    st.scheduler_state = f.empty() ? "" : f[0];
    st.state = slurm_state(st.scheduler_state);
    if (f.size() > 1 && f[1] != "(null)" && f[1] != "None assigned") st.node = f[1];
    if (f.size() > 2 && f[2] != "None") st.detail = source + ": " + f[2];
    return st;
  }
  SlurmSettings s_;
};

Status unknown_key(const std::string& file, const std::string& key) {
  return invalid_argument(
      file + ": unknown key [slurm]." + key +
      " (known: partition, account, time, gpus, cpus_per_task, mem, qos, constraint, extra, rest_url, "
      "rest_api, rest_user, rest_token_file)");
}

Status read_string(const toml::node& n, const std::string& where, std::string& out) {
  auto v = n.value<std::string>();
  if (!v) return invalid_argument(where + " must be a string");
  out = *v;
  return Status::Ok();
}

Status read_count(const toml::node& n, const std::string& where, int& out) {
  auto v = n.value<int64_t>();
  if (!v || *v < 0 || *v > 1'000'000) return invalid_argument(where + " must be a whole number >= 0");
  out = int(*v);
  return Status::Ok();
}

Status read_key(const std::string& file, const std::string& key, const toml::node& n, SlurmSettings& s) {
  const std::string where = file + ": [slurm]." + key;
  if (key == "partition") return read_string(n, where, s.partition);
  if (key == "account") return read_string(n, where, s.account);
  if (key == "time") return read_string(n, where, s.time_limit);
  if (key == "mem") return read_string(n, where, s.mem);
  if (key == "qos") return read_string(n, where, s.qos);
  if (key == "constraint") return read_string(n, where, s.constraint);
  if (key == "rest_url") return read_string(n, where, s.rest_url);
  if (key == "rest_api") return read_string(n, where, s.rest_api);
  if (key == "rest_user") return read_string(n, where, s.rest_user);
  if (key == "rest_token_file") return read_string(n, where, s.rest_token_file);
  if (key == "gpus") return read_count(n, where, s.gpus);
  if (key == "cpus_per_task") return read_count(n, where, s.cpus_per_task);
  if (key != "extra") return unknown_key(file, key);
  const auto* arr = n.as_array();
  if (!arr) return invalid_argument(where + " must be an array of strings");
  s.extra.clear();
  for (const auto& e : *arr) {
    std::string v;
    PLUMB_RETURN_IF_ERROR(read_string(e, where + "[]", v));
    s.extra.push_back(v);
  }
  return Status::Ok();
}

}  // namespace

JobState slurm_state(const std::string& word) {
  std::string w = word.substr(0, word.find(' '));  // "CANCELLED by 0"
  if (w == "PENDING" || w == "REQUEUED" || w == "RESV_DEL_HOLD" || w == "REQUEUE_HOLD" || w == "SUSPENDED")
    return JobState::kPending;
  if (w == "RUNNING" || w == "COMPLETING" || w == "CONFIGURING" || w == "STAGE_OUT" || w == "SIGNALING" ||
      w == "RESIZING")
    return JobState::kRunning;
  if (w == "COMPLETED") return JobState::kCompleted;
  if (w == "CANCELLED" || w == "PREEMPTED" || w == "REVOKED") return JobState::kCancelled;
  if (w == "TIMEOUT") return JobState::kTimedOut;
  if (w == "NODE_FAIL") return JobState::kNodeFailed;
  if (w == "FAILED" || w == "OUT_OF_MEMORY" || w == "BOOT_FAIL" || w == "DEADLINE") return JobState::kFailed;
  return JobState::kLost;
}

Result<SlurmSettings> load_slurm_settings(const std::string& toml_path, SlurmSettings base) {
  auto text = read_file(toml_path);
  if (!text.ok())
    return not_found("cannot read the Slurm settings file " + toml_path + ": " + text.status().message());
  toml::table t;
  try {
    t = toml::parse(*text, toml_path);
  } catch (const toml::parse_error& e) {
    return invalid_argument(toml_path + ": not valid TOML: " + std::string(e.description()));
  }
  const auto* slurm = t.get_as<toml::table>("slurm");
  if (!slurm) return invalid_argument(toml_path + ": no [slurm] table (see docs/cluster.md for a sample)");
  for (const auto& [k, v] : *slurm) PLUMB_RETURN_IF_ERROR(read_key(toml_path, std::string(k.str()), v, base));
  PLUMB_RETURN_IF_ERROR(validate(base).with_context(toml_path));
  return base;
}

Status validate(const SlurmSettings& s) {
  static const std::regex time_re(R"(^(UNLIMITED|INFINITE|[0-9]+(-[0-9]+)?(:[0-9]+){0,2})$)");
  if (!s.time_limit.empty() && !std::regex_match(s.time_limit, time_re))
    return invalid_argument("Slurm time limit '" + s.time_limit +
                            "' is not in Slurm's syntax: minutes (\"30\"), \"H:MM:SS\" or \"D-HH:MM:SS\"");
  for (const std::string* v :
       {&s.partition, &s.account, &s.time_limit, &s.mem, &s.qos, &s.constraint, &s.nodelist})
    if (v->find('\n') != std::string::npos)
      return invalid_argument("a Slurm setting holds a newline: '" + *v + "'");
  for (const auto& e : s.extra)
    if (e.rfind("--", 0) != 0 || e.find('\n') != std::string::npos)
      return invalid_argument("extra sbatch option '" + e +
                              "' must be one long option (\"--exclusive\", \"--qos=x\")");
  if (s.gpus < 0 || s.cpus_per_task < 0) return invalid_argument("Slurm gpus and cpus_per_task must be >= 0");
  if (!s.rest_url.empty()) {
    auto u = net::parse_url(s.rest_url);
    if (!u.ok() || s.rest_url.find('/', 7) != std::string::npos)
      return invalid_argument(
          "slurmrestd URL '" + s.rest_url + "' must be http://host:port" +
          (u.ok() ? " (no path: plumb adds /slurm/<api>/...)" : ": " + u.status().message()));
  }
  static const std::regex api_re(R"(^v[0-9]+\.[0-9]+\.[0-9]+$)");
  if (!std::regex_match(s.rest_api, api_re))
    return invalid_argument("slurmrestd API version '" + s.rest_api + "' must be of the form v0.0.38");
  for (const std::string* v : {&s.rest_user, &s.rest_token_file})
    if (v->find('\n') != std::string::npos)
      return invalid_argument("a Slurm setting holds a newline: '" + *v + "'");
  return Status::Ok();
}

std::string render_sbatch_script(const JobSpec& spec, const SlurmSettings& s) {
  std::string o = "#!/bin/bash\n# Written by plumb (executor slurm): one job, the command at the end.\n";
  auto opt = [&o](const std::string& name, const std::string& value) {
    if (!value.empty()) o += "#SBATCH --" + name + "=" + value + "\n";
  };
  opt("job-name", spec.scheduler_name.empty() ? spec.name : spec.scheduler_name);
  opt("output", output_path(spec));
  opt("chdir", spec.work_dir);
  opt("partition", s.partition);
  opt("account", s.account);
  opt("time", s.time_limit);
  if (s.gpus > 0) opt("gres", "gpu:" + std::to_string(s.gpus));
  if (s.cpus_per_task > 0) opt("cpus-per-task", std::to_string(s.cpus_per_task));
  opt("mem", s.mem);
  opt("qos", s.qos);
  opt("constraint", s.constraint);
  opt("nodelist", s.nodelist);
  for (const auto& e : s.extra) o += "#SBATCH " + e + "\n";
  std::map<std::string, std::string> env = spec.env;
  set_child_gpu_env(env);
  for (const auto& [k, v] : env) o += "export " + k + "=" + shell_quote(v) + "\n";
  o += "exec";
  for (const auto& a : spec.argv) o += " " + shell_quote(a);
  return o + "\n";
}

std::unique_ptr<Executor> make_slurm_executor(const SlurmSettings& s) {
  return std::make_unique<SlurmExecutor>(s);
}

}  // namespace plumb::executor
