#include "server/api.h"

#include <gtest/gtest.h>

#include <algorithm>

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
  EXPECT_EQ(r.sampling.eos_ids, std::vector<int32_t>{2});  // the tokenizer's EOS set
  EXPECT_TRUE(r.sampling.stop_token_ids.empty());
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

TEST_F(Api, LenientValuesAreRefusedNamingTheField) {
  auto param = [&](const char* body, bool chat = false) {
    auto ct = engine::ChatTemplate::for_tokenizer(*tok_);
    ParseContext c = ctx(200);
    if (ct.ok()) c.chat_template = &*ct;
    ApiError e = err(parse_completion(body, chat, c));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error") << body;
    return e.param;
  };
  EXPECT_EQ(param(R"({"prompt": "a", "temperature": 1e29})"), "temperature");
  EXPECT_EQ(param(R"({"prompt": "a", "temperature": 1e38})"), "temperature");
  EXPECT_EQ(param(R"({"prompt": "a", "temperature": 2.0001})"), "temperature");
  EXPECT_EQ(param(R"({"prompt": "a", "temperature": -0.5})"), "temperature");
  EXPECT_EQ(param(R"({"prompt": "a", "top_p": 0})"), "top_p");
  EXPECT_EQ(param(R"({"prompt": "a", "top_p": 1.5})"), "top_p");
  EXPECT_EQ(param(R"({"prompt": "a", "top_k": -2})"), "top_k");
  EXPECT_EQ(param(R"({"prompt": "a", "stop": ""})"), "stop");
  EXPECT_EQ(param(R"({"prompt": "a", "stop": ["x", ""]})"), "stop");
  EXPECT_EQ(param(R"({"model": null, "prompt": "a"})"), "model");
  EXPECT_EQ(param(R"({"messages": [{"role": "bogus", "content": "hi"}]})", true), "messages.[0].role");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "a"}, {"role": "", "content": "hi"}]})", true),
            "messages.[1].role");
  EXPECT_EQ(param(R"({"messages": [{"role": "user"}]})", true), "messages.[0].content");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": null}]})", true), "messages.[0].content");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": []}]})", true), "messages.[0].content");
  EXPECT_EQ(param(R"({"messages": [{"content": "hi"}]})", true), "messages.[0].role");
  // Still accepted: the edges of the ranges, top_k -1, the four roles, empty content text.
  auto ct = engine::ChatTemplate::for_tokenizer(*tok_);
  ASSERT_TRUE(ct.ok());
  ParseContext c = ctx(400);
  c.chat_template = &*ct;
  for (const char* ok : {R"({"prompt": "a", "temperature": 0, "top_p": 1, "top_k": -1})",
                         R"({"prompt": "a", "temperature": 2, "top_p": 1e-9, "stop": ["x"]})"}) {
    auto v = parse_completion(ok, false, c);
    EXPECT_TRUE(std::holds_alternative<CompletionRequest>(v)) << ok << " " << err(v).body();
  }
  auto v = parse_completion(
      R"({"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "q"},
                       {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]})",
      true, c);
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(v)) << err(v).body();
}

TEST_F(Api, SamplingFieldsReachTheEngine) {
  auto v = parse_completion(
      R"({"prompt": "a", "max_tokens": 8, "logit_bias": {"7": 100, "12": -100, "3": 0.5},
          "presence_penalty": 0.5, "frequency_penalty": -1, "repetition_penalty": 1.3, "min_tokens": 4})",
      false, ctx());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v)) << err(v).body();
  const auto& r = std::get<CompletionRequest>(v);
  auto bias = r.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{3, 0.5f}, {7, 100.0f}, {12, -100.0f}}));
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(r.sampling.min_tokens, 4);
  EXPECT_EQ(r.min_tokens, 4);
  // The defaults ask for no processing (the sampler's fast path).
  auto d = parse_completion(R"({"prompt": "a"})", false, ctx());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(d));
  EXPECT_FALSE(std::get<CompletionRequest>(d).sampling.processes_logits());

  auto param = [&](const char* body) { return err(parse_completion(body, false, ctx())).param; };
  EXPECT_EQ(param(R"({"prompt": "a", "logit_bias": {"7": 100.5}})"), "logit_bias");
  EXPECT_EQ(param(R"({"prompt": "a", "logit_bias": {"-1": 1}})"), "logit_bias");
  EXPECT_EQ(param(R"({"prompt": "a", "logit_bias": {"99999999": 1}})"), "logit_bias");
  EXPECT_EQ(param(R"({"prompt": "a", "logit_bias": {"7": "x"}})"), "logit_bias");
  EXPECT_EQ(param(R"({"prompt": "a", "logit_bias": [7]})"), "logit_bias");
  EXPECT_EQ(param(R"({"prompt": "a", "presence_penalty": 2.1})"), "presence_penalty");
  EXPECT_EQ(param(R"({"prompt": "a", "frequency_penalty": -3})"), "frequency_penalty");
  EXPECT_EQ(param(R"({"prompt": "a", "repetition_penalty": -1})"), "repetition_penalty");
  EXPECT_EQ(param(R"({"prompt": "a", "min_tokens": -1})"), "min_tokens");
  EXPECT_EQ(param(R"({"prompt": "a", "max_tokens": 3, "min_tokens": 4})"), "min_tokens");
}

// stop_token_ids end the output under ignore_eos too (SamplingParams::ends_sequence); ids outside
// the vocabulary, non-integers and oversized lists are a 400 naming the field.
TEST_F(Api, StopTokenIdsAreTakenAndChecked) {
  auto v = parse_completion(R"({"prompt": "a", "stop_token_ids": [5, 7], "ignore_eos": true})", false, ctx());
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(v)) << err(v).body();
  const auto& r = std::get<CompletionRequest>(v);
  EXPECT_EQ(r.sampling.stop_token_ids, (std::vector<int32_t>{5, 7}));
  EXPECT_TRUE(r.sampling.ends_sequence(7, 3));
  EXPECT_FALSE(r.sampling.ends_sequence(2, 3));  // EOS, under ignore_eos
  std::string many = "[";
  for (int i = 0; i < 257; ++i) many += (i ? ",1" : "1");
  many += "]";
  for (std::string bad :
       {std::string("[-1]"), std::string("[100000000]"), std::string("[1.5]"), std::string("\"5\""), many}) {
    std::string body = R"({"prompt": "a", "stop_token_ids": )" + bad + "}";
    ApiError e = err(parse_completion(body, false, ctx()));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "stop_token_ids") << body;
  }
}

TEST_F(Api, FieldsPlumbDoesNotImplementAreRefusedNotIgnored) {
  auto ct = engine::ChatTemplate::for_tokenizer(*tok_);
  ASSERT_TRUE(ct.ok());
  ParseContext c = ctx(400);
  c.chat_template = &*ct;
  const std::string chat_prefix = R"({"messages": [{"role": "user", "content": "hi"}], )";
  for (const char* f :
       {R"("response_format": {"type": "json_object"})",
        R"("response_format": {"type": "json_schema", "json_schema": {}})",
        R"("tools": [{"type": "function", "function": {"name": "f"}}])", R"("tool_choice": "required")",
        R"("n": 2)", R"("min_p": 0.1)", R"("guided_json": {"type": "object"})", R"("echo": true)",
        R"("add_generation_prompt": false)", R"("chat_template_kwargs": {"enable_thinking": false})",
        R"("use_beam_search": true)"}) {
    std::string body = chat_prefix + f + "}";
    ApiError e = err(parse_completion(body, true, c));
    EXPECT_EQ(e.status, 400) << body;
    std::string field(f);
    field = field.substr(1, field.find('"', 1) - 1);
    EXPECT_EQ(e.param, field) << body;
  }
  for (const char* f : {R"("best_of": 3)", R"("suffix": "end")", R"("include_stop_str_in_output": true)",
                        R"("prompt_logprobs": 1)", R"("response_format": {"type": "json_object"})"}) {
    std::string body = std::string(R"({"prompt": "a", )") + f + "}";
    ApiError e = err(parse_completion(body, false, c));
    EXPECT_EQ(e.status, 400) << body;
    std::string field(f);
    EXPECT_EQ(e.param, field.substr(1, field.find('"', 1) - 1)) << body;
  }
  // Their neutral values change nothing and pass.
  std::string neutral = chat_prefix +
                        R"("response_format": {"type": "text"}, "tools": [], "tool_choice": "none", "n": 1,
                           "min_p": 0, "echo": false, "add_generation_prompt": true, "user": "u"})";
  auto v = parse_completion(neutral, true, c);
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(v)) << err(v).body();
  auto w = parse_completion(R"({"prompt": "a", "best_of": 1, "suffix": null})", false, c);
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(w)) << err(w).body();
}

TEST_F(Api, MinTokensHoldsStopStringsBack) {
  // "b" would stop at the first token; with min_tokens 2 it stops only from the second on.
  std::vector<int32_t> ids = tok_->encode("b b b", false);
  ASSERT_GE(ids.size(), 2u);
  TextAssembler early(*tok_, {"b"}, false, true, 0);
  early.push(ids, {});
  EXPECT_TRUE(early.stopped());
  EXPECT_EQ(early.tokens(), 1);
  TextAssembler held(*tok_, {"b"}, false, true, 2);
  std::string out = held.push({ids[0]}, {});
  EXPECT_FALSE(held.stopped());
  held.push({ids[1]}, {});
  EXPECT_TRUE(held.stopped());
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
