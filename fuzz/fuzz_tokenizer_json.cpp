// Loading a Hugging Face tokenizer.json (engine/tokenizer/tokenizer.h, Tokenizer::from_json) with
// tokenizer_config.json and generation_config.json, all from the input. For an accepted tokenizer,
// invariants of the header's contract on a few texts: every id is inside [0, vocab_size()), and
// the StreamDecoder's pieces concatenate to decode() of the same ids, with and without special
// tokens.
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "fuzz/fuzz_target.h"
#include "fuzz/tokenizer_checks.h"

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
      if (std::string broke = plumb::fuzz::check_ids_and_streaming(t, ids); !broke.empty()) return broke;
    }
  }
  (void)t.eos_ids();
  (void)t.chat_template();
  return "";
}
