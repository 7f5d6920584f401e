// The quality and integrity gates against OpenAI-compatible servers (docs/protocol.md §9,
// docs/architecture.md "## Gates"). Each run_* talks HTTP with blocking requests, one at a time,
// so the server under test sees only this traffic; /metrics deltas rely on that. Every check
// becomes a named Constraint; transport errors of a required request return a Status (the gate
// could not be run), a wrong answer from the server fails its constraint instead.
// Not thread-safe per call (no shared state between calls).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "gates/fidelity.h"
#include "gates/gate.h"
#include "gates/multiple_choice.h"

namespace plumb::gates {

// An OpenAI-compatible server.
struct Endpoint {
  std::string url;    // base URL, e.g. "http://127.0.0.1:8000" (no trailing /v1)
  std::string model;  // model name sent in requests; "" = the first id of GET /v1/models, or none
};

// Minimal blocking OpenAI client over net::http_request.
class OpenAiClient {
 public:
  explicit OpenAiClient(Endpoint ep, std::chrono::milliseconds timeout = std::chrono::milliseconds{120'000});
  // POST path with a JSON body ("model" is added when known); the parsed JSON object of a 200
  // reply. Transport errors keep their Status; an HTTP error is kFailedPrecondition with the body.
  Result<json::object> post(const std::string& path, json::object body);
  // Like post, also returning the seconds from send to the end of the response (monotonic).
  Result<json::object> post_timed(const std::string& path, json::object body, double* seconds);
  // GET path; the body of a 200 reply (NotFound for 404).
  Result<std::string> get(const std::string& path);
  // Resolves the model name (GET /v1/models) once; "" when the server lists none.
  Status resolve_model();
  const Endpoint& endpoint() const { return ep_; }

 private:
  Endpoint ep_;
  std::chrono::milliseconds timeout_;
  bool resolved_ = false;
};

// Fresh prompts of equal shape from a seed: `words` words drawn from a fixed English word list.
std::vector<std::string> fresh_prompts(uint64_t seed, int count, int words);

// Teacher-forced prompt logprobs through /v1/completions (echo, logprobs=top_k, max_tokens=1,
// temperature 0).
Result<PromptLogprobs> prompt_logprobs(OpenAiClient& client, const std::string& prompt, int top_k);

struct McResult {
  int64_t items = 0;       // questions asked
  int64_t correct = 0;     // extracted answer == key
  int64_t unanswered = 0;  // no extractable answer (counted wrong)
  double accuracy = 0;     // correct / items
};

// Greedy multiple-choice accuracy. format "completion" (prompt ending "Answer:") or "chat".
Result<McResult> mc_accuracy(OpenAiClient& client, const std::vector<McItem>& items,
                             const std::string& format, int max_tokens = 8);

struct QualityOptions {
  std::vector<McItem> items;                // the multiple-choice set (already loaded and cut)
  std::string format = "completion";        // "completion" | "chat"
  double tau = 0.95;                        // pass iff accuracy >= tau * baseline
  std::optional<double> baseline_accuracy;  // known baseline (e.g. from the ledger); else measured
  int fidelity_prompts = 4;                 // fresh prompts for fidelity (0: skip fidelity)
  int fidelity_words = 24;                  // words per fidelity prompt
  int top_logprobs = 5;                     // k of the top-k lists
  uint64_t seed = 1;                        // seeds the fresh prompts
  FidelityBounds bounds;                    // fidelity bounds
};

// Quality gate: accuracy >= tau * baseline (baseline measured on the reference unless given), and
// fidelity (top-1 agreement, mean KL, token match) to the reference. reference may be null when
// baseline_accuracy is given; fidelity is then not evaluated.
Result<GateResult> run_quality(OpenAiClient& target, OpenAiClient* reference, const QualityOptions& opt,
                               McResult* target_mc = nullptr, McResult* reference_mc = nullptr);

// Fidelity constraints of one comparison (shared by both gates).
std::vector<Constraint> fidelity_constraints(OpenAiClient& target, OpenAiClient& reference, uint64_t seed,
                                             int prompts, int words, int top_k, const FidelityBounds& b,
                                             FidelityStats* stats = nullptr);

// Files whose SHA-256 is recorded before and after a run.
struct HarnessHashes {
  std::vector<std::pair<std::string, std::string>> files;  // path, sha256 hex ("missing" if unreadable)
  std::string protocol_hash;                               // protocol::protocol_hash()
};
HarnessHashes hash_harness(const std::vector<std::string>& paths);
// What changed between two hashings of the same files (same order): files and protocol hash.
struct HarnessChange {
  int changed = 0;    // files whose SHA-256 differs, plus 1 if the protocol hash does
  std::string which;  // their paths (and "protocol"), comma-separated
};
HarnessChange harness_changes(const HarnessHashes& before, const HarnessHashes& after);

struct IntegrityOptions {
  uint64_t seed = 1;         // fresh prompts and sampling seeds
  int fidelity_prompts = 4;  // 0: fidelity not evaluated
  int fidelity_words = 24;
  int top_logprobs = 5;
  FidelityBounds bounds;
  int cache_prompts = 4;  // fresh prompts, each also repeated once
  int cache_words = 24;   // words per prompt
  // ignore_eos generation length. Long enough that decode dominates: the "fresh" variant may
  // recompute one more KV block of prompt than the repeat (its changed word can fall in the last
  // full block), which at 16 tokens made an honest, idle plumb serve read 0.49 < 0.5.
  int cache_max_tokens = 64;
  double min_repeat_time_ratio = 0.5;      // median E2E(repeat) / median E2E(fresh) must stay above
  int sample_seeds = 4;                    // temperature-1 samples of one prompt with different seeds
  int accounting_requests = 4;             // requests of the work-accounting check
  int accounting_max_tokens = 24;          // requested with ignore_eos
  double text_recount_tolerance = 0.25;    // |retokenized text - usage| / usage allowed
  double metrics_tolerance = 0.02;         // relative error of /metrics counter deltas
  double bandwidth_gbs = 0;                // memory bandwidth (GB/s) for the roofline; 0 = unknown
  double weight_bytes = 0;                 // bytes of weights read per decode step; 0 = unknown
  double kv_bytes_per_token = 0;           // KV bytes read per context token (optional)
  std::vector<std::string> harness_files;  // hashed before/after (plumb binary, datasets)
  HarnessHashes harness_before;            // taken before the system under test ran
};

// Integrity gate (docs/protocol.md §9). reference may be null (fidelity not evaluated; /tokenize of the
// target is used for re-counts).
Result<GateResult> run_integrity(OpenAiClient& target, OpenAiClient* reference, const IntegrityOptions& opt);

// Sum of the samples of every Prometheus series whose name ends with `suffix` (e.g.
// "generation_tokens_total" matches plumb:generation_tokens_total and vllm:generation_tokens_total);
// nullopt when there is none.
std::optional<double> prometheus_sum(const std::string& text, const std::string& suffix);

}  // namespace plumb::gates
