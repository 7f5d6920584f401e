// The invariants both tokenizer targets hold a tokenizer to (fuzz_tokenizer_json, fuzz_tokenizer_encode).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace plumb::fuzz {

// Every id of `ids` is inside the vocabulary, and for both settings of skip_special the streaming
// decoder gives decode()'s text. "" when both hold, else which broke.
inline std::string check_ids_and_streaming(const engine::Tokenizer& t, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size())
      return "encode gave id " + std::to_string(id) + " outside the vocabulary";
  }
  for (bool skip : {false, true}) {
    std::string whole = t.decode(ids, skip);
    engine::StreamDecoder dec(t, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += dec.push(id);
    streamed += dec.flush();
    if (streamed != whole) return "StreamDecoder's text differs from decode()";
  }
  return "";
}

}  // namespace plumb::fuzz
