#include "engine/generate.h"

#include <algorithm>

#include "engine/tokenizer/tokenizer.h"

namespace plumb::engine {

namespace {

class TokenizerStream final : public TextStream {
 public:
  TokenizerStream(const Tokenizer& tok, bool skip_special)
      : vocab_(tok.vocab_size()), dec_(tok, skip_special) {}
  std::string push(int32_t id) override {
    if (id >= 0 && id < vocab_) return dec_.push(id);
    return dec_.flush() + "[" + std::to_string(id) + "]";
  }
  std::string flush() override { return dec_.flush(); }

 private:
  int32_t vocab_;
  StreamDecoder dec_;
};

// Length of the UTF-8 sequence a lead byte announces (0 = not a valid lead byte).
int utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

class ByteStream final : public TextStream {
 public:
  std::string push(int32_t id) override {
    if (id < 0 || id >= 256) return flush() + "[" + std::to_string(id) + "]";
    pending_.push_back(char(id));
    return drain(false);
  }
  std::string flush() override { return drain(true); }

 private:
  // Emits every complete sequence; ill-formed bytes become U+FFFD; an incomplete tail waits unless
  // `all`.
  std::string drain(bool all) {
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
      const auto c = static_cast<unsigned char>(pending_[i]);
      const int n = utf8_len(c);
      if (n == 0) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      if (i + size_t(n) > pending_.size()) {
        bool ok_so_far = true;
        for (size_t j = i + 1; j < pending_.size(); ++j)
          ok_so_far &= (static_cast<unsigned char>(pending_[j]) & 0xC0) == 0x80;
        if (!all && ok_so_far) break;  // wait for the rest
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      bool ok = true;
      for (int j = 1; j < n; ++j) ok &= (static_cast<unsigned char>(pending_[i + size_t(j)]) & 0xC0) == 0x80;
      if (!ok) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      out.append(pending_, i, size_t(n));
      i += size_t(n);
    }
    pending_.erase(0, i);
    return out;
  }
  std::string pending_;
};

}  // namespace

std::unique_ptr<TextStream> tokenizer_text_stream(const Tokenizer& tok, bool skip_special_tokens) {
  return std::make_unique<TokenizerStream>(tok, skip_special_tokens);
}
std::unique_ptr<TextStream> byte_text_stream() { return std::make_unique<ByteStream>(); }

std::vector<int32_t> byte_encode(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(int32_t(static_cast<unsigned char>(c)));
  return ids;
}

Result<GenerateResult> generate(Model& model, std::span<const int32_t> prompt, const GenerateOptions& opts,
                                TextStream* text,
                                const std::function<bool(const GeneratedToken&)>& on_token) {
  const SamplingParams& sp = opts.sampling;
  PLUMB_RETURN_IF_ERROR(sp.validate());
  const ModelConfig& cfg = model.config();
  const int64_t ctx = cfg.max_context();
  if (prompt.empty()) return invalid_argument("generate: the prompt has no tokens");
  if (int64_t(prompt.size()) > ctx) {
    return invalid_argument("generate: the prompt has " + std::to_string(prompt.size()) +
                            " tokens, more than the model's context of " + std::to_string(ctx));
  }
  if (opts.block_size <= 0) return invalid_argument("generate: block_size must be > 0");
  // Generating n tokens writes the prompt and the first n-1 generated tokens into the cache.
  const int64_t max_new = std::min<int64_t>(sp.max_tokens, ctx - int64_t(prompt.size()) + 1);
  const int64_t capacity = int64_t(prompt.size()) + max_new;
  const int32_t blocks = int32_t((capacity + opts.block_size - 1) / opts.block_size);
  PLUMB_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(model.kv_config(blocks, opts.block_size)));
  BlockAllocator alloc(blocks);
  BlockTable table;
  PLUMB_RETURN_IF_ERROR(reserve_tokens(alloc, table, capacity, opts.block_size));

  std::vector<int32_t> eos;
  if (!sp.ignore_eos) {
    for (int64_t id : cfg.eos_token_ids) eos.push_back(int32_t(id));
    eos.insert(eos.end(), opts.extra_eos_ids.begin(), opts.extra_eos_ids.end());
  }
  auto is_stop = [&](int32_t id) {
    return std::find(eos.begin(), eos.end(), id) != eos.end() ||
           std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), id) != sp.stop_token_ids.end();
  };

  Clock& clock = opts.clock ? *opts.clock : static_cast<Clock&>(SteadyClock::instance());
  Sampler sampler(sp, model.kernel_sets()[size_t(Phase::kDecode)].sample, prompt);
  GenerateResult res;
  res.prompt_tokens = int64_t(prompt.size());
  res.finish_reason = "length";
  ForwardOutput out;
  const SteadyTime t0 = clock.now();
  SteadyTime t_first = t0;
  int32_t pos = 0;
  std::span<const int32_t> step = prompt;
  int32_t last = -1;
  while (int64_t(res.tokens.size()) < max_new) {
    SequenceInput in{step, pos, table.blocks, false};
    PLUMB_RETURN_IF_ERROR(model.forward(std::span(&in, 1), cache, &out));
    pos += int32_t(step.size());
    PLUMB_ASSIGN_OR_RETURN(SampledToken s, sampler.sample(out.last(0)));
    if (res.tokens.empty()) t_first = clock.now();
    res.tokens.push_back(s.id);
    GeneratedToken g;
    g.id = s.id;
    g.logprob = s.logprob;
    g.top = std::move(s.top);
    const bool stop = is_stop(s.id);
    if (text) {
      g.text = text->push(s.id);
      if (stop || int64_t(res.tokens.size()) == max_new) g.text += text->flush();
      res.text += g.text;
    }
    if (on_token && !on_token(g)) {
      res.finish_reason = "cancelled";
      break;
    }
    if (stop) {
      res.finish_reason = "stop";
      break;
    }
    last = s.id;
    step = std::span(&last, 1);
  }
  const SteadyTime t_end = clock.now();
  res.prefill_seconds = seconds_between(t0, t_first);
  res.decode_seconds = seconds_between(t_first, t_end);
  return res;
}

}  // namespace plumb::engine
