#include "engine/scheduler/llm_engine.h"

#include <algorithm>
#include <optional>

#include "core/json.h"
#include "core/log.h"
#include "core/random.h"
#include "engine/sampling.h"

namespace plumb::scheduler {

Result<LlmEngineConfig> llm_engine_preset(const std::string& name, std::string_view device) {
  LlmEngineConfig c;
  if (name == "default") {
    // A GPU step costs about the same for 1 and for a few hundred rows (it reads every weight
    // once): the CPU's 512-token steps made a 4,096-token prompt take 16 steps, each holding up the
    // running sequences' next tokens, and a batch of 32 left the card mostly idle.
    if (auto d = parse_device(std::string(device)); d.ok() && d->kind == Device::Kind::kCuda) {
      c.max_num_seqs = 256;
      c.max_num_batched_tokens = 2048;
      c.prefill_chunk_size = 2048;
    }
    return c;
  }
  if (name == "naive") {
    c.max_num_seqs = 1;
    c.enable_prefix_caching = false;
    c.enable_chunked_prefill = false;
    c.kernels = "reference";
    return c;
  }
  return invalid_argument("unknown preset '" + name + "' (naive|default)");
}

Result<LlmEngineConfig> normalize(const LlmEngineConfig& requested, int64_t model_context,
                                  std::vector<std::string>* notes) {
  LlmEngineConfig c = requested;
  auto note = [&](std::string s) {
    if (notes) notes->push_back(std::move(s));
  };
  if (c.max_num_seqs < 1) return invalid_argument("max_num_seqs must be >= 1");
  if (c.max_num_batched_tokens < 1) return invalid_argument("max_num_batched_tokens must be >= 1");
  if (c.prefill_chunk_size < 1) return invalid_argument("prefill_chunk_size must be >= 1");
  if (c.kv_block_size < 1 || c.kv_block_size > 1024)
    return invalid_argument("kv_block_size must be in [1, 1024]");
  if (c.kv_cache_tokens < c.kv_block_size)
    return invalid_argument("kv_cache_tokens must be >= kv_block_size");
  if (c.max_queue < 1) return invalid_argument("max_queue must be >= 1");
  if (c.threads < 0) return invalid_argument("threads must be >= 0");
  if (!(c.debug_step_slowdown >= 0 && c.debug_step_slowdown <= 100))
    return invalid_argument("debug_step_slowdown must be in [0, 100]");
  if (c.scheduling_policy != "fcfs") {
    return invalid_argument("scheduling policy '" + c.scheduling_policy + "' is not supported (fcfs)");
  }
  if (model_context < 2) return invalid_argument("model context must be >= 2 tokens");
  PLUMB_ASSIGN_OR_RETURN(Device device, parse_device(c.device));
  if (device.name() != c.device) {
    note("device " + c.device + " is " + device.name());
    c.device = device.name();
  }
  if (!c.enable_chunked_prefill && c.max_num_batched_tokens < model_context) {
    note("max_num_batched_tokens raised from " + std::to_string(c.max_num_batched_tokens) +
         " to the context " + std::to_string(model_context) +
         ": without chunked prefill a whole prompt must fit in one step");
    c.max_num_batched_tokens = int32_t(model_context);
  }
  if (c.prefill_chunk_size > c.max_num_batched_tokens) {
    note("prefill_chunk_size capped at max_num_batched_tokens (" + std::to_string(c.max_num_batched_tokens) +
         ")");
    c.prefill_chunk_size = c.max_num_batched_tokens;
  }
  int64_t rounded = (c.kv_cache_tokens + c.kv_block_size - 1) / c.kv_block_size * c.kv_block_size;
  if (rounded != c.kv_cache_tokens) {
    note("kv_cache_tokens rounded up to whole blocks: " + std::to_string(rounded));
    c.kv_cache_tokens = rounded;
  }
  return c;
}

std::string llm_engine_config_json(const LlmEngineConfig& c) {
  json::object o;
  o["max_num_seqs"] = c.max_num_seqs;
  o["max_num_batched_tokens"] = c.max_num_batched_tokens;
  o["enable_chunked_prefill"] = c.enable_chunked_prefill;
  o["prefill_chunk_size"] = c.prefill_chunk_size;
  o["kv_block_size"] = c.kv_block_size;
  o["kv_cache_tokens"] = c.kv_cache_tokens;
  o["enable_prefix_caching"] = c.enable_prefix_caching;
  o["scheduling_policy"] = c.scheduling_policy;
  o["max_queue"] = c.max_queue;
  o["threads"] = c.threads;
  o["kernels"] = c.kernels;
  o["device"] = c.device;
  if (c.tensor_parallel_size != 1) o["tensor_parallel_size"] = c.tensor_parallel_size;  // absent: one card
  if (c.debug_step_slowdown > 0) o["debug_step_slowdown"] = c.debug_step_slowdown;
  return json::dump(o);
}

struct LlmEngine::Seq {
  RequestId id = 0;
  GenerationRequest req;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t prompt_len = 0;
  int32_t num_computed = 0;      // tokens whose K/V is in the cache
  std::vector<int32_t> table;    // block table
  std::vector<uint64_t> hashes;  // hash chain of the leading full, computed blocks
  int32_t generated = 0;
  std::optional<engine::Sampler> sampler;
  RequestTimings timings;
  std::vector<TokenLogprob> prompt_lp;  // collected until the first token goes out
  bool prompt_lp_done = false;
  bool ever_scheduled = false;
};

LlmEngine::LlmEngine(LlmEngineConfig config, std::unique_ptr<ModelRunner> runner, Mode mode)
    : config_(std::move(config)), runner_(std::move(runner)), mode_(mode) {}

Result<std::unique_ptr<LlmEngine>> LlmEngine::create(const LlmEngineConfig& config,
                                                     std::unique_ptr<ModelRunner> runner, Mode mode) {
  if (!runner) return invalid_argument("LlmEngine needs a model runner");
  PLUMB_ASSIGN_OR_RETURN(LlmEngineConfig eff, normalize(config, runner->max_context()));
  int32_t num_blocks = int32_t(eff.kv_cache_tokens / eff.kv_block_size);
  PLUMB_RETURN_IF_ERROR(
      runner->init_kv(num_blocks, eff.kv_block_size).with_context("allocating the KV cache"));
  std::unique_ptr<LlmEngine> e(new LlmEngine(std::move(eff), std::move(runner), mode));
  e->blocks_ =
      std::make_unique<BlockManager>(num_blocks, e->config_.kv_block_size, e->config_.enable_prefix_caching);
  e->max_context_ = std::min<int64_t>(e->runner_->max_context(), e->config_.kv_cache_tokens);
  e->counters_.kv_blocks_total = num_blocks;
  e->stats_ = e->counters_;
  if (mode == Mode::kThread) e->thread_ = std::thread([p = e.get()] { p->run(); });
  return e;
}

LlmEngine::~LlmEngine() { stop(); }

Result<RequestId> LlmEngine::submit(GenerationRequest request) {
  if (!request.sink) return invalid_argument("request has no token sink");
  if (request.prompt.empty()) return invalid_argument("the prompt is empty");
  PLUMB_RETURN_IF_ERROR(request.sampling.validate());
  if (request.sampling.logprobs > 20) return invalid_argument("logprobs must be <= 20");
  int32_t vocab = runner_->vocab_size();
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab) {
      return invalid_argument("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
    }
  }
  if (int64_t(request.prompt.size()) >= max_context_) {
    return invalid_argument("the prompt has " + std::to_string(request.prompt.size()) +
                            " tokens; this server's context is " + std::to_string(max_context_) +
                            " tokens and at least one must be left to generate");
  }
  auto s = std::make_unique<Seq>();
  s->timings.arrival = std::chrono::steady_clock::now();
  s->tokens = request.prompt;
  s->prompt_len = int32_t(request.prompt.size());
  s->timings.prompt_tokens = s->prompt_len;
  s->req = std::move(request);
  std::lock_guard lock(mu_);
  if (stopping_) return unavailable("the server is shutting down");
  if (queued_ >= config_.max_queue) {
    stats_.requests_rejected++;
    return resource_exhausted("queue full: " + std::to_string(queued_) + " requests waiting (max_queue " +
                              std::to_string(config_.max_queue) + ")");
  }
  s->id = next_id_++;
  s->sampler.emplace(s->req.sampling, runner_->sample_kernel(), s->req.prompt);
  RequestId id = s->id;
  inbox_.push_back(std::move(s));
  queued_++;
  stats_.waiting++;
  cv_.notify_one();
  return id;
}

void LlmEngine::cancel(RequestId id) {
  std::lock_guard lock(mu_);
  cancels_.push_back(id);
  cv_.notify_one();
}

ServingStats LlmEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::string LlmEngine::describe() const {
  auto o = json::parse(llm_engine_config_json(config_));
  json::object out;
  out["engine"] = "llm";
  out["model"] = runner_->describe();
  out["max_context"] = max_context_;
  if (o.ok()) out["settings"] = *o;
  return json::dump(out);
}

void LlmEngine::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  if (mode_ == Mode::kManual) {
    // Nobody else drives the engine: cancel what is left here.
    std::vector<std::pair<Seq*, TokenEvent>> out;
    take_inbox();
    for (auto& s : running_) finish(*s, FinishReason::kCancelled, Status::Ok(), out);
    for (auto& s : waiting_) finish(*s, FinishReason::kCancelled, Status::Ok(), out);
    for (auto& [s, ev] : out) s->req.sink(std::move(ev));
    running_.clear();
    waiting_.clear();
    publish_stats();
  }
}

void LlmEngine::take_inbox() {
  std::vector<std::unique_ptr<Seq>> in;
  std::vector<RequestId> cancels;
  {
    std::lock_guard lock(mu_);
    in.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& s : in) waiting_.push_back(std::move(s));
  if (cancels.empty()) return;
  std::vector<std::pair<Seq*, TokenEvent>> out;
  std::vector<std::unique_ptr<Seq>> dead;
  for (RequestId id : cancels) {
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i]->id == id) {
        finish(*running_[i], FinishReason::kCancelled, Status::Ok(), out);
        dead.push_back(std::move(running_[i]));
        running_.erase(running_.begin() + std::ptrdiff_t(i));
        break;
      }
    }
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if ((*it)->id == id) {
        finish(**it, FinishReason::kCancelled, Status::Ok(), out);
        dead.push_back(std::move(*it));
        waiting_.erase(it);
        break;
      }
    }
  }
  for (auto& [s, ev] : out) s->req.sink(std::move(ev));
}

void LlmEngine::finish(Seq& s, FinishReason reason, Status error,
                       std::vector<std::pair<Seq*, TokenEvent>>& out) {
  blocks_->release_all(s.table);
  s.hashes.clear();
  s.timings.finished = std::chrono::steady_clock::now();
  s.timings.completion_tokens = s.generated;
  TokenEvent ev;
  ev.finished = true;
  ev.reason = reason;
  ev.error = std::move(error);
  ev.timings = s.timings;
  switch (reason) {
    case FinishReason::kCancelled:
      counters_.requests_cancelled++;
      break;
    case FinishReason::kError:
      counters_.requests_failed++;
      break;
    default:
      counters_.requests_finished++;
      break;
  }
  out.emplace_back(&s, std::move(ev));
}

bool LlmEngine::ensure_blocks(Seq& s, int64_t n_tokens) {
  int32_t bs = config_.kv_block_size;
  while (int64_t(s.table.size()) * bs < n_tokens) {
    auto b = blocks_->allocate();
    if (!b.ok()) return false;
    s.table.push_back(*b);
  }
  return true;
}

void LlmEngine::preempt(size_t running_index) {
  std::unique_ptr<Seq> s = std::move(running_[running_index]);
  running_.erase(running_.begin() + std::ptrdiff_t(running_index));
  blocks_->release_all(s->table);
  s->hashes.clear();
  s->num_computed = 0;
  if (!s->prompt_lp_done) s->prompt_lp.clear();  // recomputed from the start
  s->timings.preemptions++;
  counters_.preemptions++;
  log::debug("event=preempt request={} tokens={}", s->id, s->tokens.size());
  waiting_.push_front(std::move(s));
}

bool LlmEngine::step() {
  take_inbox();
  if (running_.empty() && waiting_.empty()) {
    publish_stats();
    return false;
  }
  std::vector<Planned> plan;
  int64_t budget = config_.max_num_batched_tokens;
  schedule_running(plan, budget);
  admit_waiting(plan, budget);
  if (plan.empty()) {
    // Everything waits on blocks held by nobody runnable: cannot happen, since a lone sequence
    // always fits (max_context <= KV capacity). Guard against a busy loop anyway.
    publish_stats();
    return false;
  }
  Outcome out;
  Status fs = run_batch(plan);
  if (fs.ok()) {
    take_logits(plan, out);
  } else {
    fail_planned(plan, fs, out);
  }
  retire_ended(out);
  publish_stats();
  for (auto& [s, ev] : out.events) s->req.sink(std::move(ev));
  return true;
}

// A running sequence's share of this step: the rest of its prompt (a chunk of it with chunked
// prefill) or its one decode token, within the budget.
int64_t LlmEngine::tokens_wanted(const Seq& s, int64_t budget) const {
  int64_t n = std::min(int64_t(s.tokens.size()) - s.num_computed, budget);
  if (config_.enable_chunked_prefill) n = std::min<int64_t>(n, config_.prefill_chunk_size);
  return n;
}

void LlmEngine::schedule_running(std::vector<Planned>& plan, int64_t& budget) {
  // Oldest first. A sequence that cannot get a block preempts the newest one.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Seq& s = *running_[i];
    const int64_t want = int64_t(s.tokens.size()) - s.num_computed;
    const int64_t n = tokens_wanted(s, budget);
    if (!config_.enable_chunked_prefill && n < want) break;  // a whole prompt that no longer fits waits
    bool ok = ensure_blocks(s, s.num_computed + n);
    while (!ok && running_.size() - 1 > i) {
      preempt(running_.size() - 1);
      ok = ensure_blocks(s, s.num_computed + n);
    }
    if (!ok) {
      preempt(i);  // it is the newest itself; it waits for blocks to come back
      continue;
    }
    plan.push_back({&s, int32_t(n)});
    budget -= n;
    ++i;
  }
}

void LlmEngine::admit_waiting(std::vector<Planned>& plan, int64_t& budget) {
  // First come, first served; the first request that does not fit stops admission.
  const int32_t bs = config_.kv_block_size;
  while (!waiting_.empty() && int32_t(running_.size()) < config_.max_num_seqs && budget > 0) {
    Seq& s = *waiting_.front();
    if (s.table.empty() && !(s.req.prompt_logprobs && !s.prompt_lp_done)) {
      int32_t max_blocks = int32_t((s.tokens.size() - 1) / size_t(bs));  // always recompute the last token
      int32_t hit = blocks_->match_prefix(s.tokens, max_blocks, s.table, s.hashes);
      s.num_computed = hit * bs;
      if (!s.ever_scheduled) s.timings.cached_prompt_tokens = int64_t(hit) * bs;
    }
    const int64_t want = int64_t(s.tokens.size()) - s.num_computed;
    const int64_t n = tokens_wanted(s, budget);
    int64_t need_blocks = (s.num_computed + n + bs - 1) / bs - int64_t(s.table.size());
    if ((!config_.enable_chunked_prefill && n < want) || need_blocks > blocks_->available()) {
      // Not now: give back the cached blocks it holds so they stay evictable.
      blocks_->release_all(s.table);
      s.hashes.clear();
      s.num_computed = 0;
      break;
    }
    ensure_blocks(s, s.num_computed + n);
    if (!s.ever_scheduled) {
      s.ever_scheduled = true;
      counters_.prompt_tokens += s.prompt_len;
      counters_.prefix_cache_queries = blocks_->query_tokens();
      counters_.prefix_cache_hits = blocks_->hit_tokens();
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.push_back({&s, int32_t(n)});
    budget -= n;
  }
}

Status LlmEngine::run_batch(std::vector<Planned>& plan) {
  batch_.clear();
  SteadyTime now = std::chrono::steady_clock::now();
  const bool device_greedy = runner_->greedy_on_device(), device_draws = runner_->samples_on_device();
  size_t n_greedy = 0;
  for (Planned& p : plan) {
    Seq& s = *p.seq;
    if (s.timings.first_scheduled == SteadyTime{}) s.timings.first_scheduled = now;
    StepSeq st;
    st.tokens = std::span<const int32_t>(s.tokens).subspan(size_t(s.num_computed), size_t(p.n));
    st.start_pos = s.num_computed;
    st.block_table = s.table;
    const bool reaches_end = s.num_computed + p.n == int32_t(s.tokens.size());
    if (s.req.prompt_logprobs && !s.prompt_lp_done && s.num_computed < s.prompt_len) {
      st.logits = StepSeq::Logits::kAll;
    } else {
      st.logits = reaches_end ? StepSeq::Logits::kLast : StepSeq::Logits::kNone;
    }
    // A greedy row's argmax, and a plain draw with a temperature, are taken on the device where the
    // runner can (only ids travel back); the draw's uniform comes from the request's own generator,
    // as sample() would take it.
    if (st.logits == StepSeq::Logits::kLast) {
      if (device_greedy && s.sampler->greedy_only()) {
        st.greedy = true;
      } else if (device_draws && s.sampler->plain_draw()) {
        st.greedy = true;
        st.temperature = s.req.sampling.temperature;
        st.u = s.sampler->next_u();
      }
    }
    n_greedy += st.greedy ? 1 : 0;
    p.logits = st.logits;
    p.greedy = st.greedy;
    batch_.push_back(st);
  }
  greedy_ids_.clear();
  Status fs = n_greedy > 0 ? runner_->forward_greedy(batch_, logits_, greedy_ids_)
                           : runner_->forward(batch_, logits_);
  if (fs.ok() && greedy_ids_.size() != n_greedy) {
    fs = internal_error("the runner returned " + std::to_string(greedy_ids_.size()) + " greedy ids for " +
                        std::to_string(n_greedy) + " greedy rows");
  }
  counters_.steps++;
  return fs;
}

void LlmEngine::fail_planned(const std::vector<Planned>& plan, const Status& error, Outcome& out) {
  log::error("event=forward_failed error=\"{}\"", error.to_string());
  for (const Planned& p : plan) {
    finish(*p.seq, FinishReason::kError, error.with_context("model forward pass"), out.events);
    out.ended.push_back(p.seq);
  }
}

void LlmEngine::take_logits(const std::vector<Planned>& plan, Outcome& out) {
  size_t row = 0, greedy = 0;  // next row of logits_, next id of greedy_ids_
  for (const Planned& p : plan) {
    Seq& s = *p.seq;
    const int32_t start = s.num_computed;
    s.num_computed += p.n;
    register_full_blocks(s);
    if (p.greedy) {
      accept_sampled(s, s.sampler->take(greedy_ids_[greedy++]), out);
      continue;
    }
    std::span<const float> last_row = logit_rows(s, p, start, row);
    if (!last_row.empty()) accept_sampled(s, s.sampler->sample(last_row), out);
  }
}

void LlmEngine::register_full_blocks(Seq& s) {
  const int32_t bs = config_.kv_block_size;
  while (int64_t(s.hashes.size()) < s.num_computed / bs) {
    size_t b = s.hashes.size();
    std::span<const int32_t> toks = std::span<const int32_t>(s.tokens).subspan(b * size_t(bs), size_t(bs));
    uint64_t h = kv_block_hash(b == 0 ? 0 : s.hashes.back(), toks);
    s.hashes.push_back(h);
    blocks_->register_full(s.table[b], h, toks);
  }
}

std::span<const float> LlmEngine::logit_rows(Seq& s, const Planned& p, int32_t start, size_t& row) {
  const auto vocab = size_t(runner_->vocab_size());
  auto row_at = [&](size_t r) { return std::span<const float>(logits_.data() + r * vocab, vocab); };
  if (p.logits == StepSeq::Logits::kLast) return row_at(row++);
  if (p.logits == StepSeq::Logits::kNone) return {};
  // kAll: every row predicts the next prompt token's logprob; the last one also samples.
  for (int32_t j = 0; j < p.n; ++j) {
    const int32_t pos = start + j;  // this row predicts token pos + 1
    if (pos + 1 >= s.prompt_len) continue;
    std::span<const float> r = row_at(row + size_t(j));
    TokenLogprob lp;
    lp.token = s.tokens[size_t(pos) + 1];
    lp.logprob = engine::logprob_of(r, lp.token);
    if (s.req.sampling.logprobs > 0) lp.top = engine::top_logprobs(r, s.req.sampling.logprobs);
    s.prompt_lp.push_back(std::move(lp));
  }
  std::span<const float> last;
  if (s.num_computed == int32_t(s.tokens.size())) last = row_at(row + size_t(p.n) - 1);
  row += size_t(p.n);
  return last;
}

void LlmEngine::accept_sampled(Seq& s, Result<engine::SampledToken> next, Outcome& out) {
  if (!next.ok()) {  // non-finite logits: the request fails, the others go on
    log::error("event=sampling_failed request={} error=\"{}\"", s.id, next.status().to_string());
    finish(s, FinishReason::kError, next.status(), out.events);
    out.ended.push_back(&s);
    return;
  }
  engine::SampledToken sampled = std::move(next).value();
  const int32_t tok = sampled.id;
  TokenEvent ev;
  ev.tokens.push_back(tok);
  if (s.req.sampling.logprobs >= 0)
    ev.logprobs.push_back(TokenLogprob{tok, sampled.logprob, std::move(sampled.top)});
  if (s.req.prompt_logprobs && !s.prompt_lp_done) {
    ev.prompt_logprobs = std::move(s.prompt_lp);
    s.prompt_lp.clear();
  }
  s.prompt_lp_done = true;
  s.tokens.push_back(tok);
  s.generated++;
  counters_.generation_tokens++;
  if (s.timings.first_token == SteadyTime{}) s.timings.first_token = std::chrono::steady_clock::now();
  FinishReason reason = FinishReason::kNone;
  if (s.req.sampling.ends_sequence(tok, s.generated)) {
    reason = FinishReason::kStop;
  } else if (s.generated >= s.req.sampling.max_tokens || int64_t(s.tokens.size()) >= max_context_) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) {
    out.events.emplace_back(&s, std::move(ev));
    return;
  }
  finish(s, reason, Status::Ok(), out.events);
  // The finishing event carries the last token too.
  TokenEvent& fin = out.events.back().second;
  fin.tokens = std::move(ev.tokens);
  fin.logprobs = std::move(ev.logprobs);
  fin.prompt_logprobs = std::move(ev.prompt_logprobs);
  out.ended.push_back(&s);
}

void LlmEngine::retire_ended(Outcome& out) {
  // Out of running_, but alive (in out.dead) until their sinks ran.
  for (Seq* e : out.ended) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](auto& p) { return p.get() == e; });
    if (it != running_.end()) {
      out.dead.push_back(std::move(*it));
      running_.erase(it);
    }
  }
}

void LlmEngine::publish_stats() {
  std::lock_guard lock(mu_);
  queued_ = int64_t(inbox_.size() + waiting_.size());
  ServingStats s = counters_;
  s.requests_rejected = stats_.requests_rejected;
  s.running = int64_t(running_.size());
  s.waiting = queued_;
  s.kv_blocks_used = blocks_->used_count();
  s.kv_blocks_cached = blocks_->evictable_count();
  s.prefix_cache_queries = blocks_->query_tokens();
  s.prefix_cache_hits = blocks_->hit_tokens();
  stats_ = s;
}

void LlmEngine::run() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !running_.empty() || !waiting_.empty();
      });
      if (stopping_) break;
    }
    const auto t_step = std::chrono::steady_clock::now();
    const bool stepped = step();
    // The debug slowdown hook (config comment): a wait proportional to the step just run, and nothing else.
    // A decode step of the shipped model takes well under a millisecond. A sleep that short overshoots
    // by the timer slack, and the core it leaves idle wakes late and runs the next step cold, so a
    // sleeping arm is far more than x slower (BENCHMARKS.md, "Calibration"). So the thread yields in a
    // loop until the wait is over (the engine's IO threads, which may share its core, run in the
    // yields; the core never idles), and what a wait overshoots is owed back by the next one.
    if (stepped && config_.debug_step_slowdown > 0) {
      const auto now = std::chrono::steady_clock::now();
      slowdown_owed_ += std::chrono::duration_cast<Nanos>((now - t_step) * config_.debug_step_slowdown);
      if (slowdown_owed_ > Nanos::zero()) {
        const auto until = now + slowdown_owed_;
        while (std::chrono::steady_clock::now() < until) std::this_thread::yield();
        slowdown_owed_ -= std::chrono::steady_clock::now() - now;
      }
    }
    if (!stepped) {
      // Work exists but nothing could be scheduled (should not happen: a lone sequence always
      // fits); wait briefly instead of spinning.
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
  // Stopping: cancel what is left.
  std::vector<std::pair<Seq*, TokenEvent>> out;
  take_inbox();
  for (auto& s : running_) finish(*s, FinishReason::kCancelled, Status::Ok(), out);
  for (auto& s : waiting_) finish(*s, FinishReason::kCancelled, Status::Ok(), out);
  for (auto& [s, ev] : out) s->req.sink(std::move(ev));
  running_.clear();
  waiting_.clear();
  publish_stats();
}

}  // namespace plumb::scheduler
