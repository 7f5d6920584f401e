#include "kernels/accept.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include "compare/compare.h"
#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "engine/cpu/plugin.h"
#include "engine/model_config.h"
#include "engine/scheduler/model_runner.h"
#include "ledger/ledger.h"

namespace plumb::kernels {

using engine::Phase;

namespace {

// One entry of search.json's candidates: taken into p when it passed screening and is the named
// best (or, with no name, scores above p's utility so far).
void consider_candidate(const json::value& c, const std::string& named, Patch& p) {
  if (!c.is_object()) return;
  const auto& co = c.as_object();
  auto rit = co.find("result");
  if (rit == co.end() || !rit->value().is_object()) return;
  const auto& res = rit->value().as_object();
  auto verdict = json::opt_string(res, "verdict");
  auto u = json::opt_double(res, "utility");
  auto so = json::opt_string(res, "so_path");
  auto name = json::opt_string(co, "name");
  if (!verdict.ok() || !u.ok() || !so.ok() || !name.ok() || verdict->value_or("") != "pass") return;
  double score = u->value_or(0);
  if (auto s = json::opt_double(co, "score"); s.ok() && s->has_value()) score = **s;
  if (named.empty() ? score > p.utility : name->value_or("") == named) {
    p.utility = score;
    p.so_path = so->value_or("");
    p.name = name->value_or("");
  }
}

// A CUDA search's best (kernels/cuda/search.h: screened, and under compute-sanitizer where asked),
// its cubin checked against the hash the search recorded.
Result<Patch> best_cuda_patch(const std::string& dir, const json::object& o, double min_utility,
                              Phase phase) {
  Patch p;
  p.search_dir = dir;
  p.phase = phase;
  PLUMB_ASSIGN_OR_RETURN(auto op, json::opt_string(o, "op"));
  if (!op || (*op != "swiglu" && *op != "rmsnorm_residual"))
    return invalid_argument(
        dir + "/search.json: missing or unknown op (a CUDA search has swiglu or rmsnorm_residual)");
  p.cuda_op = *op;
  p.op = *op == "swiglu" ? engine::Op::kSwiglu : engine::Op::kRmsNorm;
  p.module = *op;
  auto b = o.find("best");
  if (b == o.end() || !b->value().is_object())
    return not_found(dir + ": the search found no passing candidate");
  const json::object& best = b->value().as_object();
  auto str = [&](const char* key) -> Result<std::string> {
    PLUMB_ASSIGN_OR_RETURN(auto v, json::opt_string(best, key));
    return v.value_or("");
  };
  PLUMB_ASSIGN_OR_RETURN(p.name, str("name"));
  PLUMB_ASSIGN_OR_RETURN(p.cubin_path, str("cubin"));
  PLUMB_ASSIGN_OR_RETURN(p.cubin_sha256, str("cubin_sha256"));
  PLUMB_ASSIGN_OR_RETURN(p.source_sha256, str("source_sha256"));
  PLUMB_ASSIGN_OR_RETURN(p.nvrtc_version, str("nvrtc_version"));
  PLUMB_ASSIGN_OR_RETURN(p.card, str("card"));
  PLUMB_ASSIGN_OR_RETURN(auto u, json::opt_double(best, "utility"));
  p.utility = u.value_or(0);
  if (p.name.empty() || p.cubin_path.empty() || p.cubin_sha256.empty())
    return invalid_argument(dir + "/search.json: the best candidate has no name, cubin or cubin_sha256");
  if (p.utility <= min_utility) {
    return not_found(
        fmt::format("{}: the best screened candidate {} has u = {:.3f} <= {:.3f}: nothing to accept", dir,
                    p.name, p.utility, min_utility));
  }
  std::error_code ec;
  p.cubin_path = std::filesystem::absolute(p.cubin_path, ec).string();
  PLUMB_ASSIGN_OR_RETURN(std::string h, sha256_file(p.cubin_path));
  if (h != p.cubin_sha256) {
    return failed_precondition(p.cubin_path + " is not the cubin its search screened (sha256 " +
                               h.substr(0, 12) + ", recorded " + p.cubin_sha256.substr(0, 12) +
                               "): search again");
  }
  return p;
}

}  // namespace

Result<Patch> best_patch(const std::string& dir, double min_utility, Phase cuda_phase) {
  auto v = json::parse_file(dir + "/search.json");
  if (!v.ok()) return v.status().with_context(dir + " (run `plumb kernels search --out " + dir + "` first)");
  if (!v->is_object()) return invalid_argument(dir + "/search.json must be an object");
  const json::object& o = v->as_object();
  if (auto dev = json::opt_string(o, "device"); dev.ok() && dev->value_or("cpu") == "cuda")
    return best_cuda_patch(dir, o, min_utility, cuda_phase);
  Patch p;
  p.search_dir = dir;
  PLUMB_ASSIGN_OR_RETURN(auto op, json::opt_string(o, "op"));
  PLUMB_ASSIGN_OR_RETURN(auto phase, json::opt_string(o, "phase"));
  PLUMB_ASSIGN_OR_RETURN(auto module, json::opt_string(o, "module"));
  if (!op || !phase) return invalid_argument(dir + "/search.json: missing op or phase");
  PLUMB_ASSIGN_OR_RETURN(p.op, engine::op_from_name(*op));
  p.phase = *phase == "prefill" ? Phase::kPrefill : Phase::kDecode;
  p.module = module.value_or("");
  // The search names its best (chosen on the confirmed, lower u: kernels/search.h); a file without
  // one (hand-written, or older) gives the passing candidate with the highest u.
  std::string named;
  if (auto b = o.find("best"); b != o.end() && b->value().is_string())
    named = std::string(b->value().as_string());
  auto it = o.find("candidates");
  if (it == o.end() || !it->value().is_array())
    return invalid_argument(dir + "/search.json: missing candidates");
  for (const auto& c : it->value().as_array()) consider_candidate(c, named, p);
  if (p.name.empty()) return not_found(dir + ": no candidate passed screening");
  if (p.utility <= min_utility) {
    return not_found(
        fmt::format("{}: the best screened candidate {} has u = {:.3f} <= {:.3f}: nothing to accept", dir,
                    p.name, p.utility, min_utility));
  }
  std::error_code ec;
  p.so_path = std::filesystem::absolute(p.so_path, ec).string();
  return p;
}

engine::KernelSelection patched_selection(const engine::KernelSelection& base,
                                          const std::vector<Patch>& patches) {
  engine::KernelSelection s = base;
  for (const Patch& p : patches) {
    if (p.cuda()) {
      (p.phase == Phase::kPrefill ? s.cuda_prefill : s.cuda_decode)[p.cuda_op] = p.cubin_path;
      continue;
    }
    if (std::find(s.plugins.begin(), s.plugins.end(), p.so_path) == s.plugins.end())
      s.plugins.push_back(p.so_path);
    (p.phase == Phase::kPrefill ? s.prefill : s.decode)[p.op] = p.name;
  }
  return s;
}

namespace {

std::string toml_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

Status write_arm(const std::string& path, const std::string& model_dir, const std::string& kernels_file,
                 int threads, const std::string& device) {
  std::string t =
      "# written by plumb kernels accept: the two arms differ only in `kernels`\nadapter = "
      "\"plumb\"\n[params]\n";
  t += "model = " + toml_quote(model_dir) + "\n";
  if (device != "cpu") t += "device = " + toml_quote(device) + "\n";
  t += "kernels = " + toml_quote(kernels_file) + "\n";
  if (threads > 0) t += "threads = " + std::to_string(threads) + "\n";
  return write_file_atomic(path, t);
}

}  // namespace

std::vector<AcceptGroup> accept_groups(const std::vector<Patch>& patches, bool joint,
                                       const std::string& scenario, const std::string& default_scenario) {
  std::map<Phase, std::vector<Patch>> by_phase;
  for (const Patch& p : patches) by_phase[p.phase].push_back(p);
  auto default_for = [&](Phase ph) -> std::string {
    if (!default_scenario.empty()) return default_scenario;
    return ph == Phase::kDecode ? "B" : "A";
  };
  std::vector<AcceptGroup> plan;
  if (patches.empty()) return plan;
  if (joint) {
    // One phase: that phase's scenario; both phases: D, the scenario that loads both.
    const std::string sc = by_phase.size() > 1 ? std::string("D") : default_for(by_phase.begin()->first);
    plan.push_back({"joint", scenario.empty() ? sc : scenario, patches});
    return plan;
  }
  for (auto& [phase, group] : by_phase)
    plan.push_back({engine::phase_name(phase), scenario.empty() ? default_for(phase) : scenario, group});
  return plan;
}

namespace {

using Say = std::function<void(const std::string&)>;

// The base kernel selection: --base, else auto everywhere.
Result<engine::KernelSelection> base_selection(const AcceptOptions& o) {
  engine::KernelSelection base;
  if (!o.base_kernels.empty()) {
    PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(o.base_kernels));
    auto sel = engine::KernelSelection::parse_json(text);
    if (!sel.ok()) return sel.status().with_context(o.base_kernels);
    base = *sel;
  }
  return base;
}

// The best screened candidate of each search folder (a folder without one is skipped and said);
// each certificate must hold now (the library may have changed since screening).
Result<std::vector<Patch>> screened_patches(const AcceptOptions& o, const Say& say) {
  std::vector<Patch> all;
  const bool cuda = o.device != "cpu";
  for (const auto& d : o.search_dirs) {
    auto p = best_patch(d, o.min_utility, o.cuda_phase == "prefill" ? Phase::kPrefill : Phase::kDecode);
    if (!p.ok()) {
      say("skipping " + d + ": " + p.status().message());
      continue;
    }
    if (p->cuda() != cuda) {
      return invalid_argument(d + " is a " + (p->cuda() ? "CUDA" : "CPU") + " search; accept --device " +
                              o.device + " takes " + (cuda ? "`plumb kernels search --device cuda`" : "CPU") +
                              " searches");
    }
    if (!cuda) PLUMB_RETURN_IF_ERROR(engine::check_certificate(p->so_path).status());
    all.push_back(*p);
    if (cuda && o.cuda_phase == "both") {  // the same cubin in the other phase too
      all.push_back(*p);
      all.back().phase = Phase::kPrefill;
    }
  }
  if (all.empty()) return not_found("no screened candidate to accept (every search folder was skipped)");
  return all;
}

// Content-addressed file names: the arm configs the ledger stores name the kernel files by the
// SHA-256 of the selection and of every plugin library, so a stored registration identifies the
// exact patch it measured.
Result<std::string> content_id(const engine::KernelSelection& sel) {
  std::string text = sel.to_json();
  for (const auto& so : sel.plugins) {
    PLUMB_ASSIGN_OR_RETURN(std::string h, sha256_file(so));
    text += "\n" + h;
  }
  for (const auto* m : {&sel.cuda_prefill, &sel.cuda_decode}) {
    for (const auto& [op, cubin] : *m) {
      PLUMB_ASSIGN_OR_RETURN(std::string h, sha256_file(cubin));
      text += "\n" + h;
    }
  }
  return sha256_hex(text).substr(0, 16);
}

// Writes both arms' kernel files and engine configs at `stem` (they differ only in `kernels`).
Status write_arms(const std::string& stem, const engine::KernelSelection& base,
                  const engine::KernelSelection& cand, const std::string& model, int threads,
                  const std::string& device) {
  PLUMB_ASSIGN_OR_RETURN(std::string base_id, content_id(base));
  PLUMB_ASSIGN_OR_RETURN(std::string cand_id, content_id(cand));
  const std::string base_file = stem + ".kernels-" + base_id + ".json";
  const std::string cand_file = stem + ".kernels-" + cand_id + ".json";
  PLUMB_RETURN_IF_ERROR(write_file_atomic(base_file, base.to_json() + "\n"));
  PLUMB_RETURN_IF_ERROR(write_file_atomic(cand_file, cand.to_json() + "\n"));
  PLUMB_RETURN_IF_ERROR(write_arm(stem + ".arm-a.toml", model, base_file, threads, device));
  return write_arm(stem + ".arm-b.toml", model, cand_file, threads, device);
}

// The readout's ratio, its CI, ℓ = 1/ratio and the verdict into out; accepted on `better`.
void take_readout(const compare::ReadoutResult& rd, AcceptOutcome& out) {
  out.readout_id = rd.readout_id;
  out.ratio = rd.readout.ratio;
  out.ratio_lo = rd.readout.lo;
  out.ratio_hi = rd.readout.hi;
  out.ell = out.ratio > 0 ? 1.0 / out.ratio : 0;
  out.ell_lo = out.ratio_hi > 0 ? 1.0 / out.ratio_hi : 0;
  out.ell_hi = out.ratio_lo > 0 ? 1.0 / out.ratio_lo : 0;
  out.verdict = std::string(protocol::verdict_name(rd.readout.verdict));
  out.readout_text = compare::format_readout(rd);
  out.accepted = rd.readout.verdict == protocol::Verdict::kBetter;
}

// One group's paired comparison, base against base + its patches: registered, run, read out.
Result<AcceptOutcome> compare_group(ledger::Ledger& ledger, const AcceptGroup& g,
                                    const engine::KernelSelection& base, const std::string& work,
                                    const std::string& model, const AcceptOptions& o, const Say& say) {
  const std::vector<Patch>& patches = g.patches;
  AcceptOutcome out;
  out.phase = g.label;
  out.patches = patches;
  out.scenario = g.scenario;
  const std::string stem = work + "/" + out.phase;
  PLUMB_RETURN_IF_ERROR(write_arms(stem, base, patched_selection(base, patches), model, o.threads, o.device));
  compare::RegisterOptions ro;
  ro.config_a = stem + ".arm-a.toml";
  ro.config_b = stem + ".arm-b.toml";
  ro.scenario = out.scenario;
  ro.size = o.size;
  ro.min_effect = o.min_effect;
  ro.delta = o.delta;
  ro.pairs = o.pairs;
  ro.seed = o.seed;
  PLUMB_ASSIGN_OR_RETURN(out.registration_id, compare::register_comparison(ledger, ro));
  std::string names;
  for (const auto& p : patches)
    names += (names.empty() ? "" : ", ") + p.name + fmt::format(" (u={:.2f})", p.utility);
  say(fmt::format("{}: registered comparison {} on scenario {} ({}), {} pairs: base vs base + {}", out.phase,
                  out.registration_id, out.scenario, o.size, o.pairs, names));
  compare::RunOptions run;
  run.plumb_binary = o.plumb_binary;
  run.work_dir = work;
  run.progress = o.progress;
  PLUMB_ASSIGN_OR_RETURN(auto summary, compare::run_comparison(ledger, out.registration_id, run));
  say(fmt::format("{}: {} runs recorded ({} invalid)", out.phase, summary.runs_recorded,
                  summary.runs_invalid));
  auto rd = compare::readout_comparison(ledger, out.registration_id, true);
  if (!rd.ok()) {
    out.verdict = "refused";
    out.readout_text = rd.status().message();
    return out;
  }
  take_readout(*rd, out);
  return out;
}

}  // namespace

Result<std::vector<AcceptOutcome>> run_accept(const AcceptOptions& o) {
  Say say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  if (o.search_dirs.empty())
    return invalid_argument("accept needs at least one search folder (--search DIR)");
  if (o.ledger_path.empty()) return invalid_argument("accept needs a ledger (--ledger FILE)");
  if (o.kernels_out.empty())
    return invalid_argument("accept needs --out FILE for the accepted kernel configuration");
  PLUMB_RETURN_IF_ERROR(scheduler::parse_device(o.device).status().with_context("accept --device"));
  if (o.cuda_phase != "decode" && o.cuda_phase != "prefill" && o.cuda_phase != "both")
    return invalid_argument("accept --phase " + o.cuda_phase + ": expected decode, prefill or both");
  PLUMB_ASSIGN_OR_RETURN(engine::KernelSelection base, base_selection(o));
  PLUMB_ASSIGN_OR_RETURN(std::vector<Patch> all, screened_patches(o, say));
  const std::vector<AcceptGroup> plan = accept_groups(all, o.joint, o.scenario, o.device == "cpu" ? "" : "D");
  std::error_code ec;
  const std::string work =
      std::filesystem::absolute(o.work_dir.empty() ? "kernels-accept" : o.work_dir, ec).string();
  std::filesystem::create_directories(work, ec);
  std::string model = o.model_dir;
  if (model.empty()) {
    PLUMB_ASSIGN_OR_RETURN(model, engine::shipped_model_dir());
  }
  model = std::filesystem::absolute(model, ec).string();
  PLUMB_ASSIGN_OR_RETURN(auto ledger, ledger::Ledger::open(o.ledger_path));
  std::vector<AcceptOutcome> outcomes;
  engine::KernelSelection accepted = base;
  for (const AcceptGroup& g : plan) {
    PLUMB_ASSIGN_OR_RETURN(AcceptOutcome out, compare_group(*ledger, g, base, work, model, o, say));
    if (out.accepted) accepted = patched_selection(accepted, g.patches);
    outcomes.push_back(std::move(out));
  }
  bool any = false;
  for (const auto& x : outcomes) any |= x.accepted;
  if (any) PLUMB_RETURN_IF_ERROR(write_file_atomic(o.kernels_out, accepted.to_json() + "\n"));
  return outcomes;
}

}  // namespace plumb::kernels
