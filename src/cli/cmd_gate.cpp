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

int run_gate(const GateArgs& a) {
  auto fail = [](int code, const std::string& msg) {
    std::cerr << "plumb gate: " << msg << "\n";
    return code;
  };
  if (a.which != "quality" && a.which != "integrity" && a.which != "all")
    return fail(kExitUsage, "the gate must be quality, integrity or all");
  if (a.format != "completion" && a.format != "chat")
    return fail(kExitUsage, "--format must be completion or chat");
  if (!(a.tau > 0 && a.tau <= 1)) return fail(kExitUsage, "--tau must be in (0, 1]");
  bool quality = a.which != "integrity", integrity = a.which != "quality";
  std::string started = utc_timestamp_now();

  // Hashes of the harness before anything runs.
  std::vector<std::string> harness = a.harness_files;
  if (std::string self = self_exe(); !self.empty()) harness.insert(harness.begin(), self);
  std::string dataset = a.dataset;
  if (dataset.empty() && quality) {
    auto shipped = find_shipped_file(Shipped::kData, "mc_heldout.jsonl");  // core/shipped.h's search
    if (!shipped.ok()) return fail(kExitUsage, shipped.status().message() + "; or pass --dataset");
    dataset = *shipped;
  }
  if (quality) harness.push_back(dataset);
  gates::HarnessHashes before = gates::hash_harness(harness);

  std::vector<gates::McItem> items;
  std::string dataset_sha;
  if (quality) {
    auto it = gates::load_mc_jsonl(dataset);
    if (!it.ok()) return fail(kExitUsage, it.status().message());
    items = std::move(*it);
    if (a.limit > 0 && size_t(a.limit) < items.size()) items.resize(size_t(a.limit));
    auto h = sha256_file(dataset);
    if (h.ok()) dataset_sha = *h;
    if (a.limit > 0) dataset_sha = sha256_hex(dataset_sha + "/limit/" + std::to_string(a.limit));
  }

  std::unique_ptr<LaunchedReference> launched;
  std::string ref_url = a.reference;
  if (!a.reference.empty() && a.reference.rfind("http://", 0) != 0 && a.reference.rfind("https://", 0) != 0) {
    auto l = launch_reference(a.reference);
    if (!l.ok()) return fail(kExitError, l.status().message());
    launched = std::move(*l);
    ref_url = launched->url;
    std::cerr << "plumb gate: reference `plumb serve " << a.reference << "` at " << ref_url << "\n";
  }

  gates::OpenAiClient target({a.target, ""});
  std::unique_ptr<gates::OpenAiClient> reference;
  if (!ref_url.empty()) reference = std::make_unique<gates::OpenAiClient>(gates::Endpoint{ref_url, ""});
  if (auto s = target.resolve_model(); !s.ok()) return fail(kExitError, "target: " + s.message());

  std::unique_ptr<ledger::Ledger> ledger;
  if (!a.ledger_path.empty()) {
    auto l = ledger::Ledger::open(a.ledger_path);
    if (!l.ok()) return fail(kExitError, l.status().to_string());
    ledger = std::move(*l);
  }

  gates::FidelityBounds bounds;
  bounds.min_top1_agreement = a.min_top1;
  bounds.max_mean_kl = a.max_kl;
  gates::GateReport report;
  std::optional<double> reference_accuracy;
  if (quality) {
    gates::QualityOptions q;
    q.items = items;
    q.format = a.format;
    q.tau = a.tau;
    q.seed = a.seed;
    q.fidelity_prompts = a.fidelity_prompts;
    q.top_logprobs = a.top_logprobs;
    q.bounds = bounds;
    if (a.baseline_accuracy >= 0) {
      q.baseline_accuracy = a.baseline_accuracy;
    } else if (!reference && ledger) {
      auto b = gates::ledger_baseline_accuracy(*ledger, dataset_sha, target.endpoint().model);
      if (!b.ok()) return fail(kExitError, b.status().to_string());
      q.baseline_accuracy = *b;
      if (*b) std::cerr << "plumb gate: baseline accuracy " << **b << " from the ledger\n";
    }
    if (!reference && !q.baseline_accuracy)
      return fail(
          kExitUsage,
          "the quality gate needs --reference, --baseline-accuracy, or a baseline for this dataset, model "
          "and machine in --ledger");
    gates::McResult tmc, rmc;
    auto g = gates::run_quality(target, reference.get(), q, &tmc, &rmc);
    if (!g.ok()) return fail(kExitError, g.status().to_string());
    if (rmc.items > 0) reference_accuracy = rmc.accuracy;
    report.gates.push_back(std::move(*g));
  }
  if (integrity) {
    gates::IntegrityOptions io;
    io.seed = a.seed;
    io.fidelity_prompts = quality ? 0 : a.fidelity_prompts;  // `all`: fidelity already judged above
    io.top_logprobs = a.top_logprobs;
    io.bounds = bounds;
    io.bandwidth_gbs = a.bandwidth_gbs;
    io.weight_bytes = a.weight_bytes;
    if (io.weight_bytes <= 0 && !a.model_dir.empty()) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(a.model_dir, ec))
        if (e.path().extension() == ".safetensors" && e.path().filename() != "reference.safetensors")
          io.weight_bytes += double(e.file_size());
    }
    if (io.bandwidth_gbs <= 0 && ledger) {
      auto m = protocol::capture_machine();
      if (m.ok()) {
        auto mid = ledger->find_machine(m->hash());
        if (mid.ok() && *mid) {
          auto cs = ledger->ceilings_for(**mid);
          if (cs.ok())
            for (const auto& c : *cs)
              if (c.name == "mem_read_bw") io.bandwidth_gbs = c.value;
        }
      }
    }
    io.harness_before = before;
    auto g = gates::run_integrity(target, reference.get(), io);
    if (!g.ok()) return fail(kExitError, g.status().to_string());
    if (quality) {
      // In `all`, fidelity belongs to the quality gate; note it instead of a second not-evaluated row.
      auto& cs = g->constraints;
      cs.erase(std::remove_if(cs.begin(), cs.end(),
                              [](const gates::Constraint& c) { return c.name == "fidelity"; }),
               cs.end());
    }
    report.gates.push_back(std::move(*g));
  }

  std::cout << gates::render_table(report, a.strict);
  json::object j = gates::to_json(report, a.strict);
  j["target"] = a.target;
  j["reference"] = a.reference;
  if (quality) j["dataset"] = dataset;
  if (!a.json_path.empty()) {
    if (auto s = write_file_atomic(a.json_path, json::dump_pretty(j)); !s.ok())
      return fail(kExitError, s.to_string());
  }
  if (ledger) {
    gates::GateRunInfo info;
    info.target_url = a.target;
    info.target_model = target.endpoint().model;
    info.reference = a.reference;
    info.dataset_path = quality ? dataset : "";
    info.dataset_sha256 = dataset_sha;
    info.items = quality ? int64_t(items.size()) : 1;
    info.seed = a.seed;
    info.strict = a.strict;
    info.started_at = started;
    info.ended_at = utc_timestamp_now();
    info.reference_accuracy = reference_accuracy;
    auto id = gates::record_gate_run(*ledger, report, info);
    if (!id.ok()) return fail(kExitError, "ledger: " + id.status().to_string());
    std::cout << "recorded in " << a.ledger_path << " as run " << *id << "\n";
  }
  if (launched) launched->proc.stop();
  return report.passed(a.strict) ? kExitOk : kExitFailed;
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
