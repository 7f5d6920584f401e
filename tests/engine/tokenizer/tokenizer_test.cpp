// Hand-written tokenizers (built inline below) with hand-derived expected ids.
#include "engine/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/unicode.h"

namespace plumb::engine {
namespace {

namespace bj = boost::json;
using Ids = std::vector<int32_t>;

// Qwen2's pre-tokenizer pattern.
constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama-3's (digits in groups of up to three).
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bj::object added(int id, const std::string& content, bool special = true) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// Byte-level BPE: ids 0..255 are the bytes (GPT-2 stand-in characters), then merges.
bj::object bytelevel_json(const char* pattern = kQwenPattern) {
  bj::object vocab;
  const auto& bm = unicode::byte_map();
  for (int b = 0; b < 256; ++b) vocab[bm.byte_to_utf8[size_t(b)]] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"},    {"l", "l"}, {"Ġ", "t"}, {"Ġt", "he"}, {"he", "ll"},
      {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"1", "2"}};
  bj::array m;
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] =
        id++;  // 256 he, 257 ll, 258 Ġt, 259 Ġthe, 260 hell, 261 hello, 262 Ġw, 263 or, 264 Ġwor, 265 12
    m.push_back(bj::string(a + " " + b));
  }
  bj::object j;
  j["version"] = "1.0";
  j["added_tokens"] =
      bj::array{added(266, "<|endoftext|>"), added(267, "<|im_start|>"), added(268, "<|im_end|>")};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", bj::array{bj::object{{"type", "Split"},
                                                               {"pattern", {{"Regex", pattern}}},
                                                               {"behavior", "Isolated"},
                                                               {"invert", false}},
                                                    bj::object{{"type", "ByteLevel"},
                                                               {"add_prefix_space", false},
                                                               {"trim_offsets", false},
                                                               {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}};
  j["model"] = {
      {"type", "BPE"},          {"dropout", nullptr},     {"unk_token", nullptr}, {"fuse_unk", false},
      {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab},       {"merges", m}};
  return j;
}

// SentencePiece-style BPE (Llama-2 layout): <unk> <s> </s>, <0x00>..<0xFF> at 3..258, then pieces.
bj::object sentencepiece_json(bool byte_fallback = true) {
  bj::object vocab;
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* p : {"▁", "a", "b", "h", "i", "▁a", "ab", "▁ab", "hi", "▁hi"}) vocab[p] = id++;
  // 259 ▁, 260 a, 261 b, 262 h, 263 i, 264 ▁a, 265 ab, 266 ▁ab, 267 hi, 268 ▁hi
  bj::object j;
  j["added_tokens"] = bj::array{added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")};
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       bj::array{bj::object{{"type", "Prepend"}, {"prepend", "▁"}},
                 bj::object{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", bj::array{bj::object{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                           bj::object{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", bj::array{}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", bj::array{1}}, {"tokens", bj::array{"<s>"}}}}}}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       bj::array{bj::object{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                 bj::object{{"type", "ByteFallback"}}, bj::object{{"type", "Fuse"}},
                 bj::object{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["model"] = {{"type", "BPE"},    {"unk_token", "<unk>"},
                {"fuse_unk", true}, {"byte_fallback", byte_fallback},
                {"vocab", vocab},   {"merges", bj::array{"▁ a", "a b", "▁a b", "h i", "▁ hi"}}};
  return j;
}

std::unique_ptr<Tokenizer> make(const bj::object& j, std::string_view config = {}) {
  auto r = Tokenizer::from_json(bj::serialize(j), config);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

std::string stream_all(const Tokenizer& t, const Ids& ids, bool skip = false) {
  StreamDecoder d(t, skip);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = d.push(id);
    EXPECT_TRUE(unicode::is_valid_utf8(piece)) << "broken UTF-8 piece streamed";
    out += piece;
  }
  return out + d.flush();
}

TEST(ByteLevelBpe, MergesByRankLeftmostFirst) {
  auto t = make(bytelevel_json());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello the world", false), (Ids{261, 259, 264, 'l', 'd'}));
  // No post-processor template: add_special_tokens changes nothing.
  EXPECT_EQ(t->encode("hello", true), (Ids{261}));
  EXPECT_EQ(t->encode("", true), Ids{});
  EXPECT_EQ(t->vocab_size(), 269);
  EXPECT_EQ(t->token_to_id("Ġthe"), 259);
  EXPECT_EQ(t->id_to_token(264), "Ġwor");
  EXPECT_EQ(t->id_to_token(9999), "");
}

TEST(ByteLevelBpe, DigitsFollowThePattern) {
  auto qwen = make(bytelevel_json(kQwenPattern));
  auto llama = make(bytelevel_json(kLlama3Pattern));
  ASSERT_TRUE(qwen && llama);
  EXPECT_EQ(qwen->encode("123", false), (Ids{'1', '2', '3'}));  // \p{N}: one digit per word
  EXPECT_EQ(llama->encode("123", false), (Ids{265, '3'}));      // \p{N}{1,3}: "123" is one word
  EXPECT_EQ(llama->encode("1234", false), (Ids{265, '3', '4'}));
}

TEST(ByteLevelBpe, MultibyteTextIsBytes) {
  auto t = make(bytelevel_json());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("é", false), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(t->encode("😀", false), (Ids{0xF0, 0x9F, 0x98, 0x80}));
  for (std::string s :
       {"héllo wörld", "日本語のテキスト", "e\u0301 a\u0308", "tabs\t\tand   spaces \n\n x",
        "emoji 😀👍🏽 mix", "digits 12345 3.14", "  leading and trailing  ", "it's we'LL"}) {
    Ids ids = t->encode(s, false);
    EXPECT_EQ(t->decode(ids), s);
    EXPECT_EQ(stream_all(*t, ids), s);
  }
}

TEST(ByteLevelBpe, WhitespaceRunsSplitBeforeTheLastSpace) {
  auto t = make(bytelevel_json());
  ASSERT_TRUE(t);
  // "\s+(?!\S)" leaves the last space of a run to the following word: "a", "  ", " the".
  EXPECT_EQ(t->encode("a   the", false), (Ids{'a', ' ', ' ', 259}));  // ids of byte stand-ins = byte values
}

TEST(ByteLevelBpe, SpecialTokensInText) {
  auto t = make(bytelevel_json());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a<|im_end|>b", false), (Ids{'a', 268, 'b'}));
  EXPECT_EQ(t->encode("<|im_start|><|im_end|>", false), (Ids{267, 268}));
  EXPECT_EQ(t->encode("<|im_end", false), (Ids{'<', '|', 'i', 'm', '_', 'e', 'n', 'd'}));  // not a token
  EXPECT_TRUE(t->is_special(268));
  EXPECT_FALSE(t->is_special(261));
  EXPECT_EQ(t->decode(Ids{'a', 268, 'b'}), "a<|im_end|>b");
  EXPECT_EQ(t->decode(Ids{'a', 268, 'b'}, true), "ab");
  EXPECT_EQ(stream_all(*t, Ids{'a', 268, 'b'}, true), "ab");
}

TEST(ByteLevelBpe, BrokenUtf8DecodesLikeTheReference) {
  auto t = make(bytelevel_json());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->decode(Ids{0xC3}), "\uFFFD");
  EXPECT_EQ(t->decode(Ids{0xF0, 'A'}), "\uFFFDA");  // one U+FFFD per maximal subpart
  EXPECT_EQ(t->decode(Ids{0xF0, 0x9F, 'A'}), "\uFFFDA");
  EXPECT_EQ(t->decode(Ids{0xFF, 0xC3, 0xA9}), "\uFFFD\u00E9");  // an impossible byte, then é
}

TEST(ByteLevelBpe, StreamHoldsIncompleteCharacters) {
  auto t = make(bytelevel_json());
  ASSERT_TRUE(t);
  StreamDecoder d(*t);
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "😀");
  EXPECT_EQ(d.push(261), "hello");
  EXPECT_EQ(d.push(0xC3), "");
  EXPECT_EQ(d.flush(), "\uFFFD");
  // Reusable after flush.
  EXPECT_EQ(d.push(261), "hello");
  EXPECT_EQ(d.flush(), "");
}

TEST(ByteLevelBpe, InvalidInputUtf8IsRepaired) {
  auto t = make(bytelevel_json());
  ASSERT_TRUE(t);
  // "\xC3" alone is ill-formed: encoded as U+FFFD (EF BF BD).
  EXPECT_EQ(t->encode(std::string("a\xC3"), false), t->encode("a\uFFFD", false));
}

TEST(SentencePieceBpe, PrependAndMerges) {
  auto t = make(sentencepiece_json());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("ab hi", false), (Ids{266, 268}));
  EXPECT_EQ(t->encode("ab hi", true), (Ids{1, 266, 268}));
  EXPECT_EQ(t->decode(Ids{1, 266, 268}), "<s> ab hi");  // as the reference: only a leading space is stripped
  EXPECT_EQ(t->decode(Ids{1, 266, 268}, true), "ab hi");
  EXPECT_EQ(t->decode(Ids{266, 268}), "ab hi");
}

TEST(SentencePieceBpe, ByteFallback) {
  auto t = make(sentencepiece_json());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("aé", false), (Ids{264, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode(Ids{264, 3 + 0xC3, 3 + 0xA9}), "aé");
  // An ill-formed run of byte tokens: one U+FFFD per byte.
  EXPECT_EQ(t->decode(Ids{3 + 0xC3}), "\uFFFD");
  EXPECT_EQ(t->decode(Ids{3 + 0xC3, 3 + 0xC3, 260}), "\uFFFD\uFFFDa");
  for (std::string s : {"aé 日本 😀", "a  b", "ab\n\nhi", "e\u0301"}) {
    Ids ids = t->encode(s, true);
    EXPECT_EQ(t->decode(ids, true), s);
    EXPECT_EQ(stream_all(*t, ids, true), s);
  }
}

TEST(SentencePieceBpe, SpecialTokensSplitFirstThenNormalize) {
  auto t = make(sentencepiece_json());
  ASSERT_TRUE(t);
  // Each text segment is normalized alone: "b" after </s> gets its own "▁" (Llama-2 legacy behaviour).
  EXPECT_EQ(t->encode("a</s>b", false), (Ids{264, 2, 259, 261}));
}

TEST(SentencePieceBpe, UnknownCharactersFuseWithoutByteFallback) {
  auto t = make(sentencepiece_json(false));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("zz", false), (Ids{259, 0}));
  EXPECT_EQ(t->encode("zzaz", false), (Ids{259, 0, 260, 0}));
}

TEST(SentencePieceBpe, StreamStripsOnlyTheFirstSpace) {
  auto t = make(sentencepiece_json());
  ASSERT_TRUE(t);
  StreamDecoder d(*t);
  EXPECT_EQ(d.push(266), "ab");
  EXPECT_EQ(d.push(268), " hi");
  EXPECT_EQ(d.push(3 + 0xE6), "");  // 日 = E6 97 A5, held until the run of byte tokens ends
  EXPECT_EQ(d.push(3 + 0x97), "");
  EXPECT_EQ(d.push(3 + 0xA5), "");
  EXPECT_EQ(d.push(264), "日 a");
  EXPECT_EQ(d.flush(), "");
}

TEST(SentencePieceBpe, MergesAcrossTheMarkerDisableWordCutting) {
  // A vocabulary entry "b▁" lets a merge cross the start of a "▁" run, so segments stay whole words.
  bj::object j = sentencepiece_json();
  j["model"].as_object()["vocab"].as_object()["b▁"] = 269;
  j["model"].as_object()["merges"].as_array().push_back("b ▁");
  auto t = make(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("b b", false), (Ids{259, 269, 261}));
  auto plain = make(sentencepiece_json());
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->encode("b b", false), (Ids{259, 261, 259, 261}));
}

TEST(Metaspace, PrependSchemeFirstAndSplit) {
  bj::object j = sentencepiece_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  auto t = make(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("ab hi", false), (Ids{266, 268}));
  // Only the segment at the start of the text gets the prefix.
  EXPECT_EQ(t->encode("a</s>b", false), (Ids{264, 2, 261}));
  EXPECT_EQ(t->decode(Ids{266, 268}), "ab hi");
  EXPECT_EQ(stream_all(*t, Ids{266, 268}), "ab hi");
}

TEST(AddedTokens, LstripRstripSingleWord) {
  bj::object j = bytelevel_json();
  bj::object mask = added(269, "<mask>");
  mask["lstrip"] = true;
  bj::object word = added(270, "he", false);
  word["single_word"] = true;
  bj::object eat = added(271, "<eat>");
  eat["rstrip"] = true;
  j["added_tokens"].as_array().push_back(mask);
  j["added_tokens"].as_array().push_back(word);
  j["added_tokens"].as_array().push_back(eat);
  auto t = make(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a  <mask>", false), (Ids{'a', 269}));
  EXPECT_EQ(t->encode("<eat>  a", false), (Ids{271, 'a'}));
  EXPECT_EQ(t->encode("he said", false), (Ids{270, ' ', 's', 'a', 'i', 'd'}));
  EXPECT_EQ(t->encode("hello", false), (Ids{261}));  // "he" inside a word is not the single-word token
}

TEST(PostProcessor, TemplateAddsBos) {
  bj::object j = bytelevel_json(kLlama3Pattern);
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       bj::array{bj::object{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}},
                 bj::object{{"type", "TemplateProcessing"},
                            {"single", bj::array{bj::object{{"SpecialToken",
                                                             {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                                 bj::object{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                            {"special_tokens",
                             {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", bj::array{266}}}}}}}}}};
  auto t = make(j, R"({"bos_token": "<|endoftext|>", "eos_token": {"content": "<|im_end|>"}})");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello", true), (Ids{266, 261}));
  EXPECT_EQ(t->encode("hello", false), (Ids{261}));
  EXPECT_EQ(t->bos_id(), 266);
  EXPECT_EQ(t->eos_id(), 268);
  EXPECT_EQ(t->eos_ids(), (Ids{268}));
}

TEST(Config, GenerationConfigAddsEosIds) {
  auto r = Tokenizer::from_json(bj::serialize(bytelevel_json()), R"({"eos_token": "<|im_end|>"})",
                                R"({"eos_token_id": [266, 268]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->eos_ids(), (Ids{268, 266}));
}

TEST(Malformed, ClearErrors) {
  auto err = [](std::string_view text) {
    auto r = Tokenizer::from_json(text);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().to_string();
  };
  EXPECT_NE(err("{not json").find("invalid JSON"), std::string::npos);
  EXPECT_NE(err("[]").find("top level"), std::string::npos);
  EXPECT_NE(err(R"({"added_tokens": []})").find("missing 'model'"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "WordPiece", "vocab": {}}})").find("WordPiece"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": [], "merges": []}})").find("model.vocab"),
            std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})").find("merge #0"),
            std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})")
                .find("missing from the vocab"),
            std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})").find("non-numeric"),
            std::string::npos);
  bj::object bad_regex = bytelevel_json("(unclosed");
  EXPECT_NE(err(bj::serialize(bad_regex)).find("bad regex"), std::string::npos);
  bj::object bad_pre = bytelevel_json();
  bad_pre["pre_tokenizer"] = {{"type", "Whatever"}};
  EXPECT_NE(err(bj::serialize(bad_pre)).find("'Whatever'"), std::string::npos);
  EXPECT_FALSE(Tokenizer::load("/nonexistent/model").ok());
  EXPECT_EQ(Tokenizer::load("/nonexistent/model").status().code(), Code::kNotFound);
}

TEST(Malformed, ArrayMergesAreAccepted) {
  bj::object j = sentencepiece_json();
  bj::array pairs;
  for (const auto& m : j["model"].as_object()["merges"].as_array()) {
    std::string s(m.as_string());
    size_t sp = s.find(' ');
    pairs.push_back(bj::array{bj::string(s.substr(0, sp)), bj::string(s.substr(sp + 1))});
  }
  j["model"].as_object()["merges"] = pairs;
  auto t = make(j);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("ab hi", false), (Ids{266, 268}));
}

}  // namespace
}  // namespace plumb::engine
