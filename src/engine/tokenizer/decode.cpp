// Decoding. The decoder chain of tokenizer.json runs as a streaming pipeline: decode() is a
// StreamDecoder fed every id, so streamed text equals decoded text by construction.
//
// Stages before the first fusing stage (ByteLevel, Fuse) see whole tokens, as in the reference;
// stages after it see the fused text in chunks that always end on a character boundary.
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace plumb::engine {

struct StreamDecoder::State {
  struct Stage {
    bool stream_mode = false;  // after a fusing stage: sees chunks of one text, not tokens
    size_t count = 0;          // tokens seen (Metaspace's first-token rule, JoinSpace)
    std::string buf;           // ByteFallback: pending bytes; Strip(stop): held trailing characters
    unicode::LossyUtf8 lossy;  // ByteLevel
    int stripped = 0;          // Strip(start) in stream mode: characters removed so far
    bool start_done = false;
  };
  std::vector<Stage> stages;

  explicit State(const Tokenizer::Impl& impl) { reset(impl); }
  void reset(const Tokenizer::Impl& impl) {
    stages.assign(impl.decoders.size(), Stage{});
    bool fused = false;
    for (size_t k = 0; k < impl.decoders.size(); ++k) {
      stages[k].stream_mode = fused;
      fused = fused || impl.decoders[k].fusing();
    }
  }
};

namespace {

using State = StreamDecoder::State;

bool byte_token(std::string_view t, uint8_t& b) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return false;
  b = uint8_t(h * 16 + l);
  return true;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t f = s.find(from, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(to);
    pos = f + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace

std::string byte_level_bytes(std::string_view tok) {
  const auto& bm = unicode::byte_map();
  std::string out;
  out.reserve(tok.size());
  for (size_t i = 0; i < tok.size();) {
    size_t n = unicode::valid_sequence_length(tok, i);
    if (n == 0) return std::string(tok);
    uint32_t cp = unicode::decode_at(tok, i, n);
    if (cp >= bm.cp_to_byte.size() || bm.cp_to_byte[cp] < 0) return std::string(tok);
    out.push_back(char(bm.cp_to_byte[cp]));
    i += n;
  }
  return out;
}

namespace {

// Removes up to n leading (front) or trailing copies of the character c from s.
std::string_view strip_n(std::string_view s, std::string_view c, int start, int stop) {
  for (int k = 0; k < start && s.substr(0, c.size()) == c; ++k) s.remove_prefix(c.size());
  for (int k = 0; k < stop && s.size() >= c.size() && s.substr(s.size() - c.size()) == c; ++k) {
    s.remove_suffix(c.size());
  }
  return s;
}

class Pipeline {
 public:
  Pipeline(const Tokenizer::Impl& impl, State& st, std::string& out) : impl_(impl), st_(st), out_(out) {}

  // First stage ByteLevel with the token's bytes already mapped.
  void byte_level_first(std::string_view bytes) {
    std::string text;
    st_.stages[0].lossy.push(bytes, text);
    if (!text.empty()) chunk(1, text);
  }

  void token(size_t k, std::string_view tok) {
    if (k == impl_.decoders.size()) {
      out_.append(tok);  // the reference joins the decoder's outputs with ""
      return;
    }
    const DecoderStep& d = impl_.decoders[k];
    State::Stage& s = st_.stages[k];
    if (s.stream_mode) {
      chunk(k, tok);
      return;
    }
    switch (d.kind) {
      case DecKind::kByteLevel: {
        std::string text;
        s.lossy.push(byte_level_bytes(tok), text);
        if (!text.empty()) chunk(k + 1, text);
        return;
      }
      case DecKind::kFuse:
        chunk(k + 1, tok);
        return;
      case DecKind::kReplace:
        token(k + 1, replace_all(tok, d.from, d.to));
        return;
      case DecKind::kByteFallback: {
        uint8_t b = 0;
        if (byte_token(tok, b)) {
          s.buf.push_back(char(b));
          return;
        }
        flush_fallback(k);
        token(k + 1, tok);
        return;
      }
      case DecKind::kStrip:
        token(k + 1, strip_n(tok, d.content, d.start, d.stop));
        return;
      case DecKind::kMetaspace: {
        bool first = s.count++ == 0;
        token(k + 1, replace_all(tok, d.from, first && d.prepend ? "" : " "));
        return;
      }
      case DecKind::kJoinSpace: {
        if (s.count++ > 0) token(k + 1, " ");
        token(k + 1, tok);
        return;
      }
    }
  }

  // Fused text, in chunks that end on character boundaries.
  void chunk(size_t k, std::string_view text) {
    if (text.empty()) return;
    if (k == impl_.decoders.size()) {
      out_.append(text);
      return;
    }
    const DecoderStep& d = impl_.decoders[k];
    State::Stage& s = st_.stages[k];
    switch (d.kind) {
      case DecKind::kReplace:
        chunk(k + 1, replace_all(text, d.from, d.to));
        return;
      case DecKind::kMetaspace:
        // After fusing, the whole text is the reference's single (first) token.
        chunk(k + 1, replace_all(text, d.from, d.prepend ? "" : " "));
        return;
      case DecKind::kByteLevel: {
        std::string t;
        s.lossy.push(byte_level_bytes(text), t);
        chunk(k + 1, t);
        return;
      }
      case DecKind::kStrip: {
        std::string_view c = d.content;
        if (!s.start_done) {
          while (s.stripped < d.start && text.substr(0, c.size()) == c) {
            text.remove_prefix(c.size());
            ++s.stripped;
          }
          if (text.empty()) return;
          s.start_done = true;
        }
        if (d.stop <= 0) {
          chunk(k + 1, text);
          return;
        }
        // Hold back the trailing run of c (at most stop copies) until we know it is not the end.
        std::string all = s.buf;
        all.append(text);
        size_t keep = 0;
        while (int(keep) < d.stop && all.size() >= (keep + 1) * c.size() &&
               std::string_view(all).substr(all.size() - (keep + 1) * c.size(), c.size()) == c) {
          ++keep;
        }
        size_t emit = all.size() - keep * c.size();
        s.buf = all.substr(emit);
        chunk(k + 1, std::string_view(all).substr(0, emit));
        return;
      }
      case DecKind::kFuse:
      case DecKind::kByteFallback:
      case DecKind::kJoinSpace:
        chunk(k + 1, text);
        return;
    }
  }

  void finish() {
    for (size_t k = 0; k < impl_.decoders.size(); ++k) {
      const DecoderStep& d = impl_.decoders[k];
      State::Stage& s = st_.stages[k];
      if (d.kind == DecKind::kByteFallback && !s.stream_mode) {
        flush_fallback(k);
      } else if (d.kind == DecKind::kByteLevel) {
        std::string t;
        s.lossy.finish(t);
        chunk(k + 1, t);
      } else if (d.kind == DecKind::kStrip && s.stream_mode) {
        s.buf.clear();  // the held characters are exactly the ones Strip(stop) removes
      }
    }
  }

 private:
  void flush_fallback(size_t k) {
    State::Stage& s = st_.stages[k];
    if (s.buf.empty()) return;
    std::string bytes = std::move(s.buf);
    s.buf.clear();
    if (unicode::is_valid_utf8(bytes)) {
      token(k + 1, bytes);
    } else {
      // The reference emits one U+FFFD per byte of an ill-formed run.
      for (size_t i = 0; i < bytes.size(); ++i) token(k + 1, unicode::kReplacementChar);
    }
  }

  const Tokenizer::Impl& impl_;
  State& st_;
  std::string& out_;
};

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer),
      skip_special_(skip_special_tokens),
      state_(std::make_unique<State>(tokenizer.impl())) {}
StreamDecoder::~StreamDecoder() = default;
StreamDecoder::StreamDecoder(StreamDecoder&&) noexcept = default;
StreamDecoder& StreamDecoder::operator=(StreamDecoder&&) noexcept = default;

namespace {

void feed(const Tokenizer::Impl& impl, Pipeline& p, int32_t id, bool skip_special) {
  if (id < 0 || size_t(id) >= impl.id_to_token.size()) return;
  if (skip_special && impl.special[size_t(id)]) return;
  const std::string& tok = impl.id_to_token[size_t(id)];
  if (tok.empty() && !impl.is_added[size_t(id)]) return;  // a hole in the id space
  if (!impl.byte_level_tokens.empty()) {
    p.byte_level_first(impl.byte_level_tokens[size_t(id)]);
  } else {
    p.token(0, tok);
  }
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  std::string out;
  Pipeline p(tokenizer_->impl(), *state_, out);
  feed(tokenizer_->impl(), p, id, skip_special_);
  return out;
}

std::string StreamDecoder::flush() {
  const Tokenizer::Impl& impl = tokenizer_->impl();
  std::string out;
  Pipeline(impl, *state_, out).finish();
  state_->reset(impl);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  // The same pipeline as StreamDecoder, writing into one string.
  StreamDecoder::State state(*impl_);
  std::string out;
  out.reserve(ids.size() * 4);
  Pipeline p(*impl_, state, out);
  for (int32_t id : ids) feed(*impl_, p, id, skip_special_tokens);
  p.finish();
  return out;
}

}  // namespace plumb::engine
