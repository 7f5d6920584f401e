#include "server/api.h"

#include <gtest/gtest.h>

#include "net/sse.h"

namespace plumb::server {
namespace {

class Api : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = engine::Tokenizer::load(std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny");
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() { delete tok_; }
  ParseContext ctx(int64_t max_context = 64) const {
    ParseContext c;
    c.tokenizer = tok_;
    c.served_model = "m";
    c.max_context = max_context;
    c.eos_ids = {2};
    return c;
  }
  static engine::Tokenizer* tok_;
};
engine::Tokenizer* Api::tok_ = nullptr;

ApiError err(const std::variant<CompletionRequest, ApiError>& v) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(v));
  return std::holds_alternative<ApiError>(v) ? std::get<ApiError>(v) : ApiError{};
}

TEST_F(Api, ParsesACompletionWithDefaults) {
  auto v = parse_completion(R"({"model": "m", "prompt": "hello world", "unknown": [1]})", false, ctx());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v)) << err(v).body();
  const auto& r = std::get<CompletionRequest>(v);
  EXPECT_EQ(r.prompt_ids, tok_->encode("hello world", true));
  EXPECT_EQ(r.sampling.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.seeded);
  EXPECT_EQ(r.sampling.logprobs, -1);
}

TEST_F(Api, PromptFormsAndFields) {
  auto v =
      parse_completion(R"({"prompt": [[5, 6, 7]], "max_completion_tokens": 3, "max_tokens": 9, "stop": "x",
                               "seed": 4, "logprobs": 2, "echo": true, "stream": true,
                               "stream_options": {"include_usage": true}, "top_k": 5, "top_p": 0.5})",
                       false, ctx());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v)) << err(v).body();
  const auto& r = std::get<CompletionRequest>(v);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(r.sampling.max_tokens, 3);  // max_completion_tokens wins
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, 4u);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_TRUE(r.prompt_logprobs);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.sampling.top_k, 5);
}

TEST_F(Api, ErrorsNameTheField) {
  EXPECT_EQ(err(parse_completion("nope", false, ctx())).status, 400);
  EXPECT_EQ(err(parse_completion(R"({"prompt": "a", "top_p": "x"})", false, ctx())).param, "top_p");
  EXPECT_EQ(err(parse_completion(R"({"prompt": ["a", "b"]})", false, ctx())).param, "prompt");
  EXPECT_EQ(err(parse_completion(R"({"prompt": "a", "logprobs": 21})", false, ctx())).param, "logprobs");
  ApiError nf = err(parse_completion(R"({"model": "other", "prompt": "a"})", false, ctx()));
  EXPECT_EQ(nf.status, 404);
  EXPECT_EQ(nf.code, "model_not_found");
  ApiError tl =
      err(parse_completion(R"({"prompt": [1,2,3,4,5,6,7,8,9,10], "max_tokens": 60})", false, ctx()));
  EXPECT_EQ(tl.code, "context_length_exceeded");
  EXPECT_NE(tl.message.find("maximum context length is 64"), std::string::npos);
  // max_tokens at the int64 limit is "too long for the context" (no overflow of prompt + max_tokens).
  ApiError huge =
      err(parse_completion(R"({"prompt": "a", "max_tokens": 9223372036854775807})", false, ctx()));
  EXPECT_EQ(huge.code, "context_length_exceeded") << huge.message;
  EXPECT_NE(huge.message.find("more than 9223372036854775807"), std::string::npos) << huge.message;
  // Chat without a template is a 400, not a crash.
  EXPECT_EQ(err(parse_completion(R"({"messages": [{"role": "user", "content": "hi"}]})", true, ctx())).param,
            "messages");
  auto body = nf.body();
  EXPECT_NE(body.find("\"param\":\"model\""), std::string::npos);
}

TEST_F(Api, ChatDefaultMaxTokensIsTheRestOfTheContext) {
  auto ct = engine::ChatTemplate::for_tokenizer(*tok_);
  ASSERT_TRUE(ct.ok());
  ParseContext c = ctx(200);
  c.chat_template = &*ct;
  auto v = parse_completion(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})", true, c);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v)) << err(v).body();
  const auto& r = std::get<CompletionRequest>(v);
  EXPECT_EQ(r.sampling.max_tokens, 200 - int32_t(r.prompt_ids.size()));
}

TEST_F(Api, TextAssemblerCutsAtStopStringsAcrossTokens) {
  std::vector<int32_t> ids = tok_->encode("one two three four five", false);
  std::string full = tok_->decode(ids);
  size_t at = full.find("three");
  ASSERT_NE(at, std::string::npos);
  TextAssembler a(*tok_, {"thr"}, false);
  std::string out;
  for (int32_t id : ids) {
    out += a.push({id}, {});
    if (a.stopped()) break;
  }
  out += a.finish();
  EXPECT_TRUE(a.stopped());
  EXPECT_EQ(out, full.substr(0, at));
  // Without stop strings everything comes through, token by token.
  TextAssembler b(*tok_, {}, false);
  std::string all;
  for (int32_t id : ids) all += b.push({id}, {});
  all += b.finish();
  EXPECT_EQ(all, full);
  EXPECT_EQ(b.tokens(), int64_t(ids.size()));
}

}  // namespace
}  // namespace plumb::server

namespace plumb::server {
namespace {

// The per-response frame gives exactly the bytes of building and serializing each chunk, for texts
// that need every kind of escaping and header fields that look like the frame's own placeholder.
TEST(PieceFrame, EventsAreByteIdenticalToTheSerializedChunk) {
  const std::vector<std::string> texts = {"",
                                          "hello",
                                          " a \"quoted\" back\\slash /",
                                          "new\nline\r\ttab\b\f",
                                          std::string("ctl \x01\x1f\x7f nul ") + std::string(1, '\0') + "!",
                                          "h\xc3\xa9llo \xf0\x9f\x8c\x8d \xe4\xb8\xad\xe6\x96\x87",
                                          "\xff\xfe not utf-8",
                                          "\x01plumb-piece\x01"};
  for (bool chat : {false, true}) {
    for (const char* model : {"plumb-tiny", "m \"x\" \x01plumb-piece\x01"}) {
      const ChunkHeader h{"cmpl-42", chat, 1764720000, model};
      const PieceFrame frame(h);
      for (const auto& t : texts) {
        EXPECT_EQ(frame.event(t), net::sse_format_data(json::dump(piece_chunk(h, t, nullptr))))
            << "chat " << chat << " model " << model << " text " << t;
      }
    }
  }
  // And it is a well-formed event whose JSON reads back the text.
  const ChunkHeader h{"chatcmpl-1", true, 1, "m"};
  const std::string ev = PieceFrame(h).event("x\"y");
  ASSERT_EQ(ev.rfind("data: ", 0), 0u);
  ASSERT_EQ(ev.substr(ev.size() - 2), "\n\n");
  auto v = json::parse(ev.substr(6, ev.size() - 8));
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(json::dump(v->as_object().at("choices").as_array()[0].as_object().at("delta")),
            "{\"content\":\"x\\\"y\"}");
}

}  // namespace
}  // namespace plumb::server
