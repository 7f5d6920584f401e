// `plumb kernels search --device cuda`: episodes of propose -> compile -> screen over one op of the
// CUDA candidate ABI (abi.h), each step in a child process (compile.h, screen.h).
//
// Candidates come from
//  - the built-in generator (generate.h): episode 1 takes a spread of its grid; each later episode
//    the untried variants nearest the best so far (fewest parameters different: block size, rows
//    per block, vector width, items per thread, grid cap, fusion);
//  - an external proposer (the JSON-in/JSON-out convention of `plumb tune --proposer`): a program
//    that reads one JSON object on stdin, the context
//      {"schema_version": 1, "op": "swiglu", "rows": 256, "cols": 4096, "abi": "<plumb_cuda_abi.h>",
//       "utility": "implied bandwidth / measured copy bandwidth",
//       "tried": [{"name", "origin", "verdict", "reason", "median_us", "utility"}, ...],
//       "best": {"name", "utility"} | null}
//    and prints one JSON object {"name": ..., "source": "<CUDA C++>", "rationale": ...}. A proposer
//    that fails, times out or prints something unusable is recorded as that episode's failed
//    proposal, never fatal.
//
// Utility u = the candidate's implied bandwidth (the bytes the op must read over its median time,
// L2 flushed between reps) over the card's measured device-to-device copy bandwidth: 1 is the
// roofline of these memory-bound ops, and the screening's roofline floor refuses u > 1.05.
// Candidates are screened without compute-sanitizer; once the episodes are done, the best passing
// candidate is screened again with ScreenOptions::sanitizers, and one that fails them gives way to
// the next (at most three tried). Writes <out>/search.json (schema_version 1) and
// <out>/experience-<e>.json after each episode (verdict counts, the best so far, the best per
// origin). No device: the search stops at the first screening with that verdict, saying so (the
// candidates compiled are kept).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"
#include "kernels/cuda/compile.h"
#include "kernels/cuda/generate.h"
#include "kernels/cuda/screen.h"

namespace plumb::kernels::cuda {

struct CudaSearchOptions {
  std::string plumb_exe;  // the plumb that runs the compile and screening children
  std::string out_dir;
  int episodes = 2;
  int candidates_per_episode = 6;          // built-in variants per episode
  std::vector<std::string> proposer_argv;  // external proposer; empty = none
  int proposals_per_episode = 1;
  std::chrono::milliseconds proposer_timeout{120'000};
  CompileOptions compile;
  ScreenOptions screen;  // op, shape, draws, reps; `sanitizers` run on the best only
  std::function<void(const std::string&)> progress;
};

struct CudaTried {
  std::string name;
  std::string origin;     // "generator" | "proposer"
  std::string rationale;  // the proposer's; the generator's parameters
  int episode = 0;
  CompileResult compile;
  ScreenResult screen;  // verdict crashed with an empty reason when it did not compile
  bool screened = false;
  double utility = 0;  // implied / copy bandwidth when it passed
  std::string error;   // a proposal that failed; or why a best candidate was dropped (sanitizers)
};

struct CudaSearchResult {
  std::vector<CudaTried> tried;
  int best = -1;  // index into tried: passed, and the sanitizers where asked for; -1 = none
};

// Parameters in which two variants differ (block size, rows per block, vector width, items per
// thread, grid cap, fusion).
int variant_distance(const Variant& a, const Variant& b);
// Up to n variants of `all` not in `tried`, nearest `best` first (ties in the generator's order).
std::vector<size_t> nearest_untried(const std::vector<Variant>& all, const Variant& best,
                                    const std::set<std::string>& tried, size_t n);
// n variants spread evenly over the generator's order.
std::vector<size_t> spread(size_t count, size_t n);

// What the proposer reads.
json::object cuda_proposer_context(const CudaSearchOptions& o, const std::vector<CudaTried>& tried, int best);
// The experience record after episode `e`.
json::object cuda_experience(const std::vector<CudaTried>& tried, int best, int episode);

Result<CudaSearchResult> run_cuda_search(const CudaSearchOptions& o);
json::object cuda_search_json(const CudaSearchOptions& o, const CudaSearchResult& r);

}  // namespace plumb::kernels::cuda
