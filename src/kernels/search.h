// `plumb kernels search`: episodes of propose -> screen -> distil over one task.
//
// Candidates come from
//  - the built-in generator: parameterised C++ templates per op, compiled as plugins: vector width
//    (GCC vector extensions, 4/8/16 floats), unrolling (independent accumulators), rows per tile
//    (matmul), thread split (serial, or parallel_for over rows/features with a chunk alignment and a
//    serial cut-off below a work threshold) and fused vs unfused passes (rmsnorm: one sweep that
//    keeps the row in registers vs two sweeps; swiglu: a polynomial exp vs libm's);
//  - an external proposer: any program; it gets a JSON context on stdin (schema_version, task,
//    plugin ABI header, experience record, candidates tried) and prints one JSON object
//    {"name": ..., "source": "<C++>", "rationale": ...} on stdout (the convention of `plumb tune`'s
//    proposer: JSON in, JSON out, a failure is recorded, never fatal).
// Each episode screens its candidates (screen.h) and ends with an experience record
// (<out>/experience-<e>.json): constraints that held (correct and guard-page safe over the shape
// range, faster than baseline, ...), failure signatures with counts, per-family best utility, and
// the best candidate so far. The next episode restarts from the task plus that record: the
// generator explores the neighbourhood of the best family's parameters, skips families whose
// every candidate failed, and the proposer reads the record.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "kernels/screen.h"

namespace plumb::kernels {

struct SearchOptions {
  int episodes = 2;
  int candidates_per_episode = 6;          // built-in candidates per episode
  std::vector<std::string> proposer_argv;  // external proposer; empty = none
  int proposals_per_episode = 1;
  std::chrono::milliseconds proposer_timeout{120'000};
  std::string out_dir;  // candidates, libraries, certificates, experience records, search.json
  ScreenOptions screen;
  uint64_t seed = 7;
  // After the last episode the `confirm` passing candidates with the highest u are screened and timed
  // once more (fresh draws); the best is then the one whose lower u of the two is highest. The
  // highest of many noisy u values is biased upward (the winner's curse: one pair timed during a slow
  // spell of the machine reads near 1 whatever the kernels); a second timing exposes that. 0 = off.
  int confirm = 3;
  std::function<void(const std::string&)> progress;
  // Where candidates are screened. Null: here, one after another (screen_candidate; confirmation by
  // screen_library on the compiled library). Set: called with each batch (an episode's candidates,
  // then the confirmation's) and one screening seed per candidate; returns one result per candidate
  // in order, each screened as screen_candidate would with `screen` and that seed (a confirmation
  // compiles the source again). `plumb kernels search --executor` screens each candidate as a job.
  // An error stops the search (nothing of the batch is recorded).
  std::function<Result<std::vector<ScreenResult>>(const std::vector<Candidate>&,
                                                  const std::vector<uint64_t>&)>
      screen_batch;
};

struct Tried {
  Candidate candidate;
  ScreenResult result;
  int episode = 0;
  double confirmed_utility = -1;  // u of the confirmation screening (0 if it failed); -1 = not re-timed
  // What the best is chosen by: min(u, confirmed u) when re-timed, else u.
  double score() const {
    return confirmed_utility >= 0 ? std::min(result.utility, confirmed_utility) : result.utility;
  }
};

struct SearchResult {
  std::vector<Tried> tried;
  // Index into tried of the best: among re-timed candidates (when any) the highest score(); else the
  // passing candidate with the highest u. -1 if none passed.
  int best = -1;
  std::vector<std::string> experience_files;
};

// The built-in generator's candidates for a task (all of them, in a fixed order).
std::vector<Candidate> builtin_candidates(const Task& task);

// The experience record after `tried` (what is written per episode).
json::object experience_record(const Task& task, const std::vector<Tried>& tried, int episode);

Result<SearchResult> run_search(const Task& task, const SearchOptions& options);
std::string search_json(const Task& task, const SearchResult& r);  // schema_version 1

}  // namespace plumb::kernels
