// `plumb generate`: run the reference engine on one prompt and stream the text.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/log.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/scheduler/model_runner.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace plumb::cli {
namespace {

struct GenerateArgs {
  ModelFlags model;  // --model, --model-config, --load-format, --dtype, --quantization
  std::string prompt = "Once upon a time";
  int max_tokens = 64;
  bool chat = false;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  int threads = 0;
  std::string kernels = "auto";
  bool ignore_eos = false;
  int block_size = 16;
  int tensor_parallel_size = 1;  // --device cuda: the model split over this many cards
};

int fail(int code, const Status& s) {
  std::cerr << "plumb generate: " << s.to_string() << "\n";
  return code;
}

// Tokenizer: the model folder's; for a config-only model, the shipped model's tokenizer when its
// vocabulary fits inside the model's, else none: bytes (see docs/architecture.md, Engine).
int load_tokenizer(const GenerateArgs& a, const std::string& dir, const engine::Model& model,
                   std::unique_ptr<engine::Tokenizer>& tok) {
  using namespace plumb::engine;
  const std::string tok_dir = a.model.tokenizer_dir(dir);
  if (!tok_dir.empty()) {
    auto t = Tokenizer::load(tok_dir);
    if (t.ok() && (*t)->vocab_size() <= model.config().vocab_size) {
      tok = std::move(t).value();
    } else if (!t.ok() && !a.model.model_dir.empty() && t.status().code() != Code::kNotFound) {
      return fail(kExitError, t.status());
    }
  }

  return kExitOk;
}

// The prompt as token ids: through the tokenizer (and chat template with --chat), else UTF-8 bytes.
int encode_prompt(const GenerateArgs& a, const engine::Tokenizer* tok, const engine::Model& model,
                  std::vector<int32_t>& ids) {
  using namespace plumb::engine;
  if (tok) {
    if (a.chat) {
      std::vector<ChatMessage> msgs = {{"user", a.prompt}};
      auto text = apply_chat_template(*tok, msgs, true);
      if (!text.ok()) return fail(kExitUsage, text.status());
      ids = tok->encode(*text, /*add_special_tokens=*/false);
    } else {
      ids = tok->encode(a.prompt, /*add_special_tokens=*/true);
    }
  } else {
    if (a.chat) return fail(kExitUsage, invalid_argument("--chat needs a tokenizer with a chat template"));
    if (model.config().vocab_size < 256) {
      return fail(kExitUsage, invalid_argument("no tokenizer, and the vocabulary is too small for bytes"));
    }
    ids = byte_encode(a.prompt);
  }

  return kExitOk;
}

// The model line of the summary, taken before the runner takes the model.
std::string describe_model(const GenerateArgs& a, const std::string& dir, engine::Model& model,
                           bool has_tokenizer) {
  using namespace plumb::engine;
  const auto& cfg = model.config();
  std::ostringstream d;
  d << (a.model.model_config.empty() ? dir : a.model.model_config) << " (" << architecture_name(cfg.arch)
    << ", " << cfg.num_hidden_layers << " layers, "
    << (model.weights().quantization().scheme == QuantScheme::kNone
            ? std::string(dtype_name(model.weights().linear_dtype()))
            : model.weights().quantization().name() + " linear")
    << (a.model.load_format == "dummy" ? " dummy" : "") << " weights, " << model.pool().size() << " threads, "
    << (has_tokenizer ? "tokenizer" : "byte-level text") << ")";
  return d.str();
}

void print_summary(const std::string& described, double load_s, const engine::GenerateResult& res) {
  std::cout << "---\n"
            << "model: " << described << ", loaded in " << load_s << " s\n"
            << "prompt tokens: " << res.prompt_tokens << "\n"
            << "generated tokens: " << res.tokens.size() << " (finish: " << res.finish_reason << ")\n"
            << "prefill: " << res.prefill_tokens_per_s() << " tokens/s (" << res.prefill_seconds * 1e3
            << " ms)\n"
            << "decode: " << res.decode_tokens_per_s() << " tokens/s (" << res.decode_seconds * 1e3
            << " ms for " << (res.tokens.empty() ? 0 : res.tokens.size() - 1) << " tokens)\n";
}

int run(const GenerateArgs& a) {
  using namespace plumb::engine;
  if (Status s = a.model.check(); !s.ok()) return fail(kExitUsage, s);
  auto sel = load_kernel_selection(a.kernels);
  if (!sel.ok()) return fail(kExitUsage, sel.status());
  ModelOptions mo = a.model.options(a.seed, a.threads, *sel);
  mo.upload_only = a.model.device_spec().kind != scheduler::Device::Kind::kCpu;  // row-major, never packed

  // Where the config (and maybe weights and tokenizer) come from.
  auto folder = a.model.folder();
  if (!folder.ok()) return fail(kExitError, folder.status());
  const std::string dir = *folder;
  auto config_path = a.model.config_path(dir);
  if (!config_path.ok()) return fail(kExitUsage, config_path.status());
  auto config = load_model_config(*config_path);
  if (!config.ok()) return fail(kExitUsage, config.status());

  SteadyClock& clock = SteadyClock::instance();
  const SteadyTime t_load = clock.now();
  auto loaded = a.model.load(dir, *config, mo);
  if (!loaded.ok()) return fail(kExitError, loaded.status());
  std::unique_ptr<Model> model = std::move(loaded).value();
  const double load_s = seconds_between(t_load, clock.now());

  std::unique_ptr<Tokenizer> tok;
  if (int rc = load_tokenizer(a, dir, *model, tok); rc != kExitOk) return rc;
  std::vector<int32_t> ids;
  if (int rc = encode_prompt(a, tok.get(), *model, ids); rc != kExitOk) return rc;

  // The model line, before the runner takes the model.
  const auto& cfg = model->config();
  std::ostringstream described;
  described << describe_model(a, dir, *model, tok != nullptr);
  GenerateOptions go;
  go.sampling.temperature = a.temperature;
  go.sampling.top_p = a.top_p;
  go.sampling.top_k = a.top_k;
  go.sampling.seed = a.seed;
  go.sampling.max_tokens = a.max_tokens;
  go.sampling.ignore_eos = a.ignore_eos;
  go.sampling.eos_ids = model_eos_ids(cfg, tok.get());
  go.block_size = a.block_size;
  // The runner factory for --device (cpu, cuda, cuda:N): generate() is the same loop on every device.
  const scheduler::Device device = a.model.device_spec();
  if (device.kind != scheduler::Device::Kind::kCpu) {
    log::info("event=settings device={}", device.name());
    described << " on " << device.name();
  }
  scheduler::RunnerOptions ro;
  ro.tensor_parallel_size = a.tensor_parallel_size;
  auto runner = scheduler::make_runner(device, std::move(model), described.str(), ro);
  if (!runner.ok()) return fail(kExitError, runner.status());
  // Special tokens (the EOS that ends a chat turn) are not printed.
  auto stream = tok ? tokenizer_text_stream(*tok, /*skip_special_tokens=*/true) : byte_text_stream();
  auto res = generate(std::move(runner).value(), ids, go, stream.get(), [](const GeneratedToken& g) {
    std::fwrite(g.text.data(), 1, g.text.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::cout << "\n";
  if (!res.ok())
    return fail(res.status().code() == Code::kInvalidArgument ? kExitUsage : kExitError, res.status());

  print_summary(described.str(), load_s, *res);
  return kExitOk;
}

void setup(CLI::App& root) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = root.add_subcommand(
      "generate",
      "Generate text with plumb's reference engine and report its speed.\n"
      "With no --model it runs the shipped small model (models/plumb-tiny). --model-config NAME with\n"
      "--load-format dummy runs a real architecture (models/configs/NAME: qwen2.5-0.5b, llama-3.2-1b,\n"
      "smollm2-135m, tinyllama-1.1b, qwen3-0.6b, mistral-7b) on seeded random weights: the text is\n"
      "meaningless, the speed is real. Prints the text as it streams, then prompt tokens, prefill\n"
      "tokens/s and decode tokens/s (monotonic clock). A config-only model uses the shipped model's\n"
      "tokenizer when its vocabulary fits in the model's (ids it does not know print as [id]), else\n"
      "UTF-8 bytes as token ids.\n"
      "Examples:\n"
      "  plumb generate --prompt 'Once upon a time' --max-tokens 64\n"
      "  plumb generate --model-config qwen2.5-0.5b --load-format dummy --max-tokens 32 --ignore-eos\n"
      "  plumb generate --quantization int8 --prompt 'Q: 2+3=' --temperature 0");
  a->model.add_to(cmd);
  cmd->add_option("--prompt", a->prompt, "prompt text")->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--tensor-parallel-size", a->tensor_parallel_size,
                  "split the model over this many GPUs, --device cuda:N and the ones after it (docs/cuda.md)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--chat", a->chat, "wrap the prompt as one user message in the model's chat template");
  cmd->add_option("--temperature", a->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "nucleus sampling, in (0, 1]")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "keep the k most likely tokens (0 = all)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "sampling seed (and dummy weights' seed)")->capture_default_str();
  cmd->add_option("--threads", a->threads, "kernel threads including the caller (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--kernels", a->kernels,
                  "auto | reference | a kernel selection JSON file, e.g. {\"matmul\": \"reference\", "
                  "\"attention\": {\"decode\": \"avx2\"}}")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-sequence tokens");
  cmd->add_option("--block-size", a->block_size, "KV cache block size in tokens")->capture_default_str();
  cmd->callback([a] { set_exit_code(run(*a)); });
}

PLUMB_COMMAND(20, setup);

}  // namespace
}  // namespace plumb::cli
