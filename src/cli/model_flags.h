// The model-choosing flags `plumb serve` and `plumb generate` share (--model, --model-config,
// --load-format, --dtype, --quantization, --device), their checks, and loading the model they
// name: one place, so the two commands cannot drift apart.
//
// Which model: --model DIR (a Hugging Face folder), or --model-config NAME --load-format dummy (a
// shipped config under models/configs/ on seeded random weights), or neither: the shipped small
// model models/plumb-tiny. The tokenizer is the model folder's; a config-only model borrows the
// shipped model's (callers check it fits the vocabulary).
#pragma once

#include <memory>
#include <string>

#include "cli/command.h"
#include "core/status.h"
#include "engine/model.h"
#include "engine/scheduler/model_runner.h"

namespace plumb::cli {

struct ModelFlags {
  std::string model_dir;              // --model
  std::string model_config;           // --model-config
  std::string load_format = "auto";   // --load-format: auto | dummy
  std::string dtype = "auto";         // --dtype: linear weights in memory
  std::string quantization = "none";  // --quantization: none | int8 | int4 | int4-g64
  bool check_weights = false;         // --check-weights: scan the safetensors for NaN/Inf before loading
  std::string device = "cpu";         // --device: cpu | cuda | cuda:N (scheduler::make_runner)

  // Adds the six options to `cmd` (the help text of each names its values and default).
  void add_to(CLI::App* cmd);

  // Usage errors (InvalidArgument naming the flag): --model with --model-config, an unknown
  // --load-format, --model-config without --load-format dummy, a bad --dtype, --quantization or
  // --device, --quantization with a CUDA device; FailedPrecondition for --device cuda in a build
  // without CUDA (the message says how to build with it).
  Status check() const;
  // The parsed --device (after check()).
  scheduler::Device device_spec() const;

  // The folder with the tokenizer (and weights unless dummy): --model, the shipped model when
  // neither flag is given (NotFound saying what to pass if it is missing), or "" for --model-config.
  Result<std::string> folder() const;
  // config.json of the chosen model (folder from folder()).
  Result<std::string> config_path(const std::string& folder) const;
  // Where to load the tokenizer from: the folder, else the shipped model's ("" if not found).
  std::string tokenizer_dir(const std::string& folder) const;

  // ModelOptions with --dtype and --quantization applied (after check()).
  engine::ModelOptions options(uint64_t seed, int threads, const engine::KernelSelection& kernels) const;
  // Loads the chosen model: dummy weights for `config`, or the safetensors of `folder` (with
  // --check-weights scanned first: Corrupt naming the first non-finite tensor and element).
  Result<std::unique_ptr<engine::Model>> load(const std::string& folder, const engine::ModelConfig& config,
                                              const engine::ModelOptions& opts) const;
};

// --kernels: "auto" (empty selection), "reference" (every op's reference), or a kernel selection
// JSON file (engine/cpu/kernels.h). Errors name the file.
Result<engine::KernelSelection> load_kernel_selection(const std::string& spec);

}  // namespace plumb::cli
