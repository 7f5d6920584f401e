// The CUDA side of `plumb kernels` (docs/kernels.md, "CUDA"): abi, compile, generate and their
// internal child. Defined in cmd_kernels_cuda.cpp; in a build without CUDA the commands exist and
// say how to get a CUDA build.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace plumb::cli {

// The flags `plumb kernels screen --device cuda` adds (op, shape range, draws, reps, arch, time
// limits); opaque outside cmd_kernels_cuda.cpp.
struct CudaScreenArgs;
std::shared_ptr<CudaScreenArgs> add_cuda_screen_flags(CLI::App* screen);
// Compiles `source` in a child, screens the cubin in another (`draws` per shape; timed unless
// `timing` is off); prints the verdict (JSON with `json`). Exit code: 0 iff it passes.
int run_cuda_screen(const CudaScreenArgs& a, const std::string& source, const std::string& out, int draws,
                    bool timing, bool json);

// `plumb kernels search --device cuda` (kernels/cuda/search.h): the shape and screening flags of
// `a`, and these. Exit code: 0 when a best candidate was found, 1 when none passed, 3 on an error
// (no device included).
struct CudaSearchArgs {
  std::string out;  // default <op>.search
  int episodes = 2;
  int candidates = 6;
  std::string proposer;  // run by /bin/sh; "" = none
  int proposals = 1;
  double proposer_timeout_s = 120;
  int draws = 3;
  bool timing = true;
  bool json = false;
};
int run_cuda_search(const CudaScreenArgs& a, const CudaSearchArgs& s);

// Adds the CUDA subcommands under `plumb kernels`.
void add_kernels_cuda_commands(CLI::App* kernels);

}  // namespace plumb::cli
