// The model flags of `plumb serve` and `plumb generate` (model_flags.h).
#include "cli/model_flags.h"

#include "core/file.h"
#include "core/log.h"
#include "engine/cpu/quant.h"
#include "engine/safetensors.h"

namespace plumb::cli {

void ModelFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--model", model_dir,
                  "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)");
  cmd->add_option("--model-config", model_config,
                  "shipped config name under models/configs/ (needs --load-format dummy)");
  cmd->add_option("--load-format", load_format, "auto (safetensors) | dummy (seeded random weights)")
      ->capture_default_str();
  cmd->add_option("--dtype", dtype, "linear weights in memory: auto (as stored; dummy: bf16) | f32 | bf16")
      ->capture_default_str();
  cmd->add_option("--quantization", quantization,
                  "weight-only quantization of the linear layers at load: none | int8 (per output channel) | "
                  "int4 (groups of 32 inputs) | int4-g64; embeddings and lm_head stay as --dtype "
                  "(docs/architecture.md, Quantization)")
      ->capture_default_str();
  cmd->add_flag("--check-weights", check_weights,
                "scan every weight for NaN/Inf before loading; a bad one fails the command naming the tensor "
                "and the element (dummy weights are generated finite and not scanned)");
  cmd->add_option("--device", device,
                  "where the model runs: cpu | cuda | cuda:N (an NVIDIA GPU; needs a build with CUDA, "
                  "docs/cuda.md)")
      ->capture_default_str();
}

Status ModelFlags::check() const {
  if (!model_dir.empty() && !model_config.empty())
    return invalid_argument("give --model or --model-config, not both");
  if (load_format != "auto" && load_format != "dummy") {
    return invalid_argument("--load-format must be 'auto' or 'dummy'");
  }
  if (!model_config.empty() && load_format != "dummy") {
    return invalid_argument("--model-config ships no weights: add --load-format dummy");
  }
  if (auto d = engine::parse_weight_dtype(dtype); !d.ok()) return d.status().with_context("--dtype");
  if (auto q = engine::parse_quantization(quantization); !q.ok())
    return q.status().with_context("--quantization");
  auto dev = scheduler::parse_device(device);
  if (!dev.ok()) return dev.status().with_context("--device");
  if (dev->kind == scheduler::Device::Kind::kCuda) {
    if (!scheduler::cuda_built()) {
      return failed_precondition("--device " + device +
                                 ": plumb was built without CUDA; rebuild on a machine with the CUDA toolkit "
                                 "(nvcc in /usr/local/cuda/bin or CMAKE_CUDA_COMPILER) with -DPLUMB_CUDA=on "
                                 "(docs/cuda.md)");
    }
    if (quantization != "none") {
      return invalid_argument("--quantization " + quantization +
                              " is CPU-only: the CUDA runner takes bf16 weights");
    }
  }
  return Status::Ok();
}

scheduler::Device ModelFlags::device_spec() const {
  auto dev = scheduler::parse_device(device);
  return dev.ok() ? *dev : scheduler::Device{};
}

Result<std::string> ModelFlags::folder() const {
  if (!model_dir.empty()) return model_dir;
  if (!model_config.empty()) return std::string();
  auto models = engine::find_models_dir();
  if (!models.ok()) return models.status();
  std::string dir = *models + "/plumb-tiny";
  if (!read_file(dir + "/config.json").ok()) {
    return not_found("no --model given and the shipped model " + dir +
                     " is missing; pass --model DIR or --model-config NAME --load-format dummy");
  }
  return dir;
}

Result<std::string> ModelFlags::config_path(const std::string& dir) const {
  if (!model_config.empty()) return engine::resolve_model_config(model_config);
  return dir + "/config.json";
}

std::string ModelFlags::tokenizer_dir(const std::string& dir) const {
  if (!dir.empty()) return dir;
  if (auto models = engine::find_models_dir(); models.ok()) return *models + "/plumb-tiny";
  return "";
}

engine::ModelOptions ModelFlags::options(uint64_t seed, int threads,
                                         const engine::KernelSelection& kernels) const {
  engine::ModelOptions mo;
  mo.seed = seed;
  mo.threads = threads;
  mo.kernels = kernels;
  if (auto d = engine::parse_weight_dtype(dtype); d.ok()) mo.dtype = *d;
  if (auto q = engine::parse_quantization(quantization); q.ok()) mo.quantization = *q;
  return mo;
}

Result<std::unique_ptr<engine::Model>> ModelFlags::load(const std::string& dir,
                                                        const engine::ModelConfig& config,
                                                        const engine::ModelOptions& opts) const {
  if (load_format == "dummy") return engine::Model::dummy(config, opts);
  if (check_weights) {
    PLUMB_ASSIGN_OR_RETURN(engine::ModelTensors tensors, engine::ModelTensors::open_folder(dir));
    PLUMB_RETURN_IF_ERROR(engine::check_finite(tensors).with_context("--check-weights"));
    log::info("event=weights_checked model={} result=finite", dir);
  }
  return engine::Model::load(dir, opts);
}

Result<engine::KernelSelection> load_kernel_selection(const std::string& spec) {
  if (spec.empty() || spec == "auto") return engine::KernelSelection{};
  if (spec == "reference") return engine::KernelSelection::all_reference();
  auto text = read_file(spec);
  if (!text.ok()) return text.status().with_context("--kernels");
  auto sel = engine::KernelSelection::parse_json(*text);
  if (!sel.ok()) return sel.status().with_context(spec);
  return sel;
}

}  // namespace plumb::cli
