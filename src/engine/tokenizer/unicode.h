// UTF-8 and Unicode helpers for the tokenizer (internal to plumb_tokenizer).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plumb::engine::unicode {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends the UTF-8 encoding of code point cp.
void append_utf8(std::string& out, uint32_t cp);

// Length in bytes of the well-formed UTF-8 sequence starting at s[i], or 0 if the bytes there are
// ill-formed or truncated.
size_t valid_sequence_length(std::string_view s, size_t i);
bool is_valid_utf8(std::string_view s);
// Decodes the well-formed character at s[i] (len = valid_sequence_length(s, i) > 0).
uint32_t decode_at(std::string_view s, size_t i, size_t len);

// Streaming UTF-8 repair with the reference semantics (Rust's String::from_utf8_lossy, i.e. Unicode's
// "maximal subpart" substitution): push bytes, get back only complete characters; an incomplete
// trailing sequence is held until completed or finish() turns it into one U+FFFD.
class LossyUtf8 {
 public:
  void push(std::string_view bytes, std::string& out);
  void finish(std::string& out);
  bool empty() const { return pending_.empty(); }

 private:
  std::string pending_;
};

// Whole-string form of LossyUtf8.
std::string to_valid_utf8(std::string_view s);

// GPT-2's reversible byte <-> printable-character map used by ByteLevel pre-tokenizers/decoders.
struct ByteMap {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its stand-in character
  std::array<int16_t, 324> cp_to_byte;        // stand-in code point (< 324) -> byte, -1 if none
};
const ByteMap& byte_map();

// True for Unicode White_Space (what Oniguruma's \s and Rust's char::is_whitespace match).
bool is_whitespace(uint32_t cp);
// Alphanumeric or '_' (approximation of a regex word character: ASCII exactly, any non-ASCII
// letter-like code point counts as a word character).
bool is_word_char(uint32_t cp);

// Unicode normalization forms through ICU. Input must be valid UTF-8.
enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
Result<std::string> normalize(std::string_view s, NormalForm form);

}  // namespace plumb::engine::unicode
