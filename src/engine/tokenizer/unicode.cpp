#include "engine/tokenizer/unicode.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <cstring>
#include <vector>

namespace plumb::engine::unicode {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Expected total length and the allowed range of the second byte for a lead byte (Unicode Table 3-7).
struct Lead {
  int len;  // 0: not a valid lead byte
  uint8_t lo, hi;
};

Lead lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

enum class Scan { kValid, kInvalid, kTruncated };

// Examines the sequence at s[i]: kValid (n = its length), kInvalid (n = bytes forming the maximal
// ill-formed subpart, >= 1) or kTruncated (a well-formed prefix running to the end of s).
Scan scan(std::string_view s, size_t i, size_t& n) {
  uint8_t b = uint8_t(s[i]);
  Lead l = lead_info(b);
  if (l.len == 0) {
    n = 1;
    return Scan::kInvalid;
  }
  for (int k = 1; k < l.len; ++k) {
    if (i + k >= s.size()) {
      n = s.size() - i;
      return Scan::kTruncated;
    }
    uint8_t c = uint8_t(s[i + k]);
    uint8_t lo = k == 1 ? l.lo : 0x80, hi = k == 1 ? l.hi : 0xBF;
    if (c < lo || c > hi) {
      n = size_t(k);
      return Scan::kInvalid;
    }
  }
  n = size_t(l.len);
  return Scan::kValid;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  size_t n = 0;
  return scan(s, i, n) == Scan::kValid ? n : 0;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  // ASCII runs eight bytes at a time.
  while (true) {
    while (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) return true;
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = valid_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
}

uint32_t decode_at(std::string_view s, size_t i, size_t len) {
  auto b = [&](size_t k) { return uint32_t(uint8_t(s[i + k])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void LossyUtf8::push(std::string_view bytes, std::string& out) {
  std::string_view s = bytes;
  std::string joined;
  if (!pending_.empty()) {
    joined = pending_;
    joined.append(bytes);
    pending_.clear();
    s = joined;
  }
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    size_t n = 0;
    switch (scan(s, i, n)) {
      case Scan::kValid:
        out.append(s.substr(i, n));
        break;
      case Scan::kInvalid:
        out.append(kReplacementChar);
        break;
      case Scan::kTruncated:
        pending_.assign(s.substr(i));
        return;
    }
    i += n;
  }
}

void LossyUtf8::finish(std::string& out) {
  if (!pending_.empty()) out.append(kReplacementChar);
  pending_.clear();
}

std::string to_valid_utf8(std::string_view s) {
  LossyUtf8 l;
  std::string out;
  out.reserve(s.size());
  l.push(s, out);
  l.finish(out);
  return out;
}

const ByteMap& byte_map() {
  static const ByteMap m = [] {
    ByteMap r;
    r.cp_to_byte.fill(-1);
    // Printable bytes map to themselves; the others to 256, 257, ... in byte order (GPT-2).
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? uint32_t(b) : next++;
      r.byte_to_utf8[b].clear();
      append_utf8(r.byte_to_utf8[b], cp);
      r.cp_to_byte[cp] = int16_t(b);
    }
    return r;
  }();
  return m;
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_word_char(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  return !is_whitespace(cp);
}

Result<std::string> normalize(std::string_view s, NormalForm form) {
  // Code points below U+0300 are unchanged by every form except compatibility mappings of a few
  // Latin-1 characters, so the common ASCII case skips ICU entirely.
  bool trivial = true;
  for (unsigned char c : s) {
    if (c >= 0x80) {
      trivial = false;
      break;
    }
  }
  if (trivial) return std::string(s);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      n = unorm2_getNFCInstance(&err);
      break;
    case NormalForm::kNFD:
      n = unorm2_getNFDInstance(&err);
      break;
    case NormalForm::kNFKC:
      n = unorm2_getNFKCInstance(&err);
      break;
    case NormalForm::kNFKD:
      n = unorm2_getNFKDInstance(&err);
      break;
  }
  if (U_FAILURE(err)) return internal_error(std::string("ICU normalizer unavailable: ") + u_errorName(err));
  int32_t len16 = 0;
  u_strFromUTF8(nullptr, 0, &len16, s.data(), int32_t(s.size()), &err);
  if (err != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(err)) return invalid_argument("text is not valid UTF-8");
  err = U_ZERO_ERROR;
  std::vector<UChar> src(size_t(len16) + 1);
  u_strFromUTF8(src.data(), len16 + 1, nullptr, s.data(), int32_t(s.size()), &err);
  if (U_FAILURE(err)) return invalid_argument("text is not valid UTF-8");
  // Decompositions can grow text (at most x18 for NFKD of some characters, rarely); retry on overflow.
  std::vector<UChar> dst(size_t(len16) * 2 + 16);
  int32_t dlen = unorm2_normalize(n, src.data(), len16, dst.data(), int32_t(dst.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    dst.resize(size_t(dlen) + 1);
    dlen = unorm2_normalize(n, src.data(), len16, dst.data(), int32_t(dst.size()), &err);
  }
  if (U_FAILURE(err)) return internal_error(std::string("ICU normalize failed: ") + u_errorName(err));
  int32_t len8 = 0;
  u_strToUTF8(nullptr, 0, &len8, dst.data(), dlen, &err);
  err = U_ZERO_ERROR;
  std::string out(size_t(len8), '\0');
  u_strToUTF8(out.data(), len8, nullptr, dst.data(), dlen, &err);
  if (U_FAILURE(err) && err != U_STRING_NOT_TERMINATED_WARNING) {
    return internal_error(std::string("ICU UTF-8 conversion failed: ") + u_errorName(err));
  }
  return out;
}

}  // namespace plumb::engine::unicode
