// A small deterministic ModelRunner for scheduler tests. It is a real paged-KV consumer, not a
// script: each new token's "K/V" (a 64-bit state) is written into the slot its block table names,
// and every logits row is computed from the states READ BACK through the block table for the
// whole context. A scheduler that hands out a wrong block, reuses a stale prefix block, or
// forgets a token therefore changes the generated tokens. toy_reference() computes the same
// greedy continuation directly from the tokens, with no cache, as the ground truth.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/scheduler/model_runner.h"

namespace plumb::scheduler::testing {

inline uint64_t toy_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// The state a token leaves at a position.
inline uint64_t toy_state(int32_t token, int32_t pos) {
  return toy_mix(uint64_t(token) * 1000003ULL + uint64_t(pos));
}
// Logits after a context whose states are `states`.
inline void toy_logits(std::span<const uint64_t> states, int32_t vocab, float* out) {
  uint64_t h = 0;
  for (uint64_t s : states) h = toy_mix(h ^ s);
  for (int32_t v = 0; v < vocab; ++v) out[v] = float(toy_mix(h + uint64_t(v)) >> 40) / float(1 << 20);
}

// Greedy continuation of `prompt` for n tokens, computed without any cache.
inline std::vector<int32_t> toy_reference(std::vector<int32_t> prompt, int32_t n, int32_t vocab) {
  std::vector<uint64_t> states;
  for (size_t i = 0; i < prompt.size(); ++i) states.push_back(toy_state(prompt[i], int32_t(i)));
  std::vector<int32_t> out;
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int32_t k = 0; k < n; ++k) {
    toy_logits(states, vocab, logits.data());
    int32_t best = 0;
    for (int32_t v = 1; v < vocab; ++v) {
      if (logits[size_t(v)] > logits[size_t(best)]) best = v;
    }
    out.push_back(best);
    states.push_back(toy_state(best, int32_t(states.size())));
  }
  return out;
}

class ToyRunner final : public ModelRunner {
 public:
  struct StepRecord {
    std::vector<int32_t> n_tokens;   // new tokens per sequence, batch order
    std::vector<int32_t> start_pos;  // start positions, batch order
  };
  ToyRunner(int32_t vocab, int64_t context, std::vector<StepRecord>* log = nullptr)
      : vocab_(vocab), context_(context), log_(log) {}

  int32_t vocab_size() const override { return vocab_; }
  int64_t max_context() const override { return context_; }
  int64_t kv_bytes_per_token() const override { return 8; }
  std::string describe() const override { return "toy"; }
  Status init_kv(int32_t num_blocks, int32_t block_size) override {
    block_size_ = block_size;
    slots_.assign(size_t(num_blocks) * size_t(block_size), 0);
    return Status::Ok();
  }
  Status forward(std::span<const StepSeq> batch, std::vector<float>& logits) override {
    logits.clear();
    StepRecord rec;
    for (const StepSeq& s : batch) {
      drawn_rows_ += s.greedy && s.temperature > 0.0f ? 1 : 0;
      rec.n_tokens.push_back(int32_t(s.tokens.size()));
      rec.start_pos.push_back(s.start_pos);
      int64_t end = s.start_pos + int64_t(s.tokens.size());
      if (int64_t(s.block_table.size()) * block_size_ < end) return internal_error("block table too short");
      for (size_t j = 0; j < s.tokens.size(); ++j)
        slot(s.block_table, s.start_pos + int32_t(j)) = toy_state(s.tokens[j], s.start_pos + int32_t(j));
      auto row = [&](int32_t upto) {  // logits after positions [0, upto]
        std::vector<uint64_t> st;
        for (int32_t p = 0; p <= upto; ++p) st.push_back(slot(s.block_table, p));
        size_t off = logits.size();
        logits.resize(off + size_t(vocab_));
        toy_logits(st, vocab_, logits.data() + off);
      };
      if (s.logits == StepSeq::Logits::kAll) {
        for (size_t j = 0; j < s.tokens.size(); ++j) row(s.start_pos + int32_t(j));
      } else if (s.logits == StepSeq::Logits::kLast) {
        row(int32_t(end - 1));
      }
    }
    if (log_) log_->push_back(std::move(rec));
    return Status::Ok();
  }
  // As a runner that picks greedy and plain-draw tokens itself (the CUDA runner), through
  // ModelRunner's host forward_greedy; the engine then hands it those rows.
  void pick_tokens(bool on) { picks_tokens_ = on; }
  bool greedy_on_device() const override { return picks_tokens_; }
  bool samples_on_device() const override { return picks_tokens_; }
  // Rows handed over for a plain draw (greedy set, temperature > 0) so far.
  int64_t drawn_rows() const { return drawn_rows_; }

 private:
  uint64_t& slot(std::span<const int32_t> table, int32_t pos) {
    return slots_[size_t(table[size_t(pos / block_size_)]) * size_t(block_size_) + size_t(pos % block_size_)];
  }
  int32_t vocab_;
  int64_t context_;
  std::vector<StepRecord>* log_;
  int32_t block_size_ = 16;
  std::vector<uint64_t> slots_;
  bool picks_tokens_ = false;
  int64_t drawn_rows_ = 0;
};

}  // namespace plumb::scheduler::testing
