// Loading tokenizer.json and encoding. Decoding lives in decode.cpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstring>
#include <exception>
#include <functional>
#include <queue>

#include "core/file.h"
#include "core/json.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace plumb::engine {

// ---------------------------------------------------------------------------------------------
// Regex

namespace {

// Oniguruma (the reference library's engine) matches Unicode White_Space with \s; PCRE2's UCP \s
// differs (e.g. on U+0085), so \s and \S become explicit classes.
constexpr std::string_view kSpaceItems =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string rewrite_spaces(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char d = p[i + 1];
      ++i;
      if (d == 's') {
        if (in_class) {
          out += kSpaceItems;
        } else {
          out += '[';
          out += kSpaceItems;
          out += ']';
        }
      } else if (d == 'S' && !in_class) {
        out += "[^";
        out += kSpaceItems;
        out += ']';
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<Regex>> Regex::compile(const std::string& pattern) {
  std::string p = rewrite_spaces(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP,
                                   &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    return invalid_argument("bad regex '" + pattern + "' at offset " + std::to_string(off) + ": " +
                            reinterpret_cast<char*>(buf));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  auto r = std::make_shared<Regex>();
  r->code_ = code;
  return r;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

namespace {
// One match block per thread, shared by every pattern: next_match copies the offsets out before
// returning, so nested scans (a Split whose pieces go through another regex) may reuse it. Patterns
// with more groups than it holds still report the whole match (pcre2_match returns 0).
struct ThreadMatchData {
  pcre2_match_data* md = pcre2_match_data_create(16, nullptr);
  ~ThreadMatchData() { pcre2_match_data_free(md); }
};
}  // namespace

void* Regex::new_match_data() const {
  thread_local ThreadMatchData data;
  return data.md;
}
void Regex::free_match_data(void*) {}

bool Regex::next_match(std::string_view s, size_t from, size_t& start, size_t& end, void* md) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* m = static_cast<pcre2_match_data*>(md);
  int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), from, PCRE2_NO_UTF_CHECK, m,
                       nullptr);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
    // JIT stack exhausted on a pathological input: the interpreter has no such limit.
    rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), from,
                     PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, m, nullptr);
  }
  if (rc < 0) return false;
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m);
  start = ov[0];
  end = ov[1];
  return true;
}

// ---------------------------------------------------------------------------------------------
// TokenTrie

void TokenTrie::insert(std::string_view s, int32_t index) {
  if (s.empty()) return;
  first_[uint8_t(s[0])] = true;
  int32_t node = 0;
  for (char ch : s) {
    auto c = uint8_t(ch);
    int32_t child = -1;
    for (auto& [b, n] : nodes_[size_t(node)].next) {
      if (b == c) child = n;
    }
    if (child < 0) {
      child = int32_t(nodes_.size());
      nodes_[size_t(node)].next.emplace_back(c, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  nodes_[size_t(node)].token = index;
}

int32_t TokenTrie::longest_at(std::string_view s, size_t i, size_t& len) const {
  int32_t node = 0, best = -1;
  for (size_t k = i; k < s.size(); ++k) {
    auto c = uint8_t(s[k]);
    int32_t child = -1;
    for (const auto& [b, n] : nodes_[size_t(node)].next) {
      if (b == c) {
        child = n;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes_[size_t(node)].token >= 0) {
      best = nodes_[size_t(node)].token;
      len = k + 1 - i;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Loading

namespace {

namespace bj = boost::json;

// Thrown inside this file only (caught in from_json) to keep the parser readable.
struct LoadError {
  Status status;
};

[[noreturn]] void fail(Status s) { throw LoadError{std::move(s)}; }

const bj::value* member(const bj::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return nullptr;
  return &it->value();
}

const bj::object& need_object(const bj::value* v, const std::string& what) {
  if (!v || !v->is_object()) fail(invalid_argument("tokenizer.json: '" + what + "' must be an object"));
  return v->as_object();
}

std::string need_string(const bj::object& o, std::string_view key, const std::string& where) {
  const bj::value* v = member(o, key);
  if (!v || !v->is_string()) {
    fail(invalid_argument("tokenizer.json: '" + where + "." + std::string(key) + "' must be a string"));
  }
  return std::string(v->as_string());
}

std::string opt_string(const bj::object& o, std::string_view key, const std::string& def = {}) {
  const bj::value* v = member(o, key);
  return v && v->is_string() ? std::string(v->as_string()) : def;
}

bool opt_bool(const bj::object& o, std::string_view key, bool def) {
  const bj::value* v = member(o, key);
  return v && v->is_bool() ? v->as_bool() : def;
}

int64_t opt_int(const bj::object& o, std::string_view key, int64_t def) {
  const bj::value* v = member(o, key);
  return v && v->is_int64() ? v->as_int64() : v && v->is_uint64() ? int64_t(v->as_uint64()) : def;
}

std::string type_of(const bj::object& o, const std::string& where) { return need_string(o, "type", where); }

// {"String": "x"} or {"Regex": "..."} -> compiled regex (literal escaped).
std::shared_ptr<Regex> pattern_regex(const bj::object& o, const std::string& where) {
  const bj::object& p = need_object(member(o, "pattern"), where + ".pattern");
  std::string src;
  if (const bj::value* s = member(p, "String"); s && s->is_string()) {
    src = escape_literal(std::string(s->as_string()));
  } else if (const bj::value* r = member(p, "Regex"); r && r->is_string()) {
    src = std::string(r->as_string());
  } else {
    fail(invalid_argument("tokenizer.json: '" + where + ".pattern' needs a String or Regex"));
  }
  auto re = Regex::compile(src);
  if (!re.ok()) fail(re.status().with_context("tokenizer.json: " + where));
  return *re;
}

std::shared_ptr<Regex> compile_or_fail(const std::string& src, const std::string& where) {
  auto re = Regex::compile(src);
  if (!re.ok()) fail(re.status().with_context("tokenizer.json: " + where));
  return *re;
}

PrependScheme prepend_scheme(const bj::object& o) {
  if (const bj::value* v = member(o, "prepend_scheme"); v && v->is_string()) {
    std::string s(v->as_string());
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    fail(invalid_argument("tokenizer.json: unknown Metaspace prepend_scheme '" + s + "'"));
  }
  return opt_bool(o, "add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

void parse_normalizer(const bj::value& v, std::vector<NormalizerStep>& out) {
  const bj::object& o = need_object(&v, "normalizer");
  std::string t = type_of(o, "normalizer");
  NormalizerStep s;
  if (t == "Sequence") {
    const bj::value* list = member(o, "normalizers");
    if (!list || !list->is_array())
      fail(invalid_argument("tokenizer.json: Sequence normalizer needs 'normalizers'"));
    for (const auto& n : list->as_array()) parse_normalizer(n, out);
    return;
  } else if (t == "Prepend") {
    s.kind = NormKind::kPrepend;
    s.text = need_string(o, "prepend", "normalizer");
  } else if (t == "Replace") {
    s.kind = NormKind::kReplace;
    const bj::object& p = need_object(member(o, "pattern"), "normalizer.pattern");
    if (const bj::value* str = member(p, "String"); str && str->is_string()) {
      s.text = std::string(str->as_string());
      if (s.text.empty()) fail(invalid_argument("tokenizer.json: Replace normalizer with an empty pattern"));
    } else {
      s.regex = pattern_regex(o, "normalizer");
    }
    s.content = need_string(o, "content", "normalizer");
  } else if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
    s.kind = NormKind::kUnicode;
    s.form = t == "NFC"    ? unicode::NormalForm::kNFC
             : t == "NFD"  ? unicode::NormalForm::kNFD
             : t == "NFKC" ? unicode::NormalForm::kNFKC
                           : unicode::NormalForm::kNFKD;
  } else {
    fail(unimplemented("tokenizer.json: normalizer type '" + t + "' is not supported"));
  }
  out.push_back(std::move(s));
}

SplitBehavior split_behavior(const std::string& b) {
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(invalid_argument("tokenizer.json: unknown Split behavior '" + b + "'"));
}

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void parse_pre_tokenizer(const bj::value& v, std::vector<PreTokenizerStep>& out) {
  const bj::object& o = need_object(&v, "pre_tokenizer");
  std::string t = type_of(o, "pre_tokenizer");
  PreTokenizerStep s;
  if (t == "Sequence") {
    const bj::value* list = member(o, "pretokenizers");
    if (!list || !list->is_array()) {
      fail(invalid_argument("tokenizer.json: Sequence pre_tokenizer needs 'pretokenizers'"));
    }
    for (const auto& n : list->as_array()) parse_pre_tokenizer(n, out);
    return;
  } else if (t == "Split") {
    s.kind = PreKind::kSplit;
    s.regex = pattern_regex(o, "pre_tokenizer");
    s.behavior = split_behavior(need_string(o, "behavior", "pre_tokenizer"));
    s.invert = opt_bool(o, "invert", false);
  } else if (t == "ByteLevel") {
    s.kind = PreKind::kByteLevel;
    s.add_prefix_space = opt_bool(o, "add_prefix_space", true);
    if (opt_bool(o, "use_regex", true)) s.regex = compile_or_fail(kGpt2Pattern, "ByteLevel");
  } else if (t == "Metaspace") {
    s.kind = PreKind::kMetaspace;
    s.replacement = opt_string(o, "replacement", "\xE2\x96\x81");
    s.prepend = prepend_scheme(o);
    s.split = opt_bool(o, "split", true);
  } else if (t == "Digits") {
    s.kind = PreKind::kDigits;
    s.regex = compile_or_fail("\\p{N}", "Digits");
    s.behavior =
        opt_bool(o, "individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else {
    fail(unimplemented("tokenizer.json: pre_tokenizer type '" + t + "' is not supported"));
  }
  out.push_back(std::move(s));
}

void parse_decoder(const bj::value& v, std::vector<DecoderStep>& out) {
  const bj::object& o = need_object(&v, "decoder");
  std::string t = type_of(o, "decoder");
  DecoderStep s;
  if (t == "Sequence") {
    const bj::value* list = member(o, "decoders");
    if (!list || !list->is_array())
      fail(invalid_argument("tokenizer.json: Sequence decoder needs 'decoders'"));
    for (const auto& n : list->as_array()) parse_decoder(n, out);
    return;
  } else if (t == "ByteLevel") {
    s.kind = DecKind::kByteLevel;
  } else if (t == "Replace") {
    s.kind = DecKind::kReplace;
    const bj::object& p = need_object(member(o, "pattern"), "decoder.pattern");
    const bj::value* str = member(p, "String");
    if (!str || !str->is_string() || str->as_string().empty()) {
      fail(unimplemented("tokenizer.json: Replace decoder supports only non-empty String patterns"));
    }
    s.from = std::string(str->as_string());
    s.to = need_string(o, "content", "decoder");
  } else if (t == "ByteFallback") {
    s.kind = DecKind::kByteFallback;
  } else if (t == "Fuse") {
    s.kind = DecKind::kFuse;
  } else if (t == "Strip") {
    s.kind = DecKind::kStrip;
    s.content = need_string(o, "content", "decoder");
    if (!unicode::is_valid_utf8(s.content) || s.content.empty() ||
        unicode::valid_sequence_length(s.content, 0) != s.content.size()) {
      fail(invalid_argument("tokenizer.json: Strip decoder 'content' must be one character"));
    }
    s.start = int(opt_int(o, "start", 0));
    s.stop = int(opt_int(o, "stop", 0));
  } else if (t == "Metaspace") {
    s.kind = DecKind::kMetaspace;
    s.from = opt_string(o, "replacement", "\xE2\x96\x81");
    s.prepend = prepend_scheme(o) != PrependScheme::kNever;
  } else {
    fail(unimplemented("tokenizer.json: decoder type '" + t + "' is not supported"));
  }
  out.push_back(std::move(s));
}

void parse_post_processor(const bj::value& v, Tokenizer::Impl& impl) {
  const bj::object& o = need_object(&v, "post_processor");
  std::string t = type_of(o, "post_processor");
  if (t == "Sequence") {
    const bj::value* list = member(o, "processors");
    if (!list || !list->is_array()) {
      fail(invalid_argument("tokenizer.json: Sequence post_processor needs 'processors'"));
    }
    for (const auto& p : list->as_array()) parse_post_processor(p, impl);
  } else if (t == "ByteLevel") {
    // Only trims offsets; ids are unchanged.
  } else if (t == "TemplateProcessing") {
    const bj::value* single = member(o, "single");
    if (!single || !single->is_array())
      fail(invalid_argument("tokenizer.json: TemplateProcessing needs 'single'"));
    const bj::value* specials = member(o, "special_tokens");
    impl.prefix_ids.clear();
    impl.suffix_ids.clear();
    bool after = false;
    for (const auto& piece : single->as_array()) {
      const bj::object& po = need_object(&piece, "post_processor.single[]");
      if (member(po, "Sequence")) {
        after = true;
        continue;
      }
      const bj::object& sp = need_object(member(po, "SpecialToken"), "post_processor.single[].SpecialToken");
      std::string name = need_string(sp, "id", "SpecialToken");
      if (!specials || !specials->is_object()) {
        fail(invalid_argument("tokenizer.json: TemplateProcessing needs 'special_tokens'"));
      }
      const bj::object& entry = need_object(member(specials->as_object(), name), "special_tokens." + name);
      const bj::value* ids = member(entry, "ids");
      if (!ids || !ids->is_array())
        fail(invalid_argument("tokenizer.json: special_tokens." + name + ".ids missing"));
      for (const auto& id : ids->as_array()) {
        if (!id.is_number())
          fail(invalid_argument("tokenizer.json: special_tokens." + name + ".ids not numbers"));
        (after ? impl.suffix_ids : impl.prefix_ids).push_back(int32_t(id.to_number<int64_t>()));
      }
    }
  } else if (t == "BertProcessing" || t == "RobertaProcessing") {
    auto id_of = [&](std::string_view key) {
      const bj::value* p = member(o, key);
      if (!p || !p->is_array() || p->as_array().size() != 2 || !p->as_array()[1].is_number()) {
        fail(invalid_argument("tokenizer.json: " + t + "." + std::string(key) + " must be [token, id]"));
      }
      return int32_t(p->as_array()[1].to_number<int64_t>());
    };
    impl.prefix_ids = {id_of("cls")};
    impl.suffix_ids = {id_of("sep")};
  } else {
    fail(unimplemented("tokenizer.json: post_processor type '" + t + "' is not supported"));
  }
}

void parse_bpe(const bj::object& m, Tokenizer::Impl& impl) {
  const bj::value* vocab = member(m, "vocab");
  if (!vocab || !vocab->is_object())
    fail(invalid_argument("tokenizer.json: 'model.vocab' must be an object"));
  impl.vocab.reserve(vocab->as_object().size());
  for (const auto& kv : vocab->as_object()) {
    if (!kv.value().is_number()) {
      fail(invalid_argument("tokenizer.json: vocab entry '" + std::string(kv.key()) +
                            "' has a non-numeric id"));
    }
    int64_t id = kv.value().to_number<int64_t>();
    if (id < 0 || id > INT32_MAX) fail(invalid_argument("tokenizer.json: vocab id out of range"));
    impl.vocab.emplace(std::string(kv.key()), int32_t(id));
  }
  for (std::string_view key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!opt_string(m, key).empty()) {
      fail(unimplemented("tokenizer.json: BPE '" + std::string(key) + "' is not supported"));
    }
  }
  const bj::value* merges = member(m, "merges");
  if (!merges || !merges->is_array())
    fail(invalid_argument("tokenizer.json: 'model.merges' must be an array"));
  impl.merges.reserve(merges->as_array().size());
  uint64_t rank = 0;
  for (const auto& mv : merges->as_array()) {
    std::string a, b;
    if (mv.is_string()) {
      std::string_view s = mv.as_string();
      size_t sp = s.find(' ');
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
        fail(invalid_argument("tokenizer.json: merge #" + std::to_string(rank) + " '" + std::string(s) +
                              "' is not two tokens separated by one space"));
      }
      a = std::string(s.substr(0, sp));
      b = std::string(s.substr(sp + 1));
    } else if (mv.is_array() && mv.as_array().size() == 2 && mv.as_array()[0].is_string() &&
               mv.as_array()[1].is_string()) {
      a = std::string(mv.as_array()[0].as_string());
      b = std::string(mv.as_array()[1].as_string());
    } else {
      fail(invalid_argument("tokenizer.json: merge #" + std::to_string(rank) +
                            " must be \"a b\" or [\"a\", \"b\"]"));
    }
    auto ia = impl.vocab.find(a), ib = impl.vocab.find(b), iab = impl.vocab.find(a + b);
    if (ia == impl.vocab.end() || ib == impl.vocab.end() || iab == impl.vocab.end()) {
      fail(invalid_argument("tokenizer.json: merge #" + std::to_string(rank) + " '" + a + " " + b +
                            "' uses a token missing from the vocab"));
    }
    uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
    // The first (lowest-rank) occurrence of a pair wins, as in the reference.
    impl.merges.emplace(key, (rank << 32) | uint32_t(iab->second));
    ++rank;
  }
  if (std::string unk = opt_string(m, "unk_token"); !unk.empty()) {
    auto it = impl.vocab.find(unk);
    if (it == impl.vocab.end())
      fail(invalid_argument("tokenizer.json: unk_token '" + unk + "' is not in the vocab"));
    impl.unk_id = it->second;
  }
  impl.fuse_unk = opt_bool(m, "fuse_unk", false);
  impl.byte_fallback = opt_bool(m, "byte_fallback", false);
  impl.ignore_merges = opt_bool(m, "ignore_merges", false);
}

// bos_token / eos_token: a string or {"content": "..."}.
std::string special_token_text(const bj::object& cfg, std::string_view key) {
  const bj::value* v = member(cfg, key);
  if (!v) return {};
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_object()) return opt_string(v->as_object(), "content");
  return {};
}

// The BPE model (the only supported type).
void parse_model_section(const bj::object& root, Tokenizer::Impl& impl) {
  const bj::value* model = member(root, "model");
  if (!model) fail(invalid_argument("tokenizer.json: missing 'model'"));
  const bj::object& m = need_object(model, "model");
  std::string mtype = opt_string(m, "type", member(m, "merges") ? "BPE" : "");
  if (mtype != "BPE") {
    fail(unimplemented("tokenizer.json: model type '" + mtype + "' is not supported (only BPE)"));
  }
  parse_bpe(m, impl);
}

// Normalizers, pre-tokenizers (ByteLevel last), decoders and the post-processor.
void parse_pipeline(const bj::object& root, Tokenizer::Impl& impl) {
  if (const bj::value* n = member(root, "normalizer")) parse_normalizer(*n, impl.normalizers);
  if (const bj::value* p = member(root, "pre_tokenizer")) parse_pre_tokenizer(*p, impl.pre_tokenizers);
  for (size_t i = 0; i < impl.pre_tokenizers.size(); ++i) {
    if (impl.pre_tokenizers[i].kind == PreKind::kByteLevel) {
      if (i + 1 != impl.pre_tokenizers.size()) {
        fail(unimplemented("tokenizer.json: a ByteLevel pre_tokenizer must be the last one"));
      }
      impl.byte_level = true;
    }
  }
  if (const bj::value* d = member(root, "decoder")) {
    parse_decoder(*d, impl.decoders);
  } else {
    DecoderStep join;
    join.kind = DecKind::kJoinSpace;
    impl.decoders.push_back(std::move(join));
  }
  if (const bj::value* p = member(root, "post_processor")) parse_post_processor(*p, impl);
}

void parse_added_tokens(const bj::object& root, Tokenizer::Impl& impl) {
  // Added tokens.
  if (const bj::value* at = member(root, "added_tokens")) {
    if (!at->is_array()) fail(invalid_argument("tokenizer.json: 'added_tokens' must be an array"));
    for (const auto& tv : at->as_array()) {
      const bj::object& t = need_object(&tv, "added_tokens[]");
      AddedToken a;
      const bj::value* id = member(t, "id");
      if (!id || !id->is_number())
        fail(invalid_argument("tokenizer.json: added token without a numeric 'id'"));
      int64_t idv = id->to_number<int64_t>();
      if (idv < 0 || idv > INT32_MAX) fail(invalid_argument("tokenizer.json: added token id out of range"));
      a.id = int32_t(idv);
      a.content = need_string(t, "content", "added_tokens[]");
      a.single_word = opt_bool(t, "single_word", false);
      a.lstrip = opt_bool(t, "lstrip", false);
      a.rstrip = opt_bool(t, "rstrip", false);
      a.normalized = opt_bool(t, "normalized", false);
      a.special = opt_bool(t, "special", false);
      if (a.content.empty()) continue;
      impl.added.push_back(std::move(a));
    }
  }
  for (size_t i = 0; i < impl.added.size(); ++i) {
    const AddedToken& a = impl.added[i];
    impl.added_by_content[a.content] = a.id;
    bool in_normalized = a.normalized && !impl.normalizers.empty();
    (in_normalized ? impl.normalized_trie : impl.raw_trie).insert(a.content, int32_t(i));
  }
}

void build_id_tables(Tokenizer::Impl& impl) {
  // id -> token tables.
  int64_t max_id = -1;
  for (const auto& [tok, id] : impl.vocab) max_id = std::max<int64_t>(max_id, id);
  for (const auto& a : impl.added) max_id = std::max<int64_t>(max_id, a.id);
  if (max_id > 16 * 1024 * 1024)
    fail(invalid_argument("tokenizer.json: token ids above 16M are not supported"));
  impl.id_to_token.assign(size_t(max_id + 1), {});
  impl.special.assign(size_t(max_id + 1), 0);
  impl.is_added.assign(size_t(max_id + 1), 0);
  for (const auto& [tok, id] : impl.vocab) impl.id_to_token[size_t(id)] = tok;
  for (const auto& a : impl.added) {
    impl.id_to_token[size_t(a.id)] = a.content;
    impl.is_added[size_t(a.id)] = 1;
    impl.special[size_t(a.id)] = a.special ? 1 : 0;
  }
  if (!impl.decoders.empty() && impl.decoders[0].kind == DecKind::kByteLevel) {
    impl.byte_level_tokens.resize(impl.id_to_token.size());
    for (size_t i = 0; i < impl.id_to_token.size(); ++i)
      impl.byte_level_tokens[i] = byte_level_bytes(impl.id_to_token[i]);
  }
  for (int32_t id : impl.prefix_ids) {
    if (id < 0 || id > max_id) fail(invalid_argument("tokenizer.json: post_processor id out of range"));
  }
  for (int32_t id : impl.suffix_ids) {
    if (id < 0 || id > max_id) fail(invalid_argument("tokenizer.json: post_processor id out of range"));
  }
}

void choose_word_marker(Tokenizer::Impl& impl) {
  // Word marker for SentencePiece-style models (see tokenizer_impl.h).
  if (!impl.byte_level) {
    std::string marker;
    bool splits = false;
    for (const auto& p : impl.pre_tokenizers) {
      if (p.kind == PreKind::kMetaspace) {
        marker = p.replacement;
        splits = splits || p.split;
      } else {
        splits = true;
      }
    }
    for (const auto& n : impl.normalizers) {
      if (n.kind == NormKind::kReplace && !n.regex && n.text == " ") marker = n.content;
    }
    if (!splits && !marker.empty()) {
      bool safe = true;
      for (const auto& [tok, id] : impl.vocab) {
        size_t lead = 0;
        while (tok.compare(lead, marker.size(), marker) == 0) lead += marker.size();
        if (tok.find(marker, lead) != std::string::npos) {
          safe = false;
          break;
        }
      }
      if (safe) impl.word_marker = marker;
    }
  }
}

// Each byte's token id and byte-fallback id (-1 where the vocab has none).
void build_byte_ids(Tokenizer::Impl& impl) {
  const auto& bm = unicode::byte_map();
  for (int b = 0; b < 256; ++b) {
    auto it = impl.vocab.find(bm.byte_to_utf8[size_t(b)]);
    impl.byte_ids[size_t(b)] = it == impl.vocab.end() ? -1 : it->second;
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto fb = impl.vocab.find(name);
    impl.fallback_ids[size_t(b)] = fb == impl.vocab.end() ? -1 : fb->second;
  }
}

void parse_tokenizer_config(std::string_view config_json, Tokenizer::Impl& impl) {
  // tokenizer_config.json.
  auto lookup = [&](const std::string& tok) -> std::optional<int32_t> {
    if (tok.empty()) return std::nullopt;
    if (auto it = impl.added_by_content.find(tok); it != impl.added_by_content.end()) return it->second;
    if (auto it = impl.vocab.find(tok); it != impl.vocab.end()) return it->second;
    return std::nullopt;
  };
  if (!config_json.empty()) {
    auto cfg = json::parse_object(config_json);
    if (!cfg.ok()) fail(cfg.status().with_context("tokenizer_config.json"));
    impl.bos_token = special_token_text(*cfg, "bos_token");
    impl.eos_token = special_token_text(*cfg, "eos_token");
    impl.bos_id = lookup(impl.bos_token);
    impl.eos_id = lookup(impl.eos_token);
    if (const bj::value* ct = member(*cfg, "chat_template")) {
      if (ct->is_string()) {
        impl.chat_template = std::string(ct->as_string());
      } else if (ct->is_array()) {
        for (const auto& e : ct->as_array()) {
          if (e.is_object() && opt_string(e.as_object(), "name") == "default") {
            impl.chat_template = opt_string(e.as_object(), "template");
          }
        }
      }
    }
  }
}

// The eos set: tokenizer_config's eos_token, then generation_config's eos_token_id(s).
void parse_generation_config(std::string_view generation_json, Tokenizer::Impl& impl) {
  if (impl.eos_id) impl.eos_ids.push_back(*impl.eos_id);
  if (!generation_json.empty()) {
    auto gen = json::parse_object(generation_json);
    if (!gen.ok()) fail(gen.status().with_context("generation_config.json"));
    auto add = [&](const bj::value& v) {
      if (!v.is_number()) return;
      auto id = int32_t(v.to_number<int64_t>());
      if (std::find(impl.eos_ids.begin(), impl.eos_ids.end(), id) == impl.eos_ids.end())
        impl.eos_ids.push_back(id);
    };
    if (const bj::value* e = member(*gen, "eos_token_id")) {
      if (e->is_array()) {
        for (const auto& x : e->as_array()) add(x);
      } else {
        add(*e);
      }
    }
  }
}

void build(std::string_view tokenizer_json, std::string_view config_json, std::string_view generation_json,
           Tokenizer::Impl& impl) {
  auto root_r = json::parse(tokenizer_json);
  if (!root_r.ok()) fail(root_r.status().with_context("tokenizer.json"));
  if (!root_r->is_object()) fail(invalid_argument("tokenizer.json: top level must be an object"));
  const bj::object& root = root_r->as_object();
  parse_model_section(root, impl);
  parse_pipeline(root, impl);
  parse_added_tokens(root, impl);
  build_id_tables(impl);
  choose_word_marker(impl);
  build_byte_ids(impl);
  parse_tokenizer_config(config_json, impl);
  parse_generation_config(generation_json, impl);
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view tokenizer_json,
                                                        std::string_view tokenizer_config_json,
                                                        std::string_view generation_config_json) {
  auto impl = std::make_unique<Impl>();
  try {
    build(tokenizer_json, tokenizer_config_json, generation_config_json, *impl);
  } catch (const LoadError& e) {
    return e.status;
  } catch (const std::exception& e) {
    return invalid_argument(std::string("tokenizer.json: malformed content: ") + e.what());
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_dir) {
  PLUMB_ASSIGN_OR_RETURN(std::string tj, read_file(model_dir + "/tokenizer.json"));
  std::string cj, gj;
  if (auto c = read_file(model_dir + "/tokenizer_config.json"); c.ok()) cj = std::move(*c);
  if (auto g = read_file(model_dir + "/generation_config.json"); g.ok()) gj = std::move(*g);
  auto r = from_json(tj, cj, gj);
  if (!r.ok()) return r.status().with_context(model_dir);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Accessors

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->id_to_token.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  std::string t(token);
  if (auto it = impl_->added_by_content.find(t); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->vocab.find(t); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->id_to_token.size()) return {};
  return impl_->id_to_token[size_t(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->special.size() && impl_->special[size_t(id)];
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }
const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos_ids; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

// ---------------------------------------------------------------------------------------------
// Encoding

namespace {

size_t char_len_at(std::string_view s, size_t i) {
  size_t n = unicode::valid_sequence_length(s, i);
  return n ? n : 1;
}

uint32_t cp_at(std::string_view s, size_t i) {
  size_t n = unicode::valid_sequence_length(s, i);
  return n ? unicode::decode_at(s, i, n) : 0xFFFD;
}

uint32_t last_cp(std::string_view s) {
  if (s.empty()) return 0;
  size_t i = s.size() - 1;
  while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
  return cp_at(s, i);
}

// Splits s around added tokens of the trie (leftmost-longest), honouring lstrip/rstrip/single_word;
// on_text(piece, offset) for the text between tokens, on_token(id) for each token.
template <typename OnText, typename OnToken>
void split_added(std::string_view s, const TokenTrie& trie, const std::vector<AddedToken>& added,
                 OnText&& on_text, OnToken&& on_token) {
  if (trie.empty()) {
    if (!s.empty()) on_text(s, size_t(0));
    return;
  }
  size_t emitted = 0;  // end of the last token (start of pending text)
  size_t i = 0;
  while (i < s.size()) {
    if (!trie.may_start(uint8_t(s[i]))) {
      ++i;
      continue;
    }
    size_t len = 0;
    int32_t idx = trie.longest_at(s, i, len);
    if (idx < 0) {
      ++i;
      continue;
    }
    const AddedToken& a = added[size_t(idx)];
    size_t start = i, stop = i + len;
    if (a.single_word) {
      bool start_ok = start == 0 || !unicode::is_word_char(last_cp(s.substr(0, start)));
      bool stop_ok = stop == s.size() || !unicode::is_word_char(cp_at(s, stop));
      if (!start_ok || !stop_ok) {
        ++i;
        continue;
      }
    }
    if (a.lstrip) {
      size_t ns = start;
      while (ns > emitted) {
        size_t p = ns - 1;
        while (p > emitted && (uint8_t(s[p]) & 0xC0) == 0x80) --p;
        if (!unicode::is_whitespace(cp_at(s, p))) break;
        ns = p;
      }
      start = ns;
    }
    if (a.rstrip) {
      while (stop < s.size() && unicode::is_whitespace(cp_at(s, stop))) stop += char_len_at(s, stop);
    }
    if (start > emitted) on_text(s.substr(emitted, start - emitted), emitted);
    on_token(a.id);
    emitted = stop;
    i = stop;
  }
  if (emitted < s.size()) on_text(s.substr(emitted), emitted);
}

struct Span {
  size_t start, end;
  bool match;
};

// The reference's NormalizedString::split: partitions s by the regex matches, then groups by behavior.
void split_spans(std::string_view s, const Regex& re, SplitBehavior behavior, bool invert,
                 std::vector<Span>& out) {
  std::vector<Span> parts;
  size_t last = 0;
  re.for_each_match(s, [&](size_t a, size_t b) {
    if (a > last) parts.push_back({last, a, invert});
    parts.push_back({a, b, !invert});
    last = b;
  });
  if (last < s.size()) parts.push_back({last, s.size(), invert});
  out.clear();
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto& p : parts) out.push_back({p.start, p.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (auto& p : parts) {
        if (!p.match) out.push_back({p.start, p.end, false});
      }
      break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (auto& p : parts) {
        if (p.match && prev_match && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back({p.start, p.end, false});
        }
        prev_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& p : parts) {
        if (p.match && !prev_match && !out.empty()) {
          out.back().end = p.end;
        } else {
          out.push_back({p.start, p.end, false});
        }
        prev_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = parts.size(); k-- > 0;) {
        const Span& p = parts[k];
        if (p.match && !prev_match && !out.empty()) {
          out.back().start = p.start;
        } else {
          out.push_back({p.start, p.end, false});
        }
        prev_match = p.match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out.append(to);
    pos = f + from.size();
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// The model's words of a fully pre-tokenized piece: the piece itself, or, with a word marker, cut
// before each marker that follows a non-marker character.
inline void model_words(const Tokenizer::Impl& impl, std::string_view piece, std::vector<int32_t>& out) {
  if (impl.word_marker.empty()) {
    impl.bpe_word(piece, out);
    return;
  }
  // Cut before each marker that follows a non-marker character.
  const std::string& mk = impl.word_marker;
  size_t start = 0;
  for (size_t pos = piece.find(mk); pos != std::string_view::npos; pos = piece.find(mk, pos + mk.size())) {
    // Fewer bytes than a marker before pos (e.g. "a" in "a\u2581b" when no Prepend normalizer
    // adds a leading marker) cannot be a marker.
    if (pos > start && (pos < mk.size() || piece.compare(pos - mk.size(), mk.size(), mk) != 0)) {
      impl.bpe_word(piece.substr(start, pos - start), out);
      start = pos;
    }
  }
  impl.bpe_word(piece.substr(start), out);
}

// Runs pre-tokenizer `step` and onwards over piece; the model gets each final piece.
void pre_tokenize(const Tokenizer::Impl& impl, size_t step, std::string_view piece, bool first,
                  std::vector<int32_t>& out) {
  if (piece.empty()) return;
  if (step == impl.pre_tokenizers.size()) {
    model_words(impl, piece, out);
    return;
  }
  const PreTokenizerStep& st = impl.pre_tokenizers[step];
  switch (st.kind) {
    case PreKind::kByteLevel: {
      std::string prefixed;
      if (st.add_prefix_space && piece[0] != ' ') {
        prefixed = " ";
        prefixed.append(piece);
        piece = prefixed;
      }
      if (!st.regex) {
        pre_tokenize(impl, step + 1, piece, first, out);
      } else {
        size_t last = 0;
        st.regex->for_each_match(piece, [&](size_t a, size_t b) {
          if (a > last) pre_tokenize(impl, step + 1, piece.substr(last, a - last), first && last == 0, out);
          pre_tokenize(impl, step + 1, piece.substr(a, b - a), first && a == 0, out);
          last = b;
        });
        if (last < piece.size()) pre_tokenize(impl, step + 1, piece.substr(last), first && last == 0, out);
      }
      return;
    }
    case PreKind::kSplit:
    case PreKind::kDigits: {
      if (st.behavior == SplitBehavior::kIsolated && !st.invert) {
        // Fast path for the common case (Llama-3, Qwen2): stream the pieces without collecting them.
        size_t last = 0;
        st.regex->for_each_match(piece, [&](size_t a, size_t b) {
          if (a > last) pre_tokenize(impl, step + 1, piece.substr(last, a - last), first && last == 0, out);
          pre_tokenize(impl, step + 1, piece.substr(a, b - a), first && a == 0, out);
          last = b;
        });
        if (last < piece.size()) pre_tokenize(impl, step + 1, piece.substr(last), first && last == 0, out);
        return;
      }
      std::vector<Span> spans;
      split_spans(piece, *st.regex, st.behavior, st.invert, spans);
      for (const Span& sp : spans) {
        pre_tokenize(impl, step + 1, piece.substr(sp.start, sp.end - sp.start), first && sp.start == 0, out);
      }
      return;
    }
    case PreKind::kMetaspace: {
      std::string s(piece);
      replace_all(s, " ", st.replacement);
      bool starts = s.compare(0, st.replacement.size(), st.replacement) == 0;
      if (!starts &&
          (st.prepend == PrependScheme::kAlways || (st.prepend == PrependScheme::kFirst && first))) {
        s.insert(0, st.replacement);
      }
      if (!st.split) {
        pre_tokenize(impl, step + 1, s, first, out);
        return;
      }
      // Split on the replacement, each occurrence merged with what follows it.
      std::string_view v = s;
      size_t start = 0;
      for (size_t pos = v.find(st.replacement, 1); pos != std::string_view::npos;
           pos = v.find(st.replacement, pos + st.replacement.size())) {
        if (pos > start) pre_tokenize(impl, step + 1, v.substr(start, pos - start), first && start == 0, out);
        start = pos;
      }
      pre_tokenize(impl, step + 1, v.substr(start), first && start == 0, out);
      return;
    }
  }
}

}  // namespace

void Tokenizer::Impl::encode_segment(std::string_view normalized, bool at_text_start,
                                     std::vector<int32_t>& out) const {
  pre_tokenize(*this, 0, normalized, at_text_start, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (!unicode::is_valid_utf8(text)) {
    repaired = unicode::to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special_tokens) out.insert(out.end(), m.prefix_ids.begin(), m.prefix_ids.end());

  auto on_token = [&](int32_t id) { out.push_back(id); };
  split_added(
      text, m.raw_trie, m.added,
      [&](std::string_view seg, size_t offset) {
        if (m.normalizers.empty()) {
          m.encode_segment(seg, offset == 0, out);
          return;
        }
        std::string s(seg);
        for (const NormalizerStep& n : m.normalizers) {
          switch (n.kind) {
            case NormKind::kPrepend:
              if (!s.empty()) s.insert(0, n.text);
              break;
            case NormKind::kReplace:
              if (n.regex) {
                std::string r;
                size_t last = 0;
                n.regex->for_each_match(s, [&](size_t a, size_t b) {
                  r.append(s, last, a - last);
                  r.append(n.content);
                  last = b;
                });
                r.append(s, last, std::string::npos);
                s = std::move(r);
              } else {
                replace_all(s, n.text, n.content);
              }
              break;
            case NormKind::kUnicode: {
              auto r = unicode::normalize(s, n.form);
              if (r.ok()) s = std::move(*r);
              break;
            }
          }
        }
        split_added(
            s, m.normalized_trie, m.added,
            [&](std::string_view piece, size_t off2) {
              m.encode_segment(piece, offset == 0 && off2 == 0, out);
            },
            on_token);
      },
      on_token);

  if (add_special_tokens) out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// BPE

bool Tokenizer::Impl::CacheShard::find(std::string_view word, uint64_t h, std::vector<int32_t>& out) {
  if (slots.empty()) return false;
  const size_t mask = slots.size() - 1;
  for (size_t i = (h >> 8) & mask;; i = (i + 1) & mask) {
    const Slot& s = slots[i];
    if (s.hash == 0) return false;
    if (s.hash == h && s.key_len == word.size() &&
        std::memcmp(keys.data() + s.key_off, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids.begin() + s.ids_off, ids.begin() + s.ids_off + s.n_ids);
      return true;
    }
  }
}

void Tokenizer::Impl::CacheShard::insert(std::string_view word, uint64_t h, const int32_t* word_ids,
                                         size_t n) {
  if (slots.empty()) slots.resize(kCacheSlots);
  if (used * 10 >= slots.size() * 6) {  // keep probes short: clear at 60% load
    std::fill(slots.begin(), slots.end(), Slot{});
    keys.clear();
    ids.clear();
    used = 0;
  }
  const size_t mask = slots.size() - 1;
  size_t i = (h >> 8) & mask;
  while (slots[i].hash != 0) {
    if (slots[i].hash == h && slots[i].key_len == word.size() &&
        std::memcmp(keys.data() + slots[i].key_off, word.data(), word.size()) == 0) {
      return;  // another thread got here first
    }
    i = (i + 1) & mask;
  }
  Slot& s = slots[i];
  s.hash = h;
  s.key_off = uint32_t(keys.size());
  s.key_len = uint16_t(word.size());
  s.ids_off = uint32_t(ids.size());
  s.n_ids = uint16_t(n);
  keys.append(word);
  ids.insert(ids.end(), word_ids, word_ids + n);
  ++used;
}

void Tokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > kCacheMaxWord) {
    bpe_word_uncached(word, out);
    return;
  }
  uint64_t h = uint64_t(std::hash<std::string_view>{}(word)) | 1;  // 0 marks an empty slot
  CacheShard& shard = cache[h % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.find(word, h, out)) return;
  }
  size_t before = out.size();
  bpe_word_uncached(word, out);
  size_t n = out.size() - before;
  if (n > 0xFFFF) return;
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.insert(word, h, out.data() + before, n);
}

namespace {

// Llama-3 (ignore_merges): a word that is itself in the vocabulary is emitted whole, merges or not.
inline bool emit_whole_word(const Tokenizer::Impl& impl, std::string_view word, std::vector<int32_t>& out) {
  std::string whole;
  if (impl.byte_level) {
    const auto& bm = unicode::byte_map();
    for (unsigned char b : word) whole += bm.byte_to_utf8[b];
  } else {
    whole = std::string(word);
  }
  if (auto it = impl.vocab.find(whole); it != impl.vocab.end()) {
    out.push_back(it->second);
    return true;
  }
  return false;
}

// The word's initial symbols into ids, with the reference's unknown-character handling.
inline void initial_symbols(const Tokenizer::Impl& impl, std::string_view word, std::vector<int32_t>& ids) {
  std::optional<int32_t> pending_unk;
  auto known = [&](int32_t id) {
    if (pending_unk) {
      ids.push_back(*pending_unk);
      pending_unk.reset();
    }
    ids.push_back(id);
  };
  auto unknown = [&]() {
    if (!impl.unk_id) return;  // no unk token: the character is dropped, as in the reference
    if (pending_unk && impl.fuse_unk) return;
    if (pending_unk) ids.push_back(*pending_unk);
    pending_unk = impl.unk_id;
  };
  if (impl.byte_level) {
    for (unsigned char b : word) {
      if (impl.byte_ids[b] >= 0) {
        known(impl.byte_ids[b]);
      } else if (impl.byte_fallback && impl.fallback_ids[b] >= 0) {
        ids.push_back(impl.fallback_ids[b]);
      } else {
        unknown();
      }
    }
  } else {
    std::string ch;
    for (size_t i = 0; i < word.size();) {
      size_t n = char_len_at(word, i);
      ch.assign(word.substr(i, n));
      if (auto it = impl.vocab.find(ch); it != impl.vocab.end()) {
        known(it->second);
      } else {
        bool done = false;
        if (impl.byte_fallback) {
          bool all = true;
          for (size_t k = 0; k < n; ++k) all = all && impl.fallback_ids[uint8_t(word[i + k])] >= 0;
          if (all) {
            for (size_t k = 0; k < n; ++k) ids.push_back(impl.fallback_ids[uint8_t(word[i + k])]);
            done = true;
          }
        }
        if (!done) unknown();
      }
      i += n;
    }
  }
  if (pending_unk) ids.push_back(*pending_unk);
}

// Applies the merges to ids (at least two symbols) and appends the result to out.
inline void merge_symbols(const Tokenizer::Impl& impl, std::vector<int32_t>& ids, std::vector<int32_t>& out) {
  const size_t n = ids.size();
  // Merge lowest rank first, leftmost among equal ranks, over a linked list of symbols.
  thread_local std::vector<int32_t> next, prev;
  next.resize(n);
  prev.resize(n);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
    prev[i] = int32_t(i) - 1;
  }
  auto find_merge = [&](int32_t a, int32_t b, uint64_t& packed) {
    auto it = impl.merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    if (it == impl.merges.end()) return false;
    packed = it->second;
    return true;
  };
  // Heap entries: (rank << 32 | position of the left symbol); smallest first.
  thread_local std::vector<uint64_t> heap;
  heap.clear();
  auto push = [&](int32_t pos) {
    int32_t nx = next[size_t(pos)];
    if (nx < 0) return;
    uint64_t packed;
    if (find_merge(ids[size_t(pos)], ids[size_t(nx)], packed)) {
      heap.push_back((packed & 0xFFFFFFFF00000000ull) | uint32_t(pos));
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    uint64_t e = heap.back();
    heap.pop_back();
    auto pos = int32_t(e & 0xFFFFFFFFu);
    uint64_t rank = e >> 32;
    if (ids[size_t(pos)] < 0) continue;  // merged away
    int32_t nx = next[size_t(pos)];
    if (nx < 0) continue;
    uint64_t packed;
    if (!find_merge(ids[size_t(pos)], ids[size_t(nx)], packed) || (packed >> 32) != rank) continue;  // stale
    ids[size_t(pos)] = int32_t(packed & 0xFFFFFFFFu);
    ids[size_t(nx)] = -1;
    next[size_t(pos)] = next[size_t(nx)];
    if (next[size_t(pos)] >= 0) prev[size_t(next[size_t(pos)])] = pos;
    if (prev[size_t(pos)] >= 0) push(prev[size_t(pos)]);
    push(pos);
  }
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(ids[size_t(i)]);
}

}  // namespace

void Tokenizer::Impl::bpe_word_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges && emit_whole_word(*this, word, out)) return;
  thread_local std::vector<int32_t> ids;
  ids.clear();
  initial_symbols(*this, word, ids);
  if (ids.size() <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  merge_symbols(*this, ids, out);
}

}  // namespace plumb::engine
