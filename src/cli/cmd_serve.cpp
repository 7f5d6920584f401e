// `plumb serve`: the OpenAI-compatible server over the reference engine (continuous batching) or
// the synthetic engine (tokens on a known schedule, no model compute).
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "core/file.h"
#include "core/json.h"
#include "core/log.h"
#include "engine/model.h"
#include "engine/scheduler/llm_engine.h"
#include "engine/scheduler/model_runner.h"
#include "engine/scheduler/synthetic_engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "net/http_server.h"
#include "server/server.h"

namespace plumb::cli {
namespace {

struct ServeArgs {
  std::string host = "127.0.0.1";
  int port = 8000;
  ModelFlags model;  // --model, --model-config, --load-format, --dtype, --quantization
  std::string served_model_name;
  std::string engine = "llm";
  std::string preset = "default";
  int io_threads = 2;
  int64_t max_connections = 0;  // 0 = from the fd limit
  double idle_timeout_s = 60, header_timeout_s = 60, body_timeout_s = 60;
  uint64_t seed = 0;
  int drain_ms = 30'000;
  // Engine knobs: unset = the preset's value.
  std::optional<int> max_num_seqs, max_num_batched_tokens, prefill_chunk_size, kv_block_size, max_queue,
      threads;
  std::optional<int64_t> kv_cache_tokens;
  std::optional<bool> chunked_prefill, prefix_caching;
  // CUDA runner (docs/cuda.md): unset = on, off in the naive preset; unset = --kv-cache-tokens.
  std::optional<bool> cuda_graphs;
  std::optional<double> gpu_memory_utilization;
  int tensor_parallel_size = 1;
  std::optional<std::string> scheduling_policy, kernels;
  double debug_step_slowdown = 0.0;  // both engines: every step (synthetic: every delay) takes 1 + x as long
  double debug_eos_after = 0.0;      // both engines: ignore ignore_eos, end after this fraction of max_tokens
  // Synthetic engine.
  double ttft_ms = 50.0;
  double itl_ms = 10.0;
  double jitter_ms = 0.0;
  double launch_jitter = 0.0;  // per process: every delay scaled by one factor from [1-x, 1+x]
  std::string distribution = "constant";
  int tokens_per_chunk = 1;
  bool honour_eos = false;
};

int fail(int code, const Status& s) {
  std::cerr << "plumb serve: " << s.to_string() << "\n";
  return code;
}

// The flags that need no model: engine, port, connection and timeout bounds.
int check_args(const ServeArgs& a) {
  if (Status s = a.model.check(); !s.ok()) return fail(kExitUsage, s);
  if (a.engine != "llm" && a.engine != "synthetic") {
    return fail(kExitUsage, invalid_argument("--engine must be 'llm' or 'synthetic'"));
  }
  if (a.port < 0 || a.port > 65535) return fail(kExitUsage, invalid_argument("--port must be in [0, 65535]"));
  if (a.max_connections < 0) {
    return fail(kExitUsage, invalid_argument("--max-connections must be >= 1 (or 0 for the default)"));
  }
  for (auto [flag, v] : {std::pair{"--idle-timeout-s", a.idle_timeout_s},
                         {"--header-timeout-s", a.header_timeout_s},
                         {"--body-timeout-s", a.body_timeout_s}}) {
    if (!(v > 0 && v <= 86400))
      return fail(kExitUsage, invalid_argument(std::string(flag) + " must be in (0, 86400]"));
  }
  return kExitOk;
}

// --served-model-name, else the model config's name, else the model folder's.
std::string served_name(const ServeArgs& a, const std::string& dir) {
  std::string name = a.served_model_name;
  if (name.empty()) {
    if (!a.model.model_config.empty()) {
      name = a.model.model_config;
    } else {
      std::string d = dir;
      while (!d.empty() && d.back() == '/') d.pop_back();
      name = d.substr(d.find_last_of('/') + 1);
    }
  }
  return name;
}

// The synthetic engine: delays on the configured schedule, tokens from the tokenizer.
int make_synthetic(const ServeArgs& a, const engine::ModelConfig& cfg, const engine::Tokenizer& tokenizer,
                   std::unique_ptr<scheduler::ServingEngine>& backend, std::string& summary) {
  using namespace plumb::engine;
  scheduler::SyntheticConfig sc;
  auto kind = scheduler::parse_delay_kind(a.distribution);
  if (!kind.ok()) return fail(kExitUsage, kind.status());
  if (a.launch_jitter < 0 || a.launch_jitter >= 1)
    return fail(kExitUsage, invalid_argument("--launch-jitter must be in [0, 1)"));
  double scale = 1.0;
  if (a.launch_jitter > 0) {
    // Deliberately not seeded: each launch is a different "run" of the same configuration, the
    // run-to-run noise a real server shows (a fault to inject, for the protocol's CV cap).
    std::random_device rd;
    scale = std::uniform_real_distribution<double>(1.0 - a.launch_jitter, 1.0 + a.launch_jitter)(rd);
    log::info("synthetic: --launch-jitter {}: this process's delays are scaled by {:.4f}", a.launch_jitter,
              scale);
  }
  scale *= 1.0 + a.debug_step_slowdown;  // the debug slowdown: longer waits, nothing else
  sc.ttft = {*kind, a.ttft_ms * scale, a.jitter_ms * scale};
  sc.itl = {*kind, a.itl_ms * scale, a.jitter_ms * scale};
  sc.tokens_per_chunk = a.tokens_per_chunk;
  sc.seed = a.seed;
  sc.max_context = cfg.max_context();
  sc.max_queue = a.max_queue.value_or(1 << 20);
  sc.honour_stop_tokens = a.honour_eos;
  sc.token_cycle = tokenizer.encode(
      " The quick brown fox jumps over the lazy dog. A synthetic engine streams these words on a"
      " schedule it knows exactly, so a client's measurements can be checked against the truth.",
      false);
  auto e = scheduler::SyntheticEngine::create(sc);
  if (!e.ok()) return fail(kExitUsage, e.status());
  backend = std::move(e).value();
  summary =
      "synthetic engine, ttft " + std::to_string(a.ttft_ms) + " ms, itl " + std::to_string(a.itl_ms) + " ms";
  return kExitOk;
}

// The preset with the engine flags over it.
int llm_config(const ServeArgs& a, scheduler::LlmEngineConfig& c) {
  auto preset = scheduler::llm_engine_preset(a.preset, a.model.device);
  if (!preset.ok()) return fail(kExitUsage, preset.status());
  c = *preset;
  if (a.max_num_seqs) c.max_num_seqs = *a.max_num_seqs;
  if (a.max_num_batched_tokens) c.max_num_batched_tokens = *a.max_num_batched_tokens;
  if (a.chunked_prefill) c.enable_chunked_prefill = *a.chunked_prefill;
  if (a.prefill_chunk_size) c.prefill_chunk_size = *a.prefill_chunk_size;
  if (a.kv_block_size) c.kv_block_size = *a.kv_block_size;
  if (a.kv_cache_tokens) c.kv_cache_tokens = *a.kv_cache_tokens;
  if (a.prefix_caching) c.enable_prefix_caching = *a.prefix_caching;
  if (a.scheduling_policy) c.scheduling_policy = *a.scheduling_policy;
  if (a.max_queue) c.max_queue = *a.max_queue;
  if (a.threads) c.threads = *a.threads;
  if (a.kernels) c.kernels = *a.kernels;
  c.debug_step_slowdown = a.debug_step_slowdown;
  c.device = a.model.device;
  c.tensor_parallel_size = a.tensor_parallel_size;
  return kExitOk;
}

// --gpu-memory-utilization: the KV cache sized by the runner to that fraction of device memory.
int size_kv_cache(const ServeArgs& a, const engine::ModelConfig& cfg, const scheduler::ModelRunner& runner,
                  scheduler::LlmEngineConfig& c, Result<scheduler::LlmEngineConfig>& eff,
                  std::vector<std::string>& notes) {
  if (a.kv_cache_tokens) {
    return fail(kExitUsage, invalid_argument("--kv-cache-tokens and --gpu-memory-utilization are exclusive"));
  }
  auto tokens = runner.kv_tokens_for_memory_fraction(*a.gpu_memory_utilization, eff->max_num_batched_tokens);
  if (!tokens.ok()) return fail(kExitUsage, tokens.status());
  c.kv_cache_tokens = std::min<int64_t>(*tokens, int64_t(INT32_MAX) / 2);
  auto sized = scheduler::normalize(c, cfg.max_context(), &notes);
  if (!sized.ok()) return fail(kExitUsage, sized.status());
  eff = std::move(sized);
  log::info("event=kv_cache_sized gpu_memory_utilization={} kv_cache_tokens={}", *a.gpu_memory_utilization,
            eff->kv_cache_tokens);
  return kExitOk;
}

// The reference engine: the preset with the flags over it, the model loaded and its runner built.
int make_llm(const ServeArgs& a, const std::string& dir, const engine::ModelConfig& cfg,
             const std::string& name, std::unique_ptr<scheduler::ServingEngine>& backend,
             std::string& summary) {
  using namespace plumb::engine;
  scheduler::LlmEngineConfig c;
  if (int rc = llm_config(a, c); rc != kExitOk) return rc;
  std::vector<std::string> notes;
  auto eff = scheduler::normalize(c, cfg.max_context(), &notes);
  if (!eff.ok()) return fail(kExitUsage, eff.status());
  for (const auto& n : notes) log::info("event=setting_adjusted note=\"{}\"", n);
  log::info("event=settings requested={} effective={}", scheduler::llm_engine_config_json(c),
            scheduler::llm_engine_config_json(*eff));

  auto sel = load_kernel_selection(eff->kernels);
  if (!sel.ok()) return fail(kExitUsage, sel.status());
  const scheduler::Device dev = a.model.device_spec();
  if (sel->has_cuda() && dev.kind == scheduler::Device::Kind::kCpu) {  // before the model loads
    return fail(kExitUsage, invalid_argument("--kernels " + eff->kernels +
                                             " names CUDA candidate kernels (its \"cuda\" entries), which "
                                             "replace the CUDA runner's kernels: add --device cuda"));
  }
  engine::ModelOptions mo = a.model.options(a.seed, eff->threads, *sel);
  mo.upload_only = dev.kind != scheduler::Device::Kind::kCpu;  // row-major host weights, never packed
  auto loaded = a.model.load(dir, cfg, mo);
  if (!loaded.ok()) return fail(kExitError, loaded.status());
  std::unique_ptr<Model> model = std::move(loaded).value();
  std::string desc = name + " (" + architecture_name(cfg.arch) + ", " +
                     std::to_string(cfg.num_hidden_layers) + " layers, " +
                     std::to_string(model->pool().size()) + " threads, kernels " + eff->kernels +
                     ", quantization " + model->weights().quantization().name() + ")";
  if (dev.kind != scheduler::Device::Kind::kCuda &&
      (a.cuda_graphs || a.gpu_memory_utilization || a.tensor_parallel_size != 1)) {
    return fail(kExitUsage,
                invalid_argument("--cuda-graphs, --gpu-memory-utilization and --tensor-parallel-size "
                                 "need --device cuda[:N]"));
  }
  scheduler::RunnerOptions ro;
  ro.cuda_graphs = a.cuda_graphs.value_or(a.preset != "naive");
  ro.reference_kernels = a.preset == "naive";
  ro.tensor_parallel_size = a.tensor_parallel_size;
  ro.cuda_candidates_prefill = sel->cuda_prefill;
  ro.cuda_candidates_decode = sel->cuda_decode;
  const bool bar = dev.kind != scheduler::Device::Kind::kCpu && isatty(2) != 0;
  if (bar) {
    ro.upload_progress = [name = dev.name()](size_t done, size_t all) {
      std::fprintf(stderr, "\rloading weights onto %s: layer %zu of %zu   ", name.c_str(), done, all);
      if (done == all) std::fprintf(stderr, "\n");
    };
  }
  const auto upload_start = std::chrono::steady_clock::now();
  auto runner = scheduler::make_runner(dev, std::move(model), desc, ro);
  if (!runner.ok()) return fail(kExitError, runner.status());
  if (dev.kind != scheduler::Device::Kind::kCpu) {
    log::info("event=weights_on_device device={} seconds={:.2f} runner=\"{}\"", dev.name(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - upload_start).count(),
              (*runner)->describe());
  }
  if (a.gpu_memory_utilization) {
    if (int rc = size_kv_cache(a, cfg, **runner, c, eff, notes); rc != kExitOk) return rc;
  }
  auto e = scheduler::LlmEngine::create(*eff, std::move(runner).value());
  if (!e.ok()) return fail(kExitError, e.status());
  backend = std::move(e).value();
  summary =
      "preset " + a.preset + (a.model.quantization == "none" ? "" : ", quantization " + a.model.quantization);
  return kExitOk;
}

server::ServerOptions server_options(const ServeArgs& a, const std::string& name) {
  server::ServerOptions so;
  so.host = a.host;
  so.port = uint16_t(a.port);
  so.io_threads = a.io_threads;
  so.served_model_name = name;
  so.debug_eos_after = a.debug_eos_after;
  so.max_connections = std::size_t(a.max_connections);
  auto ms = [](double s) { return std::chrono::milliseconds(int64_t(s * 1000.0)); };
  so.idle_timeout = ms(a.idle_timeout_s);
  so.header_timeout = ms(a.header_timeout_s);
  so.body_timeout = ms(a.body_timeout_s);
  log::info("event=http_limits max_connections={} idle_timeout_s={} header_timeout_s={} body_timeout_s={}",
            a.max_connections > 0 ? std::size_t(a.max_connections) : net::default_max_connections(),
            a.idle_timeout_s, a.header_timeout_s, a.body_timeout_s);
  return so;
}

int run(const ServeArgs& a) {
  using namespace plumb::engine;
  // SIGTERM/SIGINT are taken synchronously by this thread (blocked in every thread, sigwait below),
  // so the drain runs in normal code, not in a signal handler. Blocked before any thread starts
  // (engine, kernel pool, IO), since threads inherit the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  if (int rc = check_args(a); rc != kExitOk) return rc;

  auto folder = a.model.folder();
  if (!folder.ok()) return fail(kExitError, folder.status());
  std::string dir = *folder;

  // The model config (for the context and dummy weights).
  auto config_path = a.model.config_path(dir);
  if (!config_path.ok()) return fail(kExitUsage, config_path.status());
  auto cfg = load_model_config(*config_path);
  if (!cfg.ok()) return fail(kExitUsage, cfg.status());

  // Tokenizer: the model folder's; for a config-only model, the shipped model's when its
  // vocabulary fits inside the model's (the same rule as `plumb generate`).
  const std::string tok_dir = a.model.tokenizer_dir(dir);
  auto tok = Tokenizer::load(tok_dir);
  if (!tok.ok()) return fail(kExitError, tok.status().with_context("loading the tokenizer from " + tok_dir));
  if ((*tok)->vocab_size() > cfg->vocab_size) {
    return fail(kExitUsage,
                invalid_argument("the tokenizer of " + tok_dir + " (" + std::to_string((*tok)->vocab_size()) +
                                 " ids) does not fit the model's vocabulary (" +
                                 std::to_string(cfg->vocab_size) + "); serve needs a tokenizer"));
  }
  const std::string name = served_name(a, dir);

  std::unique_ptr<scheduler::ServingEngine> backend;
  std::string summary;
  if (a.engine == "synthetic") {
    if (int rc = make_synthetic(a, *cfg, **tok, backend, summary); rc != kExitOk) return rc;
  } else {
    if (int rc = make_llm(a, dir, *cfg, name, backend, summary); rc != kExitOk) return rc;
  }

  server::ServerOptions so = server_options(a, name);
  server::OpenAiServer srv(so, *backend, **tok);

  Status st = srv.start();
  if (!st.ok()) return fail(kExitError, st);
  std::cout << "plumb serve: listening on http://" << a.host << ":" << srv.port() << " (model " << name
            << ", " << summary << ")" << std::endl;
  int sig = 0;
  sigwait(&sigs, &sig);
  log::info("event=signal signal={} draining_ms={}", sig, a.drain_ms);
  srv.drain(std::chrono::milliseconds(a.drain_ms));
  backend->stop();
  std::cout << "plumb serve: stopped" << std::endl;
  return kExitOk;
}

void setup(CLI::App& root) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = root.add_subcommand(
      "serve",
      "Serve a model over the OpenAI API (/v1/completions, /v1/chat/completions, /v1/models, /tokenize,\n"
      "/detokenize, /health, /metrics) with continuous batching, chunked prefill, prefix caching and\n"
      "preemption. With no --model it serves the shipped small model (models/plumb-tiny).\n"
      "Engine knobs start from --preset (naive: one request at a time, no prefix caching, no chunked\n"
      "prefill, reference kernels; default: the defaults shown) and explicit flags override it.\n"
      "--engine synthetic streams tokens on a configured schedule with no model compute (for measuring\n"
      "clients). Prints 'plumb serve: listening on http://HOST:PORT (...)' when ready; SIGTERM drains.\n"
      "Examples:\n"
      "  plumb serve --port 8000\n"
      "  plumb serve --model-config qwen2.5-0.5b --load-format dummy --preset naive\n"
      "  plumb serve --quantization int8\n"
      "  plumb serve --engine synthetic --ttft-ms 20 --itl-ms 5 --port 0");
  cmd->add_option("--host", a->host, "address to bind")->capture_default_str();
  cmd->add_option("--port", a->port, "port (0 = any free port; the ready line names it)")
      ->capture_default_str();
  a->model.add_to(cmd);
  cmd->add_option("--served-model-name", a->served_model_name,
                  "model id clients send (default: the model folder's or config's name)");
  cmd->add_option("--engine", a->engine, "llm (the reference engine) | synthetic (no compute)")
      ->capture_default_str();
  cmd->add_option("--preset", a->preset, "naive | default: starting values of the engine knobs")
      ->capture_default_str();
  scheduler::LlmEngineConfig d;
  cmd->add_option("--max-num-seqs", a->max_num_seqs,
                  "sequences in the running batch at most [default " + std::to_string(d.max_num_seqs) +
                      ", with --device cuda 256; naive 1]");
  cmd->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                  "tokens per engine step, decode + prefill [default " +
                      std::to_string(d.max_num_batched_tokens) +
                      ", with --device cuda 2048; without chunked prefill raised to the context]");
  cmd->add_option(
      "--enable-chunked-prefill", a->chunked_prefill,
      "true|false: split long prompts over steps, mixed with decodes [default true, naive false]");
  cmd->add_option("--prefill-chunk-size", a->prefill_chunk_size,
                  "prompt tokens per sequence per step with chunked prefill [default " +
                      std::to_string(d.prefill_chunk_size) + ", with --device cuda 2048]");
  cmd->add_option("--kv-block-size", a->kv_block_size,
                  "token slots per KV block [default " + std::to_string(d.kv_block_size) + "]");
  cmd->add_option("--kv-cache-tokens", a->kv_cache_tokens,
                  "KV cache capacity in tokens; also caps the context [default " +
                      std::to_string(d.kv_cache_tokens) + "]");
  cmd->add_option("--cuda-graphs", a->cuda_graphs,
                  "true|false: replay decode steps as CUDA graphs, one per batch-size bucket (--device cuda) "
                  "[default true, naive false]");
  cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                  "fraction of the GPU's memory for weights, workspace and KV cache; sizes the KV cache from "
                  "what is free after loading (--device cuda; instead of --kv-cache-tokens)");
  cmd->add_option("--tensor-parallel-size", a->tensor_parallel_size,
                  "split the model over this many GPUs, --device cuda:N and the ones after it: attention "
                  "heads and MLP columns per card, NCCL all-reduces between (--device cuda; docs/cuda.md) "
                  "[default 1]")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--enable-prefix-caching", a->prefix_caching,
                  "true|false: reuse cached full KV blocks across requests [default true, naive false]");
  cmd->add_option("--scheduling-policy", a->scheduling_policy,
                  "fcfs (first come, first served) [default fcfs]");
  cmd->add_option(
      "--max-queue", a->max_queue,
      "requests waiting at most; more get HTTP 429 [default " + std::to_string(d.max_queue) + "]");
  cmd->add_option("--threads", a->threads,
                  "compute threads including the engine thread (0 = all cores) [default 0]");
  cmd->add_option(
      "--kernels", a->kernels,
      "auto | reference | a kernel selection JSON file (as plumb generate --kernels) [default auto, "
      "naive reference]");
  cmd->add_option("--debug-step-slowdown", a->debug_step_slowdown,
                  "debugging: make the engine this fraction slower by waiting and nothing else (llm: after "
                  "each step, wait x times the step's duration; synthetic: every delay times 1 + x). A "
                  "configuration known to be slower, for `plumb compare calibrate`")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option(
         "--debug-eos-after", a->debug_eos_after,
         "debugging: behave like a server that ignores ignore_eos and stops at its end-of-sequence "
         "token: every request ends after ceil(F * max_tokens) tokens (or at the model's own EOS, if "
         "sooner). A strawman that cannot honour the output length, for testing how plumb bench "
         "scores one (docs/protocol.md §3); 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a->seed, "dummy weights' seed; synthetic schedule seed")->capture_default_str();
  cmd->add_option("--io-threads", a->io_threads, "HTTP IO threads")->capture_default_str();
  cmd->add_option("--max-connections", a->max_connections,
                  "HTTP connections at once; past it a new connection gets 503 at once [default 0 = the "
                  "file-descriptor soft limit minus min(128, limit/2); now " +
                      std::to_string(net::default_max_connections()) + "]");
  cmd->add_option("--idle-timeout-s", a->idle_timeout_s,
                  "seconds a connection may wait for its next request (keep-alive) before it is closed")
      ->capture_default_str();
  cmd->add_option("--header-timeout-s", a->header_timeout_s,
                  "seconds for a request head, from its first byte")
      ->capture_default_str();
  cmd->add_option("--body-timeout-s", a->body_timeout_s, "seconds for a request body, after its head")
      ->capture_default_str();
  cmd->add_option("--drain-ms", a->drain_ms, "on SIGTERM, time running requests get to finish")
      ->capture_default_str();
  cmd->add_option("--ttft-ms", a->ttft_ms, "synthetic: time to first token (centre)")->capture_default_str();
  cmd->add_option("--itl-ms", a->itl_ms, "synthetic: time between chunks (centre)")->capture_default_str();
  cmd->add_option("--jitter-ms", a->jitter_ms, "synthetic: spread of both delays (see --distribution)")
      ->capture_default_str();
  cmd->add_option("--launch-jitter", a->launch_jitter,
                  "synthetic: scale every delay of this process by one unseeded factor drawn from [1-x, 1+x] "
                  "(run-to-run noise: each launch of the same configuration is a little faster or slower)")
      ->capture_default_str();
  cmd->add_option("--distribution", a->distribution,
                  "synthetic: constant | uniform (centre +- jitter) | normal (sd jitter) | lognormal (median "
                  "centre, sigma jitter/centre)")
      ->capture_default_str();
  cmd->add_option("--tokens-per-chunk", a->tokens_per_chunk, "synthetic: tokens per streamed chunk")
      ->capture_default_str();
  cmd->add_flag(
      "--synthetic-honour-eos", a->honour_eos,
      "synthetic: end at a stop token if the cycled text contains one (default: always max_tokens)");
  cmd->callback([a] { set_exit_code(run(*a)); });
}

PLUMB_COMMAND(30, setup);

}  // namespace
}  // namespace plumb::cli
