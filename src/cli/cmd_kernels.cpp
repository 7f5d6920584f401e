// `plumb kernels list|profile|tasks|search|screen|accept`: the deployment-aware kernel loop
// (docs/architecture.md, idea 3; docs/kernels.md). The logic lives in kernels/ (profile.h, task.h, screen.h,
// search.h, accept.h); this file parses flags and prints.
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/command.h"
#include "cli/executor_flags.h"
#include "cli/job_outcome.h"
#include "cli/kernels_cuda.h"
#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "engine/cpu/kernels.h"
#include "executor/journal.h"
#include "executor/lock.h"
#include "kernels/accept.h"
#include "kernels/profile.h"
#include "kernels/screen.h"
#include "kernels/search.h"
#include "kernels/task.h"
#include "ledger/ledger.h"

namespace plumb::cli {
namespace {

struct KernelsArgs {
  kernels::ProfileOptions profile;
  std::string weights;  // "prefill=0.5,decode=0.5"
  bool json = false;
  std::string out;
  int top = 6;
  double min_share = 0.005;
  std::string task_dir;
  kernels::SearchOptions search;
  std::string proposer;
  double proposer_timeout_s = 120;  // search --device cuda
  std::string source;               // screen: a C++ file (a CUDA source with --device cuda)
  std::string device = "cpu";       // screen: cpu (a task's plugin candidate) or cuda
  std::string so;                   // screen-child
  int fd = -1;
  bool no_timing = false;
  bool naive = false;
  kernels::AcceptOptions accept;
  ExecutorArgs exec;            // search --executor: each candidate's screening as a job
  bool executor_given = false;  // without --executor, candidates are screened in this process
  int max_parallel_jobs = 1;    // screening jobs in flight at once
  std::string candidate_file;   // screen-job: the candidate (JSON)
  std::string result_file;      // screen-job: where its screening result goes
};

int fail(const char* what, const Status& s) {
  std::cerr << "plumb kernels " << what << ": " << s.to_string() << "\n";
  return exit_for(s);
}

void progress(const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); }

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

Status parse_weights(const std::string& text, std::array<double, 2>* w) {
  if (text.empty()) return Status::Ok();
  double pre = -1, dec = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return invalid_argument("--weights: expected prefill=W,decode=W, got '" + text + "'");
    std::string key = item.substr(0, eq);
    double v = 0;
    try {
      v = std::stod(item.substr(eq + 1));
    } catch (...) {
      return invalid_argument("--weights: '" + item + "' is not key=number");
    }
    if (v < 0) return invalid_argument("--weights: weights must be >= 0");
    if (key == "prefill") {
      pre = v;
    } else if (key == "decode") {
      dec = v;
    } else {
      return invalid_argument("--weights: unknown phase '" + key + "' (prefill, decode)");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (pre < 0 || dec < 0) return invalid_argument("--weights needs both prefill= and decode=");
  if (pre + dec <= 0) return invalid_argument("--weights: at least one weight must be > 0");
  (*w)[0] = pre / (pre + dec);
  (*w)[1] = dec / (pre + dec);
  return Status::Ok();
}

int run_list() {
  auto& reg = engine::KernelRegistry::instance();
  for (int i = 0; i < int(engine::Op::kCount); ++i) {
    const engine::Op op = engine::Op(i);
    std::printf("%s (auto: prefill %s, decode %s)\n", engine::op_name(op),
                reg.best(op, engine::Phase::kPrefill)->name.c_str(),
                reg.best(op, engine::Phase::kDecode)->name.c_str());
    for (const auto* v : reg.list(op)) {
      const bool ok = !v->supported || v->supported();
      std::printf("  %-14s %s%s\n", v->name.c_str(), v->description.c_str(),
                  ok ? "" : " [not supported on this CPU]");
    }
  }
  return kExitOk;
}

int run_profile(KernelsArgs& a, bool tasks) {
  Status st = parse_weights(a.weights, &a.profile.weights);
  if (!st.ok()) return fail(tasks ? "tasks" : "profile", st);
  a.profile.capture = tasks;
  a.profile.progress = progress;
  auto r = kernels::run_profile(a.profile);
  if (!r.ok()) return fail(tasks ? "tasks" : "profile", r.status());
  if (!tasks) {
    if (a.json) {
      std::cout << kernels::profile_json(*r);
    } else {
      std::cout << kernels::format_profile(*r);
    }
    if (!a.out.empty()) {
      Status w = write_file_atomic(a.out, kernels::profile_json(*r));
      if (!w.ok()) return fail("profile", w);
    }
    return kExitOk;
  }
  if (a.out.empty()) return fail("tasks", invalid_argument("--out DIR is required"));
  auto dirs = kernels::write_tasks(*r, a.out, a.top, a.min_share);
  if (!dirs.ok()) return fail("tasks", dirs.status());
  Status w = write_file_atomic(a.out + "/profile.json", kernels::profile_json(*r));
  if (!w.ok()) return fail("tasks", w);
  std::cout << fmt::format("{} task folders in {} (profile.json alongside):\n", dirs->size(), a.out);
  for (const auto& d : *dirs) {
    auto t = kernels::load_task(d);
    if (!t.ok()) return fail("tasks", t.status());
    std::cout << fmt::format("  {:<40} {} {} rows {}..{} n={} k={} {} baseline {} ({:.1f}% of e2e)\n", d,
                             engine::op_name(t->op), engine::phase_name(t->phase), t->m_min, t->m_max, t->n,
                             t->k, engine::dtype_name(t->dtype), t->baseline_variant, 100 * t->share);
  }
  std::cout << "next: plumb kernels search --task <folder> --out <search folder>\n";
  return kExitOk;
}

// --- `plumb kernels search --executor local|slurm`: each candidate's screening as a job ---
//
// The controller runs the episodes (generation, the proposer, experience records, the choice of the
// best) and hands each batch of candidates to screening jobs: one job per candidate, at most
// --max-parallel-jobs in flight, each `plumb kernels screen-job` on its node, which compiles and
// screens the candidate there (correctness, guard pages, warm and cold timing against the baseline
// variant on the same node, so u is a within-node ratio) and writes its result to a JSON file in the
// shared work directory OUT/jobs. The controller reads the files back. How a job ends decides what it
// means:
//   result file written           the screening's verdict (pass, incorrect, unsafe, crash, ...)
//   failed without a result       a verdict for the candidate: crash (the job's output tail in detail)
//   cancelled, node failed, lost, an infrastructure failure: OUT/jobs/screen.jobs.jsonl and the console
//   SIGKILL/SIGTERM                say so, the job is submitted again up to --max-job-retries, then the
//                                 search stops; never a verdict for the candidate.
//   past its time limit           "timed_out": not retried (it would time out again), the search stops
//                                 with an error naming --slurm-time; never a verdict.
//
// Killed and started again with the same --out, the search resumes from the journal
// (docs/cluster.md): a screening the journal finished is not submitted again (its result comes from
// the journal, or from its result file when the job wrote one), a job still in flight is reattached
// by its id, and a screening that failed for infrastructure reasons is submitted again. A screening
// is known by its candidate's name, source and screening seed, so a restarted search, whose built-in
// generator proposes the same candidates from the same results, finds them all.
struct ScreenJobs {
  executor::Executor& e;
  const KernelsArgs& a;
  std::string task_dir;   // absolute
  std::string out_dir;    // absolute: the search's folder (candidates/ is compiled into there)
  std::string work;       // absolute: out_dir/jobs
  int jobs = 0;           // the next stem's number (cN: unique across batches and restarts)
  json::object identity;  // what decides a screening's result besides its candidate
  std::vector<executor::JournaledJob> known;       // an earlier controller's jobs (load_journal)
  std::shared_ptr<executor::ControllerLock> lock;  // held while the search runs (load_journal)

  struct Job {
    size_t index = 0;  // in the batch
    int attempt = 0;
    int first_attempt = 0;  // this run's first; retries are counted from it
    std::string stem;       // cN-<name>
    std::string id;
    executor::JobSpec spec;
    std::string result_path;
    int poll_errors = 0;
  };

  std::string journal_path() const { return work + "/screen.jobs.jsonl"; }
  void journal(json::object event) const {
    if (Status s = executor::journal_append(journal_path(), std::move(event)); !s.ok())
      std::fprintf(stderr, "%s\n", s.to_string().c_str());
  }

  // Reads the journal of an earlier controller, refuses one written for another search, and numbers
  // new stems after every stem it (or a candidate file in the work directory) used.
  Status load_journal() {
    PLUMB_ASSIGN_OR_RETURN(lock,
                           executor::ControllerLock::acquire(
                               journal_path(), "plumb kernels search",
                               "wait for it to end, or stop it and start this search again (it takes over "
                               "the screenings in flight); or give this search another --out"));
    if (!lock->took_over().empty())
      std::fprintf(stderr, "took over the controller lock %s of %s, which is gone\n", lock->path().c_str(),
                   lock->took_over().c_str());
    identity = json::object{{"task", task_dir},
                            {"executor", e.kind()},
                            {"draws", std::to_string(a.search.screen.draws)},
                            {"threads", std::to_string(a.search.screen.threads)},
                            {"cxx", a.search.screen.cxx},
                            {"timing", !a.no_timing},
                            {"asan", a.search.screen.asan}};
    auto events = executor::journal_read(journal_path());
    PLUMB_RETURN_IF_ERROR(executor::check_journal_identity(
        journal_path(), events, identity,
        "give this search another --out, or remove the journal to screen every candidate again"));
    PLUMB_RETURN_IF_ERROR(resolve_unconfirmed(events));
    known = executor::journal_jobs(events);
    auto stem_number = [](const std::string& name) {
      if (name.size() < 3 || name[0] != 'c' || !std::isdigit(static_cast<unsigned char>(name[1]))) return -1;
      return std::atoi(name.c_str() + 1);
    };
    for (const auto& j : known) jobs = std::max(jobs, stem_number(j.key) + 1);
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(work, ec))
      jobs = std::max(jobs, stem_number(f.path().filename().string()) + 1);
    if (!known.empty())
      std::fprintf(stderr, "resuming from the journal %s: %zu screening job(s) of an earlier search\n",
                   journal_path().c_str(), known.size());
    return Status::Ok();
  }

  // The submissions an earlier controller began and never journaled (killed between sbatch and its
  // "submitted" line): a job found by its name is journaled as submitted (into `events`), so that
  // place() reattaches to it; one not found is closed ("not_submitted"), and its candidate is screened
  // under a new stem (its candidate file numbers the next stem past it).
  Status resolve_unconfirmed(std::vector<json::object>& events) {
    for (const json::object& intent : executor::unconfirmed_submissions(events)) {
      const std::string key = json::string_at(intent, "key").value_or("");
      const std::string name = json::string_at(intent, "job_name").value_or("");
      PLUMB_ASSIGN_OR_RETURN(std::optional<std::string> id,
                             executor::resolve_submission(e, journal_path(), intent));
      if (!id) {
        std::fprintf(
            stderr,
            "an earlier search was submitting %s (job name %s) when it stopped; the %s executor knows "
            "no job of that name, so its candidate is screened afresh\n",
            key.c_str(), name.c_str(), e.kind().c_str());
        continue;
      }
      json::object line = intent;
      line["event"] = "submitted";
      line["job_id"] = *id;
      line["found_by"] = "name";
      line.erase("at");
      PLUMB_RETURN_IF_ERROR(executor::journal_append(journal_path(), line));
      events.push_back(std::move(line));
      std::fprintf(
          stderr,
          "reattaching to screening job %s (%s), found by its name %s: an earlier search submitted it "
          "and stopped before journaling it\n",
          id->c_str(), key.c_str(), name.c_str());
    }
    return Status::Ok();
  }

  static std::string source_sha(const kernels::Candidate& c) { return sha256_hex(c.source); }

  // The earlier controller's last job for this screening (candidate and seed), if any.
  const executor::JournaledJob* earlier(const kernels::Candidate& c, uint64_t seed) const {
    const executor::JournaledJob* last = nullptr;
    for (const auto& j : known) {
      const auto& s = j.submitted;
      if (json::string_at(s, "candidate").value_or("") == c.name &&
          json::string_at(s, "source_sha256").value_or("") == source_sha(c) &&
          json::string_at(s, "seed").value_or("") == std::to_string(seed))
        last = &j;
    }
    return last;
  }

  // Names attempt `j.attempt` of stem `j.stem`: the job's name and its result file.
  void name(Job& j) const {
    j.spec.name = j.stem + "-a" + std::to_string(j.attempt);
    j.spec.work_dir = work;
    j.result_path = work + "/" + j.spec.name + ".result.json";
  }

  // Writes the candidate's file once per job stem; submits attempt `j.attempt`.
  Status submit(Job& j, const kernels::Candidate& c, uint64_t seed) {
    const std::string cand = work + "/" + j.stem + ".candidate.json";
    if (j.attempt == 0 || !std::filesystem::exists(cand)) {
      json::object o{{"name", c.name},     {"family", c.family}, {"params", c.params},
                     {"source", c.source}, {"origin", c.origin}, {"rationale", c.rationale}};
      PLUMB_RETURN_IF_ERROR(write_file_atomic(cand, json::dump_pretty(o) + "\n"));
    }
    name(j);
    std::error_code ec;
    std::filesystem::remove(j.result_path, ec);
    const auto& so = a.search.screen;
    j.spec.argv = {self_exe(),
                   "kernels",
                   "screen-job",
                   "--task",
                   task_dir,
                   "--candidate",
                   cand,
                   "--out",
                   out_dir + "/candidates",
                   "--result",
                   j.result_path,
                   "--seed",
                   std::to_string(seed),
                   "--draws",
                   std::to_string(so.draws),
                   "--threads",
                   std::to_string(so.threads),
                   "--cxx",
                   so.cxx};
    if (a.no_timing) j.spec.argv.push_back("--no-timing");
    if (so.asan) j.spec.argv.push_back("--asan");
    // The "submitting" line carries what the "submitted" one does: a restart that finds the job by its
    // name journals it from that line alone (load_journal).
    json::object line{{"candidate", c.name}, {"source_sha256", source_sha(c)}, {"seed", std::to_string(seed)},
                      {"stem", j.stem},      {"attempt", int64_t(j.attempt)},  {"identity", identity}};
    PLUMB_ASSIGN_OR_RETURN(j.id, executor::submit_journaled(e, journal_path(), j.spec, line));
    j.poll_errors = 0;
    line["event"] = "submitted";
    line["key"] = j.spec.name;
    line["job_id"] = j.id;
    line["job_name"] = j.spec.scheduler_name;
    line["executor"] = e.kind();
    return executor::journal_append(journal_path(), std::move(line));
  }

  // The verdict of a job that failed on its own, without writing its result.
  static kernels::ScreenResult crash_verdict(const Job& j, const executor::JobStatus& st) {
    kernels::ScreenResult r;
    r.verdict = "crash";
    r.signature = job_signal(st) != 0 ? "job:signal:" + std::to_string(job_signal(st)) : "job:exit";
    auto out = read_file(executor::output_path(j.spec));
    std::string tail = out.ok() ? out->substr(out->size() > 400 ? out->size() - 400 : 0) : "";
    r.detail = "the screening job " + j.id + " ended " + executor::state_name(st.state) +
               (st.detail.empty() ? "" : " (" + st.detail + ")") + " without a result; its output " +
               executor::output_path(j.spec) + " ends: " + tail;
    return r;
  }

  static bool infrastructure(const executor::JobStatus& st) {
    if (st.state != executor::JobState::kFailed && st.state != executor::JobState::kCompleted) return true;
    if (st.state == executor::JobState::kCompleted) return false;
    int sig = job_signal(st);
    return sig == SIGKILL || sig == SIGTERM || node_never_ran(st);
  }

  // A final job: its result, a crash verdict, or (nullopt) an infrastructure failure to retry.
  std::optional<kernels::ScreenResult> outcome(const Job& j, const executor::JobStatus& st) const {
    if (auto text = read_file(j.result_path); text.ok()) {
      auto r = kernels::screen_result_from_json_text(*text);
      if (r.ok()) return *r;
    }
    if (infrastructure(st)) return std::nullopt;
    if (st.state == executor::JobState::kCompleted) return std::nullopt;  // exited 0 without a result
    return crash_verdict(j, st);
  }

  // Handles one final job; Unavailable when its retries are spent.
  Status finish(Job& j, const executor::JobStatus& st, const std::vector<kernels::Candidate>& cands,
                std::vector<std::optional<kernels::ScreenResult>>& out, std::deque<Job>& again) {
    auto r = outcome(j, st);
    if (r) {
      journal({{"event", "finished"},
               {"key", j.spec.name},
               {"job_id", j.id},
               {"verdict", r->verdict},
               {"result", json::parse(kernels::screen_result_json_text(*r)).value()}});
      out[j.index] = std::move(*r);
      return Status::Ok();
    }
    // The journal line of a job that ended without a result.
    auto journal_end = [&](const char* event) {
      journal({{"event", event},
               {"key", j.spec.name},
               {"job_id", j.id},
               {"state", executor::state_name(st.state)},
               {"scheduler_state", st.scheduler_state},
               {"node", st.node},
               {"detail", st.detail}});
    };
    if (st.state == executor::JobState::kTimedOut) {
      // Not retried: the same screening under the same limit would time out again.
      journal_end("timed_out");
      const std::string ended = executor::state_name(st.state) + (st.node.empty() ? "" : " on " + st.node) +
                                (st.scheduler_state.empty() ? "" : " (" + st.scheduler_state + ")") +
                                (st.detail.empty() ? "" : " [" + st.detail + "]");
      std::fprintf(stderr, "  TIMED OUT: screening job %s (%s) ran past its time limit: %s\n", j.id.c_str(),
                   cands[j.index].name.c_str(), ended.c_str());
      return timeout_error(
          "the screening job " + j.id + " (" + j.spec.name + ") of candidate " + cands[j.index].name +
          " ran past its time limit: " + ended +
          "; not retried (it would time out again): give it more time (--slurm-time, or "
          "time in the [slurm] table) or less work (fewer --draws). Its output: " +
          executor::output_path(j.spec) +
          "; started again with the same --out, the search reuses the screenings that finished");
    }
    journal_end("infrastructure_failure");
    std::fprintf(stderr, "  INFRASTRUCTURE FAILURE of screening job %s (%s): it ended %s%s; not a verdict\n",
                 j.id.c_str(), cands[j.index].name.c_str(), executor::state_name(st.state).c_str(),
                 st.detail.empty() ? "" : (" [" + st.detail + "]").c_str());
    if (j.attempt - j.first_attempt >= a.exec.max_job_retries)
      return unavailable(
          "the screening job of candidate " + cands[j.index].name + " failed for infrastructure " +
          "reasons " + std::to_string(j.attempt - j.first_attempt + 1) + " time(s) (--max-job-retries " +
          std::to_string(a.exec.max_job_retries) + "); its output: " + executor::output_path(j.spec) +
          "; run the search again when the cluster is healthy");
    ++j.attempt;
    again.push_back(std::move(j));
    return Status::Ok();
  }

  // Polls the jobs in flight; moves the final ones through finish().
  Status poll_all(std::vector<Job>& flight, const std::vector<kernels::Candidate>& cands,
                  std::vector<std::optional<kernels::ScreenResult>>& out, std::deque<Job>& queue) {
    for (size_t k = 0; k < flight.size();) {
      auto st = e.poll(flight[k].id);
      if (!st.ok()) {
        if (++flight[k].poll_errors >= 10) return st.status();
        ++k;
        continue;
      }
      flight[k].poll_errors = 0;
      if (!executor::is_final(st->state)) {
        ++k;
        continue;
      }
      Job j = std::move(flight[k]);
      flight.erase(flight.begin() + std::ptrdiff_t(k));
      PLUMB_RETURN_IF_ERROR(finish(j, *st, cands, out, queue));
    }
    return Status::Ok();
  }

  // A screening the earlier controller finished: its result (from the journal, else its file).
  std::optional<kernels::ScreenResult> earlier_result(const executor::JournaledJob& k) const {
    if (const auto* r = k.last.if_contains("result")) {
      auto res = kernels::screen_result_from_json_text(json::dump(*r));
      if (res.ok()) return *res;
    }
    if (auto text = read_file(work + "/" + k.key + ".result.json"); text.ok()) {
      auto res = kernels::screen_result_from_json_text(*text);
      if (res.ok()) return *res;
    }
    return std::nullopt;
  }

  // Candidate i of a batch: its earlier result, a job to reattach to (into `flight`), or a job to
  // submit (into `queue`).
  void place(size_t i, const kernels::Candidate& c, uint64_t seed,
             std::vector<std::optional<kernels::ScreenResult>>& out, std::vector<Job>& flight,
             std::deque<Job>& queue) {
    Job j;
    j.index = i;
    const executor::JournaledJob* k = earlier(c, seed);
    if (!k) {
      j.stem = "c" + std::to_string(jobs++) + "-" + safe_file_name(c.name, 60);
      queue.push_back(std::move(j));
      return;
    }
    j.stem = json::string_at(k->submitted, "stem").value_or("");
    j.attempt = int(json::number_at(k->submitted, "attempt").value_or(0));
    if (k->last_event() == "finished") {
      if (auto r = earlier_result(*k)) {
        std::fprintf(stderr, "  %s: screened by job %s of an earlier search (%s), not again\n",
                     c.name.c_str(), k->job_id.c_str(), r->verdict.c_str());
        out[i] = std::move(*r);
        return;
      }
    }
    if (k->in_flight()) {
      name(j);
      j.id = k->job_id;
      std::fprintf(stderr, "  %s: reattaching to screening job %s (%s)\n", c.name.c_str(), j.id.c_str(),
                   j.spec.name.c_str());
      flight.push_back(std::move(j));
      return;
    }
    j.first_attempt = ++j.attempt;  // failed, or finished without a readable result: a new attempt
    queue.push_back(std::move(j));
  }

  Result<std::vector<kernels::ScreenResult>> operator()(const std::vector<kernels::Candidate>& cands,
                                                        const std::vector<uint64_t>& seeds) {
    std::deque<Job> queue;
    std::vector<Job> flight;
    std::vector<std::optional<kernels::ScreenResult>> out(cands.size());
    for (size_t i = 0; i < cands.size(); ++i) place(i, cands[i], seeds[i], out, flight, queue);
    const auto every = std::chrono::milliseconds(int64_t(std::max(0.05, a.exec.poll_s) * 1000));
    while (!queue.empty() || !flight.empty()) {
      while (!queue.empty() && int(flight.size()) < std::max(1, a.max_parallel_jobs)) {
        Job j = std::move(queue.front());
        queue.pop_front();
        PLUMB_RETURN_IF_ERROR(submit(j, cands[j.index], seeds[j.index]));
        flight.push_back(std::move(j));
      }
      std::this_thread::sleep_for(every);
      PLUMB_RETURN_IF_ERROR(poll_all(flight, cands, out, queue));
    }
    std::vector<kernels::ScreenResult> results;
    results.reserve(out.size());
    for (auto& r : out) results.push_back(std::move(*r));
    return results;
  }
};

// `kernels screen-job` (internal): one candidate screened on this node, its result written to a file.
int run_screen_job(KernelsArgs& a) {
  auto t = kernels::load_task(a.task_dir);
  if (!t.ok()) return fail("screen-job", t.status());
  auto o = json::parse_file(a.candidate_file);
  if (!o.ok() || !o->is_object())
    return fail("screen-job", o.ok() ? invalid_argument("not an object") : o.status());
  const auto& j = o->as_object();
  kernels::Candidate c;
  c.name = json::string_at(j, "name").value_or("");
  c.family = json::string_at(j, "family").value_or("");
  c.source = json::string_at(j, "source").value_or("");
  c.origin = json::string_at(j, "origin").value_or("");
  c.rationale = json::string_at(j, "rationale").value_or("");
  if (j.contains("params") && j.at("params").is_object()) c.params = j.at("params").as_object();
  kernels::ScreenOptions so = a.search.screen;
  so.plumb_binary = self_exe();
  if (a.no_timing) so.timing = false;
  auto r = kernels::screen_candidate(*t, c, a.out, so);
  std::printf("%s: %s%s: %s\n", c.name.c_str(), r.verdict.c_str(),
              r.signature.empty() ? "" : (" (" + r.signature + ")").c_str(), r.detail.c_str());
  Status st = write_file_atomic(a.result_file, kernels::screen_result_json_text(r) + "\n");
  if (!st.ok()) return fail("screen-job", st);
  return kExitOk;
}

// The search's screening through the executor: SearchOptions::screen_batch.
Status use_screening_jobs(KernelsArgs& a, std::unique_ptr<executor::Executor>& e) {
  PLUMB_ASSIGN_OR_RETURN(e, make_executor(a.exec));
  if (a.max_parallel_jobs < 1) return invalid_argument("--max-parallel-jobs must be >= 1");
  auto abs = [](const std::string& p) { return std::filesystem::absolute(p).lexically_normal().string(); };
  a.search.out_dir = abs(a.search.out_dir);
  auto jobs = std::make_shared<ScreenJobs>(
      ScreenJobs{*e, a, abs(a.task_dir), a.search.out_dir, a.search.out_dir + "/jobs"});
  std::error_code ec;
  std::filesystem::create_directories(jobs->work, ec);
  if (ec) return invalid_argument("cannot create " + jobs->work + ": " + ec.message());
  PLUMB_RETURN_IF_ERROR(jobs->load_journal());
  a.search.screen_batch = [jobs](const std::vector<kernels::Candidate>& c, const std::vector<uint64_t>& s) {
    return (*jobs)(c, s);
  };
  std::fprintf(stderr, "screening each candidate as a %s job (at most %d at once); jobs in %s\n",
               e->kind().c_str(), a.max_parallel_jobs, jobs->work.c_str());
  return Status::Ok();
}

int run_search(KernelsArgs& a) {
  auto t = kernels::load_task(a.task_dir);
  if (!t.ok()) return fail("search", t.status());
  if (a.search.out_dir.empty()) a.search.out_dir = a.task_dir + "/search";
  std::unique_ptr<executor::Executor> exec;  // outlives the search: screen_batch uses it
  if (a.executor_given) {
    if (Status s = use_screening_jobs(a, exec); !s.ok()) return fail("search", s);
  }
  if (!a.proposer.empty()) a.search.proposer_argv = {"/bin/sh", "-c", a.proposer};
  a.search.proposer_timeout = std::chrono::milliseconds(int64_t(a.proposer_timeout_s * 1000));
  a.search.progress = progress;
  a.search.screen.plumb_binary = self_exe();
  if (a.no_timing) a.search.screen.timing = false;
  auto r = kernels::run_search(*t, a.search);
  if (!r.ok()) return fail("search", r.status());
  if (a.json) {
    std::cout << kernels::search_json(*t, *r);
  } else if (r->best >= 0) {
    const auto& b = r->tried[size_t(r->best)];
    std::cout << fmt::format(
        "best: {} (family {}), u = {:.3f} over {} ({:.0f} ns vs {:.0f} ns warm){}; library {}\n",
        b.candidate.name, b.candidate.family, b.score(), b.result.baseline, b.result.warm_ns,
        b.result.base_warm_ns,
        b.confirmed_utility >= 0 ? fmt::format(", the lower of two timings ({:.3f}, {:.3f})",
                                               b.result.utility, b.confirmed_utility)
                                 : "",
        b.result.so_path);
    std::cout << "results: " << a.search.out_dir << "/search.json; next: plumb kernels accept --search "
              << a.search.out_dir << "\n";
  } else {
    std::cout << "no candidate passed screening; see " << a.search.out_dir << "/search.json\n";
  }
  return kExitOk;
}

int run_screen(KernelsArgs& a) {
  auto t = kernels::load_task(a.task_dir);
  if (!t.ok()) return fail("screen", t.status());
  auto src = read_file(a.source);
  if (!src.ok()) return fail("screen", src.status());
  kernels::Candidate c;
  c.name = std::filesystem::path(a.source).stem().string();
  c.family = "file";
  c.origin = "file";
  c.source = *src;
  kernels::ScreenOptions o = a.search.screen;
  o.plumb_binary = self_exe();
  o.guard_pages = !a.naive;
  if (a.no_timing) o.timing = false;
  const std::string work = a.out.empty() ? a.task_dir + "/screen" : a.out;
  auto r = kernels::screen_candidate(*t, c, work, o);
  if (a.json) {
    std::cout << kernels::screen_result_json_text(r) << "\n";
  } else {
    std::cout << fmt::format("{}: {}{} — {}\n", c.name, r.verdict,
                             r.signature.empty() ? "" : " (" + r.signature + ")", r.detail);
    if (r.passed() && o.timing) {
      std::cout << fmt::format("u = {:.3f}: {:.0f} ns vs {} {:.0f} ns warm; cold {:.0f} vs {:.0f} ns\n",
                               r.utility, r.warm_ns, r.baseline, r.base_warm_ns, r.cold_ns, r.base_cold_ns);
    }
  }
  return r.passed() ? kExitOk : kExitFailed;
}

int run_accept(KernelsArgs& a, bool min_utility_given) {
  a.accept.plumb_binary = self_exe();
  // A CUDA search's u is the fraction of the copy bandwidth (at most about 1), not a speedup over the
  // reference: without --min-utility every screened best is patched, and the comparison decides.
  if (a.accept.device != "cpu" && !min_utility_given) a.accept.min_utility = 0.0;
  a.accept.progress = progress;
  auto r = kernels::run_accept(a.accept);
  if (!r.ok()) return fail("accept", r.status());
  bool any = false;
  json::array arr;
  for (const auto& o : *r) {
    any |= o.accepted;
    if (!a.json) {
      std::cout << fmt::format(
          "{} patches on scenario {}: comparison {}, readout {}: objective ratio {:.4f} [{:.4f}, {:.4f}], "
          "ell(c) = {:.4f} [{:.4f}, {:.4f}], verdict {} -> {}\n",
          o.phase, o.scenario, o.registration_id, o.readout_id, o.ratio, o.ratio_lo, o.ratio_hi, o.ell,
          o.ell_lo, o.ell_hi, o.verdict, o.accepted ? "ACCEPTED" : "not accepted");
      std::cout << o.readout_text << "\n";
    }
    json::array patches;
    for (const auto& p : o.patches) {
      json::object po{
          {"name", p.name},     {"op", engine::op_name(p.op)}, {"phase", engine::phase_name(p.phase)},
          {"module", p.module}, {"utility", p.utility},        {"so_path", p.so_path}};
      if (p.cuda()) {
        po["cuda_op"] = p.cuda_op;
        po["cubin"] = p.cubin_path;
        po["cubin_sha256"] = p.cubin_sha256;
        po["source_sha256"] = p.source_sha256;
        po["nvrtc_version"] = p.nvrtc_version;
        po["screened_on"] = p.card;
      }
      patches.push_back(std::move(po));
    }
    arr.push_back(json::object{{"phase", o.phase},
                               {"scenario", o.scenario},
                               {"registration_id", o.registration_id},
                               {"readout_id", o.readout_id},
                               {"ratio", o.ratio},
                               {"ratio_ci", json::array{o.ratio_lo, o.ratio_hi}},
                               {"ell", o.ell},
                               {"ell_ci", json::array{o.ell_lo, o.ell_hi}},
                               {"verdict", o.verdict},
                               {"accepted", o.accepted},
                               {"patches", std::move(patches)}});
  }
  if (a.json) {
    std::cout << json::dump_pretty(json::object{{"schema_version", 1}, {"outcomes", std::move(arr)}}) << "\n";
  }
  if (any) {
    std::cerr << "accepted kernel configuration written to " << a.accept.kernels_out
              << " (use: plumb serve --kernels " << a.accept.kernels_out << ")\n";
  } else {
    std::cerr << "nothing accepted; " << a.accept.kernels_out << " not written\n";
  }
  return any ? kExitOk : kExitFailed;
}

using KernelsArgsPtr = std::shared_ptr<KernelsArgs>;

// `profile` and `tasks`: the workload run in process, the hotspot table or the task folders.
void add_profile_commands(CLI::App* c, const KernelsArgsPtr& a) {
  auto add_profile_flags = [a](CLI::App* s) {
    s->add_option("--workload", a->profile.workload,
                  "scenario A|B|C|D (drawn from --seed as plumb compare does) or a request-set JSONL file")
        ->capture_default_str();
    s->add_option("--size", a->profile.size, "scenario size class: small | gpu")->capture_default_str();
    s->add_option(
        "--model", a->profile.model_dir,
        "model folder (config.json, safetensors, tokenizer.json; default: the shipped models/plumb-tiny, "
        "found as plumb serve finds it)");
    s->add_option("--seed", a->profile.seed, "request-set seed")->capture_default_str();
    s->add_option("--requests", a->profile.max_requests, "run only the first N requests (0 = all)")
        ->capture_default_str();
    s->add_option("--concurrency", a->profile.concurrency, "requests in flight (0 = the scenario's)")
        ->capture_default_str();
    s->add_option("--threads", a->profile.threads, "kernel threads (0 = all cores)")->capture_default_str();
    s->add_option("--kernels", a->profile.kernels, "auto | reference | a kernel selection JSON file")
        ->capture_default_str();
    s->add_option("--device", a->profile.device,
                  "cpu | cuda | cuda:N: where the workload runs; on a GPU each of the CUDA runner's ops is "
                  "timed with CUDA events (decode graphs included) and the overhead of profiling is "
                  "measured with a second, unprofiled run (docs/kernels.md)")
        ->capture_default_str();
    s->add_option("--weights", a->weights,
                  "phase weights prefill=W,decode=W for s(m) (default: measured time shares)");
  };
  auto* pr = c->add_subcommand("profile", "Run the workload in process and print the hotspot table");
  add_profile_flags(pr);
  pr->add_flag("--json", a->json, "print JSON (schema_version 1) instead of the table");
  pr->add_option("--out", a->out, "also write the JSON here");
  pr->callback([a] { set_exit_code(run_profile(*a, false)); });

  auto* tk = c->add_subcommand(
      "tasks", "Profile with input capture and write one task folder per hot module and phase");
  add_profile_flags(tk);
  tk->add_option("--out", a->out, "folder for the task folders")->required();
  tk->add_option("--top", a->top,
                 "the N hottest (module, phase) pairs with a plugin op (matmul, rmsnorm, rope, swiglu, "
                 "sampling)")
      ->capture_default_str();
  tk->add_option("--min-share", a->min_share, "skip modules below this share of end-to-end time")
      ->capture_default_str();
  tk->callback([a] { set_exit_code(run_profile(*a, true)); });
}

// The screening flags of `search`, `screen` and `screen-job` (the CPU loop).
void add_screen_flags(CLI::App* s, const KernelsArgsPtr& a) {
  s->add_option("--draws", a->search.screen.draws, "fresh random draws over the task's shape range")
      ->capture_default_str();
  s->add_option("--threads", a->search.screen.threads, "timing thread pool (0 = all cores, as the engine)")
      ->capture_default_str();
  s->add_flag("--asan", a->search.screen.asan,
              "compile with AddressSanitizer and run the child with libasan");
  s->add_flag("--no-timing", a->no_timing, "correctness and safety only");
  s->add_option("--cxx", a->search.screen.cxx, "compiler")->capture_default_str();
}

// `search`: over a task's plugin candidates, or with --device cuda over one CUDA op.
void add_search_command(CLI::App* c, const KernelsArgsPtr& a) {
  auto* se = c->add_subcommand("search",
                               "Episodes of built-in and proposed candidates over one task (or, with "
                               "--device cuda, one CUDA op), screened");
  se->add_option("--task", a->task_dir,
                 "a task folder from plumb kernels tasks (required with --device cpu)");
  se->add_option(
        "--device", a->device,
        "cpu: plugin-ABI candidates over --task | cuda: CUDA candidates (plumb_cuda_abi.h) for --op, "
        "compiled with NVRTC and screened on the GPU, the best then under compute-sanitizer "
        "(the CUDA flags below; docs/kernels.md)")
      ->capture_default_str();
  se->add_option("--proposer-timeout", a->proposer_timeout_s, "seconds per proposer call")
      ->capture_default_str();
  se->add_option("--out", a->search.out_dir,
                 "results folder (default <task>/search; with --device cuda <op>.search)");
  se->add_option("--episodes", a->search.episodes, "episodes")->capture_default_str();
  se->add_option("--candidates", a->search.candidates_per_episode, "built-in candidates per episode")
      ->capture_default_str();
  se->add_option("--proposer", a->proposer,
                 "external proposer command (run by /bin/sh): JSON context on stdin, prints "
                 "{\"name\",\"source\",\"rationale\"}");
  se->add_option("--proposals", a->search.proposals_per_episode, "proposer calls per episode")
      ->capture_default_str();
  se->add_option("--confirm", a->search.confirm,
                 "the N best by u are screened and timed again at the end; the best is the highest lower "
                 "u of the two (0 = off)")
      ->capture_default_str();
  se->add_flag("--json", a->json, "print search.json");
  add_screen_flags(se, a);
  add_executor_flags(se, a->exec, "candidate's screening",
                     "given, each screening runs as a child job on this machine, with the journal and "
                     "retries of slurm; without --executor, in this process");
  se->add_option("--max-parallel-jobs", a->max_parallel_jobs,
                 "screening jobs in flight at once (with --executor). Killed and started again with the "
                 "same --out, the search reuses the screenings its journal finished and reattaches to "
                 "those in flight (docs/cluster.md)")
      ->capture_default_str()
      ->group("Executor (where the work runs; docs/cluster.md)");
  auto cuda_search = add_cuda_screen_flags(se);
  se->callback([se, a, cuda_search] {
    a->executor_given = se->get_option("--executor")->count() > 0;
    if (a->device == "cuda") {
      if (a->executor_given)
        return set_exit_code(
            fail("search", invalid_argument("--executor is not available with --device cuda yet: "
                                            "the CUDA search screens here, one candidate at a time")));
      CudaSearchArgs s;
      s.out = a->search.out_dir;
      s.episodes = a->search.episodes;
      s.candidates = a->search.candidates_per_episode;
      s.proposer = a->proposer;
      s.proposals = a->search.proposals_per_episode;
      s.proposer_timeout_s = a->proposer_timeout_s;
      s.draws = a->search.screen.draws;
      s.timing = !a->no_timing;
      s.json = a->json;
      return set_exit_code(run_cuda_search(*cuda_search, s));
    }
    if (a->device != "cpu")
      return set_exit_code(
          fail("search", invalid_argument("--device must be cpu or cuda, not " + a->device)));
    if (a->task_dir.empty())
      return set_exit_code(
          fail("search", invalid_argument("--task is required with --device cpu: give a task "
                                          "folder from plumb kernels tasks")));
    set_exit_code(run_search(*a));
  });
}

// `search`, `screen` and the internal `screen-child`.
void add_search_commands(CLI::App* c, const KernelsArgsPtr& a) {
  add_search_command(c, a);
  auto* sc = c->add_subcommand(
      "screen",
      "Screen one C++ source (plugin ABI) against a task, or with --device cuda one CUDA candidate "
      "(plumb_cuda_abi.h) on the GPU; exit 0 iff it passes");
  sc->add_option("--task", a->task_dir, "a task folder (required with --device cpu)");
  sc->add_option("--source", a->source, "the candidate's C++ source (CUDA C++ with --device cuda)")
      ->required();
  sc->add_option("--out", a->out, "work folder (default <task>/screen; with --device cuda <source>.screen)");
  sc->add_flag("--naive", a->naive, "no guard pages: the naive isolated check (to see what guard pages add)");
  sc->add_flag("--json", a->json, "print the verdict as JSON");
  sc->add_option(
        "--device", a->device,
        "cpu: a plugin-ABI candidate against --task | cuda: a CUDA candidate (plumb_cuda_abi.h) compiled "
        "with NVRTC and screened on the GPU (the CUDA flags below)")
      ->capture_default_str();
  add_screen_flags(sc, a);
  auto cuda = add_cuda_screen_flags(sc);
  sc->callback([a, cuda] {
    if (a->device == "cuda")
      return set_exit_code(
          run_cuda_screen(*cuda, a->source, a->out, a->search.screen.draws, !a->no_timing, a->json));
    if (a->device != "cpu")
      return set_exit_code(
          fail("screen", invalid_argument("--device must be cpu or cuda, not " + a->device)));
    if (a->task_dir.empty())
      return set_exit_code(
          fail("screen", invalid_argument("--task is required with --device cpu: give a task "
                                          "folder from plumb kernels tasks")));
    set_exit_code(run_screen(*a));
  });

  auto* sj =
      c->add_subcommand("screen-job", "(internal) one candidate's screening as a job of search --executor");
  sj->group("");
  sj->add_option("--task", a->task_dir)->required();
  sj->add_option("--candidate", a->candidate_file)->required();
  sj->add_option("--out", a->out)->required();
  sj->add_option("--result", a->result_file)->required();
  sj->add_option("--seed", a->search.screen.seed);
  add_screen_flags(sj, a);
  sj->callback([a] { set_exit_code(run_screen_job(*a)); });

  auto* ch = c->add_subcommand("screen-child", "(internal) the screening child, exec'd for --asan");
  ch->group("");
  ch->add_option("--task", a->task_dir)->required();
  ch->add_option("--so", a->so)->required();
  ch->add_option("--fd", a->fd)->required();
  ch->add_option("--draws", a->search.screen.draws);
  ch->add_option("--seed", a->search.screen.seed);
  ch->add_flag("--no-timing", a->no_timing);
  ch->callback([a] {
    kernels::ScreenOptions o = a->search.screen;
    o.timing = !a->no_timing;
    set_exit_code(kernels::screen_child_main(a->task_dir, a->so, o, a->fd));
  });
}

// `accept`: the in-model paired comparison of the best screened candidates.
void add_accept_command(CLI::App* c, const KernelsArgsPtr& a) {
  auto* ac =
      c->add_subcommand("accept",
                        "Patch the best screened candidates into a kernel configuration and accept them only "
                        "if the pre-registered paired comparison reads `better`");
  ac->add_option("--search", a->accept.search_dirs, "search folders (search.json)")->required();
  ac->add_option("--ledger", a->accept.ledger_path, "SQLite ledger")
      ->default_val(std::string(ledger::kDefaultPath));
  ac->add_option("--out", a->accept.kernels_out, "accepted kernel configuration (written only on `better`)")
      ->required();
  ac->add_option("--base", a->accept.base_kernels,
                 "kernel configuration to patch (default: auto everywhere)");
  ac->add_option(
      "--scenario", a->accept.scenario,
      "scenario (default: B for decode patches, A for prefill; D for --joint over both; D on cuda)");
  ac->add_option(
        "--device", a->accept.device,
        "cpu, or cuda[:N]: the search folders are `kernels search --device cuda`'s, their best cubins "
        "go into the kernel configuration's \"cuda\" entries and both arms serve on that device")
      ->capture_default_str();
  ac->add_option("--phase", a->accept.cuda_phase,
                 "cuda: the phase the candidates replace the runner's kernel in (decode, prefill, both)")
      ->check(CLI::IsMember({"decode", "prefill", "both"}))
      ->capture_default_str();
  ac->add_option("--size", a->accept.size, "size class")->capture_default_str();
  ac->add_option("--pairs", a->accept.pairs, "pairs (>= 5)")->capture_default_str();
  ac->add_option("--min-effect", a->accept.min_effect, "better: CI of the ratio above 1 + min_effect")
      ->capture_default_str();
  ac->add_option("--delta", a->accept.delta, "equivalence margin")->capture_default_str();
  ac->add_option("--seed", a->accept.seed, "base seed of the pairs")->capture_default_str();
  auto* min_u = ac->add_option("--min-utility", a->accept.min_utility,
                               "patch only candidates with u above this (default 1 on cpu, 0 on cuda)");
  ac->add_option("--model", a->accept.model_dir, "model folder for both arms (default models/plumb-tiny)");
  ac->add_option("--work-dir", a->accept.work_dir, "arm configs and engine logs (default kernels-accept/)");
  ac->add_option("--threads", a->accept.threads, "engine threads of both arms (0 = default)");
  ac->add_flag("--joint", a->accept.joint,
               "one comparison of every patch together (both phases) instead of one per phase; scenario "
               "default D when the patches span both phases");
  ac->add_flag("--json", a->json, "print the outcomes as JSON");
  ac->callback([a, min_u] { set_exit_code(run_accept(*a, min_u->count() > 0)); });
}

void setup_kernels(CLI::App& root) {
  auto a = std::make_shared<KernelsArgs>();
  auto* c = root.add_subcommand(
      "kernels",
      "Deployment-aware kernel optimization: profile the real workload per module and phase, extract tasks, "
      "search and screen candidates (correctness, guard pages, crash isolation, warm/cold timing), accept "
      "only "
      "through the in-model paired comparison");
  c->footer(
      "\nThe loop (docs/kernels.md):\n"
      "  plumb kernels profile --workload B                 # hotspot table: s(m), phase weights, e2e "
      "shares\n"
      "  plumb kernels tasks --workload B --out tasks/      # one folder per hot module and phase\n"
      "  plumb kernels search --task tasks/<m>.decode --out s1/   # episodes of candidates, screened\n"
      "  plumb kernels accept --search s1/ --ledger plumb.db --out kernels.json   # paired, in-model\n"
      "  plumb serve --kernels kernels.json\n"
      "CUDA candidates (docs/kernels.md, \"CUDA\"):\n"
      "  plumb kernels generate --device cuda --op swiglu --out v/        # built-in variants\n"
      "  plumb kernels compile --device cuda --source v/<name>.cu         # NVRTC in a child, sm_90a\n"
      "  plumb kernels screen --device cuda --op swiglu --source v/<name>.cu   # on a GPU\n");
  c->require_subcommand(1);

  auto* ls = c->add_subcommand("list", "Every kernel op with its variants and what auto picks per phase");
  ls->callback([] { set_exit_code(run_list()); });
  add_profile_commands(c, a);
  add_search_commands(c, a);
  add_accept_command(c, a);
  add_kernels_cuda_commands(c);
}

}  // namespace

PLUMB_COMMAND(55, setup_kernels);

}  // namespace plumb::cli
