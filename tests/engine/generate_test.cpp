#include "engine/generate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "engine/safetensors.h"
#include "engine/tokenizer/tokenizer.h"

namespace plumb::engine {
namespace {

std::string fixture(const std::string& name) {
  return std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

class Generate : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(fixture("qwen2") + "/reference.safetensors")) {
      GTEST_SKIP() << "fixture tests/fixtures/models/qwen2 not present yet";
    }
    ModelOptions o;
    o.threads = 2;
    auto m = Model::load(fixture("qwen2"), o);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    auto ref = ModelTensors::open_file(fixture("qwen2") + "/reference.safetensors");
    ASSERT_TRUE(ref.ok());
    auto ids = ref->get("input_ids");
    for (int64_t i = 0; i < ids->numel(); ++i) {
      int64_t v;
      std::memcpy(&v, ids->data + 8 * i, 8);
      prompt_.push_back(int32_t(v));
    }
    auto logits = ref->get("logits_f32");
    const int64_t V = logits->shape[1];
    const float* last = reinterpret_cast<const float*>(logits->data) + (ids->numel() - 1) * V;
    ref_argmax_ = int32_t(std::max_element(last, last + V) - last);
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
  int32_t ref_argmax_ = -1;
};

TEST_F(Generate, GreedyFirstTokenIsTheReferenceArgmaxAndRunsAreReproducible) {
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_tokens = 8;
  o.sampling.ignore_eos = true;
  int calls = 0;
  auto r = generate(*model_, prompt_, o, nullptr, [&](const GeneratedToken&) { return ++calls > 0; });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tokens.size(), 8u);
  EXPECT_EQ(calls, 8);
  EXPECT_EQ(r->tokens[0], ref_argmax_);
  EXPECT_EQ(r->finish_reason, "length");
  EXPECT_EQ(r->prompt_tokens, int64_t(prompt_.size()));
  // Sampling with a seed is reproducible; block size does not change the result.
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 7;
  auto a = generate(*model_, prompt_, o, nullptr, nullptr);
  o.block_size = 5;
  auto b = generate(*model_, prompt_, o, nullptr, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
}

TEST_F(Generate, StopsOnStopIdsEosAndCallback) {
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_tokens = 8;
  o.sampling.stop_token_ids = {ref_argmax_};
  auto r = generate(*model_, prompt_, o, nullptr, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, std::vector<int32_t>{ref_argmax_});
  EXPECT_EQ(r->finish_reason, "stop");
  o.sampling.stop_token_ids.clear();
  o.sampling.eos_ids = {ref_argmax_};
  r = generate(*model_, prompt_, o, nullptr, nullptr);
  EXPECT_EQ(r->finish_reason, "stop");
  o.sampling.ignore_eos = true;
  r = generate(*model_, prompt_, o, nullptr, [](const GeneratedToken&) { return false; });
  EXPECT_EQ(r->finish_reason, "cancelled");
  EXPECT_EQ(r->tokens.size(), 1u);
}

TEST_F(Generate, StopIdsEndItUnderIgnoreEosAndMinTokensHoldsThemOff) {
  GenerateOptions o;
  o.sampling.temperature = 0;
  o.sampling.max_tokens = 6;
  o.sampling.ignore_eos = true;
  o.sampling.eos_ids = {ref_argmax_};
  auto r = generate(*model_, prompt_, o, nullptr, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->finish_reason, "length");  // EOS ignored
  EXPECT_EQ(r->tokens.size(), 6u);
  o.sampling.eos_ids.clear();
  o.sampling.stop_token_ids = {ref_argmax_};
  r = generate(*model_, prompt_, o, nullptr, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish_reason, "stop");  // a stop id ends it, ignore_eos or not
  EXPECT_EQ(r->tokens, std::vector<int32_t>{ref_argmax_});
  o.sampling.min_tokens = 2;
  r = generate(*model_, prompt_, o, nullptr, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->tokens.size(), 3u);
  EXPECT_NE(r->tokens[0], ref_argmax_);
  EXPECT_NE(r->tokens[1], ref_argmax_);
}

TEST_F(Generate, ContextLimits) {
  const int64_t ctx = model_->config().max_context();
  GenerateOptions o;
  o.sampling.max_tokens = 100;
  o.sampling.ignore_eos = true;
  std::vector<int32_t> long_prompt(size_t(ctx) - 2, 3);
  auto r = generate(*model_, long_prompt, o, nullptr, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tokens.size(), 3u);  // positions ctx-2 and ctx-1 are the last that fit
  EXPECT_EQ(r->finish_reason, "length");
  long_prompt.resize(size_t(ctx) + 1);
  auto too_long = generate(*model_, long_prompt, o, nullptr, nullptr);
  EXPECT_EQ(too_long.status().code(), Code::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("context of " + std::to_string(ctx)), std::string::npos);
  EXPECT_EQ(generate(*model_, {}, o, nullptr, nullptr).status().code(), Code::kInvalidArgument);
  o.sampling.top_p = 2;
  EXPECT_EQ(generate(*model_, prompt_, o, nullptr, nullptr).status().code(), Code::kInvalidArgument);
}

TEST_F(Generate, TokenizerTextStreamsTheDecodedText) {
  auto tok = Tokenizer::load(fixture("qwen2"));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  GenerateOptions o;
  o.sampling.max_tokens = 12;
  o.sampling.ignore_eos = true;
  o.sampling.seed = 3;
  auto stream = tokenizer_text_stream(**tok);
  std::string streamed;
  auto r = generate(*model_, prompt_, o, stream.get(), [&](const GeneratedToken& g) {
    streamed += g.text;
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->text, (*tok)->decode(r->tokens));
}

TEST(ByteTextStream, AssemblesUtf8AcrossTokensAndReplacesBadBytes) {
  auto s = byte_text_stream();
  std::string out;
  for (int32_t id : byte_encode("h\xC3\xA9")) out += s->push(id);  // "hé" split across two tokens
  EXPECT_EQ(out, "h\xC3\xA9");
  EXPECT_EQ(s->push(0xE2), "");  // first byte of a 3-byte char waits
  EXPECT_EQ(s->push(0x82), "");
  EXPECT_EQ(s->push(0xAC), "\xE2\x82\xAC");  // €
  EXPECT_EQ(s->push(0xFF), "\xEF\xBF\xBD");  // never valid
  EXPECT_EQ(s->push(0xC3), "");
  EXPECT_EQ(s->push('a'),
            "\xEF\xBF\xBD"
            "a");  // truncated sequence
  EXPECT_EQ(s->push(300), "[300]");
  EXPECT_EQ(s->push(0xC3), "");
  EXPECT_EQ(s->flush(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace plumb::engine
