// The text side of engine/generate.h: incremental detokenizers and the model's EOS set.
#include <algorithm>

#include "engine/generate.h"
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

std::vector<int32_t> model_eos_ids(const ModelConfig& config, const Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  auto add = [&](int32_t id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (int64_t id : config.eos_token_ids) add(int32_t(id));
  if (tokenizer) {
    for (int32_t id : tokenizer->eos_ids()) add(id);
  }
  return ids;
}

}  // namespace plumb::engine
