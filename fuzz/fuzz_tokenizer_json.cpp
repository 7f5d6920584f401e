// Loading a Hugging Face tokenizer.json (engine/tokenizer/tokenizer.h, Tokenizer::from_json) with
// tokenizer_config.json and generation_config.json, all from the input. For an accepted tokenizer,
// invariants of the header's contract on a few texts: every id is inside [0, vocab_size()), and
// the StreamDecoder's pieces concatenate to decode() of the same ids, with and without special
// tokens.
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "fuzz/fuzz_target.h"

PLUMB_FUZZ_TARGET(tokenizer_json) {
  // Fields separated by a 0x00 byte: tokenizer.json, tokenizer_config.json, generation_config.json,
  // then a text to encode (after the fixed ones).
  plumb::fuzz::Reader in(input);
  std::string_view tokenizer_json = in.field('\0');
  std::string_view config = in.field('\0');
  std::string_view generation = in.field('\0');
  std::string_view text = in.rest();
  auto tok = plumb::engine::Tokenizer::from_json(tokenizer_json, config, generation);
  if (!tok.ok()) return "";
  const plumb::engine::Tokenizer& t = **tok;
  const std::string texts[] = {"Hello, world! 123 ", "  a\tb\n\nc  ",
                               "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80", std::string(text)};
  for (const std::string& s : texts) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids = t.encode(s, special);
      for (int32_t id : ids) {
        if (id < 0 || id >= t.vocab_size())
          return "encode gave id " + std::to_string(id) + " outside the vocabulary";
      }
      for (bool skip : {false, true}) {
        std::string whole = t.decode(ids, skip);
        plumb::engine::StreamDecoder dec(t, skip);
        std::string streamed;
        for (int32_t id : ids) streamed += dec.push(id);
        streamed += dec.flush();
        if (streamed != whole) return "StreamDecoder's text differs from decode()";
      }
    }
  }
  (void)t.eos_ids();
  (void)t.chat_template();
  return "";
}
