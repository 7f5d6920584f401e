// Where requests come from: seeded length sampling, synthetic documents tokenized to target
// lengths, JSONL datasets (generic, LongBench-v2-style, ShareGPT) and shared-prefix sets.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "workload/request.h"

namespace plumb::workload {

// Counts the tokens of a text with the target model's tokenizer (or the server's /tokenize). Must
// be deterministic; may be called many times per document. An error aborts generation.
using TokenCounter = std::function<Result<int64_t>(std::string_view text)>;

// A TokenCounter that counts whitespace-separated words (space, tab, CR, LF): one "token" per word.
// Exact for synthetic documents (they hit their targets exactly), approximate for any model's tokens.
Result<int64_t> count_words(std::string_view text);

// ceil(0.8 * L): the smallest length sample_lengths draws (docs/protocol.md §1). L >= 1.
int64_t length_floor(int64_t L);
// n integers uniform in [length_floor(L), L], from Rng(derive_seed(seed, dimension)) in order:
// dimension is "input_len" or "output_len". InvalidArgument if L < 1.
Result<std::vector<int64_t>> sample_lengths(uint64_t seed, std::string_view dimension, int64_t L, size_t n);
// The same draw from [max(1, ceil(ratio * L)), L] (InferenceBench's range_ratio); ratio 0.8 gives
// exactly the draws above. InvalidArgument if L < 1 or ratio is not in (0, 1].
Result<std::vector<int64_t>> sample_lengths(uint64_t seed, std::string_view dimension, int64_t L, size_t n,
                                            double ratio);
// The protocol's ratio: lengths from [0.8 L, L] (docs/protocol.md §1).
inline constexpr double kDefaultRangeRatio = 0.8;

// A synthetic document: random words from a fixed vocabulary, cut to a token budget.
struct Document {
  std::string text;    // the document
  int64_t tokens = 0;  // counter(text): the largest word prefix with at most `target` tokens
};
// Draws words from rng until the text has >= target tokens, then keeps the longest word prefix whose
// count is <= target (binary search, so O(log n) counter calls). target >= 1.
Result<Document> synthetic_document(Rng& rng, int64_t target, const TokenCounter& count);

// The synthetic workload of the scenarios: per request an input length and an output length drawn
// by sample_lengths, and a fresh document of that many tokens (unique, so no prefix is shared).
struct SyntheticSpec {
  uint64_t seed = 0;                     // run seed; dimensions "input_len", "output_len", "document"
  size_t num_requests = 0;               // how many requests
  int64_t input_len = 0;                 // L_in, tokens, >= 1
  int64_t output_len = 0;                // L_out, tokens, >= 1
  bool fixed_lengths = false;            // true: every length is exactly L instead of [0.8 L, L]
  double range_ratio = 0.8;              // lengths from [ceil(range_ratio L), L], in (0, 1]
  int64_t template_overhead_tokens = 0;  // tokens the chat template adds around the content; the
                                         // document gets input_len - overhead (at least 1)
  double temperature = 0.0;              // per request
  bool ignore_eos = true;                // per request
  bool chat = true;                      // true: one user message; false: a completions prompt
};
// Requests in order; prompt_tokens = document tokens + template overhead.
Result<std::vector<Request>> synthetic_requests(const SyntheticSpec& spec, const TokenCounter& count);

// Shared-prefix set: `num_prefixes` documents of `prefix_len` tokens (dimension "prefix"); request i
// is prefix[i % num_prefixes] + "\n\n" + its own synthetic suffix drawn as in synthetic_requests
// (input_len is the suffix length). prompt_tokens is prefix tokens + suffix tokens + overhead (an
// estimate: the join may merge tokens).
struct SharedPrefixSpec {
  SyntheticSpec base;       // lengths, seed, sampling options; input_len = suffix length
  int64_t prefix_len = 0;   // tokens in each shared prefix, >= 1
  size_t num_prefixes = 1;  // distinct prefixes, >= 1
};
Result<std::vector<Request>> shared_prefix_requests(const SharedPrefixSpec& spec, const TokenCounter& count);

enum class SourceFormat {
  kGeneric,    // {"messages": [...]} or {"prompt": "..."}, optional "max_tokens", "temperature"
  kLongBench,  // LongBench-v2: "context", "question", "choice_A".."choice_D"
  kShareGpt,   // {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}
};
Result<SourceFormat> parse_source_format(std::string_view name);  // "generic", "longbench", "sharegpt"

struct SourceOptions {
  SourceFormat format = SourceFormat::kGeneric;  // how to read each line
  int64_t max_tokens = 0;    // output length when a line gives none; 0 = the line must give one
                             // (ShareGPT: 0 = the first reply's token count, needs a counter)
  double temperature = 0.0;  // when a line gives none
  bool ignore_eos = true;    // every request
  size_t limit = 0;          // stop after this many requests; 0 = all
};
struct SourceResult {
  std::vector<Request> requests;  // in file order
  size_t skipped = 0;             // ShareGPT conversations without a human turn followed by a reply
};
// Parses a dataset given as JSONL (or, for ShareGPT, also one JSON array). Errors name the 1-based
// line (array: the 0-based element). `count` may be empty unless ShareGPT needs reply lengths; when
// given, prompt_tokens is filled in.
Result<SourceResult> parse_source(std::string_view text, const SourceOptions& opts,
                                  const TokenCounter& count = {});
Result<SourceResult> load_source(const std::string& path, const SourceOptions& opts,
                                 const TokenCounter& count = {});

// The LongBench-v2 prompt (the upstream "0shot" template) for one item.
std::string longbench_prompt(std::string_view context, std::string_view question, std::string_view a,
                             std::string_view b, std::string_view c, std::string_view d);

}  // namespace plumb::workload
