#include "cli/ib_interop.h"

#include <chrono>
#include <cstdio>
#include <set>

#include "core/file.h"
#include "core/random.h"
#include "core/sha256.h"
#include "core/shipped.h"
#include "gates/checks.h"
#include "net/http_client.h"
#include "plumb_build_info.h"
#include "report/inferencebench.h"

namespace plumb::cli {

void IbFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--ib-scenario", scenario_file,
                  "an InferenceBench scenario.json: its lengths, request count, temperature and load "
                  "profiles become the workload (Poisson arrivals seeded by --seed; docs/inferencebench.md)");
  cmd->add_option("--ib-concurrency", concurrency,
                  "with --ib-scenario, a profile without its own concurrency runs at: declared (the "
                  "scenario's top-level concurrency, else 1) | runner (1, as IB's runner does)")
      ->capture_default_str();
  cmd->add_option("--ib-json", json_path,
                  "also write InferenceBench's metrics JSON (profiles.<name>.ttft/itl/tpot in seconds, ...; "
                  "IB's definitions, plumb's own figures under \"plumb\")");
  cmd->add_option(
      "--ib-quality-baseline", quality_baseline,
      "after the run, IB's quality check the plumb way: the target's greedy accuracy on plumb's "
      "multiple-choice set must reach tau x this baseline accuracy (measured on the same set, e.g. "
      "by `plumb gate quality` on the unoptimized server); into quality_check and --json's "
      "\"quality\", exit 1 when it fails. Needs --target");
  cmd->add_option("--ib-quality-tau", quality_tau, "the quality check's tau")->capture_default_str();
  cmd->add_option("--ib-quality-items", quality_items, "questions of the set the quality check asks (0: all)")
      ->capture_default_str();
}

namespace {
std::string short_num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}
}  // namespace

Result<LoadedRequests> load_requests(const std::string& path, const workload::IbRequestDefaults& defaults) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  LoadedRequests r;
  if (!workload::looks_like_ib_requests(text)) {
    auto set = workload::parse_jsonl(text, &r.hashes_computed);
    if (!set.ok()) return set.status().with_context(path);
    r.set = std::move(set).value();
    if (r.hashes_computed > 0)
      r.note = "--requests: " + std::to_string(r.hashes_computed) + " of " +
               std::to_string(r.set.requests.size()) +
               " requests had no \"hash\": computed their content hashes (set " +
               r.set.set_hash.substr(0, 16) + "); --save-requests FILE writes the set with them";
    return r;
  }
  auto ib = workload::parse_ib_requests(text, defaults);
  if (!ib.ok())
    return ib.status().with_context(path + " (read as an InferenceBench request file: no 'hash')");
  r.ib_format = true;
  r.set = std::move(ib->set);
  r.hashes_computed = r.set.requests.size();
  r.meta = std::move(ib->meta);
  r.ib_hashes = ib->ib_hashes;
  r.defaulted = ib->defaulted;
  r.note = "read " + path + " as an InferenceBench request file: " + std::to_string(r.set.requests.size()) +
           " requests; plumb content hashes computed (docs/protocol.md §2), set " +
           r.set.set_hash.substr(0, 16) + "; IB content_hash kept as metadata on " +
           std::to_string(r.ib_hashes) + ", not verified; " + std::to_string(r.defaulted) +
           " lines took a field from the defaults (max_new_tokens " +
           std::to_string(defaults.max_new_tokens) + ", temperature " + short_num(defaults.temperature) +
           ", ignore_eos " + (defaults.ignore_eos ? "true" : "false") + ")";
  return r;
}

namespace {

// IB's scoring of its scenarios (its README): A 1/TTFT p50, B 1/TPOT p50, C the geometric mean of
// the profiles' req/s, D the geometric mean of the three. Another id: C's rule with several profiles,
// D's with one.
protocol::Objective objective_for(const workload::IbScenario& s) {
  if (s.scenario_id == "A") return protocol::Objective::kInvMedianTtft;
  if (s.scenario_id == "B") return protocol::Objective::kInvMedianTpot;
  if (s.scenario_id == "C") return protocol::Objective::kGeomeanReqPerSec;
  if (s.scenario_id == "D") return protocol::Objective::kGeneral;
  return s.profiles.size() > 1 ? protocol::Objective::kGeomeanReqPerSec : protocol::Objective::kGeneral;
}

}  // namespace

json::object request_file_json(const LoadedRequests& lr) {
  if (!lr.ib_format) return {};
  json::array hashes;
  for (size_t i = 0; i < lr.meta.size(); ++i) {
    json::object h;
    h["index"] = int64_t(i);
    h["plumb_hash"] = lr.set.hashes[i];
    if (!lr.meta[i].content_hash.empty()) h["ib_content_hash"] = lr.meta[i].content_hash;
    if (!lr.meta[i].sample_id.empty()) h["sample_id"] = lr.meta[i].sample_id;
    if (lr.meta[i].target_input_token_count >= 0)
      h["target_input_token_count"] = lr.meta[i].target_input_token_count;
    hashes.emplace_back(std::move(h));
  }
  return json::object{
      {"format", "inferencebench"},
      {"hashes", "computed by plumb (docs/protocol.md §2); IB's content_hash kept, not verified"},
      {"lines_with_ib_content_hash", int64_t(lr.ib_hashes)},
      {"lines_defaulted", int64_t(lr.defaulted)},
      {"requests", std::move(hashes)}};
}

namespace {

// The requests of the --requests file (IB's fallbacks from the scenario); warmup reuses its first ones.
Status file_requests(const workload::IbScenario& ib, const std::string& requests_file, int warmup,
                     IbWorkload& w, json::object& info) {
  PLUMB_ASSIGN_OR_RETURN(auto lr, load_requests(requests_file, workload::ib_request_defaults(ib)));
  w.notes.push_back(lr.note);
  if (lr.ib_format) info["request_file"] = request_file_json(lr);
  w.set = std::move(lr.set);
  // Warmup reuses the first requests of the file: it may warm caches for those.
  for (int i = 0; i < warmup && size_t(i) < w.set.requests.size(); ++i)
    w.warmup.push_back(w.set.requests[size_t(i)]);
  return Status::Ok();
}

// Requests drawn from the seed at IB's lengths; warmup drawn from derive_seed(seed, "warmup").
Status drawn_requests(const workload::IbScenario& ib, uint64_t seed, int warmup,
                      const workload::TokenCounter& counter, IbWorkload& w) {
  workload::SyntheticSpec spec = workload::ib_synthetic_spec(ib, seed);
  PLUMB_ASSIGN_OR_RETURN(auto reqs, workload::synthetic_requests(spec, counter));
  PLUMB_ASSIGN_OR_RETURN(w.set, workload::make_request_set(std::move(reqs)));
  if (warmup > 0) {
    workload::SyntheticSpec ws = spec;
    ws.seed = derive_seed(seed, "warmup");
    ws.num_requests = size_t(warmup);
    PLUMB_ASSIGN_OR_RETURN(w.warmup, workload::synthetic_requests(ws, counter));
  }
  w.notes.push_back("InferenceBench scenario " + ib.scenario_id + ": " +
                    std::to_string(w.set.requests.size()) + " requests drawn by plumb from seed " +
                    std::to_string(seed) +
                    " (plumb's synthetic documents at IB's lengths, not IB's LongBench-v2 samples)");
  return Status::Ok();
}

// The scenario as plumb's protocol sees it (size class custom), without its load profiles.
void describe_scenario(const workload::IbScenario& ib, IbWorkload& w) {
  protocol::Scenario& sc = w.scenario;
  sc.id = ib.scenario_id.empty() ? "custom" : ib.scenario_id;
  sc.name = ib.name.empty() ? "InferenceBench scenario" : ib.name;
  sc.size = protocol::SizeClass::kCustom;
  sc.input_len = int(ib.input_len);
  sc.output_len = int(ib.output_len);
  sc.requests = int(w.set.requests.size());
  sc.warmup_requests = int(w.warmup.size());
  sc.temperature = ib.temperature;
  sc.objective = objective_for(ib);
  // As the protocol scenarios: the most failures the 1% error-rate bound allows.
  sc.min_completed = sc.requests - sc.requests / 100;
}

// Profile i of the scenario as a protocol load profile, with the notes on where plumb's run of it
// differs from IB's runner; its entry of the "profiles" info.
json::object add_profile(const workload::IbScenario& ib, size_t i, uint64_t seed, IbWorkload& w) {
  const auto& p = ib.profiles[i];
  const auto& a = w.profiles[i];
  protocol::LoadProfile lp;
  // IB's patterns are burst, poisson and constant (workload/inferencebench.h parses no other).
  lp.kind = protocol::load_kind(p.pattern).value_or(protocol::LoadKind::kBurst);
  lp.concurrency = a.max_concurrency;
  lp.rate_rps = a.rate;
  w.scenario.profiles.push_back(lp);
  w.profile_names.push_back(p.name);
  const int runner = workload::ib_profile_concurrency(ib, i, workload::IbConcurrency::kRunner);
  if (runner != a.max_concurrency)
    w.notes.push_back("profile '" + p.name + "': runs at the declared concurrency " +
                      std::to_string(a.max_concurrency) +
                      "; IB's runner reads only the profile's own and runs it at " + std::to_string(runner) +
                      " (--ib-concurrency runner to do the same)");
  if (p.pattern == workload::ArrivalKind::kPoisson)
    w.notes.push_back("profile '" + p.name + "': Poisson arrivals seeded (seed " + std::to_string(seed) +
                      ", dimension " + a.seed_dimension + "); IB's runner draws them unseeded");
  json::object pj;
  pj["name"] = p.name;
  pj["pattern"] = std::string(workload::arrival_kind_name(p.pattern));
  pj["rate_per_s"] = a.rate;
  pj["concurrency"] = a.max_concurrency;
  pj["ib_runner_concurrency"] = runner;
  pj["arrival_seed_dimension"] = a.seed_dimension;
  return pj;
}

}  // namespace

Result<IbWorkload> ib_workload(const IbFlags& flags, uint64_t seed, const std::string& requests_file,
                               int warmup, const workload::TokenCounter& counter) {
  auto rule = workload::parse_ib_concurrency(flags.concurrency);
  if (!rule.ok()) return rule.status().with_context("--ib-concurrency");
  PLUMB_ASSIGN_OR_RETURN(auto ib, workload::read_ib_scenario(flags.scenario_file));
  IbWorkload w;
  json::object info;
  info["ib_scenario_file"] = flags.scenario_file;
  info["seed"] = seed;
  info["concurrency_rule"] = flags.concurrency;
  if (!requests_file.empty()) {
    PLUMB_RETURN_IF_ERROR(file_requests(ib, requests_file, warmup, w, info));
  } else {
    PLUMB_RETURN_IF_ERROR(drawn_requests(ib, seed, warmup, counter, w));
  }
  w.profiles = workload::ib_arrivals(ib, seed, *rule);
  describe_scenario(ib, w);
  json::array profiles;
  for (size_t i = 0; i < ib.profiles.size(); ++i) profiles.emplace_back(add_profile(ib, i, seed, w));
  info["profiles"] = std::move(profiles);
  info["size_class"] = "custom";
  w.info = std::move(info);
  return w;
}

namespace {

// IB's model detection: the first id the target's /v1/models lists.
std::string detect_model(const std::string& target) {
  if (target.empty() || target == "null") return "null";
  auto r = net::http_request(target + "/v1/models", "GET", {}, std::chrono::milliseconds{5000});
  if (!r.ok() || r->status != 200) return "unknown";
  auto o = json::parse_object(r->body);
  if (!o.ok() || !o->contains("data") || !o->at("data").is_array() || o->at("data").as_array().empty())
    return "unknown";
  const auto& first = o->at("data").as_array()[0];
  if (!first.is_object() || !first.as_object().contains("id") || !first.as_object().at("id").is_string())
    return "unknown";
  return std::string(first.as_object().at("id").as_string());
}

}  // namespace

Status write_ib_json(const std::string& path, const IbRunOutput& out) {
  report::IbReport r;
  r.scenario = out.scenario.empty() ? "custom" : out.scenario;
  r.name = out.name;
  r.model_id = out.model.empty() ? detect_model(out.target) : out.model;
  r.plumb_version = std::string(PLUMB_VERSION) + " " + PLUMB_GIT_COMMIT;
  std::set<std::string> used;
  for (size_t i = 0; i < out.runs.size(); ++i) {
    std::string name = i < out.profile_names.size() && !out.profile_names[i].empty()
                           ? out.profile_names[i]
                           : out.runs[i]->load.arrival;
    // Profile keys must be distinct (IB's JSON is an object keyed by name).
    if (!used.insert(name).second) name += "_" + std::to_string(i);
    used.insert(name);
    r.profiles.push_back({.name = name, .run = out.runs[i], .metrics = out.metrics[i]});
  }
  r.plumb = out.plumb;
  r.vram_peak_mb = out.vram_peak_mb;
  r.quality_check = out.quality_check;
  return write_file_atomic(path, json::dump_pretty(report::render_ib_metrics(r)) + "\n");
}

Result<json::object> ib_quality_check(const IbQualityOptions& o) {
  if (!(o.baseline >= 0 && o.baseline <= 1))
    return invalid_argument("--ib-quality-baseline must be an accuracy in [0, 1]");
  if (!(o.tau > 0 && o.tau <= 1)) return invalid_argument("--ib-quality-tau must be in (0, 1]");
  std::string dataset = o.dataset;
  if (dataset.empty()) {
    PLUMB_ASSIGN_OR_RETURN(dataset, find_shipped_file(Shipped::kData, "mc_heldout.jsonl"));
  }
  auto items = gates::load_mc_jsonl(dataset);
  if (!items.ok()) return invalid_argument("quality dataset: " + items.status().message());
  if (o.items > 0 && size_t(o.items) < items->size()) items->resize(size_t(o.items));
  gates::OpenAiClient client(gates::Endpoint{o.target, o.model});
  PLUMB_RETURN_IF_ERROR(client.resolve_model());
  PLUMB_ASSIGN_OR_RETURN(gates::McResult mc, gates::mc_accuracy(client, *items, "completion"));
  auto sha = sha256_file(dataset);
  return json::object{
      {"pass", mc.accuracy >= o.tau * o.baseline},
      {"tau", o.tau},
      {"accuracy", mc.accuracy},
      {"baseline_accuracy", o.baseline},
      {"items", mc.items},
      {"correct", mc.correct},
      {"unanswered", mc.unanswered},
      {"dataset", dataset},
      {"dataset_sha256", sha.ok() ? *sha : std::string("unreadable")},
      {"note",
       "plumb's multiple-choice set and greedy answers (gates::mc_accuracy), not IB's MMLU-Pro subset: "
       "the baseline must be measured on the same set"}};
}

std::optional<json::object> ib_quality_from_gate(const gates::GateReport& report, double tau,
                                                 const std::string& dataset) {
  for (const auto& g : report.gates) {
    if (g.gate != "quality") continue;
    for (const auto& c : g.constraints) {
      if (c.name != "accuracy" || c.verdict == gates::Verdict::kNotEvaluated) continue;
      auto sha = sha256_file(dataset);
      return json::object{{"pass", c.verdict == gates::Verdict::kPass},
                          {"tau", tau},
                          {"accuracy", json::number_or_null(c.value)},
                          {"baseline_accuracy", json::number_or_null(tau > 0 ? c.bound / tau : std::nan(""))},
                          {"detail", c.detail},
                          {"dataset", dataset},
                          {"dataset_sha256", sha.ok() ? *sha : std::string("unreadable")},
                          {"note",
                           "plumb evaluate's quality gate: greedy multiple-choice accuracy on plumb's set "
                           "against the reference "
                           "server's on the same questions, not IB's MMLU-Pro subset"}};
    }
  }
  return std::nullopt;
}

json::object vram_json(const metrics::VramPeak& v) {
  if (!v.peak_mib) return json::object{{"peak_mib", nullptr}, {"unavailable", v.unavailable}};
  return json::object{{"peak_mib", *v.peak_mib},
                      {"samples", v.samples},
                      {"source", "nvidia-smi memory.used, the largest card, every 0.5 s"}};
}

}  // namespace plumb::cli
