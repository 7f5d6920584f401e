// Internal representation of a loaded tokenizer.json (not part of the public API).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace plumb::engine {

// A compiled PCRE2 pattern (UTF + UCP, JIT when available). Thread-safe to use concurrently.
class Regex {
 public:
  static Result<std::shared_ptr<Regex>> compile(const std::string& pattern);
  ~Regex();
  // Calls on_match(start, end) for each successive non-overlapping match in s (byte offsets); s must
  // be valid UTF-8.
  template <typename F>
  void for_each_match(std::string_view s, F&& on_match) const;
  bool next_match(std::string_view s, size_t from, size_t& start, size_t& end, void* match_data) const;
  void* new_match_data() const;           // the calling thread's match block (not owned by the caller)
  static void free_match_data(void* md);  // no-op, kept for symmetry

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

template <typename F>
void Regex::for_each_match(std::string_view s, F&& on_match) const {
  void* md = new_match_data();
  size_t from = 0, start = 0, end = 0;
  while (from <= s.size() && next_match(s, from, start, end, md)) {
    if (end == start) {
      // Empty match: step past one character so the scan advances.
      if (start >= s.size()) break;
      size_t n = unicode::valid_sequence_length(s, start);
      from = start + (n ? n : 1);
      continue;
    }
    on_match(start, end);
    from = end;
  }
  free_match_data(md);
}

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// Byte trie over added-token contents for leftmost-longest matching.
class TokenTrie {
 public:
  void insert(std::string_view s, int32_t index);
  bool empty() const { return nodes_.size() <= 1; }
  // Longest token starting at s[i]: its index into the added-token list, or -1; len = its length.
  int32_t longest_at(std::string_view s, size_t i, size_t& len) const;
  bool may_start(unsigned char c) const { return first_[c]; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;  // (byte, child node)
    int32_t token = -1;
  };
  std::vector<Node> nodes_{Node{}};
  std::array<bool, 256> first_{};
};

enum class NormKind { kPrepend, kReplace, kUnicode };
struct NormalizerStep {
  NormKind kind = NormKind::kPrepend;
  std::string text;              // Prepend: the prefix; Replace: the literal pattern
  std::shared_ptr<Regex> regex;  // Replace with a Regex pattern
  std::string content;           // Replace: the replacement
  unicode::NormalForm form = unicode::NormalForm::kNFC;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };
enum class PreKind { kByteLevel, kSplit, kMetaspace, kDigits };
struct PreTokenizerStep {
  PreKind kind = PreKind::kSplit;
  std::shared_ptr<Regex> regex;  // Split (regex or escaped literal), ByteLevel use_regex, Digits
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;  // Metaspace
};

enum class DecKind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace, kJoinSpace };
struct DecoderStep {
  DecKind kind = DecKind::kFuse;
  std::string from, to;  // Replace; Metaspace: from = replacement
  std::string content;   // Strip: the character
  int start = 0, stop = 0;
  bool prepend = true;  // Metaspace: strip the replacement of the first token
  bool fusing() const { return kind == DecKind::kByteLevel || kind == DecKind::kFuse; }
};

struct Tokenizer::Impl {
  // Model (BPE).
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<uint64_t, uint64_t> merges;  // (left id << 32 | right id) -> (rank << 32 | new id)
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool byte_level = false;                  // a ByteLevel pre-tokenizer maps bytes to stand-in characters
  std::array<int32_t, 256> byte_ids{};      // byte-level: id of each byte's stand-in character, -1 if none
  std::array<int32_t, 256> fallback_ids{};  // byte_fallback: id of "<0xNN>", -1 if none
  // SentencePiece-style models without a splitting pre-tokenizer see whole segments as one word.
  // When no vocabulary entry has a non-marker character followed by the marker ("▁"), no merge can
  // cross the start of a "▁" run, so words are cut there (exactly the same ids, and cacheable).
  std::string word_marker;

  // Added tokens.
  std::vector<AddedToken> added;
  TokenTrie raw_trie;         // normalized == false (or no normalizer): matched in the raw text
  TokenTrie normalized_trie;  // normalized == true with a normalizer: matched in normalized text
  std::unordered_map<std::string, int32_t> added_by_content;

  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  std::vector<DecoderStep> decoders;
  // Post-processor template for add_special_tokens: ids before and after the sequence.
  std::vector<int32_t> prefix_ids, suffix_ids;

  // id -> token string and flags.
  std::vector<std::string> id_to_token;
  std::vector<uint8_t> special;  // 1 for special added tokens
  std::vector<uint8_t> is_added;
  // When the decoder chain starts with ByteLevel: each id's bytes, precomputed for decoding speed.
  std::vector<std::string> byte_level_tokens;

  // tokenizer_config.json / generation_config.json.
  std::string bos_token, eos_token, chat_template;
  std::optional<int32_t> bos_id, eos_id;
  std::vector<int32_t> eos_ids;

  // Word cache: pre-token bytes -> ids. Open addressing over flat arrays (one probe usually touches
  // one slot and one key), sharded by hash to keep lock contention low; a full shard is cleared.
  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheSlots = size_t(1) << 14;  // per shard, power of two
  static constexpr size_t kCacheMaxWord = 256;  // longer words are not cached (CJK runs are long words)
  struct CacheShard {
    struct Slot {
      uint64_t hash = 0;  // 0: empty
      uint32_t key_off = 0;
      uint32_t ids_off = 0;
      uint16_t key_len = 0;
      uint16_t n_ids = 0;
    };
    std::mutex mu;
    std::vector<Slot> slots;
    std::string keys;
    std::vector<int32_t> ids;
    size_t used = 0;
    // Appends the cached ids of word to out; false when absent.
    bool find(std::string_view word, uint64_t h, std::vector<int32_t>& out);
    void insert(std::string_view word, uint64_t h, const int32_t* word_ids, size_t n);
  };
  mutable std::array<CacheShard, kCacheShards> cache;

  void encode_segment(std::string_view normalized, bool at_text_start, std::vector<int32_t>& out) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_word_uncached(std::string_view word, std::vector<int32_t>& out) const;
};

// A token's bytes under the GPT-2 byte map; a token with a character outside the map (e.g. an added
// token containing a space) passes through as its own UTF-8 bytes, as in the reference.
std::string byte_level_bytes(std::string_view tok);

}  // namespace plumb::engine
