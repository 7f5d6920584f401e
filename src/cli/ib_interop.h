// The InferenceBench flags of `plumb bench` (--ib-scenario, --ib-concurrency, --ib-json) and the
// glue between them and plumb: an IB scenario as a plumb workload (a custom-class protocol scenario
// with seeded arrivals), `--requests` files in either format, and IB's metrics JSON written from
// the run's records. The reading is workload/inferencebench.h, the writing report/inferencebench.h;
// docs/inferencebench.md documents both.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/json.h"
#include "core/status.h"
#include "gates/gate.h"
#include "metrics/metrics.h"
#include "metrics/request_record.h"
#include "metrics/vram.h"
#include "protocol/protocol.h"
#include "workload/inferencebench.h"
#include "workload/request.h"
#include "workload/schedule.h"
#include "workload/sources.h"

namespace plumb::cli {

struct IbFlags {
  std::string scenario_file;             // --ib-scenario: an IB scenario.json; "" none
  std::string concurrency = "declared";  // --ib-concurrency: declared | runner
  std::string json_path;                 // --ib-json: write IB's metrics JSON here; "" none
  double quality_baseline = -1;          // --ib-quality-baseline: run ib_quality_check (-1: not run)
  double quality_tau = 0.95;             // --ib-quality-tau
  int quality_items = 60;                // --ib-quality-items

  void add_to(CLI::App* cmd);
};

// A --requests file read in whichever format it is: a plumb request set (lines with "hash" are
// verified; OpenAI-style lines without one are hashed, workload::parse_jsonl) or an IB request file
// (workload::looks_like_ib_requests: plumb computes every content hash).
struct LoadedRequests {
  workload::RequestSet set;
  size_t hashes_computed = 0;                 // requests whose content hash plumb computed
  bool ib_format = false;                     // read as an IB request file
  std::vector<workload::IbRequestMeta> meta;  // IB only: meta[i] of set.requests[i]
  size_t ib_hashes = 0;                       // IB only: lines carrying IB's content_hash
  size_t defaulted = 0;                       // IB only: lines that took a field from the defaults
  std::string note;                           // how the file was read, for stderr; "" nothing to say
};
Result<LoadedRequests> load_requests(const std::string& path, const workload::IbRequestDefaults& defaults);
// For an IB request file: {"format", "hashes", "lines_with_ib_content_hash", "lines_defaulted",
// "requests": [{"index", "plumb_hash", "ib_content_hash", "sample_id", ...}]}, the IB JSON's
// plumb.request_file; an empty object for a plumb request set.
json::object request_file_json(const LoadedRequests& lr);

// An IB scenario turned into what `plumb bench` runs.
struct IbWorkload {
  protocol::Scenario scenario;                  // size class custom; objective by IB's scoring of its id
  workload::RequestSet set;                     // measured requests (drawn, or the --requests file)
  std::vector<workload::Request> warmup;        // sent first, excluded from every statistic
  std::vector<workload::ArrivalSpec> profiles;  // one per IB profile, seeded
  std::vector<std::string> profile_names;       // IB's profile names, the keys of IB's metrics JSON
  std::vector<std::string> notes;               // lines for stderr: seeding, concurrency, hashes
  json::object info;                            // the "plumb" object of IB's metrics JSON
};
// Reads flags.scenario_file; with requests_file non-empty the requests come from it (IB's fallbacks
// from the scenario), else they are drawn from `seed` with `counter`. `warmup` requests: synthetic
// from derive_seed(seed, "warmup"), or the file's first ones. InvalidArgument naming the flag or field.
Result<IbWorkload> ib_workload(const IbFlags& flags, uint64_t seed, const std::string& requests_file,
                               int warmup, const workload::TokenCounter& counter);

// Everything the IB metrics JSON needs from a finished `plumb bench`.
struct IbRunOutput {
  std::string scenario;                         // IB's scenario id, plumb's scenario id, or "custom"
  std::string name;                             // the scenario's name ("" none)
  std::string model;                            // --model; "" = ask the target's /v1/models
  std::string target;                           // base URL, or "null"
  std::vector<std::string> profile_names;       // per run; "" = the run's arrival kind
  std::vector<const metrics::RunRecord*> runs;  // per profile
  std::vector<metrics::Metrics> metrics;        // per profile
  json::object plumb;                           // the top-level "plumb" object
  std::optional<double> vram_peak_mb;           // IB's vram_peak_mb: metrics/vram.h's peak; nullopt: null
  std::optional<json::object> quality_check;    // IB's quality_check (ib_quality_check); nullopt: null
};

// IB's quality check, plumb's way: greedy multiple-choice accuracy of the target on `items`
// questions of plumb's shipped set (data/mc_heldout.jsonl, or `dataset`; gates::mc_accuracy) against
// a precomputed baseline accuracy, passing when accuracy >= tau * baseline, as IB's gate does with
// its MMLU-Pro subset. The object: {"pass", "tau", "accuracy", "baseline_accuracy", "items",
// "correct", "unanswered", "dataset", "dataset_sha256", "note"}. InvalidArgument for a baseline
// outside [0, 1], tau outside (0, 1], or an unreadable dataset; a target that does not answer is an
// error.
struct IbQualityOptions {
  std::string target;  // base URL
  std::string model;   // "" = the first id of /v1/models
  double baseline = 0;
  double tau = 0.95;
  int items = 60;  // the first N questions; 0 = all
  std::string dataset;
};
Result<json::object> ib_quality_check(const IbQualityOptions& o);

// IB's quality check from a gate plumb already ran (`plumb evaluate`'s quality gate: the target's
// multiple-choice accuracy against tau x the reference server's, measured on the same questions):
// {"pass" (the accuracy constraint's verdict), "tau", "accuracy", "baseline_accuracy" (its bound / tau),
// "detail", "dataset", "dataset_sha256", "note"}; nullopt when the gate has no evaluated accuracy.
std::optional<json::object> ib_quality_from_gate(const gates::GateReport& report, double tau,
                                                 const std::string& dataset);

// The GPU memory sampled during a run (metrics/vram.h), as plumb's object beside IB's vram_peak_mb:
// {"peak_mib", "samples", "source"} or {"peak_mib": null, "unavailable": why}.
json::object vram_json(const metrics::VramPeak& v);
Status write_ib_json(const std::string& path, const IbRunOutput& out);

}  // namespace plumb::cli
