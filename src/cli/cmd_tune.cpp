// `plumb tune`: search an engine's configuration space on a protocol scenario, keep every trial in
// the ledger, re-validate the winner against the honest baselines, and report. The logic lives in
// tune/ (study.h); this file parses flags, prints the live view and writes JSON/HTML.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <string>

#include "cli/command.h"
#include "cli/executor_flags.h"
#include "compare/preflight.h"
#include "core/file.h"
#include "core/json.h"
#include "engine/model_config.h"
#include "engine/tensor_parallel.h"
#include "executor/executor.h"
#include "executor/lock.h"
#include "launch/placement.h"
#include "ledger/ledger.h"
#include "protocol/protocol.h"
#include "report/html.h"
#include "tune/space.h"
#include "tune/study.h"

namespace plumb::cli {
namespace {

struct TuneArgs {
  std::string ledger_path = ledger::kDefaultPath;
  tune::StudyOptions study;
  std::string proposer;
  double proposer_timeout_s = 60;
  int64_t resume = 0;
  int64_t report_only = 0;
  int64_t replay = 0;
  int replay_seeds = 5;
  std::string replay_space;
  bool list = false;
  std::string print_space;
  std::string work_dir;
  bool no_revalidate = false;
  bool naive = false;
  bool no_gates = false;
  int pairs = 5;
  std::string json_path;
  std::string html_path;
  bool quiet = false;
  bool no_preflight = false;
  int preflight_runs = 4;
  int confirm_top = 3;  // --confirm: the top configurations measured again before the re-validation
  std::string placement = "auto";  // the pre-flight's (trials and comparisons place with auto)
  // Where trials run (executor/executor.h).
  ExecutorArgs exec;
  int max_parallel = 1;
  CLI::Option* max_parallel_opt = nullptr;
  std::string run_trial;  // --run-trial SPEC: the node's half of a trial job
  CLI::Option* trials_opt = nullptr;
  CLI::Option* budget_opt = nullptr;
  CLI::Option* no_revalidate_opt = nullptr;
  CLI::Option* naive_opt = nullptr;
  CLI::Option* no_gates_opt = nullptr;
  CLI::Option* pairs_opt = nullptr;
};

// What follows the search, as the study stored it; a flag given with this call (e.g. --no-revalidate
// on a resume that should only search) applies on top, and is said.
tune::StudyOptions followup_settings(const TuneArgs& a, const tune::StudyOptions& stored, bool say = true) {
  tune::StudyOptions o = stored;
  std::string now;
  if (a.no_revalidate_opt && a.no_revalidate_opt->count() > 0 && o.revalidate) {
    o.revalidate = false;
    now += " --no-revalidate";
  }
  if (a.no_gates_opt && a.no_gates_opt->count() > 0 && o.gates) {
    o.gates = false;
    now += " --no-gates";
  }
  if (a.naive_opt && a.naive_opt->count() > 0 && !o.naive) {
    o.naive = true;
    now += " --naive";
  }
  if (a.pairs_opt && a.pairs_opt->count() > 0 && o.pairs != a.pairs) {
    o.pairs = a.pairs;
    now += " --pairs " + std::to_string(a.pairs);
  }
  if (say && (!a.quiet || !now.empty()))
    std::fprintf(
        stderr,
        "after the search: re-validation %s, gates %s, naive %s, %d pairs (stored with the study%s)\n",
        o.revalidate ? "on" : "off", o.gates ? "on" : "off", o.naive ? "on" : "off", o.pairs,
        now.empty() ? "" : ("; given now:" + now).c_str());
  return o;
}

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

int fail(const Status& s) {
  std::cerr << "plumb tune: " << s.to_string() << "\n";
  return exit_for(s);
}

std::string fmtd(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// The gates' constraints on the best configuration.
report::Table revalidation_gate_table(const gates::GateReport& rep) {
  report::Table g;
  g.caption = "Gates on the best configuration (reference: the default preset)";
  g.header = {"gate", "constraint", "value", "op", "bound", "verdict", "fix"};
  for (const auto& gr : rep.gates)
    for (const auto& c : gr.constraints) {
      std::string v(gates::verdict_name(c.verdict));
      g.rows.push_back({gr.gate, c.name, report::format_number(c.value), c.op, report::format_number(c.bound),
                        c.verdict == gates::Verdict::kPass   ? report::Cell::pass(v)
                        : c.verdict == gates::Verdict::kFail ? report::Cell::fail(v)
                                                             : report::Cell::warn(v),
                        c.verdict == gates::Verdict::kPass ? "" : c.fix});
    }
  return g;
}

// The best configuration's speedups over its baselines (chart and table) and the gates.
void revalidation_section(report::Page& page, const tune::Revalidation& rv) {
  page.heading("Speedup of the best configuration (held-out seeds, paired, pre-registered)");
  report::BarChart bars;
  bars.title = "Best over baseline (95% CI)";
  bars.y.label = "speedup (objective ratio)";
  bars.reference = 1.0;
  report::Table t;
  t.header = {"baseline", "speedup", "95% CI", "verdict", "CV baseline", "CV best", "pairs", "note"};
  for (const auto& c : rv.comparisons) {
    if (!c.readout) {
      t.rows.push_back({c.baseline, "n/a", "", report::Cell::warn("not available"), "", "", "", c.error});
      continue;
    }
    const auto& r = c.readout->readout;
    std::string v(protocol::verdict_name(r.verdict));
    auto style = v == "better"  ? report::Cell::Style::kPass
                 : v == "worse" ? report::Cell::Style::kFail
                                : report::Cell::Style::kWarn;
    bars.bars.push_back({"over " + c.baseline, r.ratio, r.lo, r.hi, style});
    t.rows.push_back({c.baseline, report::format_number(r.ratio),
                      "[" + report::format_number(r.lo) + ", " + report::format_number(r.hi) + "]",
                      report::Cell(v, style), fmtd("%.1f%%", 100 * r.cv_a), fmtd("%.1f%%", 100 * r.cv_b),
                      std::to_string(r.pairs) + " of " + std::to_string(c.readout->pairs_registered),
                      r.reason + (c.error.empty() ? "" : " (" + c.error + ")")});
  }
  page.bar_chart(bars);
  page.table(t);
  if (rv.gates) page.table(revalidation_gate_table(*rv.gates));
  if (!rv.gates_error.empty()) page.note("gates: " + rv.gates_error);
}

// The best objective so far after each trial (full-stage feasible trials count).
void convergence_chart(report::Page& page, const tune::StudyState& st) {
  page.heading("Convergence");
  report::LineChart conv;
  conv.title = "Best objective so far (full-stage feasible trials)";
  conv.x.label = "trial";
  conv.y.label = "objective (higher is better)";
  conv.step = true;
  conv.markers = true;
  report::Series best{"best so far", {}, {}, {}};
  double b = NAN;
  for (const auto& t : st.trials) {
    if (t.obs.stage == "full" && t.obs.feasible && t.obs.objective &&
        (!std::isfinite(b) || *t.obs.objective > b))
      b = *t.obs.objective;
    best.x.push_back(double(t.obs.index + 1));
    best.y.push_back(b);
  }
  conv.series.push_back(best);
  page.line_chart(conv);
}

// TTFT against throughput of the feasible full trials, the Pareto front highlighted.
void pareto_chart(report::Page& page, const tune::StudyState& st) {
  page.heading("Pareto front: TTFT vs throughput");
  report::ScatterChart sc;
  sc.title = "Feasible full trials (front highlighted)";
  sc.x.label = "TTFT p50 (ms), lower is better";
  sc.y.label = "request throughput (req/s), higher is better";
  sc.connect_highlighted = true;
  report::Series pts{"trials", {}, {}, {}};
  auto front = tune::pareto_front(st);
  for (size_t i = 0; i < st.trials.size(); ++i) {
    const auto& o = st.trials[i].obs;
    if (o.stage != "full" || !o.feasible) continue;
    auto* x = o.metrics.if_contains("ttft_p50_ms");
    auto* y = o.metrics.if_contains("request_throughput");
    if (!x || !y || !x->is_number() || !y->is_number()) continue;
    pts.x.push_back(x->to_number<double>());
    pts.y.push_back(y->to_number<double>());
    pts.highlight.push_back(std::find(front.begin(), front.end(), i) != front.end());
  }
  sc.series.push_back(pts);
  page.scatter_chart(sc);
}

// One row per trial, then the best configuration as an engine config and a serve command.
void trials_section(report::Page& page, const tune::StudyState& st) {
  page.heading("Trials");
  report::Table tt;
  tt.header = {"#",           "stage", "status", "objective", "TTFT p50 ms",
               "TPOT p50 ms", "req/s", "s",      "config",    "why"};
  for (const auto& t : st.trials) {
    const auto& o = t.obs;
    auto m = [&](const char* k) {
      auto v = json::number_at(o.metrics, k);
      return v ? report::format_number(*v) : std::string("n/a");
    };
    tt.rows.push_back({std::to_string(o.index + 1), o.stage,
                       o.feasible ? report::Cell::pass(o.status) : report::Cell::fail(o.status),
                       o.objective ? report::format_number(*o.objective) : "n/a", m("ttft_p50_ms"),
                       m("tpot_p50_ms"), m("request_throughput"), fmtd("%.1f", t.elapsed_s),
                       tune::config_summary(st.space, o.config), o.feasible ? t.rationale : o.failure});
  }
  page.table(tt);
  if (auto bi = st.best()) {
    page.heading("Best configuration");
    page.paragraph(tune::engine_config_toml(st.space, st.trials[*bi].obs.config));
    if (auto cmd = tune::serve_command(st.space, st.trials[*bi].obs.config); !cmd.empty())
      page.paragraph(cmd);
  }
}

Status write_html(const std::string& path, const tune::StudyState& st, const tune::Revalidation* rv) {
  report::Page page("plumb tune: study " + std::to_string(st.row.id) + " (" + st.row.name + ")");
  page.provenance(
      {{"study", std::to_string(st.row.id) + " " + st.row.name},
       {"adapter / space", st.space.adapter + " / " + st.space.name},
       {"strategy", st.row.strategy + " (seed " + std::to_string(st.row.strategy_seed) + ")"},
       {"scenario", st.row.scenario + " (" + st.row.size_class + "), objective higher is better"},
       {"seeds",
        "dev " + std::to_string(st.row.dev_seed) + ", eval (held out) " + std::to_string(st.row.eval_seed)},
       {"trials", std::to_string(st.trials.size()) + " in " + fmtd("%.0f", st.seconds_used()) + " s"},
       {"protocol",
        "v" + std::to_string(protocol::kVersion) + " " + protocol::protocol_hash().substr(0, 12)}});
  if (rv) revalidation_section(page, *rv);
  convergence_chart(page, st);
  pareto_chart(page, st);
  trials_section(page, st);
  return page.write(path);
}

// Replays strategies over a grid study's measured table: per seed, the best objective reached after
// --trials proposals as a fraction of the grid's best, and the trials needed to reach 95% of it.
int run_replay(ledger::Ledger& ledger, const TuneArgs& a) {
  auto st = tune::load_study(ledger, a.replay);
  if (!st.ok()) return fail(st.status());
  if (!a.replay_space.empty()) {
    // A sub-space of the measured grid (e.g. the points a stopped grid study finished).
    auto sp = tune::resolve_space(a.replay_space);
    if (!sp.ok()) return fail(sp.status());
    st->space = std::move(*sp);
    std::vector<tune::Trial> kept;
    auto g = tune::enumerate_grid(st->space);
    if (!g.ok()) return fail(g.status());
    std::set<std::string> want;
    for (const auto& c : *g) want.insert(tune::config_key(c));
    for (auto& t : st->trials)
      if (want.count(tune::config_key(t.obs.config))) kept.push_back(std::move(t));
    if (kept.size() != want.size())
      return fail(invalid_argument("--replay-space: the grid study measured " + std::to_string(kept.size()) +
                                   " of its " + std::to_string(want.size()) + " points"));
    st->trials = std::move(kept);
  }
  if (st->row.strategy != "grid")
    return fail(invalid_argument("--replay needs a study measured by --strategy grid (study " +
                                 std::to_string(a.replay) + " used " + st->row.strategy + ")"));
  int64_t n = a.study.trials > 0 ? a.study.trials : int64_t(st->trials.size());
  std::printf(
      "replay of grid study %lld (%zu measured points, one measurement each): %s, %lld trials, %d seeds\n",
      (long long)a.replay, st->trials.size(), a.study.strategy.c_str(), (long long)n, a.replay_seeds);
  std::printf("  %-6s %12s %14s %16s\n", "seed", "best", "of grid best", "trials to 95%");
  std::vector<double> fr, t95;
  double grid_best = 0;
  for (int k = 1; k <= a.replay_seeds; ++k) {
    tune::StrategyOptions so = a.study.strategy_options;
    so.name = a.study.strategy;
    so.seed = a.study.strategy_seed + uint64_t(k - 1);
    auto r = tune::replay(*st, so, n);
    if (!r.ok()) return fail(r.status());
    grid_best = r->grid_best;
    double b = r->best_so_far.empty() ? NAN : r->best_so_far.back();
    fr.push_back(std::isfinite(b) ? b / r->grid_best : 0.0);
    t95.push_back(r->trials_to_95 > 0 ? double(r->trials_to_95) : INFINITY);
    std::printf("  %-6llu %12s %13.1f%% %16s\n", (unsigned long long)so.seed, fmtd("%.4g", b).c_str(),
                100 * fr.back(), r->trials_to_95 > 0 ? std::to_string(r->trials_to_95).c_str() : "never");
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  };
  std::printf(
      "  median: %.1f%% of the grid best (%s) after %lld trials (%.0f%% of the grid); median trials to 95%%: "
      "%s\n",
      100 * median(fr), fmtd("%.4g", grid_best).c_str(), (long long)n,
      100.0 * double(n) / double(st->trials.size()),
      std::isfinite(median(t95)) ? fmtd("%.1f", median(t95)).c_str() : "never");
  size_t reached = size_t(std::count_if(t95.begin(), t95.end(), [](double x) { return std::isfinite(x); }));
  std::printf("  reached 95%% of the grid best within %lld trials: %zu of %d seeds\n", (long long)n, reached,
              a.replay_seeds);
  return kExitOk;
}

// The re-validation's pairs as the pre-flight sizes them: `pairs` to start with (capped so that they
// fit about four minutes), and up to `max_pairs` by the registered sizing rule (about seven minutes,
// at most the check's max_pairs). `stop` after saying why the machine is too noisy to go on.
struct PairsPlan {
  int pairs = 0;
  int max_pairs = 0;
  bool stop = false;
};

// The pre-flight noise check (compare/preflight.h) on the study's default configuration, before the
// search, when a re-validation will follow.
Result<PairsPlan> preflight(ledger::Ledger& ledger, int64_t id, const TuneArgs& a,
                            const tune::RunContext& ctx) {
  PLUMB_ASSIGN_OR_RETURN(auto st, tune::load_study(ledger, id));
  tune::StudyOptions after = followup_settings(a, st.options, /*say=*/false);
  if (!after.revalidate) return PairsPlan{};
  tune::Config def;
  if (st.space.adapter == "plumb") def["preset"] = std::string("default");
  std::string dir = ctx.work_dir.empty() ? std::string(".") : ctx.work_dir;
  compare::NoiseCheckOptions no;
  no.config = dir + "/study-" + std::to_string(id) + "-preflight.toml";
  PLUMB_RETURN_IF_ERROR(write_file_atomic(no.config, tune::engine_config_toml(st.space, def)));
  no.scenario = st.row.scenario;
  no.size = st.row.size_class;
  no.runs = a.preflight_runs;
  no.seed = uint64_t(st.row.dev_seed);
  no.run.plumb_binary = ctx.plumb_binary;
  no.run.work_dir = ctx.work_dir;
  no.run.tokenizer = st.options.tokenizer;
  no.run.request_timeout = std::chrono::seconds(st.options.request_timeout_s);
  no.run.progress = ctx.progress;
  auto placement = launch::parse_placement_mode(a.placement);
  if (!placement.ok()) return placement.status();
  no.run.placement = *placement;
  PLUMB_ASSIGN_OR_RETURN(auto nc, compare::noise_check(no));
  std::fputs(compare::format_noise_check(nc, no).c_str(), stderr);
  if (nc.noise == compare::Noise::kTooNoisy) {
    std::fprintf(
        stderr,
        "plumb tune: stopping before the search, since a verdict is unlikely on this machine now. "
        "Study %lld is kept: `plumb tune --resume %lld --ledger %s` after quieting the machine, or add "
        "--no-preflight to tune anyway.\n",
        (long long)id, (long long)id, a.ledger_path.c_str());
    return PairsPlan{.stop = true};
  }
  const int comparisons = after.naive ? 2 : 1;
  auto fit = [&](double seconds) { return int(seconds / std::max(1e-3, 2.0 * nc.mean_run_s * comparisons)); };
  PairsPlan plan;
  plan.pairs = std::max(protocol::kMinPairs, std::min(nc.suggested_pairs, fit(240)));
  plan.max_pairs = std::max(plan.pairs, std::min(no.max_pairs, fit(420)));
  return plan;
}

// --list: one line per study in the ledger.
int list_studies(ledger::Ledger& ledger) {
  auto ss = ledger.list_studies();
  if (!ss.ok()) return fail(ss.status());
  std::printf("%-4s %-24s %-8s %-9s %-6s %-7s %-8s %s\n", "id", "created", "adapter", "strategy", "scn",
              "trials", "best", "name");
  for (const auto& s : *ss) {
    auto st = tune::load_study(ledger, s.id);
    std::string best = "-";
    size_t n = 0;
    if (st.ok()) {
      n = st->trials.size();
      if (auto b = st->best()) best = fmtd("%.4g", *st->trials[*b].obs.objective);
    }
    std::printf("%-4lld %-24s %-8s %-9s %-6s %-7zu %-8s %s\n", (long long)s.id, s.created_at.c_str(),
                s.adapter.c_str(), s.strategy.c_str(), (s.scenario + "/" + s.size_class).c_str(), n,
                best.c_str(), s.name.c_str());
  }
  return kExitOk;
}

// A new study from the flags; says how to resume it.
// The tensor-parallel sizes a trial's cards allow for plumb's engine on CUDA: every size up to
// --gpus-per-trial that splits the space's model (its KV heads and inner width; the shipped model
// unless the space fixes `model` or `model_config`). Empty when the space is not plumb on CUDA, a
// trial has one card, or the model's config cannot be read (the trials then say why).
std::vector<int64_t> tensor_parallel_sizes(const TuneArgs& a) {
  if (a.exec.gpus_per_trial <= 1) return {};
  auto sp = tune::resolve_space(a.study.space);
  if (!sp.ok() || sp->adapter != "plumb") return {};
  auto text = [&](const char* k) -> std::string {
    auto it = sp->fixed.find(k);
    const std::string* v = it == sp->fixed.end() ? nullptr : std::get_if<std::string>(&it->second);
    return v ? *v : "";
  };
  if (!text("device").starts_with("cuda")) return {};
  Result<std::string> path = not_found("");
  if (!text("model").empty()) {
    path = text("model") + "/config.json";
  } else if (!text("model_config").empty()) {
    path = engine::resolve_model_config(text("model_config"));
  } else if (auto dir = engine::shipped_model_dir(); dir.ok()) {
    path = *dir + "/config.json";
  }
  if (!path.ok()) return {};
  auto c = engine::load_model_config(*path);
  if (!c.ok()) return {};
  std::vector<int64_t> sizes;
  for (int32_t n = 1; n <= a.exec.gpus_per_trial; ++n)
    if (engine::check_tensor_parallel(*c, n).ok()) sizes.push_back(n);
  if (sizes.size() < 2) return {};
  std::string list;
  for (int64_t n : sizes) list += (list.empty() ? "" : ", ") + std::to_string(n);
  std::fprintf(stderr,
               "tensor_parallel_size searched over %s (%d cards per trial; the sizes that split %s)\n",
               list.c_str(), a.exec.gpus_per_trial, path->c_str());
  return sizes;
}

Result<int64_t> create_study(ledger::Ledger& ledger, TuneArgs& a) {
  if (!a.proposer.empty()) {
    a.study.strategy_options.proposer_argv = {"/bin/sh", "-c", a.proposer};
    if (a.study.strategy == "bayes" && a.study.strategy_options.proposer_argv.size())
      a.study.strategy = "external";
  }
  a.study.strategy_options.proposer_timeout = std::chrono::milliseconds(int64_t(a.proposer_timeout_s * 1000));
  a.study.revalidate = !a.no_revalidate;
  a.study.naive = a.naive;
  a.study.gates = !a.no_gates;
  a.study.pairs = a.pairs;
  a.study.tensor_parallel_sizes = tensor_parallel_sizes(a);
  PLUMB_ASSIGN_OR_RETURN(int64_t id, tune::create_study(ledger, a.study));
  std::fprintf(
      stderr,
      "study %lld created in %s (resume after an interruption: plumb tune --resume %lld --ledger %s)\n",
      (long long)id, a.ledger_path.c_str(), (long long)id, a.ledger_path.c_str());
  return id;
}

// The confirmation of the search's top configurations (tune::confirm_best), when a re-validation
// follows and the trials ran in this process.
int confirm(ledger::Ledger& ledger, int64_t id, const TuneArgs& a, const tune::RunContext& ctx) {
  auto st = tune::load_study(ledger, id);
  if (!st.ok()) return fail(st.status());
  if (a.confirm_top <= 0 || !followup_settings(a, st->options, /*say=*/false).revalidate) return kExitOk;
  if (ctx.executor) {
    std::fprintf(stderr,
                 "confirmation: skipped (trials ran through --executor; it runs in this process only)\n");
    return kExitOk;
  }
  auto r = tune::confirm_best(ledger, id, ctx, a.confirm_top, /*repeats=*/2);
  if (!r.ok()) {
    std::cerr << "plumb tune: confirmation of study " << id << " stopped: " << r.status().to_string()
              << "\n  continue with: plumb tune --resume " << id << "\n";
    return exit_for(r.status()) == kExitUsage ? kExitError : exit_for(r.status());
  }
  return kExitOk;
}

// The search: trials until the budget is spent; a stop keeps the finished trials.
int run_search(ledger::Ledger& ledger, int64_t id, const TuneArgs& a, const tune::RunContext& ctx) {
  auto r = tune::run_study(ledger, id, ctx);
  if (!r.ok() && executor::held_by_another(r.status())) {
    std::cerr << "plumb tune: study " << id << " not run: " << r.status().message() << "\n";
    return kExitError;
  }
  if (!r.ok()) {
    std::cerr << "plumb tune: study " << id << " stopped: " << r.status().to_string()
              << "\n  finished trials are kept; continue with: plumb tune --resume " << id << " --ledger "
              << ledger::redact_url(a.ledger_path) << "\n";
    return exit_for(r.status()) == kExitUsage ? kExitError : exit_for(r.status());
  }
  std::fprintf(stderr, "search finished: %lld trials (%lld this run), stopped by %s\n",
               (long long)r->trials_total, (long long)r->trials_run, r->stop_reason.c_str());
  return kExitOk;
}

// The winner re-validated against the baselines, with the pre-flight's pair count when it asks for
// more and --pairs was not given; nothing when the re-validation failed (said on stderr).
std::optional<tune::Revalidation> revalidate_winner(ledger::Ledger& ledger, int64_t id, const TuneArgs& a,
                                                    const tune::RunContext& ctx,
                                                    const tune::StudyOptions& after, const PairsPlan& plan) {
  tune::RevalidateOptions ro;
  ro.pairs = after.pairs;
  const bool pairs_given = a.pairs_opt && a.pairs_opt->count() > 0;
  if (!pairs_given && plan.pairs > ro.pairs) {
    std::fprintf(stderr,
                 "re-validation: %d pairs per comparison instead of %d (sized by the pre-flight CV)\n",
                 plan.pairs, ro.pairs);
    ro.pairs = plan.pairs;
  }
  if (!pairs_given && plan.max_pairs > ro.pairs) {
    ro.max_pairs = plan.max_pairs;
    std::fprintf(stderr,
                 "re-validation: up to %d pairs by the registered sizing rule, while the CI is wider than "
                 "+-%.1f%% or an arm's CV over %.1f%%\n",
                 ro.max_pairs, 100 * protocol::sizing_half_width({ro.min_effect, ro.delta, ro.pairs}),
                 100 * protocol::kExtendCvFraction * protocol::kCvCap);
  }
  ro.against_naive = after.naive;
  ro.gates = after.gates;
  auto r = tune::revalidate(ledger, id, ctx, ro);
  if (!r.ok()) {
    std::cerr << "plumb tune: re-validation failed: " << r.status().to_string() << "\n";
    return std::nullopt;
  }
  return std::move(*r);
}

// The report on stdout, with --json and --html files.
int write_reports(ledger::Ledger& ledger, const TuneArgs& a, const tune::StudyState& st,
                  const tune::Revalidation* rv) {
  std::fputs(tune::report_text(st, rv).c_str(), stdout);
  // Where the re-validation's engine and client ran (launch/placement.h), from its stored runs.
  std::string placement;
  if (rv)
    for (const auto& c : rv->comparisons)
      if (c.readout && placement.empty()) placement = c.readout->placement;
  if (!placement.empty()) std::printf("placement: %s\n", placement.c_str());
  std::fflush(stdout);  // the report before the "wrote FILE" lines on stderr, also when both are one file
  if (!a.json_path.empty()) {
    json::object j = tune::report_json(st, rv);
    // The ledger's chain head: two people compare the history behind this report by one value.
    auto head = ledger.chain_head();
    if (!head.ok()) return fail(head.status());
    j["ledger"] = json::object{{"path", a.ledger_path}, {"chain_head", *head}};
    if (!placement.empty()) j["placement"] = placement;
    auto s = write_file_atomic(a.json_path, json::dump_pretty(j) + "\n");
    if (!s.ok()) return fail(s);
    std::fprintf(stderr, "wrote %s\n", a.json_path.c_str());
  }
  if (!a.html_path.empty()) {
    auto s = write_html(a.html_path, st, rv);
    if (!s.ok()) return fail(s);
    std::fprintf(stderr, "wrote %s\n", a.html_path.c_str());
  }
  return kExitOk;
}

// Where and how trials run; a resume's new --trials / --time-budget.
tune::RunContext run_context(const TuneArgs& a) {
  tune::RunContext ctx;
  ctx.plumb_binary = self_exe();
  ctx.work_dir = a.work_dir;
  if (!a.work_dir.empty()) std::filesystem::create_directories(a.work_dir);
  if (!a.quiet) ctx.progress = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  if (a.resume > 0) {
    // A resume may spend a new budget: --trials / --time-budget given now replace the stored ones.
    if (a.trials_opt && a.trials_opt->count() > 0) ctx.trials_override = a.study.trials;
    if (a.budget_opt && a.budget_opt->count() > 0) ctx.time_budget_override = a.study.time_budget_s;
  }
  return ctx;
}

// --run-trial SPEC: measure one trial job's proposal here and record it in the shared ledger.
int run_trial_job(const TuneArgs& a) {
  auto spec = json::parse_file(a.run_trial);
  if (!spec.ok()) return fail(spec.status());
  if (!spec->is_object()) return fail(invalid_argument(a.run_trial + ": a trial job spec is a JSON object"));
  const auto& o = spec->as_object();
  auto url = json::string_at(o, "ledger");
  auto study = json::number_at(o, "study_id");
  if (!url || !study) return fail(invalid_argument(a.run_trial + ": the spec has no ledger or study_id"));
  auto lr = ledger::Ledger::open(*url);
  if (!lr.ok()) return fail(lr.status());
  auto st = tune::load_study(**lr, int64_t(*study));
  if (!st.ok()) return fail(st.status());
  auto job = tune::TrialJob::from_json(st->space, o);
  if (!job.ok()) return fail(job.status().with_context(a.run_trial));
  tune::RunContext ctx;
  ctx.plumb_binary = self_exe();
  ctx.work_dir = a.work_dir;
  ctx.progress = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  auto row = tune::run_trial_job(**lr, *job, ctx);
  if (!row.ok()) return fail(row.status().with_context("trial job " + job->key));
  std::fprintf(stderr, "trial job %s recorded as trial %lld of study %lld (%s)\n", job->key.c_str(),
               (long long)row->idx + 1, (long long)job->study_id, row->status.c_str());
  return kExitOk;
}

// Trials through an executor when the flags ask for one (ctx.executor set, exe owning it); with
// Slurm the pre-flight is skipped: it would measure this machine, not the nodes.
Status use_executor(TuneArgs& a, tune::RunContext& ctx, std::unique_ptr<executor::Executor>& exe) {
  if (a.max_parallel < 1) return invalid_argument("--max-parallel-trials must be >= 1");
  PLUMB_ASSIGN_OR_RETURN(ctx.gpu_slots, gpu_slots(a.exec));
  if (a.exec.kind == "local" && a.max_parallel == 1 && ctx.gpu_slots.empty())
    return Status::Ok();  // in this process, as always
  if (!ctx.gpu_slots.empty()) {
    // One trial per slot unless --max-parallel-trials caps it lower. The controller's own
    // measurements (pre-flight, re-validation) run on the first slot's cards.
    const bool capped = a.max_parallel_opt && a.max_parallel_opt->count() > 0;
    if (!capped) a.max_parallel = int(ctx.gpu_slots.size());
    ::setenv("CUDA_VISIBLE_DEVICES", ctx.gpu_slots[0].visible_devices().c_str(), 1);
  }
  PLUMB_ASSIGN_OR_RETURN(exe, make_executor(a.exec));
  ctx.executor = exe.get();
  ctx.ledger_url = ledger_for_jobs(a.ledger_path);
  ctx.work_dir = std::filesystem::absolute(a.work_dir.empty() ? "." : a.work_dir).lexically_normal().string();
  ctx.max_parallel_trials = a.max_parallel;
  ctx.max_job_retries = a.exec.max_job_retries;
  ctx.poll_interval = std::chrono::milliseconds(int64_t(std::max(0.05, a.exec.poll_s) * 1000));
  if (a.exec.kind == "slurm" && !a.no_preflight) {
    std::fprintf(stderr,
                 "pre-flight skipped: it would measure this machine, not the nodes the trials run on\n");
    a.no_preflight = true;
  }
  return Status::Ok();
}

int run_tune(TuneArgs& a) {
  if (!a.run_trial.empty()) return run_trial_job(a);
  if (!a.print_space.empty()) {
    auto t = tune::builtin_space_text(a.print_space);
    if (!t.ok()) return fail(t.status());
    std::fputs(t->c_str(), stdout);
    return kExitOk;
  }
  auto lr = ledger::Ledger::open(a.ledger_path);
  if (!lr.ok()) return fail(lr.status());
  auto& ledger = **lr;
  if (a.list) return list_studies(ledger);
  if (a.replay > 0) return run_replay(ledger, a);
  tune::RunContext ctx = run_context(a);
  std::unique_ptr<executor::Executor> exe;
  if (auto st = use_executor(a, ctx, exe); !st.ok()) return fail(st);
  int64_t id = a.resume > 0 ? a.resume : a.report_only;
  if (id == 0) {
    auto created = create_study(ledger, a);
    if (!created.ok()) return fail(created.status());
    id = *created;
  }
  PairsPlan plan;
  if (a.report_only == 0 && !a.no_preflight) {
    auto pf = preflight(ledger, id, a, ctx);
    if (!pf.ok()) return fail(pf.status());
    if (pf->stop) return kExitFailed;
    plan = *pf;
  }
  if (a.report_only == 0) {
    if (int rc = run_search(ledger, id, a, ctx); rc != kExitOk) return rc;
    if (int rc = confirm(ledger, id, a, ctx); rc != kExitOk) return rc;
  }
  auto st = tune::load_study(ledger, id);
  if (!st.ok()) return fail(st.status());
  std::optional<tune::Revalidation> rv;
  tune::StudyOptions after = a.report_only == 0 ? followup_settings(a, st->options) : st->options;
  if (after.revalidate && a.report_only == 0 && st->best())
    rv = revalidate_winner(ledger, id, a, ctx, after, plan);
  if (int rc = write_reports(ledger, a, *st, rv ? &*rv : nullptr); rc != kExitOk) return rc;
  // Exit 1 when there is no winner, or when the winner fails a gate (it then scores as the baseline).
  if (!st->best()) return kExitFailed;
  if (rv && rv->gates && !rv->gates->passed()) return kExitFailed;
  return kExitOk;
}

// Where trials run: the shared executor flags (docs/cluster.md), parallelism, and the trial job's
// hidden entry point.
void add_tune_executor_flags(CLI::App* c, TuneArgs& a) {
  add_executor_flags(c, a.exec, "trial");
  a.max_parallel_opt =
      c->add_option(
           "--max-parallel-trials", a.max_parallel,
           "trial jobs in flight at once (with --executor local and more than 1: child processes; with "
           "--gpus: one per slot unless this caps it lower)")
          ->capture_default_str()
          ->group("Executor (where the work runs; docs/cluster.md)");
  // The node's half of a trial job (written by the controller; not for people).
  c->add_option("--run-trial", a.run_trial, "run one trial job from its spec file")->group("");
}

void setup_tune(CLI::App& root) {
  auto a = std::make_shared<TuneArgs>();
  a->study.time_budget_s = 150;
  auto* c = root.add_subcommand(
      "tune",
      "Search an engine's configurations on a protocol scenario, re-validate the best against the honest "
      "baselines, report");
  c->footer(
      "With no arguments: tunes plumb's own engine (shipped model) on scenario D (small) with the Bayesian\n"
      "strategy for about 150 s of trials, then re-validates the best configuration against the `default`\n"
      "preset (5 pre-registered pairs, held-out eval seeds; --naive adds the `naive` preset) and runs both\n"
      "gates: about 5 minutes on an idle 2-core machine, longer on a loaded one. Every trial is a fresh "
      "launch, measured on the dev seed; crashes,\n"
      "start-up failures, timeouts and invalid runs are recorded as infeasible. Studies live in the ledger:\n"
      "an interrupted study continues with --resume ID, losing no finished trial.\n\n"
      "Examples:\n"
      "  plumb tune\n"
      "  plumb tune --strategy grid --space my_space.toml --trials 48 --json tune.json --html tune.html\n"
      "  plumb tune --strategy external --proposer 'python3 tools/proposers/example_proposer.py' --trials "
      "10\n"
      "  plumb tune --resume 3            plumb tune --list            plumb tune --print-space plumb\n"
      "  plumb tune --gpus 0,1,2,3,4,5,6,7 --gpus-per-trial 2 --space vllm   (4 trials at once, "
      "docs/cluster.md)\n"
      "  plumb tune --executor slurm --slurm-config cluster.toml --max-parallel-trials 8 \\\n"
      "             --ledger postgresql://plumb@db/plumb --work-dir /shared/study   (docs/cluster.md)\n"
      "Search spaces, strategies and the proposer protocol: docs/tuning.md");
  c->add_option("--space", a->study.space,
                "built-in space (plumb, plumb-cuda, vllm, sglang, llamacpp) or a TOML file")
      ->capture_default_str();
  c->add_option("--strategy", a->study.strategy, "grid | random | bayes (TPE) | halving | external")
      ->capture_default_str();
  c->add_option("--seed", a->study.strategy_seed, "strategy seed")->capture_default_str();
  c->add_option("--scenario", a->study.scenario, "protocol scenario A|B|C|D")->capture_default_str();
  c->add_option("--size", a->study.size, "size class small|gpu")->capture_default_str();
  c->add_option("--dev-seed", a->study.dev_seed, "seed trials are measured on")->capture_default_str();
  c->add_option("--eval-seed", a->study.eval_seed, "held-out seed of the winner's re-validation")
      ->capture_default_str();
  a->trials_opt =
      c->add_option("--trials", a->study.trials, "trial budget (-1 = none); with --resume: a new total")
          ->capture_default_str();
  a->budget_opt = c->add_option("--time-budget", a->study.time_budget_s,
                                "seconds of trials (-1 = none); with --resume: a new total")
                      ->capture_default_str();
  c->add_option("--tokenizer", a->study.tokenizer,
                "model folder whose tokenizer.json sizes the prompts (default: the shipped plumb-tiny)");
  c->add_option("--request-timeout", a->study.request_timeout_s, "per-request timeout in a trial (s)")
      ->capture_default_str();
  c->add_option("--trial-timeout", a->study.trial_timeout_s,
                "seconds a trial may take before it is stopped as a timeout (0 = 3x the median trial)")
      ->capture_default_str();
  c->add_option("--name", a->study.name, "study label");
  c->add_option("--startup", a->study.strategy_options.startup, "bayes: random trials before the model")
      ->capture_default_str();
  c->add_option("--screen-configs", a->study.strategy_options.screen_configs,
                "halving: configurations per bracket")
      ->capture_default_str();
  c->add_option("--eta", a->study.strategy_options.eta, "halving: keep the best 1/eta")
      ->capture_default_str();
  c->add_option("--screen-fraction", a->study.screen_fraction,
                "halving: screen workload size (fraction of requests)")
      ->capture_default_str();
  c->add_option(
      "--proposer", a->proposer,
      "external strategy: a shell command that reads the JSON context on stdin and prints a JSON proposal");
  c->add_option("--proposer-timeout", a->proposer_timeout_s, "seconds per proposer call")
      ->capture_default_str();
  c->add_option("--resume", a->resume, "continue study ID (after a kill or to spend a new budget)");
  c->add_option("--report", a->report_only,
                "print (and --json/--html) the report of study ID without running");
  c->add_flag("--list", a->list, "list the studies in the ledger");
  c->add_option(
      "--replay", a->replay,
      "replay --strategy over grid study ID's measured table (no engine; --trials per run, --seeds runs "
      "from --seed)");
  c->add_option("--seeds", a->replay_seeds, "--replay: strategy seeds")->capture_default_str();
  c->add_option("--replay-space", a->replay_space,
                "--replay: a sub-space of the grid (every point measured)");
  c->add_option("--print-space", a->print_space, "print a built-in search space (TOML) and exit");
  a->pairs_opt = c->add_option("--pairs", a->pairs,
                               "pairs of each re-validation comparison (>= 5; stored with the study)")
                     ->capture_default_str();
  c->add_flag("--no-preflight", a->no_preflight,
              "skip the pre-flight noise check (a few runs of the default configuration before the search "
              "that stop the job up front when the machine's cross-run CV is far over the protocol's cap, "
              "and size the re-validation's pairs)");
  c->add_option("--preflight-runs", a->preflight_runs, "runs of the pre-flight noise check (>= 3)")
      ->capture_default_str();
  c->add_option("--confirm", a->confirm_top,
                "after the search, measure the top N configurations twice more each and take the best by "
                "its mean, so that one lucky measurement does not win (0: off; in this process only, not "
                "with --executor)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_option("--preflight-placement", a->placement,
                "auto|off: placement of the pre-flight's runs (launch/placement.h), to see what it changes")
      ->capture_default_str();
  a->no_revalidate_opt =
      c->add_flag("--no-revalidate", a->no_revalidate,
                  "skip the winner's re-validation (stored with the study: a --resume skips it too)");
  a->naive_opt = c->add_flag(
      "--naive", a->naive,
      "also re-validate against the `naive` preset (slow: one naive run of D small takes over 10 minutes "
      "on a loaded 2-core VM)");
  a->no_gates_opt =
      c->add_flag("--no-gates", a->no_gates,
                  "skip the quality and integrity gates (stored with the study: a --resume skips them too)");
  c->add_option("--ledger", a->ledger_path, "results database: a SQLite file or a postgresql:// URL")
      ->capture_default_str();
  c->add_option("--work-dir", a->work_dir, "engine logs and written configs (default: current directory)");
  c->add_option("--json", a->json_path, "write the report as JSON (schema_version)");
  c->add_option("--html", a->html_path, "write the report as one offline HTML page");
  c->add_flag("--quiet", a->quiet, "no live progress on stderr");
  add_tune_executor_flags(c, *a);
  c->callback([a] { set_exit_code(run_tune(*a)); });
}

PLUMB_COMMAND(45, setup_tune);

}  // namespace
}  // namespace plumb::cli
