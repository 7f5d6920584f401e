#include "workload/request.h"

#include <gtest/gtest.h>

#include "core/sha256.h"

namespace plumb::workload {
namespace {

Request chat_request() {
  Request r;
  r.messages = {{"user", "Hello"}};
  r.max_tokens = 16;
  r.temperature = 0.2;
  r.ignore_eos = true;
  return r;
}

Request prompt_request() {
  Request r;
  r.prompt = "Once upon";
  r.max_tokens = 3;
  r.temperature = 0.0;
  r.ignore_eos = false;
  return r;
}

TEST(Request, HashIsSha256OfCanonicalHashedFields) {
  EXPECT_EQ(
      json::canonical(hashed_fields(chat_request())),
      R"({"ignore_eos":true,"max_tokens":16,"messages":[{"content":"Hello","role":"user"}],"temperature":2E-1})");
  // Pinned: computed independently (Python hashlib over the string above).
  EXPECT_EQ(content_hash(chat_request()), "763340c03c380cb03342cf39e5c50226cc7ac35da40f928694e2d56882841516");
  EXPECT_EQ(content_hash(prompt_request()),
            "d8ab65d514ab7dab2c0f3af210f514bf378682cfcc0c979096524ef925e4e7ca");
}

TEST(Request, StreamAndPromptTokensAreNotHashed) {
  Request a = chat_request();
  Request b = chat_request();
  b.stream = false;
  b.prompt_tokens = 99;
  EXPECT_EQ(content_hash(a), content_hash(b));
  b.max_tokens = 17;
  EXPECT_NE(content_hash(a), content_hash(b));
}

TEST(Request, SetHashIsHashOfConcatenatedLineHashes) {
  auto set = make_request_set({chat_request(), prompt_request()});
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->set_hash, "d3d57aea24a970c26a4d9b0f1dae50e80131b152ea7eb37e8f86d7eff7b7cce9");
  EXPECT_EQ(set->set_hash, sha256_hex(set->hashes[0] + set->hashes[1]));
}

TEST(Request, JsonlRoundTripKeepsEveryField) {
  Request a = chat_request();
  a.prompt_tokens = 5;
  a.stream = false;
  auto set = make_request_set({a, prompt_request()});
  ASSERT_TRUE(set.ok());
  std::string text = to_jsonl(*set);
  auto back = parse_jsonl(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->requests.size(), 2u);
  EXPECT_EQ(back->set_hash, set->set_hash);
  EXPECT_EQ(back->hashes, set->hashes);
  EXPECT_EQ(back->requests[0].messages[0].content, "Hello");
  EXPECT_EQ(back->requests[0].prompt_tokens, 5);
  EXPECT_FALSE(back->requests[0].stream);
  EXPECT_EQ(*back->requests[1].prompt, "Once upon");
  EXPECT_EQ(back->requests[1].max_tokens, 3);
  EXPECT_FALSE(back->requests[1].ignore_eos);
  EXPECT_EQ(to_jsonl(*back), text);
}

TEST(Request, LoadingNamesTheLineOfATamperedRequest) {
  auto set = make_request_set({chat_request(), prompt_request()});
  ASSERT_TRUE(set.ok());
  std::string text = to_jsonl(*set);
  auto pos = text.find("Once upon");
  text.replace(pos, 9, "Once upan");
  auto r = parse_jsonl("\n" + text);  // a blank first line shifts the request to line 3
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_NE(r.status().message().find("line 3: content hash mismatch"), std::string::npos)
      << r.status().message();
}

TEST(Request, LoadingNamesTheLineOfMalformedInput) {
  std::string good = to_jsonl(*make_request_set({chat_request()}));
  struct Case {
    std::string text;
    std::string expect;
  } cases[] = {
      {good + "{not json\n", "line 2: invalid JSON"},
      {good + good + R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1})" + "\n",
       "line 3: missing 'hash'"},
      {R"({"hash":"00","messages":[{"role":"user","content":"x"}]})", "line 1: missing 'max_tokens'"},
      {R"({"hash":"00","prompt":"x","max_tokens":0})", "line 1: 'max_tokens' must be >= 1"},
      {R"({"hash":"00","max_tokens":4})", "line 1: request has neither"},
      {R"({"hash":"00","prompt":"x","messages":[{"role":"user","content":"y"}],"max_tokens":4})",
       "line 1: request has both"},
      {R"({"hash":"00","prompt":"x","max_tokens":4,"temperature":"hot"})", "line 1: field 'temperature'"},
      {"\n\n", "request set is empty"},
  };
  for (const auto& c : cases) {
    auto r = parse_jsonl(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

// OpenAI-style files carry no hashes: when the caller asks, such lines are hashed here and counted,
// and the set equals the one built from the same requests; lines with a hash are still verified.
TEST(Request, LinesWithoutHashesAreHashedAndCountedWhenAsked) {
  auto set = make_request_set({chat_request(), prompt_request()});
  ASSERT_TRUE(set.ok());
  std::string hashed = to_jsonl(*set);
  std::string first = hashed.substr(0, hashed.find('\n') + 1);
  std::string bare =
      R"({"model":"m","prompt":"Once upon","max_tokens":3,"temperature":0,"ignore_eos":false})";
  size_t computed = 0;
  auto mixed = parse_jsonl(first + bare + "\n", &computed);
  ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
  EXPECT_EQ(computed, 1u);
  EXPECT_EQ(mixed->set_hash, set->set_hash);
  EXPECT_EQ(mixed->hashes, set->hashes);

  std::string tampered = hashed;
  tampered.replace(tampered.find("Once upon"), 9, "Once upan");
  computed = 0;
  auto bad = parse_jsonl(tampered, &computed);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorrupt);
  EXPECT_FALSE(parse_jsonl(bare).ok());  // not asked: a missing hash stays an error
}

TEST(Request, MakeSetRejectsInvalidRequestsByIndex) {
  Request bad = chat_request();
  bad.max_tokens = 0;
  auto r = make_request_set({chat_request(), bad});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("request 1"), std::string::npos);
}

TEST(Request, FileRoundTrip) {
  std::string path = ::testing::TempDir() + "/plumb_request_set.jsonl";
  auto set = make_request_set({chat_request(), prompt_request()});
  ASSERT_TRUE(write_request_set(path, *set).ok());
  auto back = read_request_set(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->set_hash, set->set_hash);
  auto missing = read_request_set(path + ".nope");
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace plumb::workload
