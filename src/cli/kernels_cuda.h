// The CUDA side of `plumb kernels` (docs/kernels.md, "CUDA"): abi, compile, generate and their
// internal child. Defined in cmd_kernels_cuda.cpp; in a build without CUDA the commands exist and
// say how to get a CUDA build.
#pragma once

#include <CLI/CLI.hpp>

namespace plumb::cli {

// Adds the CUDA subcommands under `plumb kernels`.
void add_kernels_cuda_commands(CLI::App* kernels);

}  // namespace plumb::cli
