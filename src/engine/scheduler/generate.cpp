// engine::generate() (engine/generate.h) on the serving engine: one request, one LlmEngine in
// manual mode, stepped until the request's final event.
#include "engine/generate.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler/llm_engine.h"
#include "engine/scheduler/model_runner.h"

namespace plumb::engine {
namespace {

// The model's runner with one more token of context. The last sampled token is never run through
// the model, so a sequence of max_context() + 1 tokens needs only max_context() positions; the
// engine ends a sequence when prompt + generated reaches its runner's context, and with this one
// generate() fills the model's context exactly (the serving engine keeps its one spare token).
class WholeContextRunner final : public scheduler::ModelRunner {
 public:
  explicit WholeContextRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  int64_t max_context() const override { return inner_->max_context() + 1; }
  Status init_kv(int32_t num_blocks, int32_t block_size) override {
    return inner_->init_kv(num_blocks, block_size);
  }
  int64_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }
  Status forward(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits) override {
    return inner_->forward(batch, logits);
  }
  SampleFn sample_kernel() const override { return inner_->sample_kernel(); }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::unique_ptr<ModelRunner> inner_;
};

const char* finish_name(scheduler::FinishReason r) {
  return r == scheduler::FinishReason::kStop ? "stop" : "length";
}

// The serving engine's settings for one sequence: the whole prompt in one pass, a cache just large
// enough, nothing shared. InvalidArgument for a request generate() does not take.
Result<scheduler::LlmEngineConfig> one_sequence_config(int64_t ctx, std::span<const int32_t> prompt,
                                                       const GenerateOptions& opts) {
  PLUMB_RETURN_IF_ERROR(opts.sampling.validate());
  if (prompt.empty()) return invalid_argument("generate: the prompt has no tokens");
  if (int64_t(prompt.size()) > ctx) {
    return invalid_argument("generate: the prompt has " + std::to_string(prompt.size()) +
                            " tokens, more than the model's context of " + std::to_string(ctx));
  }
  if (opts.block_size <= 0) return invalid_argument("generate: block_size must be > 0");
  // Generating n tokens writes the prompt and the first n-1 generated tokens into the cache.
  const int64_t max_new = std::min<int64_t>(opts.sampling.max_tokens, ctx - int64_t(prompt.size()) + 1);
  scheduler::LlmEngineConfig c;
  c.max_num_seqs = 1;
  c.enable_chunked_prefill = false;
  c.enable_prefix_caching = false;
  c.kv_block_size = opts.block_size;
  c.kv_cache_tokens = std::max<int64_t>(int64_t(prompt.size()) + max_new, opts.block_size);
  c.max_queue = 1;
  return c;
}

// Hands one event's tokens to the text stream and the callback; false when the callback asked to
// stop. The final event's last token flushes the text.
bool deliver(scheduler::TokenEvent& ev, TextStream* text,
             const std::function<bool(const GeneratedToken&)>& on_token, GenerateResult& res) {
  for (size_t i = 0; i < ev.tokens.size(); ++i) {
    GeneratedToken g;
    g.id = ev.tokens[i];
    if (i < ev.logprobs.size()) {
      g.logprob = ev.logprobs[i].logprob;
      g.top = std::move(ev.logprobs[i].top);
    }
    res.tokens.push_back(g.id);
    if (text) {
      g.text = text->push(g.id);
      if (ev.finished && i + 1 == ev.tokens.size()) g.text += text->flush();
      res.text += g.text;
    }
    if (on_token && !on_token(g)) return false;
  }
  return true;
}

}  // namespace

Result<GenerateResult> generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opts,
                                TextStream* text,
                                const std::function<bool(const GeneratedToken&)>& on_token) {
  return generate(scheduler::make_model_runner(model, "generate"), prompt, opts, text, on_token);
}

Result<GenerateResult> generate(std::unique_ptr<scheduler::ModelRunner> model_runner,
                                std::span<const int32_t> prompt, const GenerateOptions& opts,
                                TextStream* text,
                                const std::function<bool(const GeneratedToken&)>& on_token) {
  if (!model_runner) return invalid_argument("generate: no model runner");
  PLUMB_ASSIGN_OR_RETURN(scheduler::LlmEngineConfig config,
                         one_sequence_config(model_runner->max_context(), prompt, opts));
  // Declared before the engine: its destructor may still deliver a final (cancelled) event.
  std::vector<scheduler::TokenEvent> events;
  auto runner = std::make_unique<WholeContextRunner>(std::move(model_runner));
  PLUMB_ASSIGN_OR_RETURN(auto engine, scheduler::LlmEngine::create(config, std::move(runner),
                                                                   scheduler::LlmEngine::Mode::kManual));
  scheduler::GenerationRequest req;
  req.prompt.assign(prompt.begin(), prompt.end());
  req.sampling = opts.sampling;
  req.sink = [&events](scheduler::TokenEvent&& ev) { events.push_back(std::move(ev)); };

  Clock& clock = opts.clock ? *opts.clock : static_cast<Clock&>(SteadyClock::instance());
  GenerateResult res;
  res.prompt_tokens = int64_t(prompt.size());
  const SteadyTime t0 = clock.now();
  SteadyTime t_first = t0;
  PLUMB_ASSIGN_OR_RETURN(scheduler::RequestId id, engine->submit(std::move(req)));
  while (res.finish_reason.empty()) {
    if (!engine->step()) return internal_error("generate: the engine went idle before the request finished");
    for (scheduler::TokenEvent& ev : events) {
      if (ev.reason == scheduler::FinishReason::kError) return ev.error;
      if (res.tokens.empty() && !ev.tokens.empty()) t_first = clock.now();
      if (!deliver(ev, text, on_token, res)) {
        engine->cancel(id);
        res.finish_reason = "cancelled";
        break;
      }
      if (ev.finished) {
        res.finish_reason = finish_name(ev.reason);
        break;
      }
    }
    events.clear();
  }
  const SteadyTime t_end = clock.now();
  res.prefill_seconds = seconds_between(t0, t_first);
  res.decode_seconds = seconds_between(t_first, t_end);
  return res;
}

}  // namespace plumb::engine
