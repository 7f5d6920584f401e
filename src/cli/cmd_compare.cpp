// `plumb compare register|run|readout|list`: pre-registered paired comparisons (docs/protocol.md §4–5).
// The logic lives in compare/compare.h; this file only parses flags and prints.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/executor_flags.h"
#include "cli/job_outcome.h"
#include "compare/calibrate.h"
#include "compare/compare.h"
#include "executor/single_job.h"
#include "launch/placement.h"
#include "ledger/ledger.h"

namespace plumb::cli {
namespace {

struct CompareArgs {
  std::string ledger_path = ledger::kDefaultPath;
  compare::RegisterOptions reg;
  int64_t id = 0;
  std::string work_dir;
  std::string tokenizer;
  int request_timeout_s = 600;
  bool no_store = false;
  std::string placement = "auto";
  size_t request_limit = 0;
  int64_t pairs_this_run = 0;
  compare::CalibrateOptions cal;
  std::string cal_scenarios = "B,D";
  ExecutorArgs exec;            // run --executor slurm: the whole comparison as one batch job
  bool executor_given = false;  // run --executor given (local or slurm): the comparison as one job
};

Result<std::unique_ptr<ledger::Ledger>> open_ledger(const CompareArgs& a) {
  return ledger::Ledger::open(a.ledger_path);
}

int fail(const char* what, const Status& s) {
  std::cerr << "plumb compare " << what << ": " << s.to_string() << "\n";
  return exit_for(s);
}

int run_register(const CompareArgs& a) {
  auto l = open_ledger(a);
  if (!l.ok()) return fail("register", l.status());
  auto id = compare::register_comparison(**l, a.reg);
  if (!id.ok()) return fail("register", id.status());
  std::printf("%lld\n", (long long)*id);
  std::fprintf(stderr, "registered comparison %lld in %s; next: plumb compare run %lld --ledger %s\n",
               (long long)*id, a.ledger_path.c_str(), (long long)*id, a.ledger_path.c_str());
  return kExitOk;
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// `compare run --executor slurm`, `--executor local` given, or local with --gpus: every pair on one
// node (the validator refuses a comparison whose runs span two machines), as one job; with --gpus the
// job holds the first slot's cards for the whole comparison, so both arms of every pair run on the
// same cards. The job runs `plumb compare run ID` where the executor puts it; its runs go to the
// shared ledger. The controller is executor/single_job.h's: a journal WORK/compare-ID.jobs.jsonl and
// its lock, so a restarted controller reattaches to the job in flight (or reports a finished
// comparison) instead of submitting it again, and a second controller of the comparison in the same
// work directory is refused. A job that exits with an error of its own (the comparison's, e.g. an
// unknown id) is not retried, nor is one past its time limit; any other end (cancelled, node failed,
// lost, killed by a signal) is an infrastructure failure: submitted again up to --max-job-retries
// times, pinned to the node of the runs already recorded (`compare run` skips the pairs that are
// complete).
json::object comparison_identity(const CompareArgs& a, const std::string& kind, const std::string& cards) {
  return {{"executor", kind},
          {"comparison", a.id},
          {"ledger", ledger_for_jobs(a.ledger_path)},
          {"request_timeout_s", int64_t(a.request_timeout_s)},
          {"placement", a.placement},
          {"tokenizer", a.tokenizer},
          {"request_limit", int64_t(a.request_limit)},
          {"cards", cards}};
}

std::vector<std::string> comparison_argv(const CompareArgs& a, const std::string& work_dir) {
  std::vector<std::string> v = {self_exe(),
                                "compare",
                                "run",
                                std::to_string(a.id),
                                "--ledger",
                                ledger_for_jobs(a.ledger_path),
                                "--work-dir",
                                work_dir,
                                "--request-timeout",
                                std::to_string(a.request_timeout_s),
                                "--placement",
                                a.placement};
  if (!a.tokenizer.empty()) v.insert(v.end(), {"--tokenizer", a.tokenizer});
  if (a.request_limit > 0) v.insert(v.end(), {"--request-limit", std::to_string(a.request_limit)});
  return v;
}

executor::Verdict judge_comparison_job(const executor::JobStatus& st) {
  using executor::JobState;
  if (st.state == JobState::kCompleted) return executor::Verdict::kResult;
  if (st.state == JobState::kTimedOut) return executor::Verdict::kTimedOut;
  if (st.state == JobState::kFailed && job_signal(st) == 0 && !node_never_ran(st))
    return executor::Verdict::kWorkFailed;
  return executor::Verdict::kInfrastructure;
}

int report_comparison_job(const CompareArgs& a, const std::string& journal, const executor::JobAttempt& at,
                          const executor::JobStatus& st, bool again) {
  if (again)
    std::fprintf(stderr,
                 "plumb compare run: comparison %lld already ran in job %s (%s; journal %s): nothing is "
                 "submitted. To run its missing pairs again, remove the journal\n",
                 (long long)a.id, at.job_id.c_str(), at.key.c_str(), journal.c_str());
  std::printf("comparison %lld: every pair ran on node %s (%s job %s); next: plumb compare readout %lld\n",
              (long long)a.id, st.node.empty() ? "(unknown)" : st.node.c_str(), a.exec.kind.c_str(),
              at.job_id.c_str(), (long long)a.id);
  return kExitOk;
}

// Before a retry: the remaining pairs on the node of the runs already recorded.
Status pin_to_node(CompareArgs& a, std::unique_ptr<executor::Executor>& e, const executor::JobStatus& st) {
  PLUMB_ASSIGN_OR_RETURN(auto l, open_ledger(a));
  auto runs = l->comparison_runs(a.id);
  if (!runs.ok() || runs->empty() || st.node.empty() || !a.exec.slurm.nodelist.empty()) return Status::Ok();
  a.exec.slurm.nodelist = st.node;
  PLUMB_ASSIGN_OR_RETURN(e, make_executor(a.exec));
  return Status::Ok();
}

executor::SingleJob comparison_job(CompareArgs& a, std::unique_ptr<executor::Executor>& e,
                                   const std::string& work_dir, const std::string& cards) {
  executor::SingleJob j;
  const std::string name = "compare-" + std::to_string(a.id);
  j.command = "plumb compare run";
  j.what = "comparison";
  j.work_dir = work_dir;
  j.journal = work_dir + "/" + name + ".jobs.jsonl";
  j.prefix = name + "-a";
  j.identity = comparison_identity(a, e->kind(), cards);
  j.identity_remedy = "run it with the arguments it was started with, or remove the journal to start over";
  j.lock_remedy =
      "wait for it to end, or stop it and start this comparison again (it reattaches to the job in flight)";
  j.failed_event = "comparison_failed";
  j.infrastructure_note = "its runs so far are kept, no readout uses an incomplete pair";
  j.submit_note = cards.empty() ? "" : " on cards " + cards;
  j.max_retries = a.exec.max_job_retries;
  j.poll = std::chrono::milliseconds(int64_t(std::max(0.05, a.exec.poll_s) * 1000));
  j.spec = [&a, work_dir, cards](const std::string&) -> Result<executor::JobSpec> {
    executor::JobSpec s;
    if (!cards.empty()) s.env["CUDA_VISIBLE_DEVICES"] = cards;
    s.argv = comparison_argv(a, work_dir);
    return s;
  };
  j.judge = [](const executor::JobAttempt&, const executor::JobStatus& st) {
    return judge_comparison_job(st);
  };
  j.report = [&a, journal = j.journal](const executor::JobAttempt& at, const executor::JobStatus& st, int,
                                       bool again) -> Result<int> {
    return report_comparison_job(a, journal, at, st, again);
  };
  j.work_failed = [&a](const executor::JobAttempt& at, const executor::JobStatus& st) {
    std::cerr << "plumb compare run: comparison " << a.id << " failed in job " << at.job_id << " ("
              << executor::state_name(st.state) << (st.detail.empty() ? "" : ", " + st.detail)
              << "); not retried, it is the comparison's own error. The end of "
              << executor::output_path(at.spec) << ":\n"
              << executor::file_tail(executor::output_path(at.spec), 8);
    return kExitError;
  };
  j.before_retry = [&a, &e](const executor::JobAttempt&, const executor::JobStatus& st) {
    return pin_to_node(a, e, st);
  };
  return j;
}

int run_run_as_job(CompareArgs& a, const std::string& cards) {
  // Submitted with --no-requeue (make_executor): after a node failure the controller retries on the
  // node of the runs already recorded, where a Slurm requeue would run on whatever node it gets.
  auto e = make_executor(a.exec);
  if (!e.ok()) return fail("run", e.status());
  std::string work_dir =
      std::filesystem::absolute(a.work_dir.empty() ? "." : a.work_dir).lexically_normal().string();
  std::error_code ec;
  std::filesystem::create_directories(work_dir, ec);
  if (ec)
    return fail("run",
                invalid_argument("cannot create the work directory " + work_dir + ": " + ec.message()));
  const executor::SingleJob job = comparison_job(a, *e, work_dir, cards);
  auto rc = executor::run_single_job(*e, job);
  return rc.ok() ? *rc : fail("run", rc.status());
}

int run_run(CompareArgs& a) {
  if (a.pairs_this_run > 0 && (a.executor_given || a.exec.kind != "local" || !a.exec.gpus.empty()))
    return fail("run", invalid_argument("--pairs-this-run is for a comparison run in this process; a job "
                                        "(--executor) measures every pair"));
  auto slots = gpu_slots(a.exec);
  if (!slots.ok()) return fail("run", slots.status());
  if (!slots->empty()) {
    if (slots->size() > 1)
      std::fprintf(stderr,
                   "comparison %lld: one comparison holds one slot (both arms of every pair on the same "
                   "cards): cards %s; the other %zu slot(s) stay free\n",
                   (long long)a.id, (*slots)[0].visible_devices().c_str(), slots->size() - 1);
    return run_run_as_job(a, (*slots)[0].visible_devices());
  }
  if (a.executor_given) return run_run_as_job(a, "");
  auto l = open_ledger(a);
  if (!l.ok()) return fail("run", l.status());
  compare::RunOptions o;
  o.plumb_binary = self_exe();
  o.work_dir = a.work_dir;
  o.tokenizer = a.tokenizer;
  o.request_timeout = std::chrono::seconds(a.request_timeout_s);
  o.request_limit = a.request_limit;
  o.pairs_this_call = a.pairs_this_run;
  auto placement = launch::parse_placement_mode(a.placement);
  if (!placement.ok()) return fail("run", placement.status());
  o.placement = *placement;
  o.progress = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  // Where the runs execute (host, cards, their identity), with every run: a readout says when pairs
  // ran on different cards or nodes.
  executor::DeviceProvenance where = executor::device_provenance();
  o.devices = where.to_json();
  std::fprintf(stderr, "comparison %lld runs on %s\n", (long long)a.id, where.summary().c_str());
  auto s = compare::run_comparison(**l, a.id, o);
  if (!s.ok()) return fail("run", s.status());
  std::printf(
      "comparison %lld: %lld runs recorded (%lld invalid), %lld pairs already complete; next: plumb "
      "compare %s %lld\n",
      (long long)a.id, (long long)s->runs_recorded, (long long)s->runs_invalid, (long long)s->pairs_skipped,
      s->unfinished ? "run" : "readout", (long long)a.id);
  if (s->unfinished)
    std::fprintf(
        stderr,
        "plumb compare run: stopped after %lld pairs (--pairs-this-run) with pairs still to measure; "
        "the next `plumb compare run %lld` goes on from there\n",
        (long long)s->pairs_measured, (long long)a.id);
  if (a.request_limit > 0)
    std::fprintf(
        stderr,
        "plumb compare run: each run measured only the first %zu requests of its set (--request-limit): "
        "limited, not a verdict; the ledger will refuse this comparison's readout\n",
        a.request_limit);
  return kExitOk;
}

int run_readout(const CompareArgs& a) {
  auto l = open_ledger(a);
  if (!l.ok()) return fail("readout", l.status());
  auto r = compare::readout_comparison(**l, a.id, !a.no_store);
  if (!r.ok()) {
    if (r.status().code() == Code::kFailedPrecondition) {
      std::cerr << "plumb compare readout: the ledger refused this readout: " << r.status().message() << "\n";
      return kExitFailed;
    }
    return fail("readout", r.status());
  }
  std::fputs(compare::format_readout(*r).c_str(), stdout);
  return kExitOk;
}

int run_calibrate(CompareArgs a) {
  auto l = open_ledger(a);
  if (!l.ok()) return fail("calibrate", l.status());
  a.cal.scenarios.clear();
  for (size_t p = 0; p <= a.cal_scenarios.size();) {
    size_t c = std::min(a.cal_scenarios.find(',', p), a.cal_scenarios.size());
    if (c > p) a.cal.scenarios.push_back(a.cal_scenarios.substr(p, c - p));
    p = c + 1;
  }
  a.cal.work_dir = a.work_dir;
  a.cal.run.plumb_binary = self_exe();
  a.cal.run.tokenizer = a.tokenizer;
  a.cal.run.request_timeout = std::chrono::seconds(a.request_timeout_s);
  auto placement = launch::parse_placement_mode(a.placement);
  if (!placement.ok()) return fail("calibrate", placement.status());
  a.cal.run.placement = *placement;
  a.cal.run.progress = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  auto r = compare::calibrate(**l, a.cal);
  if (!r.ok()) return fail("calibrate", r.status());
  std::fputs(compare::format_calibration(*r, a.cal).c_str(), stdout);
  return kExitOk;
}

int run_list(const CompareArgs& a) {
  auto l = open_ledger(a);
  if (!l.ok()) return fail("list", l.status());
  auto regs = (*l)->list_registrations();
  if (!regs.ok()) return fail("list", regs.status());
  std::printf("%-4s %-24s %-4s %-6s %-6s %-18s %-14s %s\n", "id", "registered", "scn", "size", "pairs",
              "runs (valid)", "last verdict", "arms");
  for (const auto& r : *regs) {
    auto runs = (*l)->comparison_runs(r.id);
    auto ros = (*l)->readouts_for(r.id);
    int64_t n = 0, valid = 0;
    if (runs.ok())
      for (const auto& x : *runs) {
        ++n;
        valid += x.valid ? 1 : 0;
      }
    std::string verdict = ros.ok() && !ros->empty() ? ros->back().verdict : "-";
    std::string runs_s = std::to_string(n) + " (" + std::to_string(valid) + ")";
    std::printf("%-4lld %-24s %-4s %-6s %-6lld %-18s %-14s A=%s B=%s\n", (long long)r.id,
                r.created_at.c_str(), r.scenario.c_str(), r.size_class.c_str(), (long long)r.pairs,
                runs_s.c_str(), verdict.c_str(), r.arm_a_config.c_str(), r.arm_b_config.c_str());
  }
  // Runs outside any registration are exploratory: they can inform, never conclude.
  auto all = (*l)->list_runs();
  if (all.ok()) {
    int64_t exploratory = 0;
    for (const auto& x : *all)
      if (!x.registration_id) ++exploratory;
    if (exploratory > 0)
      std::printf("%lld runs outside any registration: exploratory (no verdict is computed from them)\n",
                  (long long)exploratory);
  }
  return kExitOk;
}

void setup_compare(CLI::App& root) {
  auto a = std::make_shared<CompareArgs>();
  auto* c = root.add_subcommand("compare",
                                "Pre-registered paired comparisons of two engine configurations "
                                "(docs/protocol.md §4-5): register, run, readout, list");
  c->require_subcommand(1);
  auto ledger_opt = [a](CLI::App* s) {
    s->add_option("--ledger", a->ledger_path, "results database (SQLite)")->capture_default_str();
  };

  auto* reg = c->add_subcommand("register", "Store a comparison before any run; prints its id");
  reg->add_option("--a", a->reg.config_a, "arm A engine config (TOML: adapter = ..., [params])")->required();
  reg->add_option("--b", a->reg.config_b, "arm B engine config")->required();
  reg->add_option("--scenario", a->reg.scenario, "A|B|C|D")->capture_default_str();
  reg->add_option("--size", a->reg.size, "small|gpu")->capture_default_str();
  reg->add_option("--metric", a->reg.metric,
                  "primary metric: the scenario's objective (the only one supported)");
  reg->add_option("--min-effect", a->reg.min_effect, "better/worse need the CI beyond 1 +- this")
      ->capture_default_str();
  reg->add_option("--delta", a->reg.delta, "equivalent needs the CI inside [1-delta, 1+delta]")
      ->capture_default_str();
  reg->add_option("--pairs", a->reg.pairs, "number of pairs (>= 5)")->capture_default_str();
  reg->add_option("--max-pairs", a->reg.max_pairs,
                  "let the comparison grow past --pairs, one pair at a time up to this many, while its "
                  "CI is too wide or an arm's CV near the cap (a registered rule that reads the spread "
                  "only; docs/protocol.md section 4); 0: exactly --pairs")
      ->capture_default_str();
  reg->add_option("--seed", a->reg.seed, "base seed; each pair gets its own seed derived from it")
      ->capture_default_str();
  ledger_opt(reg);
  reg->callback([a] { set_exit_code(run_register(*a)); });

  auto* run =
      c->add_subcommand("run", "Launch both arms for every pair (AB/BA), record every run in the ledger");
  run->add_option("id", a->id, "registration id")->required();
  run->add_option("--work-dir", a->work_dir, "where engine logs go (default: current directory)");
  run->add_option(
      "--tokenizer", a->tokenizer,
      "model folder whose tokenizer.json sizes the prompts (default: the shipped models/plumb-tiny, "
      "so scenarios fit its 512-token context); 'words' sizes them in words. Both arms always get "
      "the same bytes");
  run->add_option("--request-timeout", a->request_timeout_s, "per-request timeout in seconds")
      ->capture_default_str();
  run->add_option("--request-limit", a->request_limit,
                  "measure only the first N requests of each pair's set (to try a comparison on a slow or "
                  "time-limited machine). The runs are recorded as limited and the ledger refuses a "
                  "readout of the comparison: limited, never a verdict")
      ->check(CLI::PositiveNumber);
  run->add_option("--pairs-this-run", a->pairs_this_run,
                  "measure at most N pairs in this call, then stop; the next `compare run` resumes from "
                  "the ledger (for a comparison longer than one time-limited command)")
      ->check(CLI::PositiveNumber);
  run->add_option(
         "--placement", a->placement,
         "auto: on >= 2 CPUs the engine runs on all but the client's CPU(s), plumb's engine with one "
         "compute thread per CPU it got (printed, and stored with each run); off: nothing is bound")
      ->capture_default_str();
  ledger_opt(run);
  add_executor_flags(run, a->exec, "comparison (all its pairs, on one node)",
                     "given, the comparison runs as a child job on this machine, with the journal, lock and "
                     "retries of slurm; without --executor (and without --gpus), in this process");
  run->callback([a, run] {
    a->executor_given = run->get_option("--executor")->count() > 0;
    set_exit_code(run_run(*a));
  });

  auto* ro = c->add_subcommand("readout", "Compute and store the readout from the stored runs");
  ro->add_option("id", a->id, "registration id")->required();
  ro->add_flag("--no-store", a->no_store, "print only; do not store the readout");
  ledger_opt(ro);
  ro->callback([a] { set_exit_code(run_readout(*a)); });

  auto* cal = c->add_subcommand(
      "calibrate",
      "Measure this machine's false-positive share (N comparisons of a configuration against itself) and "
      "power (N against the same configuration made slower by --debug-step-slowdown), each a full "
      "registered paired comparison in the ledger; prints both with exact binomial 95% CIs");
  cal->add_option("--config", a->cal.config, "engine config (TOML, plumb adapter) of arm A")->required();
  cal->add_option("--comparisons", a->cal.comparisons, "comparisons of each kind")->capture_default_str();
  cal->add_option("--slowdown", a->cal.slowdown, "the slow arm's debug_step_slowdown (0.10: 10% slower)")
      ->capture_default_str();
  cal->add_option("--scenarios", a->cal_scenarios, "scenarios, alternated (comma-separated)")
      ->capture_default_str();
  cal->add_option("--size", a->cal.size, "small|gpu")->capture_default_str();
  cal->add_option("--pairs", a->cal.pairs, "pairs per comparison (>= 5)")->capture_default_str();
  cal->add_option("--max-pairs", a->cal.max_pairs, "as for register: each comparison may grow to this")
      ->capture_default_str();
  cal->add_option("--min-effect", a->cal.min_effect,
                  "registered rule: better/worse need the CI beyond 1 +- this")
      ->capture_default_str();
  cal->add_option("--delta", a->cal.delta, "registered rule: equivalence margin")->capture_default_str();
  cal->add_option("--seed", a->cal.seed, "base seed of the comparisons' seeds")->capture_default_str();
  cal->add_option("--work-dir", a->work_dir,
                  "where the arms' configs and engine logs go (default: current dir)");
  cal->add_option("--tokenizer", a->tokenizer, "as for run");
  cal->add_option("--request-timeout", a->request_timeout_s, "per-request timeout in seconds")
      ->capture_default_str();
  cal->add_option(
         "--placement", a->placement,
         "auto: on >= 2 CPUs the engine runs on all but the client's CPU(s), plumb's engine with one "
         "compute thread per CPU it got (printed, and stored with each run); off: nothing is bound")
      ->capture_default_str();
  ledger_opt(cal);
  cal->callback([a] { set_exit_code(run_calibrate(*a)); });

  auto* ls = c->add_subcommand("list", "Registered comparisons with their runs and last verdict");
  ledger_opt(ls);
  ls->callback([a] { set_exit_code(run_list(*a)); });
}

PLUMB_COMMAND(40, setup_compare);

}  // namespace
}  // namespace plumb::cli
