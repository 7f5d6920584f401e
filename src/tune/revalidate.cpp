// Re-validation of a study's best configuration (revalidate): its engine config files, paired
// comparisons on held-out seeds against the default (and naive) configuration, and the gates.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compare/compare.h"
#include "core/shipped.h"
#include "gates/checks.h"
#include "gates/multiple_choice.h"
#include "launch/adapter.h"
#include "launch/launcher.h"
#include "launch/port.h"
#include "tune/study.h"
#include "tune/study_internal.h"

namespace plumb::tune {

using launch::ParamValue;

std::string engine_config_toml(const SearchSpace& sp, const Config& c) {
  auto val = [](const ParamValue& v) -> std::string {
    if (auto* s = std::get_if<std::string>(&v)) {
      std::string q = "\"";
      for (char ch : *s) {
        if (ch == '"' || ch == '\\') q += '\\';
        q += ch;
      }
      return q + "\"";
    }
    if (auto* a = std::get_if<std::vector<std::string>>(&v)) {
      std::string s = "[";
      for (size_t i = 0; i < a->size(); ++i) s += (i ? ", \"" : "\"") + (*a)[i] + "\"";
      return s + "]";
    }
    if (auto* d = std::get_if<double>(&v)) {
      std::string s = launch::format_value(v);
      if (s.find_first_of(".eE") == std::string::npos) s += ".0";
      (void)d;
      return s;
    }
    return launch::format_value(v);
  };
  std::string s =
      "# written by plumb tune: the best configuration found\nadapter = \"" + sp.adapter + "\"\n[params]\n";
  Config all = sp.fixed;
  for (const auto& [k, v] : c) all[k] = v;
  for (const auto& [k, v] : all) s += k + " = " + val(v) + "\n";
  return s;
}

std::string serve_command(const SearchSpace& sp, const Config& c) {
  if (sp.adapter != "plumb") return "";
  std::string s = "plumb serve";
  Config all = sp.fixed;
  for (const auto& [k, v] : c) all[k] = v;
  for (const auto& [k, v] : all) {
    std::string flag = "--" + k;
    std::replace(flag.begin(), flag.end(), '_', '-');
    s += " " + flag + " " + launch::format_value(v);
  }
  return s;
}

namespace {

using Say = std::function<void(const std::string&)>;

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) return io_error("cannot write " + path);
  return Status::Ok();
}

Result<std::unique_ptr<launch::Engine>> start_engine(const launch::EngineConfig& cfg_in,
                                                     const RunContext& ctx) {
  launch::EngineConfig cfg = cfg_in;
  if (cfg.resolved.name == "plumb" && !cfg.params.count("plumb_binary") && !ctx.plumb_binary.empty())
    cfg.params["plumb_binary"] = ctx.plumb_binary;
  PLUMB_ASSIGN_OR_RETURN(uint16_t port, launch::pick_free_port());
  PLUMB_ASSIGN_OR_RETURN(auto spec, launch::render(cfg.resolved, cfg.params, port));
  launch::LaunchOptions lo;
  lo.work_dir = ctx.work_dir;
  lo.progress = [](const std::string&) {};
  return launch::Engine::start(spec, lo);
}

// Writes the best, default and (plumb adapter, against_naive) naive engine configs beside each other
// in the work directory; returns the default configuration (the gates' reference).
Result<Config> write_configs(const StudyState& st, const Config& best, const RunContext& ctx,
                             const RevalidateOptions& ro, Revalidation& out) {
  std::string dir = ctx.work_dir.empty() ? std::string(".") : ctx.work_dir;
  std::string stem = dir + "/study-" + std::to_string(st.row.id);
  out.best_config_path = stem + "-best.toml";
  PLUMB_RETURN_IF_ERROR(write_text(out.best_config_path, engine_config_toml(st.space, best)));
  out.serve_command = serve_command(st.space, best);
  Config def_cfg, naive_cfg;
  bool plumb_adapter = st.space.adapter == "plumb";
  if (plumb_adapter) {
    def_cfg["preset"] = std::string("default");
    naive_cfg["preset"] = std::string("naive");
  }
  out.default_config_path = stem + "-default.toml";
  PLUMB_RETURN_IF_ERROR(write_text(out.default_config_path, engine_config_toml(st.space, def_cfg)));
  if (plumb_adapter && ro.against_naive) {
    out.naive_config_path = stem + "-naive.toml";
    PLUMB_RETURN_IF_ERROR(write_text(out.naive_config_path, engine_config_toml(st.space, naive_cfg)));
  }
  return def_cfg;
}

// The registered comparison's readout, stored; when the ledger refuses a verdict (e.g. a NOISY arm)
// the computation is kept unstored and the refusal said in co.error.
void read_out(ledger::Ledger& ledger, int64_t rid, ComparisonOutcome& co) {
  auto r = compare::readout_comparison(ledger, rid, /*store=*/true);
  if (!r.ok() && r.status().code() == Code::kFailedPrecondition) {
    auto r2 = compare::readout_comparison(ledger, rid, /*store=*/false);
    if (r2.ok()) co.readout = *r2;
    co.error +=
        (co.error.empty() ? "" : "; ") + std::string("ledger refused the readout: ") + r.status().message();
  } else if (!r.ok()) {
    co.error += (co.error.empty() ? "" : "; ") + r.status().to_string();
  } else {
    co.readout = *r;
  }
}

// The best configuration against one baseline config file: registered, run on seeds derived from
// the eval seed, read out. Failures are kept in the outcome's error.
ComparisonOutcome compare_with(ledger::Ledger& ledger, const StudyState& st, const std::string& name,
                               const std::string& path, const std::string& best_path, const RunContext& ctx,
                               const RevalidateOptions& ro, const Say& say) {
  ComparisonOutcome co;
  co.baseline = name;
  compare::RegisterOptions reg;
  reg.config_a = path;
  reg.config_b = best_path;
  reg.scenario = st.row.scenario;
  reg.size = st.row.size_class;
  reg.pairs = ro.pairs;
  reg.max_pairs = ro.max_pairs;
  reg.seed = uint64_t(st.row.eval_seed);
  reg.min_effect = ro.min_effect;
  reg.delta = ro.delta;
  auto rid = compare::register_comparison(ledger, reg);
  if (!rid.ok()) {
    co.error = rid.status().to_string();
    return co;
  }
  co.registration_id = *rid;
  say("re-validation: best over " + name + ", comparison " + std::to_string(*rid) + ", " +
      std::to_string(ro.pairs) + " pairs" +
      (ro.max_pairs > ro.pairs ? " (up to " + std::to_string(ro.max_pairs) + " by the registered rule)"
                               : "") +
      " on seeds derived from eval seed " + std::to_string(st.row.eval_seed));
  compare::RunOptions run;
  run.plumb_binary = ctx.plumb_binary;
  run.work_dir = ctx.work_dir;
  run.tokenizer = st.options.tokenizer;
  run.request_timeout = std::chrono::seconds(std::max(st.options.request_timeout_s, 60));
  run.progress = [&](const std::string& m) {
    if (m.rfind("pair ", 0) == 0 || m.rfind("  run ", 0) == 0 || m.rfind("another pair", 0) == 0)
      say("  " + m);
  };
  auto rs = compare::run_comparison(ledger, *rid, run);
  if (!rs.ok()) co.error = rs.status().to_string();
  read_out(ledger, *rid, co);
  return co;
}

// The quality gate on the held-out multiple-choice set (the shipped one by core/shipped.h's search
// unless the options name one); "" or what failed.
std::string quality_gate(gates::OpenAiClient& target, gates::OpenAiClient& reference, const StudyState& st,
                         const RevalidateOptions& ro, gates::GateReport& rep) {
  gates::QualityOptions q;
  auto dataset = ro.mc_dataset.empty() ? find_shipped_file(Shipped::kData, "mc_heldout.jsonl")
                                       : Result<std::string>(ro.mc_dataset);
  auto items =
      dataset.ok() ? gates::load_mc_jsonl(*dataset) : Result<std::vector<gates::McItem>>(dataset.status());
  if (!items.ok()) return "quality gate dataset: " + items.status().message();
  q.items = std::move(*items);
  if (ro.quality_items > 0 && size_t(ro.quality_items) < q.items.size())
    q.items.resize(size_t(ro.quality_items));
  q.seed = uint64_t(st.row.eval_seed);
  auto g = gates::run_quality(target, &reference, q);
  if (!g.ok()) return "quality gate: " + g.status().to_string();
  rep.gates.push_back(std::move(*g));
  return "";
}

// The quality and integrity gates with the best configuration as the target and the default as
// the reference; "" or what failed.
std::string run_gates(gates::OpenAiClient& target, gates::OpenAiClient& reference, const StudyState& st,
                      const RunContext& ctx, const RevalidateOptions& ro, gates::GateReport& rep) {
  Status ts = target.resolve_model();
  Status rs = reference.resolve_model();
  if (!ts.ok()) return "target: " + ts.message();
  if (!rs.ok()) return "reference: " + rs.message();
  std::string err = quality_gate(target, reference, st, ro, rep);
  gates::IntegrityOptions io;
  io.seed = uint64_t(st.row.eval_seed);
  if (!ctx.plumb_binary.empty()) {
    io.harness_files = {ctx.plumb_binary};
    io.harness_before = gates::hash_harness(io.harness_files);
  }
  auto g = gates::run_integrity(target, &reference, io);
  if (g.ok())
    rep.gates.push_back(std::move(*g));
  else
    err += (err.empty() ? "" : "; ") + std::string("integrity gate: ") + g.status().to_string();
  return err;
}

// Starts the best and the default configuration side by side and gates the best against it.
Status gate_best(const StudyState& st, const Config& best, const Config& def_cfg, const RunContext& ctx,
                 const RevalidateOptions& ro, Revalidation& out) {
  PLUMB_ASSIGN_OR_RETURN(auto adapter, launch::resolve_adapter(st.space.adapter));
  launch::EngineConfig bc{st.space.adapter, adapter, st.space.fixed},
      dc{st.space.adapter, adapter, st.space.fixed};
  for (const auto& [k, v] : best) bc.params[k] = v;
  for (const auto& [k, v] : def_cfg) dc.params[k] = v;
  auto te = start_engine(bc, ctx);
  auto re = te.ok() ? start_engine(dc, ctx) : Result<std::unique_ptr<launch::Engine>>(te.status());
  if (!te.ok() || !re.ok()) {
    out.gates_error = "could not start the servers: " + (te.ok() ? re.status() : te.status()).to_string();
  } else {
    gates::OpenAiClient target({(*te)->base_url(), ""}), reference({(*re)->base_url(), ""});
    gates::GateReport rep;
    out.gates_error = run_gates(target, reference, st, ctx, ro, rep);
    if (!rep.gates.empty()) out.gates = std::move(rep);
  }
  if (te.ok()) (void)(*te)->stop();
  if (re.ok()) (void)(*re)->stop();
  return Status::Ok();
}

}  // namespace

Result<Revalidation> revalidate(ledger::Ledger& ledger, int64_t id, const RunContext& ctx,
                                const RevalidateOptions& ro) {
  Say say = [&](const std::string& m) {
    if (ctx.progress) ctx.progress(m);
  };
  PLUMB_ASSIGN_OR_RETURN(StudyState st, load_study(ledger, id));
  auto b = st.best();
  if (!b)
    return failed_precondition("study " + std::to_string(id) +
                               " has no feasible trial: nothing to re-validate");
  const Config& best = st.trials[*b].obs.config;
  Revalidation out;
  PLUMB_ASSIGN_OR_RETURN(Config def_cfg, write_configs(st, best, ctx, ro, out));
  std::vector<std::pair<std::string, std::string>> baselines{{"default", out.default_config_path}};
  if (!out.naive_config_path.empty()) baselines.emplace_back("naive", out.naive_config_path);
  for (const auto& [name, path] : baselines)
    out.comparisons.push_back(compare_with(ledger, st, name, path, out.best_config_path, ctx, ro, say));
  if (ro.gates) {
    say("re-validation: quality and integrity gates (target: best, reference: default preset)");
    PLUMB_RETURN_IF_ERROR(gate_best(st, best, def_cfg, ctx, ro, out));
  }
  return out;
}

}  // namespace plumb::tune
