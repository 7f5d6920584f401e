// Tokenizer: Hugging Face tokenizer.json (BPE models) in C++.
//
// Supported, as the real models use them:
//  - model: BPE (merges as "a b" strings or ["a","b"] pairs; byte_fallback; unk_token with fuse_unk;
//    ignore_merges as in Llama-3). Other model types (WordPiece, Unigram, WordLevel) -> Unimplemented.
//  - added tokens: split out of the text first (leftmost-longest match), honouring lstrip, rstrip,
//    single_word and normalized (normalized=true tokens are matched in the normalized text).
//  - normalizers: Sequence, Prepend, Replace (string or regex), NFC/NFD/NFKC/NFKD (ICU).
//  - pre-tokenizers: Sequence, Split (string or regex; Isolated/Removed/MergedWithPrevious/
//    MergedWithNext/Contiguous; invert), ByteLevel (add_prefix_space, use_regex = GPT-2 pattern),
//    Metaspace (replacement, prepend_scheme always/first/never, split), Digits.
//    Regexes run on PCRE2 with UTF+UCP and JIT; `\s`/`\S` are rewritten to Unicode White_Space so
//    they match what the reference library's Oniguruma matches.
//  - post-processors: TemplateProcessing (single sequence), ByteLevel (no effect on ids), Sequence.
//  - decoders: ByteLevel, Metaspace, Replace (string), ByteFallback, Fuse, Strip, Sequence; no decoder
//    joins tokens with " " as the reference library does.
//  Fields with no effect on ids (truncation, padding, offsets trimming) are ignored.
//
// Input text that is not valid UTF-8 is encoded as if each ill-formed sequence were U+FFFD.
//
// Thread safety: a loaded Tokenizer is immutable except for an internal, mutex-protected word cache;
// encode/decode and every accessor may be called from many threads at once. StreamDecoder is one
// stream's state: use one per stream, from one thread at a time; it must not outlive its Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plumb::engine {

class Tokenizer {
 public:
  // Reads model_dir/tokenizer.json (required), model_dir/tokenizer_config.json and
  // model_dir/generation_config.json (both optional). NotFound if tokenizer.json is missing;
  // InvalidArgument / Unimplemented naming the field for malformed or unsupported content.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& model_dir);

  // Same from in-memory texts; an empty config text means "no tokenizer_config.json" (and no
  // generation_config.json).
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json,
                                                      std::string_view tokenizer_config_json = {},
                                                      std::string_view generation_config_json = {});

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of text. add_special_tokens applies the post-processor's template (e.g. Llama's
  // leading <s> / <|begin_of_text|>); special tokens written in the text are always recognized.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Text of ids, exactly as the reference library's Tokenizer.decode (no clean-up of tokenization
  // spaces). Ids out of range are skipped. Ill-formed UTF-8 produced by byte tokens becomes U+FFFD
  // the way the reference does (ByteLevel: one per maximal ill-formed subpart; ByteFallback: one
  // per byte of an ill-formed run of byte tokens).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Number of ids: one past the largest id of the model vocabulary and the added tokens.
  int32_t vocab_size() const;
  // Id of a token string (added tokens first, then the model vocabulary), as stored in the vocab
  // (byte-level vocabularies store "Ġ" for a space-prefixed piece).
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Token string of an id; "" when out of range.
  std::string id_to_token(int32_t id) const;
  // True for added tokens marked "special" (e.g. <s>, <|eot_id|>, <|im_end|>).
  bool is_special(int32_t id) const;

  // From tokenizer_config.json: bos_token / eos_token (string or {"content": ...}); nullopt when
  // absent or not in the vocabulary.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  const std::string& bos_token() const;  // "" when absent
  const std::string& eos_token() const;  // "" when absent
  // Ids that end generation: eos_id plus generation_config.json's eos_token_id (int or list),
  // deduplicated, in that order.
  std::vector<int32_t> eos_ids() const;
  // tokenizer_config.json's chat_template ("" when absent; for a list of named templates, the one
  // named "default").
  const std::string& chat_template() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenization for streaming: push ids one at a time; each call returns the text that
// became final. The concatenation of every push() and a final flush() equals
// tokenizer.decode(all ids, skip_special_tokens) exactly, and no returned piece ever ends inside a
// UTF-8 character. Held back until more ids arrive: an incomplete UTF-8 sequence (byte-level), a run
// of <0xNN> byte-fallback tokens (the reference decides a run's validity as a whole), and trailing
// characters a Strip(stop>0) decoder might remove.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  ~StreamDecoder();
  StreamDecoder(StreamDecoder&&) noexcept;
  StreamDecoder& operator=(StreamDecoder&&) noexcept;

  std::string push(int32_t id);
  // Emits whatever is held back (an incomplete sequence becomes U+FFFD) and ends the stream; the
  // decoder may then be reused for a new stream.
  std::string flush();

  struct State;

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::unique_ptr<State> state_;
};

}  // namespace plumb::engine
