// `plumb evaluate`: score a submitted server (a start script) the way a benchmark would
// (evaluate/evaluate.h): supervised relaunches, harness integrity, both gates against plumb's
// default preset, the scenarios on the eval seeds, speedups over the registered baseline, geometric
// mean. Console table; --json (schema_version) and --html (report/).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/executor_flags.h"
#include "cli/ib_interop.h"
#include "cli/job_outcome.h"
#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "core/shipped.h"
#include "engine/model_config.h"
#include "evaluate/evaluate.h"
#include "executor/single_job.h"
#include "ledger/ledger.h"
#include "metrics/vram.h"
#include "report/html.h"

namespace plumb::cli {
namespace {

struct EvaluateArgs {
  std::string start_script;
  std::string scenario = "D";
  std::string size = "small";
  std::string seeds;  // comma-separated; "" = the protocol's eval seeds
  std::string work_dir;
  std::string ledger_path;
  std::string baseline_preset = "naive";
  std::string dataset;
  int quality_limit = 0;
  int fidelity_prompts = 4;
  int readiness_timeout_s = 300;
  int request_timeout_s = 600;
  std::string json_path;
  std::string html_path;
  std::string ib_json_dir;  // --ib-json DIR: InferenceBench's metrics JSON per scenario and seed
  bool quiet = false;
  ExecutorArgs exec;  // --executor slurm: the whole evaluation as one batch job
  bool executor_given = false;
};

// --ib-json: each measured run of the submission as InferenceBench's metrics JSON,
// DIR/<scenario>_seed<seed>.json, written after its last profile while the submission still runs
// (so its /v1/models names the model).
struct IbJsonWriter {
  std::string dir;
  std::vector<metrics::RunRecord> runs;
  std::vector<metrics::Metrics> metrics;
  Status error;
  std::vector<std::string> written;
  // The GPU memory in use while the run is measured (IB's vram_peak_mb): nvidia-smi sampled from the
  // run's start to its last profile; where there is none, null with the reason.
  std::unique_ptr<metrics::VramSampler> vram;

  void start() {
    vram = std::make_unique<metrics::VramSampler>();
    vram->start();
  }

  void add(const protocol::Scenario& sc, uint64_t seed, size_t profile, metrics::RunRecord& run,
           const metrics::Metrics& m) {
    if (profile == 0) {
      runs.clear();
      metrics.clear();
    }
    runs.push_back(std::move(run));
    metrics.push_back(m);
    if (profile + 1 < sc.profiles.size() || !error.ok()) return;
    const metrics::VramPeak peak =
        vram ? vram->stop() : metrics::VramPeak{.unavailable = "not sampled: the run's start was not seen"};
    vram.reset();
    IbRunOutput out{.scenario = sc.id,
                    .name = sc.name,
                    .target = base_url(runs.back().target),
                    .vram_peak_mb = peak.peak_mib};
    for (const auto& r : runs) out.runs.push_back(&r);
    out.metrics = metrics;
    out.plumb = json::object{{"seed", seed},
                             {"size_class", std::string(protocol::size_class_name(sc.size))},
                             {"request_set_hash", runs.back().request_set_hash},
                             {"source", "plumb evaluate: the submission's run"},
                             {"vram", vram_json(peak)}};
    std::string path = dir + "/" + sc.id + "_seed" + std::to_string(seed) + ".json";
    error = write_ib_json(path, out);
    if (error.ok()) written.push_back(path);
  }
  // The gates run after every scenario: their quality check goes into each file written, in place.
  Status add_quality_check(const std::optional<json::object>& quality) {
    if (!quality) return Status::Ok();
    for (const auto& path : written) {
      PLUMB_ASSIGN_OR_RETURN(json::value v, json::parse_file(path));
      if (!v.is_object()) return io_error(path + ": not the JSON object plumb wrote");
      v.as_object()["quality_check"] = *quality;
      PLUMB_RETURN_IF_ERROR(write_file_atomic(path, json::dump_pretty(v) + "\n"));
    }
    return Status::Ok();
  }
  // The URL in an OpenAI target's description ("openai chat http://127.0.0.1:PORT ...").
  static std::string base_url(const std::string& described) {
    std::istringstream in(described);
    for (std::string w; in >> w;)
      if (w.rfind("http", 0) == 0) return w;
    return "";
  }
};

// The headline, and one bar per scenario with the spread of its per-seed speedups.
void score_section(const evaluate::Evaluation& e, report::Page& p) {
  using report::Cell;
  char buf[256];
  std::snprintf(buf, sizeof buf, "Score: %s (geometric mean over %zu scenario%s). Gates %s; harness %s.",
                report::format_number(e.score, 4).c_str(), e.scenarios.size(),
                e.scenarios.size() == 1 ? "" : "s", e.gates_passed ? "passed" : "FAILED",
                e.harness_intact ? "intact" : "CHANGED");
  p.paragraph(buf);
  if (!e.gates_passed) p.note("A gate failed: every scenario scores 1.0 (as the baseline).");

  p.heading("Scores");
  report::BarChart bars;
  bars.title = "Score per scenario (speedup over the baseline; 1.0 = no speedup)";
  bars.y.label = "score";
  bars.reference = 1.0;
  for (const auto& s : e.scenarios) {
    report::Bar b;
    b.label = "scenario " + s.scenario;
    b.value = s.score;
    b.style = s.score_note.empty() ? Cell::Style::kPlain : Cell::Style::kWarn;
    // The spread of the per-seed speedups (min..max), when every seed has one.
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& r : s.seeds) lo = std::min(lo, r.speedup), hi = std::max(hi, r.speedup);
    if (s.score_note.empty() && s.seeds.size() > 1 && std::isfinite(lo) && std::isfinite(hi))
      b.lo = lo, b.hi = hi;
    bars.bars.push_back(b);
  }
  bool spread = false;
  for (const auto& b : bars.bars) spread = spread || std::isfinite(b.lo);
  if (spread) bars.note = "Error bars: the smallest and largest per-seed speedup.";
  p.bar_chart(bars);
}

// One row per scenario and seed, then one per scenario.
void run_tables(const evaluate::Evaluation& e, report::Page& p) {
  using report::Cell;
  report::Table t;
  t.caption = "Runs (objective higher is better)";
  t.header = {"scenario", "seed", "objective", "baseline", "speedup", "valid", "baseline source", "note"};
  for (const auto& s : e.scenarios) {
    if (s.seeds.empty())
      t.rows.push_back({s.scenario, "-", "-", "-", "-", Cell::muted("not run"), "", s.score_note});
    for (const auto& r : s.seeds)
      t.rows.push_back({s.scenario, std::to_string(r.seed), report::format_number(r.objective, 5),
                        report::format_number(r.baseline, 5), report::format_number(r.speedup, 4),
                        r.valid ? Cell::pass("yes") : Cell::fail("no"), r.baseline_source, r.failure});
  }
  p.table(t);
  report::Table st;
  st.caption = "Scenario scores";
  st.header = {"scenario", "objective", "speedup (geomean over seeds)", "score", "why 1.0"};
  for (const auto& s : e.scenarios)
    st.rows.push_back({s.scenario, s.objective_name, report::format_number(s.speedup, 4),
                       report::format_number(s.score, 4), s.score_note});
  p.table(st);
}

// Every constraint of both gates.
void gate_table(const evaluate::Evaluation& e, report::Page& p) {
  using report::Cell;
  p.heading("Gates");
  report::Table g;
  g.caption = "Quality and integrity gates (reference: plumb serve --preset default, launched by plumb)";
  g.header = {"gate", "constraint", "value", "bound", "verdict", "fix", "detail"};
  for (const auto& gate : e.gates.gates)
    for (const auto& c : gate.constraints) {
      Cell v = c.verdict == gates::Verdict::kPass   ? Cell::pass("pass")
               : c.verdict == gates::Verdict::kFail ? Cell::fail("fail")
                                                    : Cell::warn("not evaluated");
      g.rows.push_back({gate.gate, c.name, report::format_number(c.value, 5),
                        c.op + " " + report::format_number(c.bound, 5), v,
                        c.verdict == gates::Verdict::kPass ? "" : c.fix, c.detail});
    }
  p.table(g);
}

// The harness files' hashes before and after, a changed one marked.
void harness_table(const evaluate::Evaluation& e, report::Page& p) {
  using report::Cell;
  p.heading("Harness integrity");
  report::Table h;
  h.caption = "SHA-256 before the submission first ran and at the end";
  h.header = {"file", "before", "after"};
  for (size_t i = 0; i < e.harness_before.files.size(); ++i) {
    const auto& [path, before] = e.harness_before.files[i];
    std::string after = i < e.harness_after.files.size() ? e.harness_after.files[i].second : "";
    h.rows.push_back({path, before, before == after ? Cell(after) : Cell::fail(after)});
  }
  h.rows.push_back({"protocol", e.harness_before.protocol_hash, e.harness_after.protocol_hash});
  p.table(h);
}

std::string html_report(const evaluate::Evaluation& e) {
  report::Page p("plumb evaluate: " + std::filesystem::path(e.start_script).filename().string());
  p.provenance({{"start script", e.start_script},
                {"script sha256", e.script_sha256},
                {"plumb", e.plumb_version},
                {"machine", e.machine},
                {"size class", e.size},
                {"started", e.started_at},
                {"ended", e.ended_at},
                {"work directory", e.work_dir}});
  score_section(e, p);
  run_tables(e, p);
  gate_table(e, p);
  harness_table(e, p);
  return p.html();
}

// --seeds as numbers; usage error on one that is not a non-negative integer.
Result<std::vector<uint64_t>> parse_seeds(const std::string& seeds) {
  std::vector<uint64_t> out;
  std::stringstream in(seeds);
  for (std::string s; std::getline(in, s, ',');) {
    try {
      size_t used = 0;
      unsigned long long v = std::stoull(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      out.push_back(v);
    } catch (const std::exception&) {
      return invalid_argument("--seeds: '" + s + "' is not a non-negative integer (e.g. --seeds 1337,428)");
    }
  }
  return out;
}

// The shipped model is the reference's too: a submission that rewrote it would move the reference
// with it, so its files are part of the harness.
std::vector<std::string> shipped_model_files() {
  std::vector<std::string> files;
  if (auto models = engine::find_models_dir(); models.ok()) {
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}) {
      auto path = std::filesystem::path(*models) / "plumb-tiny" / f;
      if (std::filesystem::exists(path)) files.push_back(path.string());
    }
  }
  return files;
}

// The flags as evaluate::Options: scenarios, seeds, plumb's own binary, the work directory, the
// dataset (core/shipped.h's search unless --dataset names one), the harness files, timeouts.
Result<evaluate::Options> evaluate_options(const EvaluateArgs& a) {
  evaluate::Options o;
  o.start_script = a.start_script;
  if (a.scenario == "all") {
    o.scenarios = {"A", "B", "C", "D"};
  } else {
    o.scenarios.clear();
    std::stringstream in(a.scenario);
    for (std::string s; std::getline(in, s, ',');) o.scenarios.push_back(s);
  }
  o.size = a.size;
  if (!a.seeds.empty()) {
    PLUMB_ASSIGN_OR_RETURN(o.seeds, parse_seeds(a.seeds));
  }
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return job_error("cannot find the plumb binary (/proc/self/exe)");
  o.plumb_binary = self.string();
  o.work_dir =
      a.work_dir.empty()
          ? (std::filesystem::temp_directory_path() / ("plumb-evaluate-" + std::to_string(getpid()))).string()
          : a.work_dir;
  o.ledger_path = a.ledger_path;
  o.baseline_preset = a.baseline_preset;
  o.quality_dataset = a.dataset;
  if (o.quality_dataset.empty()) {
    auto shipped = find_shipped_file(Shipped::kData, "mc_heldout.jsonl");
    if (!shipped.ok()) return invalid_argument(shipped.status().message() + "; or pass --dataset");
    o.quality_dataset = *shipped;
  }
  o.quality_limit = a.quality_limit;
  o.harness_files = shipped_model_files();
  o.fidelity_prompts = a.fidelity_prompts;
  if (a.readiness_timeout_s <= 0 || a.request_timeout_s <= 0)
    return invalid_argument("--readiness-timeout and --timeout must be > 0 seconds");
  o.readiness_timeout = std::chrono::seconds(a.readiness_timeout_s);
  o.request_timeout = std::chrono::seconds(a.request_timeout_s);
  if (!a.quiet)
    o.progress = [](const std::string& line) { std::fprintf(stderr, "plumb evaluate: %s\n", line.c_str()); };
  else
    o.progress = [](const std::string&) {};
  return o;
}

// --json (with the ledger's chain head when --ledger is given) and --html.
Status write_reports(const EvaluateArgs& a, const evaluate::Evaluation& ev) {
  if (!a.json_path.empty()) {
    json::object j = evaluate::to_json(ev);
    if (!a.ledger_path.empty()) {
      // The ledger's chain head: the sealed history behind this score, as one value.
      auto l = ledger::Ledger::open(a.ledger_path);
      auto head = l.ok() ? (*l)->chain_head() : Result<std::string>(l.status());
      if (!head.ok()) return job_error("--ledger: " + head.status().to_string());
      j["ledger"] = json::object{{"path", a.ledger_path}, {"chain_head", *head}};
    }
    Status st = write_file_atomic(a.json_path, json::dump_pretty(j) + "\n");
    if (!st.ok()) return job_error("--json: " + st.to_string());
  }
  if (!a.html_path.empty()) {
    Status st = write_file_atomic(a.html_path, html_report(ev));
    if (!st.ok()) return job_error("--html: " + st.to_string());
  }
  return Status::Ok();
}

// --- `plumb evaluate --executor local|slurm`: the whole evaluation as one job (docs/cluster.md) ---
//
// One job, not one per scenario: the submission's engine and the client share the node (as a user's
// benchmark would), and the gates, the submission's runs and the baseline it is divided by must come
// from one machine. The job is `plumb evaluate` itself on the node; its rows go to the shared --ledger
// and its evaluation to a JSON file in the shared work directory, written whole at the end, which is
// the only thing the controller reads: a job that dies part-way leaves no file, so no partial
// evaluation can become a score.

// Where attempt `key` puts its evaluation and report, in the work directory.
struct AttemptFiles {
  std::string json_path;
  std::string html_path;  // "" without --html
};
AttemptFiles attempt_files(const EvaluateArgs& a, const std::string& work, const std::string& key) {
  return {work + "/" + key + ".json", a.html_path.empty() ? "" : work + "/" + key + ".html"};
}

// A job that wrote its evaluation has its result; one that exited with an error of its own (no
// signal, a node that ran it) failed the evaluation, not retried; a timeout is not retried either;
// anything else (cancelled, node failed, lost, killed by a signal) is retried.
executor::Verdict judge(const executor::JobStatus& st, bool wrote_evaluation) {
  using executor::JobState;
  bool exited = st.state == JobState::kCompleted || st.state == JobState::kFailed;
  // A lost job (one that ended while no controller watched it, then forgotten) that wrote its
  // evaluation finished it: the file is written whole at the end.
  if ((exited || st.state == JobState::kLost) && wrote_evaluation) return executor::Verdict::kResult;
  if (st.state == JobState::kTimedOut) return executor::Verdict::kTimedOut;
  if (st.state == JobState::kFailed && job_signal(st) == 0 && !node_never_ran(st))
    return executor::Verdict::kWorkFailed;
  return executor::Verdict::kInfrastructure;
}

// The node's `plumb evaluate`: the same evaluation, absolute paths, its own work directory and JSON.
std::vector<std::string> job_argv(const EvaluateArgs& a, const evaluate::Options& o, const std::string& work,
                                  const std::string& key) {
  namespace fs = std::filesystem;
  const AttemptFiles f = attempt_files(a, work, key);
  std::vector<std::string> v = {o.plumb_binary,
                                "evaluate",
                                "--start-script",
                                fs::absolute(o.start_script).lexically_normal().string(),
                                "--scenario",
                                a.scenario,
                                "--size",
                                a.size,
                                "--work-dir",
                                work + "/" + key,
                                "--baseline-preset",
                                a.baseline_preset,
                                "--dataset",
                                fs::absolute(o.quality_dataset).lexically_normal().string(),
                                "--quality-limit",
                                std::to_string(a.quality_limit),
                                "--fidelity-prompts",
                                std::to_string(a.fidelity_prompts),
                                "--readiness-timeout",
                                std::to_string(a.readiness_timeout_s),
                                "--timeout",
                                std::to_string(a.request_timeout_s),
                                "--json",
                                f.json_path};
  if (!a.seeds.empty()) v.insert(v.end(), {"--seeds", a.seeds});
  if (!f.html_path.empty()) v.insert(v.end(), {"--html", f.html_path});
  if (!a.ledger_path.empty()) v.insert(v.end(), {"--ledger", ledger_for_jobs(a.ledger_path)});
  // InferenceBench's JSON is written by the job, into the directory asked for (shared with the nodes).
  if (!a.ib_json_dir.empty())
    v.insert(v.end(), {"--ib-json", fs::absolute(a.ib_json_dir).lexically_normal().string()});
  return v;
}

// What decides an evaluation's result, as the journal records it with each job: the job's flags
// (without the attempt's own --work-dir, --json and --html paths), the executor and the start
// script's content. A restart whose identity differs is refused (check_journal_identity).
json::object evaluation_identity(const EvaluateArgs& a, const evaluate::Options& o, const std::string& work,
                                 const std::string& kind) {
  std::vector<std::string> argv = job_argv(a, o, work, "evaluate-a0");
  json::object id{{"executor", kind}};
  for (size_t i = 2; i + 1 < argv.size(); i += 2) {
    if (argv[i] == "--work-dir" || argv[i] == "--json") continue;
    id[argv[i]] = argv[i] == "--html" ? "given" : argv[i + 1];
  }
  auto sha = sha256_file(o.start_script);
  id["start_script_sha256"] = sha.ok() ? *sha : "unreadable: " + sha.status().message();
  return id;
}

// The result of the job, as the user's --json and --html and a summary on stdout; the exit code is
// the gates' verdict, as without an executor.
int report_result(const EvaluateArgs& a, const executor::JobAttempt& at, const executor::JobStatus& st,
                  int failures) {
  const AttemptFiles f = attempt_files(a, at.spec.work_dir, at.key);
  auto v = json::parse_file(f.json_path);
  if (!v.ok() || !v->is_object()) {
    std::cerr << "plumb evaluate: the job's evaluation " << f.json_path
              << " is unreadable: " << v.status().to_string() << "\n";
    return kExitError;
  }
  json::object j = v->as_object();
  j["executor"] = json::object{{"kind", a.exec.kind},
                               {"job_id", at.job_id},
                               {"node", st.node},
                               {"key", at.key},
                               {"job_output", executor::output_path(at.spec)},
                               {"infrastructure_failures", int64_t(failures)}};
  if (!a.json_path.empty()) {
    if (Status s = write_file_atomic(a.json_path, json::dump_pretty(j) + "\n"); !s.ok()) {
      std::cerr << "plumb evaluate: --json: " << s.to_string() << "\n";
      return kExitError;
    }
  }
  if (!a.html_path.empty()) {
    std::error_code ec;
    std::filesystem::copy_file(f.html_path, a.html_path, std::filesystem::copy_options::overwrite_existing,
                               ec);
    if (ec) {
      std::cerr << "plumb evaluate: --html: cannot copy " << f.html_path << ": " << ec.message() << "\n";
      return kExitError;
    }
  }
  auto flag = [&j](const char* key) { return j.contains(key) && j.at(key).is_bool() && j.at(key).as_bool(); };
  bool passed = flag("gates_passed"), intact = flag("harness_intact");
  const json::array none;
  const auto* scenarios = j.if_contains("scenarios");
  for (const auto& sc : scenarios && scenarios->is_array() ? scenarios->as_array() : none) {
    if (!sc.is_object()) continue;
    const auto& o = sc.as_object();
    auto score = json::number_at(o, "score");
    std::printf("scenario %s score %s%s%s\n", json::string_at(o, "scenario").value_or("?").c_str(),
                score ? std::to_string(*score).c_str() : "-",
                json::string_at(o, "score_note").value_or("").empty() ? "" : ": ",
                json::string_at(o, "score_note").value_or("").c_str());
  }
  auto score = json::number_at(j, "score");
  std::printf("score %s; gates %s; harness %s; measured on node %s by %s job %s (full table: %s)\n",
              score ? std::to_string(*score).c_str() : "-", passed ? "passed" : "FAILED",
              intact ? "intact" : "CHANGED", st.node.empty() ? "(unknown)" : st.node.c_str(),
              a.exec.kind.c_str(), at.job_id.c_str(), executor::output_path(at.spec).c_str());
  return passed ? kExitOk : kExitFailed;
}

// An evaluation the journal says finished: its result again, no new job.
int report_finished(const EvaluateArgs& a, const std::string& journal, const executor::JobAttempt& at,
                    const executor::JobStatus& st, int failures) {
  const AttemptFiles f = attempt_files(a, at.spec.work_dir, at.key);
  if (!std::filesystem::exists(f.json_path)) {
    std::cerr << "plumb evaluate: the journal " << journal << " says job " << at.job_id << " (" << at.key
              << ") finished this evaluation, but its file " << f.json_path
              << " is gone; remove the journal to evaluate again in this work directory\n";
    return kExitError;
  }
  std::fprintf(stderr,
               "plumb evaluate: this evaluation already finished in job %s (%s; journal %s): its result is "
               "reported again, nothing is submitted. To evaluate again, give it another --work-dir or "
               "remove the journal\n",
               at.job_id.c_str(), at.key.c_str(), journal.c_str());
  return report_result(a, at, st, failures);
}

// The evaluation as a single job (executor/single_job.h) in the work directory `work`.
executor::SingleJob evaluation_job(const EvaluateArgs& a, const evaluate::Options& o, const std::string& work,
                                   const std::string& kind) {
  executor::SingleJob j;
  j.command = "plumb evaluate";
  j.what = "evaluation";
  j.work_dir = work;
  // The job journal, WORK/evaluate.jobs.jsonl: the record a restarted controller replays to reattach.
  j.journal = work + "/evaluate.jobs.jsonl";
  j.prefix = "evaluate-a";
  j.identity = evaluation_identity(a, o, work, kind);
  j.identity_remedy =
      "give this evaluation its own --work-dir, or remove the journal to start that directory over";
  j.lock_remedy =
      "wait for it to end, or stop it and start this evaluation again (it reattaches to the job in flight); "
      "or "
      "give this evaluation its own --work-dir";
  j.failed_event = "evaluation_failed";
  j.infrastructure_note = "no evaluation of it; nothing of it is scored";
  j.max_retries = a.exec.max_job_retries;
  j.poll = std::chrono::milliseconds(int64_t(std::max(0.05, a.exec.poll_s) * 1000));
  j.spec = [&a, &o, work](const std::string& key) -> Result<executor::JobSpec> {
    executor::JobSpec s;
    s.argv = job_argv(a, o, work, key);
    return s;
  };
  // A file left under the attempt's name is removed first, so only this job's evaluation is read back.
  j.before_submit = [&a, work](const executor::JobAttempt& at) {
    const AttemptFiles f = attempt_files(a, work, at.key);
    std::error_code ec;
    std::filesystem::remove(f.json_path, ec);
    if (!f.html_path.empty()) std::filesystem::remove(f.html_path, ec);
    return Status::Ok();
  };
  j.judge = [&a, work](const executor::JobAttempt& at, const executor::JobStatus& st) {
    return judge(st, std::filesystem::exists(attempt_files(a, work, at.key).json_path));
  };
  j.report = [&a, journal = j.journal](const executor::JobAttempt& at, const executor::JobStatus& st,
                                       int failures, bool again) -> Result<int> {
    return again ? report_finished(a, journal, at, st, failures) : report_result(a, at, st, failures);
  };
  j.work_failed = [](const executor::JobAttempt& at, const executor::JobStatus& st) {
    std::cerr << "plumb evaluate: the evaluation failed in job " << at.job_id << " ("
              << executor::state_name(st.state) << (st.detail.empty() ? "" : ", " + st.detail)
              << "); not retried, it is the evaluation's own error. The end of "
              << executor::output_path(at.spec) << ":\n"
              << executor::file_tail(executor::output_path(at.spec), 8);
    return kExitError;
  };
  return j;
}

int run_evaluate_as_job(EvaluateArgs& a) {
  auto fail = [](const Status& s) {
    std::cerr << "plumb evaluate: " << s.message() << "\n";
    return exit_for(s);
  };
  auto o = evaluate_options(a);
  if (!o.ok()) return fail(o.status());
  if (Status s = evaluate::check_options(*o); !s.ok()) return fail(s);
  auto e = make_executor(a.exec);
  if (!e.ok()) return fail(e.status());
  std::string work =
      std::filesystem::absolute(a.work_dir.empty() ? "." : a.work_dir).lexically_normal().string();
  std::error_code ec;
  std::filesystem::create_directories(work, ec);
  if (ec) return fail(invalid_argument("cannot create the work directory " + work + ": " + ec.message()));
  const executor::SingleJob job = evaluation_job(a, *o, work, (*e)->kind());
  auto rc = executor::run_single_job(*e, job);
  return rc.ok() ? *rc : fail(rc.status());
}

int run_evaluate(EvaluateArgs& a) {
  if (a.executor_given) return run_evaluate_as_job(a);
  auto fail = [](const Status& s, const std::string& msg) {
    std::cerr << "plumb evaluate: " << msg << "\n";
    return exit_for(s);
  };
  auto o = evaluate_options(a);
  if (!o.ok()) return fail(o.status(), o.status().message());
  IbJsonWriter ib{.dir = a.ib_json_dir};
  if (!a.ib_json_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.ib_json_dir, ec);
    if (ec)
      return fail(invalid_argument(""), "--ib-json: cannot create " + a.ib_json_dir + ": " + ec.message());
    o->on_submission_profile = [&ib](const protocol::Scenario& sc, uint64_t seed, size_t p,
                                     metrics::RunRecord& run,
                                     const metrics::Metrics& m) { ib.add(sc, seed, p, run, m); };
    o->on_submission_run_start = [&ib](const protocol::Scenario&, uint64_t) { ib.start(); };
  }
  auto ev = evaluate::run(*o);
  if (!ev.ok()) return fail(ev.status(), ev.status().to_string());
  if (ib.error.ok())
    ib.error = ib.add_quality_check(ib_quality_from_gate(ev->gates, o->tau, o->quality_dataset));
  if (!ib.error.ok()) return fail(job_error(""), "--ib-json: " + ib.error.to_string());
  if (!a.quiet)
    for (const auto& path : ib.written)
      std::fprintf(stderr, "plumb evaluate: InferenceBench metrics JSON written to %s\n", path.c_str());
  std::fputs(evaluate::console_table(*ev).c_str(), stdout);
  if (Status s = write_reports(a, *ev); !s.ok()) return fail(s, s.message());
  if (!a.quiet)
    std::fprintf(stderr, "plumb evaluate: logs and launch directories in %s\n", ev->work_dir.c_str());
  return ev->gates_passed ? kExitOk : kExitFailed;
}

void setup_evaluate(CLI::App& root) {
  auto args = std::make_shared<EvaluateArgs>();
  auto* c = root.add_subcommand(
      "evaluate",
      "Score a submitted server the way a benchmark would. plumb runs START_SCRIPT as `START_SCRIPT <port>`\n"
      "(PORT and HOST=127.0.0.1 also in its environment) in a fresh empty directory and its own process\n"
      "group; the script must serve the OpenAI API on 127.0.0.1:<port> in the foreground and answer GET\n"
      "/health. plumb verifies the process on the port is the one it launched, hashes its own binary and\n"
      "datasets before and after, runs the quality and integrity gates against `plumb serve --preset\n"
      "default`, then each scenario on the protocol's eval seeds (a fresh launch per run) and divides by\n"
      "the registered baseline (valid runs of `plumb serve --preset naive` in --ledger, else measured\n"
      "now). Score = geometric mean of the scenario speedups; a failed gate or an invalid run scores 1.0.\n"
      "Exit code 0 when the gates pass, 1 when one fails.\n"
      "With --executor slurm the whole evaluation is one batch job on one node (plumb evaluate there,\n"
      "its runs written to the shared --ledger, its evaluation read back from --work-dir); a job that\n"
      "is cancelled or loses its node is retried, never scored; one past its --slurm-time is a timeout,\n"
      "not retried. Killed and started again with\n"
      "the same --work-dir, it reattaches to its job (or reports the finished evaluation) instead of\n"
      "submitting again; other arguments for that work directory are refused (docs/cluster.md).\n\n"
      "Example:  plumb evaluate --start-script ./start_server.sh --scenario D --json score.json");
  c->add_option("--start-script", args->start_script, "the submission's start script (executable)")
      ->required();
  c->add_option("--scenario", args->scenario, "A | B | C | D | all, or a comma list (A,D)")
      ->capture_default_str();
  c->add_option("--size", args->size, "scenario size class: small | gpu")->capture_default_str();
  c->add_option("--seeds", args->seeds,
                "comma-separated run seeds (default: the protocol's eval seeds 1337,428,777)");
  c->add_option(
      "--work-dir", args->work_dir,
      "where launch directories and logs go (default: a new directory under the temp dir; with "
      "--executor, the current directory: job scripts, outputs and evaluations, shared with the nodes)");
  c->add_option(
      "--ledger", args->ledger_path,
      "ledger (a SQLite file or a postgresql:// URL): baselines are read from it (and measured ones "
      "stored), runs and scores recorded");
  c->add_option("--baseline-preset", args->baseline_preset, "plumb serve preset of the baseline")
      ->capture_default_str();
  c->add_option("--dataset", args->dataset,
                "quality gate multiple-choice JSONL (default: data/mc_heldout.jsonl)");
  c->add_option("--quality-limit", args->quality_limit, "use the first N items of the dataset (0 = all)")
      ->capture_default_str();
  c->add_option("--fidelity-prompts", args->fidelity_prompts, "fresh prompts per fidelity check")
      ->capture_default_str();
  c->add_option("--readiness-timeout", args->readiness_timeout_s,
                "seconds the server may take to become ready")
      ->capture_default_str();
  c->add_option("--timeout", args->request_timeout_s, "per-request timeout in seconds")
      ->capture_default_str();
  c->add_option("--json", args->json_path, "write the evaluation as JSON (schema_version)");
  c->add_option("--html", args->html_path, "write a self-contained HTML report (opens offline)");
  c->add_option("--ib-json", args->ib_json_dir,
                "write each measured run of the submission as InferenceBench's metrics JSON, "
                "DIR/<scenario>_seed<seed>.json (docs/inferencebench.md)");
  c->add_flag("--quiet", args->quiet, "no progress lines");
  add_executor_flags(c, args->exec, "submission's evaluation (all of it, on one node)",
                     "given, the evaluation runs as a child job on this machine, with the journal and "
                     "retries of slurm; without --executor, in this process");
  c->callback([c, args] {
    // Without --executor the evaluation runs in this process, as it always did; with it (local or
    // slurm), as a job whose evaluation is read back from the work directory.
    args->executor_given = c->get_option("--executor")->count() > 0;
    set_exit_code(run_evaluate(*args));
  });
}

PLUMB_COMMAND(80, setup_evaluate);

}  // namespace
}  // namespace plumb::cli
