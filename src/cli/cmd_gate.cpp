// `plumb gate quality|integrity|all`: judges a target server against a reference (quality gate:
// multiple-choice accuracy and fidelity; integrity gate: docs/protocol.md §9). Prints each constraint
// with value, bound, verdict and fix; the exit code is the verdict.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/command.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "core/shipped.h"
#include "core/subprocess.h"
#include "gates/checks.h"
#include "gates/gate.h"
#include "gates/gate_record.h"
#include "ledger/ledger.h"
#include "protocol/provenance.h"

namespace plumb::cli {
namespace {

struct GateArgs {
  std::string which;  // quality | integrity | all
  std::string target;
  std::string reference;
  std::string dataset;
  int limit = 0;
  std::string format = "completion";
  double tau = 0.95;
  double baseline_accuracy = -1;
  std::string ledger_path;
  std::string json_path;
  uint64_t seed = 1;
  bool strict = false;
  int fidelity_prompts = 4;
  int top_logprobs = 5;
  double min_top1 = gates::FidelityBounds{}.min_top1_agreement;
  double max_kl = gates::FidelityBounds{}.max_mean_kl;
  double bandwidth_gbs = 0;
  double weight_bytes = 0;
  std::string model_dir;
  std::vector<std::string> harness_files;
};

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// A reference given as `plumb serve` arguments: started on a free port, stopped at the end.
struct LaunchedReference {
  Subprocess proc;
  std::string url;
  std::string log;
};

Result<std::unique_ptr<LaunchedReference>> launch_reference(const std::string& config) {
  auto ref = std::make_unique<LaunchedReference>();
  std::string self = self_exe();
  if (self.empty()) return Status(Code::kIoError, "cannot find the plumb binary (/proc/self/exe)");
  SpawnOptions so;
  so.argv = {self, "serve", "--port", "0"};
  std::istringstream in(config);
  for (std::string w; in >> w;) so.argv.push_back(w);
  ref->log =
      (std::filesystem::temp_directory_path() / ("plumb-gate-reference-" + std::to_string(getpid()) + ".log"))
          .string();
  so.stdout_path = ref->log;
  so.stderr_path = "=stdout";
  auto p = Subprocess::spawn(so);
  if (!p.ok()) return p.status();
  ref->proc = std::move(*p);
  const std::string key = "listening on ";
  for (int i = 0; i < 1200; ++i) {
    auto text = read_file(ref->log);
    if (text.ok()) {
      size_t at = text->find(key);
      if (at != std::string::npos) {
        size_t b = at + key.size(), e = text->find_first_of(" \n", b);
        ref->url = text->substr(b, e - b);
        return ref;
      }
    }
    if (!ref->proc.running())
      return Status(Code::kUnavailable,
                    "the reference `plumb serve " + config + "` exited; log: " + ref->log);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status(Code::kTimeout, "the reference `plumb serve " + config + "` did not get ready in 120 s");
}

// What a gate run is judged on: the harness hashed before anything ran and, for the quality
// gate, the multiple-choice items of the dataset.
struct GateInputs {
  bool quality = false, integrity = false;
  std::string started;
  std::string dataset;      // "" without the quality gate
  std::string dataset_sha;  // of the dataset, with --limit folded in
  std::vector<gates::McItem> items;
  gates::HarnessHashes before;
};

// The flags that no server is needed to check.
Status check_flags(const GateArgs& a) {
  if (a.which != "quality" && a.which != "integrity" && a.which != "all")
    return invalid_argument("the gate must be quality, integrity or all");
  if (a.format != "completion" && a.format != "chat")
    return invalid_argument("--format must be completion or chat");
  if (!(a.tau > 0 && a.tau <= 1)) return invalid_argument("--tau must be in (0, 1]");
  return Status::Ok();
}

// The dataset (core/shipped.h's search unless --dataset names one), the harness hashed before
// anything runs (plumb's binary, --hash-file, the dataset) and the items.
Result<GateInputs> gate_inputs(const GateArgs& a) {
  GateInputs in;
  in.quality = a.which != "integrity";
  in.integrity = a.which != "quality";
  in.started = utc_timestamp_now();
  std::vector<std::string> harness = a.harness_files;
  if (std::string self = self_exe(); !self.empty()) harness.insert(harness.begin(), self);
  in.dataset = a.dataset;
  if (in.dataset.empty() && in.quality) {
    auto shipped = find_shipped_file(Shipped::kData, "mc_heldout.jsonl");
    if (!shipped.ok()) return invalid_argument(shipped.status().message() + "; or pass --dataset");
    in.dataset = *shipped;
  }
  if (in.quality) harness.push_back(in.dataset);
  in.before = gates::hash_harness(harness);
  if (!in.quality) return in;
  auto it = gates::load_mc_jsonl(in.dataset);
  if (!it.ok()) return invalid_argument(it.status().message());
  in.items = std::move(*it);
  if (a.limit > 0 && size_t(a.limit) < in.items.size()) in.items.resize(size_t(a.limit));
  auto h = sha256_file(in.dataset);
  if (h.ok()) in.dataset_sha = *h;
  if (a.limit > 0) in.dataset_sha = sha256_hex(in.dataset_sha + "/limit/" + std::to_string(a.limit));
  return in;
}

// The servers and the ledger of a gate run; a reference given as `plumb serve` arguments is started.
struct GateServers {
  std::unique_ptr<LaunchedReference> launched;
  std::unique_ptr<gates::OpenAiClient> target, reference;
  std::unique_ptr<ledger::Ledger> ledger;
};

Result<GateServers> open_servers(const GateArgs& a) {
  GateServers s;
  std::string ref_url = a.reference;
  if (!a.reference.empty() && a.reference.rfind("http://", 0) != 0 && a.reference.rfind("https://", 0) != 0) {
    auto l = launch_reference(a.reference);
    if (!l.ok()) return job_error(l.status().message());
    s.launched = std::move(*l);
    ref_url = s.launched->url;
    std::cerr << "plumb gate: reference `plumb serve " << a.reference << "` at " << ref_url << "\n";
  }
  s.target = std::make_unique<gates::OpenAiClient>(gates::Endpoint{a.target, ""});
  if (!ref_url.empty()) s.reference = std::make_unique<gates::OpenAiClient>(gates::Endpoint{ref_url, ""});
  if (auto st = s.target->resolve_model(); !st.ok()) return job_error("target: " + st.message());
  if (!a.ledger_path.empty()) {
    auto l = ledger::Ledger::open(a.ledger_path);
    if (!l.ok()) return job_error(l.status().to_string());
    s.ledger = std::move(*l);
  }
  return s;
}

gates::FidelityBounds fidelity_bounds(const GateArgs& a) {
  gates::FidelityBounds bounds;
  bounds.min_top1_agreement = a.min_top1;
  bounds.max_mean_kl = a.max_kl;
  return bounds;
}

// The quality gate; its baseline is the reference's accuracy, --baseline-accuracy, or the ledger's.
// Sets *reference_accuracy when the reference was measured.
Result<gates::GateResult> quality_gate(const GateArgs& a, const GateInputs& in, GateServers& s,
                                       std::optional<double>* reference_accuracy) {
  gates::QualityOptions q;
  q.items = in.items;
  q.format = a.format;
  q.tau = a.tau;
  q.seed = a.seed;
  q.fidelity_prompts = a.fidelity_prompts;
  q.top_logprobs = a.top_logprobs;
  q.bounds = fidelity_bounds(a);
  if (a.baseline_accuracy >= 0) {
    q.baseline_accuracy = a.baseline_accuracy;
  } else if (!s.reference && s.ledger) {
    auto b = gates::ledger_baseline_accuracy(*s.ledger, in.dataset_sha, s.target->endpoint().model);
    if (!b.ok()) return job_error(b.status().to_string());
    q.baseline_accuracy = *b;
    if (*b) std::cerr << "plumb gate: baseline accuracy " << **b << " from the ledger\n";
  }
  if (!s.reference && !q.baseline_accuracy)
    return invalid_argument(
        "the quality gate needs --reference, --baseline-accuracy, or a baseline for this dataset, model "
        "and machine in --ledger");
  gates::McResult tmc, rmc;
  auto g = gates::run_quality(*s.target, s.reference.get(), q, &tmc, &rmc);
  if (!g.ok()) return job_error(g.status().to_string());
  if (rmc.items > 0) *reference_accuracy = rmc.accuracy;
  return g;
}

// Weight bytes read per decode step: the *.safetensors of the model folder (the reference dump aside).
double model_weight_bytes(const std::string& model_dir) {
  double bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(model_dir, ec))
    if (e.path().extension() == ".safetensors" && e.path().filename() != "reference.safetensors")
      bytes += double(e.file_size());
  return bytes;
}

// This machine's recorded memory read bandwidth (GB/s) in the ledger; 0 when there is none.
double ledger_bandwidth(ledger::Ledger& ledger) {
  double gbs = 0;
  auto m = protocol::capture_machine();
  if (!m.ok()) return gbs;
  auto mid = ledger.find_machine(m->hash());
  if (!mid.ok() || !*mid) return gbs;
  auto cs = ledger.ceilings_for(**mid);
  if (cs.ok())
    for (const auto& c : *cs)
      if (c.name == "mem_read_bw") gbs = c.value;
  return gbs;
}

// The integrity gate; in `all`, fidelity is judged by the quality gate and left out here.
Result<gates::GateResult> integrity_gate(const GateArgs& a, const GateInputs& in, GateServers& s) {
  gates::IntegrityOptions io;
  io.seed = a.seed;
  io.fidelity_prompts = in.quality ? 0 : a.fidelity_prompts;  // `all`: fidelity already judged above
  io.top_logprobs = a.top_logprobs;
  io.bounds = fidelity_bounds(a);
  io.bandwidth_gbs = a.bandwidth_gbs;
  io.weight_bytes = a.weight_bytes;
  if (io.weight_bytes <= 0 && !a.model_dir.empty()) io.weight_bytes += model_weight_bytes(a.model_dir);
  if (io.bandwidth_gbs <= 0 && s.ledger) {
    if (double gbs = ledger_bandwidth(*s.ledger); gbs > 0) io.bandwidth_gbs = gbs;
  }
  io.harness_before = in.before;
  auto g = gates::run_integrity(*s.target, s.reference.get(), io);
  if (!g.ok()) return job_error(g.status().to_string());
  if (in.quality) {
    // In `all`, fidelity belongs to the quality gate; note it instead of a second not-evaluated row.
    auto& cs = g->constraints;
    cs.erase(
        std::remove_if(cs.begin(), cs.end(), [](const gates::Constraint& c) { return c.name == "fidelity"; }),
        cs.end());
  }
  return g;
}

// The table on stdout, the JSON file (--json) and the ledger's record (--ledger).
Status write_outputs(const GateArgs& a, const GateInputs& in, GateServers& s, const gates::GateReport& report,
                     const std::optional<double>& reference_accuracy) {
  std::cout << gates::render_table(report, a.strict);
  json::object j = gates::to_json(report, a.strict);
  j["target"] = a.target;
  j["reference"] = a.reference;
  if (in.quality) j["dataset"] = in.dataset;
  if (!a.json_path.empty()) {
    if (auto st = write_file_atomic(a.json_path, json::dump_pretty(j)); !st.ok())
      return job_error(st.to_string());
  }
  if (!s.ledger) return Status::Ok();
  gates::GateRunInfo info;
  info.target_url = a.target;
  info.target_model = s.target->endpoint().model;
  info.reference = a.reference;
  info.dataset_path = in.quality ? in.dataset : "";
  info.dataset_sha256 = in.dataset_sha;
  info.items = in.quality ? int64_t(in.items.size()) : 1;
  info.seed = a.seed;
  info.strict = a.strict;
  info.started_at = in.started;
  info.ended_at = utc_timestamp_now();
  info.reference_accuracy = reference_accuracy;
  auto id = gates::record_gate_run(*s.ledger, report, info);
  if (!id.ok()) return job_error("ledger: " + id.status().to_string());
  std::cout << "recorded in " << ledger::redact_url(a.ledger_path) << " as run " << *id << "\n";
  return Status::Ok();
}

// The gates in order, on servers already open; the report.
Result<gates::GateReport> judge(const GateArgs& a) {
  PLUMB_RETURN_IF_ERROR(check_flags(a));
  PLUMB_ASSIGN_OR_RETURN(GateInputs in, gate_inputs(a));
  PLUMB_ASSIGN_OR_RETURN(GateServers s, open_servers(a));
  gates::GateReport report;
  std::optional<double> reference_accuracy;
  if (in.quality) {
    PLUMB_ASSIGN_OR_RETURN(auto g, quality_gate(a, in, s, &reference_accuracy));
    report.gates.push_back(std::move(g));
  }
  if (in.integrity) {
    PLUMB_ASSIGN_OR_RETURN(auto g, integrity_gate(a, in, s));
    report.gates.push_back(std::move(g));
  }
  PLUMB_RETURN_IF_ERROR(write_outputs(a, in, s, report, reference_accuracy));
  if (s.launched) s.launched->proc.stop();
  return report;
}

int run_gate(const GateArgs& a) {
  auto report = judge(a);
  if (!report.ok()) {
    std::cerr << "plumb gate: " << report.status().message() << "\n";
    return exit_for(report.status());
  }
  return report->passed(a.strict) ? kExitOk : kExitFailed;
}

void setup(CLI::App& root) {
  auto a = std::make_shared<GateArgs>();
  auto* cmd = root.add_subcommand(
      "gate",
      "Judge a server: quality (multiple-choice accuracy >= tau x reference, logprob fidelity) and "
      "integrity\n"
      "(docs/protocol.md §9: fidelity, response caching, work accounting, roofline, harness hashes).\n"
      "Exit code 0 only if every evaluated constraint passes (--strict: and every constraint was "
      "evaluated).\n"
      "Examples:\n"
      "  plumb gate all --target http://127.0.0.1:8001 --reference http://127.0.0.1:8000\n"
      "  plumb gate quality --target http://127.0.0.1:8001 --reference \"--dtype f32\" --limit 50");
  cmd->add_option("gate", a->which, "quality | integrity | all")->required();
  cmd->add_option("--target", a->target, "base URL of the server judged")->required();
  cmd->add_option("--reference", a->reference,
                  "reference: a base URL, or `plumb serve` arguments (e.g. \"--dtype f32\") to start one");
  cmd->add_option("--dataset", a->dataset, "MMLU-Pro-format JSONL (default: data/mc_heldout.jsonl)");
  cmd->add_option("--limit", a->limit, "first N questions only (0 = all)")->capture_default_str();
  cmd->add_option("--format", a->format, "completion | chat prompts")->capture_default_str();
  cmd->add_option("--tau", a->tau, "accuracy must be >= tau x baseline")->capture_default_str();
  cmd->add_option("--baseline-accuracy", a->baseline_accuracy,
                  "known baseline accuracy in [0,1] (skips measuring)");
  cmd->add_option("--ledger", a->ledger_path,
                  "record the gate run in this ledger (and read baselines from it)");
  cmd->add_option("--json", a->json_path, "write the constraints as JSON to this file");
  cmd->add_option("--seed", a->seed, "seed of the fresh prompts and sampling seeds")->capture_default_str();
  cmd->add_flag("--strict", a->strict, "constraints that could not be evaluated fail the gate");
  cmd->add_option("--fidelity-prompts", a->fidelity_prompts, "fresh prompts for fidelity")
      ->capture_default_str();
  cmd->add_option("--top-logprobs", a->top_logprobs, "k of the top-k logprob lists")->capture_default_str();
  cmd->add_option("--min-top1", a->min_top1, "fidelity: minimum top-1 agreement")->capture_default_str();
  cmd->add_option("--max-kl", a->max_kl, "fidelity: maximum mean KL (nats)")->capture_default_str();
  cmd->add_option("--bandwidth-gbs", a->bandwidth_gbs,
                  "roofline: memory bandwidth (default: ledger mem_read_bw)");
  cmd->add_option("--weight-bytes", a->weight_bytes, "roofline: weight bytes read per decode step");
  cmd->add_option("--model-dir", a->model_dir, "roofline: weight bytes from this folder's *.safetensors");
  cmd->add_option("--hash-file", a->harness_files, "extra files hashed before and after (repeatable)");
  cmd->callback([a] { set_exit_code(run_gate(*a)); });
}

PLUMB_COMMAND(50, setup);

}  // namespace
}  // namespace plumb::cli
