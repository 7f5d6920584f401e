// InferenceBench (IB) interoperability, reading side: IB's scenario files
// (`src/eval/tasks/*/scenario.json`) and IB's request files (JSONL), turned into plumb's requests,
// request sets and arrival specs. The formats and every place where plumb departs from IB's runner
// are in docs/inferencebench.md.
//
// Fields IB's runner defaults when absent take IB's defaults here too; a field that is present but
// mistyped or out of range is an InvalidArgument naming it (e.g. "profiles[1].rate_per_s"), where
// IB's runner would substitute a default or fail later.
//
// Thread-safety: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "workload/request.h"
#include "workload/schedule.h"
#include "workload/sources.h"

namespace plumb::workload {

// One load profile of an IB scenario: `profile` (one) or `profiles[i]`.
struct IbProfile {
  std::string name;                           // "name", else "pattern": the key of IB's metrics JSON
  ArrivalKind pattern = ArrivalKind::kBurst;  // "pattern": burst | poisson | constant
  double rate_per_s = 0.0;                    // "rate_per_s": > 0 for poisson and constant; 0 for burst
  std::optional<int> concurrency;             // "concurrency" of the profile entry, >= 1; nullopt absent
  std::optional<int64_t> num_requests;        // "num_requests" of the profile entry; nullopt absent
};

// An IB scenario file.
struct IbScenario {
  std::string scenario_id;          // "scenario_id", e.g. "A"; "" when absent
  std::string name;                 // "name", e.g. "Input heavy"; "" when absent
  int64_t input_len = 1024;         // "synthetic.input_len" (IB's default 1024), >= 1
  int64_t output_len = 0;           // "synthetic.output_len" (default: max_new_tokens), >= 1
  double range_ratio = 0.8;         // "synthetic.range_ratio" in (0, 1] (default 0.8)
  bool ignore_eos = true;           // "synthetic.ignore_eos" (IB's synthetic default true)
  bool ignore_eos_given = false;    // the file states synthetic.ignore_eos (request files' fallback)
  int64_t num_requests = 32;        // "num_requests" (default 32), >= 1
  int64_t max_new_tokens = 256;     // "max_new_tokens" (default 256), >= 1
  double temperature = 0.2;         // "temperature" (default 0.2), >= 0
  std::optional<int> concurrency;   // top-level "concurrency": declared, but IB's runner never reads it
  std::vector<IbProfile> profiles;  // "profiles" (C) or the one "profile" (A, B, D); never empty
};

// Parses a scenario file's text. InvalidArgument naming the field on a malformed file.
Result<IbScenario> parse_ib_scenario(std::string_view text);
// Reads and parses; errors are prefixed with the path.
Result<IbScenario> read_ib_scenario(const std::string& path);

// Which concurrency a profile runs at.
enum class IbConcurrency {
  // The profile's "concurrency", else the scenario's top-level "concurrency", else 1: what the
  // file declares (plumb's rule: the declared concurrency is the executed concurrency).
  kDeclared,
  // The profile's "concurrency", else 1: what IB's runner executes (it never reads the top-level
  // field, so IB's scenario D, declared at 4, runs at 1).
  kRunner,
};
Result<IbConcurrency> parse_ib_concurrency(std::string_view s);  // "declared" | "runner"
int ib_profile_concurrency(const IbScenario& s, size_t profile, IbConcurrency rule);

// One arrival spec per profile, seeded: IB draws Poisson gaps from an unseeded generator, plumb
// from derive_seed(seed, "arrival") (one profile) or "arrival/<i>" (profile i of several), the
// same dimensions as the protocol scenarios (docs/protocol.md §2).
std::vector<ArrivalSpec> ib_arrivals(const IbScenario& s, uint64_t seed, IbConcurrency rule);

// The synthetic workload of the scenario: num_requests requests, lengths drawn uniformly from
// [ceil(range_ratio·L), L] with plumb's seeded dimensions, the scenario's temperature and
// ignore_eos. The prompts are plumb's synthetic documents, not IB's LongBench-v2 samples.
SyntheticSpec ib_synthetic_spec(const IbScenario& s, uint64_t seed);

// Values a request file's line takes when it omits a field. IB's runner takes them from the
// scenario; without one, from its own defaults (the values below).
struct IbRequestDefaults {
  int64_t max_new_tokens = 256;  // scenario "max_new_tokens"
  double temperature = 0.2;      // scenario "temperature"
  bool ignore_eos = false;       // scenario "synthetic.ignore_eos" (IB's request-file default: false)
};
IbRequestDefaults ib_request_defaults(const IbScenario& s);

// What an IB request line carries beyond the request itself (kept, not hashed by plumb).
struct IbRequestMeta {
  std::string content_hash;               // "content_hash" as IB wrote it ("" absent); not verified
  std::string sample_id;                  // "sample_id" (or "_id"); "" absent
  int64_t target_input_token_count = -1;  // "target_input_token_count"; -1 absent
};

// An IB request file read as a plumb request set.
struct IbRequestFile {
  RequestSet set;                   // plumb's requests with plumb's own content hashes (computed)
  std::vector<IbRequestMeta> meta;  // meta[i] belongs to set.requests[i]
  size_t ib_hashes = 0;             // lines that carried IB's content_hash
  size_t defaulted = 0;             // lines that took at least one field from the defaults
};

// True when the text's first non-blank line is a JSON object with none of "hash", "max_tokens" and
// "prompt": an IB request file rather than a plumb request set or an OpenAI-style request file
// (workload/request.h parse_jsonl reads both). False for anything else.
bool looks_like_ib_requests(std::string_view text);

// Parses IB's JSONL: "messages" (non-empty array of {role, content}), optional "max_new_tokens",
// "temperature", "ignore_eos" (else `defaults`), "content_hash", "sample_id", "input_token_count"
// (-> Request::prompt_tokens), "target_input_token_count". Blank lines are skipped. Errors name the
// 1-based line and the field; a line without messages is an error (IB's runner skips it silently).
// A line with plumb's "max_tokens" but no "max_new_tokens" is refused (IB would ignore it).
Result<IbRequestFile> parse_ib_requests(std::string_view text, const IbRequestDefaults& defaults);
Result<IbRequestFile> read_ib_requests(const std::string& path, const IbRequestDefaults& defaults);

}  // namespace plumb::workload
