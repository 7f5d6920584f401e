// Text from outside (prompts, chat messages) through the tokenizers plumb ships and tests with:
// the shipped model's byte-level BPE, a Llama-3-style BPE and a SentencePiece-style BPE with byte
// fallback. Invariants: ids inside the vocabulary; the StreamDecoder's pieces concatenate to
// decode(); decode(encode(text)) gives the text back for valid UTF-8 (the byte-level tokenizers
// are lossless; SentencePiece's normalizer changes spaces, so it is held to the first two only).
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "fuzz/fuzz_target.h"
#include "fuzz/tokenizer_checks.h"

namespace {

struct Loaded {
  std::unique_ptr<plumb::engine::Tokenizer> tok;
  bool lossless = false;
};

const std::vector<Loaded>& tokenizers() {
  static const std::vector<Loaded> all = [] {
    std::vector<Loaded> v;
    const std::pair<const char*, bool> dirs[] = {
        {PLUMB_SOURCE_DIR "/models/plumb-tiny", true},
        {PLUMB_SOURCE_DIR "/tests/fixtures/tokenizers/llama3_bpe", true},
        {PLUMB_SOURCE_DIR "/tests/fixtures/tokenizers/sentencepiece_bpe", false},
    };
    for (const auto& [dir, lossless] : dirs) {
      auto t = plumb::engine::Tokenizer::load(dir);
      if (!t.ok()) {
        std::fprintf(stderr, "fuzz_tokenizer_encode: %s\n", t.status().message().c_str());
        std::abort();
      }
      v.push_back({std::move(t).value(), lossless});
    }
    return v;
  }();
  return all;
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < n; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

PLUMB_FUZZ_TARGET(tokenizer_encode) {
  plumb::fuzz::Reader in(input);
  uint8_t mode = in.byte();
  std::string_view text = in.rest();
  const Loaded& l = tokenizers()[mode % tokenizers().size()];
  const plumb::engine::Tokenizer& t = *l.tok;
  bool special = (mode & 0x10) != 0;
  std::vector<int32_t> ids = t.encode(text, special);
  if (std::string broke = plumb::fuzz::check_ids_and_streaming(t, ids); !broke.empty()) return broke;
  if (l.lossless && !special && valid_utf8(text)) {
    std::string back = t.decode(ids, false);
    if (back != text) return "decode(encode(text)) differs from the text";
  }
  return "";
}
