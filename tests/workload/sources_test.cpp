#include "workload/sources.h"

#include <gtest/gtest.h>

#include <set>

namespace plumb::workload {
namespace {

// A coarser tokenizer: one token per 3 bytes, rounded up, so word boundaries rarely match.
Result<int64_t> count_bytes3(std::string_view s) { return int64_t((s.size() + 2) / 3); }

TEST(Lengths, FloorIsCeilOfEightTenths) {
  EXPECT_EQ(length_floor(1024), 820);  // 819.2 -> 820
  EXPECT_EQ(length_floor(8192), 6554);
  EXPECT_EQ(length_floor(5), 4);
  EXPECT_EQ(length_floor(1), 1);
  EXPECT_EQ(length_floor(10), 8);
}

TEST(Lengths, SampledPerDimensionAndPinned) {
  // Pinned: computed independently in Python (derive_seed, SplitMix64, lo + x % span).
  EXPECT_EQ(*sample_lengths(21, "input_len", 1024, 5), (std::vector<int64_t>{836, 930, 963, 1002, 1021}));
  EXPECT_EQ(*sample_lengths(21, "output_len", 64, 5), (std::vector<int64_t>{56, 59, 57, 64, 55}));
  auto many = *sample_lengths(7, "input_len", 100, 1000);
  std::set<int64_t> seen(many.begin(), many.end());
  EXPECT_EQ(*seen.begin(), 80);
  EXPECT_EQ(*seen.rbegin(), 100);
  EXPECT_EQ(seen.size(), 21u);
  EXPECT_FALSE(sample_lengths(7, "input_len", 0, 3).ok());
}

TEST(Documents, HitTheTargetExactlyWithAWordTokenizer) {
  Rng rng(1);
  for (int64_t target : {1, 7, 100, 1000}) {
    auto d = synthetic_document(rng, target, count_words);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->tokens, target);
    EXPECT_EQ(*count_words(d->text), target);
  }
}

TEST(Documents, KeepTheLongestPrefixThatFits) {
  Rng rng(2);
  auto d = synthetic_document(rng, 500, count_bytes3);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, *count_bytes3(d->text));
  EXPECT_LE(d->tokens, 500);
  EXPECT_GE(d->tokens, 497);  // one more word (at most 8 bytes incl. space) would overshoot
}

TEST(Documents, CounterErrorsAndMissingCounterAreReported) {
  Rng rng(3);
  TokenCounter failing = [](std::string_view) -> Result<int64_t> { return unavailable("tokenizer down"); };
  auto d = synthetic_document(rng, 10, failing);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("tokenizer down"), std::string::npos);
  EXPECT_FALSE(synthetic_document(rng, 10, TokenCounter{}).ok());
  TokenCounter zero = [](std::string_view) -> Result<int64_t> { return int64_t(0); };
  EXPECT_FALSE(synthetic_document(rng, 10, zero).ok());
  EXPECT_FALSE(synthetic_document(rng, 0, count_words).ok());
}

TEST(Synthetic, RequestsAreSeededUniqueAndSized) {
  SyntheticSpec spec{.seed = 21, .num_requests = 5, .input_len = 1024, .output_len = 64, .temperature = 0.2};
  auto a = synthetic_requests(spec, count_words);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = synthetic_requests(spec, count_words);
  ASSERT_EQ(a->size(), 5u);
  std::vector<int64_t> in{836, 930, 963, 1002, 1021}, out{56, 59, 57, 64, 55};
  std::set<std::string> texts;
  for (size_t i = 0; i < 5; ++i) {
    const Request& r = (*a)[i];
    EXPECT_EQ(r.prompt_tokens, in[i]);
    EXPECT_EQ(*count_words(r.messages.at(0).content), in[i]);
    EXPECT_EQ(r.max_tokens, out[i]);
    EXPECT_EQ(r.temperature, 0.2);
    EXPECT_TRUE(r.ignore_eos);
    EXPECT_EQ(content_hash(r), content_hash((*b)[i]));
    texts.insert(r.messages[0].content.substr(0, 200));
  }
  EXPECT_EQ(texts.size(), 5u);
  spec.seed = 1337;
  EXPECT_NE(content_hash(synthetic_requests(spec, count_words)->at(0)), content_hash(a->at(0)));
}

TEST(Synthetic, FixedLengthsOverheadAndCompletionsPrompts) {
  SyntheticSpec spec{.seed = 1,
                     .num_requests = 2,
                     .input_len = 50,
                     .output_len = 8,
                     .fixed_lengths = true,
                     .template_overhead_tokens = 10,
                     .chat = false};
  auto r = synthetic_requests(spec, count_words);
  ASSERT_TRUE(r.ok());
  for (const auto& q : *r) {
    ASSERT_TRUE(q.prompt.has_value());
    EXPECT_EQ(*count_words(*q.prompt), 40);
    EXPECT_EQ(q.prompt_tokens, 50);
    EXPECT_EQ(q.max_tokens, 8);
  }
  spec.input_len = 0;
  EXPECT_FALSE(synthetic_requests(spec, count_words).ok());
}

TEST(Synthetic, SharedPrefixesAreShared) {
  SharedPrefixSpec spec{
      .base = {.seed = 5, .num_requests = 4, .input_len = 20, .output_len = 4, .fixed_lengths = true},
      .prefix_len = 30,
      .num_prefixes = 2};
  auto r = shared_prefix_requests(spec, count_words);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto prefix = [&](size_t i) {
    const std::string& s = (*r)[i].messages[0].content;
    return s.substr(0, s.find("\n\n"));
  };
  EXPECT_EQ(prefix(0), prefix(2));
  EXPECT_EQ(prefix(1), prefix(3));
  EXPECT_NE(prefix(0), prefix(1));
  EXPECT_EQ(*count_words(prefix(0)), 30);
  EXPECT_EQ((*r)[0].prompt_tokens, 50);
  EXPECT_NE((*r)[0].messages[0].content, (*r)[2].messages[0].content);
  spec.num_prefixes = 0;
  EXPECT_FALSE(shared_prefix_requests(spec, count_words).ok());
}

TEST(Sources, GenericMessagesAndPrompts) {
  std::string text =
      R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi there"}],"max_tokens":5})"
      "\n\n"
      R"({"prompt":"one two three","temperature":0.5})"
      "\n";
  auto r = parse_source(text, {.max_tokens = 9, .temperature = 0.1}, count_words);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->requests.size(), 2u);
  EXPECT_EQ(r->requests[0].messages.size(), 2u);
  EXPECT_EQ(r->requests[0].max_tokens, 5);
  EXPECT_EQ(r->requests[0].temperature, 0.1);
  EXPECT_EQ(r->requests[0].prompt_tokens, 2);  // the last message's content
  EXPECT_EQ(*r->requests[1].prompt, "one two three");
  EXPECT_EQ(r->requests[1].max_tokens, 9);
  EXPECT_EQ(r->requests[1].temperature, 0.5);
  EXPECT_EQ(r->requests[1].prompt_tokens, 3);
  auto limited = parse_source(text, {.max_tokens = 9, .limit = 1});
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->requests.size(), 1u);
}

TEST(Sources, ErrorsNameTheLine) {
  struct Case {
    std::string text;
    SourceOptions opts;
    std::string expect;
  } cases[] = {
      {"{\"prompt\":\"a\",\"max_tokens\":2}\n{\"prompt\":\"b\"}\n", {}, "line 2: missing 'max_tokens'"},
      {"{\"prompt\":\"a\",\"max_tokens\":2}\n\n[1,2\n", {}, "line 3: invalid JSON"},
      {"{\"prompt\":\"a\",\"max_tokens\":2}\n\"text\"\n", {}, "line 2: expected a JSON object"},
      {"{\"context\":\"c\",\"question\":\"q\",\"choice_A\":\"a\"}\n",
       {.format = SourceFormat::kLongBench, .max_tokens = 4},
       "line 1: missing string field 'choice_B'"},
      {"{\"conversations\":3}\n",
       {.format = SourceFormat::kShareGpt, .max_tokens = 4},
       "line 1: missing array field 'conversations'"},
      {"[{\"conversations\":[{\"from\":\"human\",\"value\":\"x\"},{\"from\":\"gpt\",\"value\":\"y\"}]},{"
       "\"x\":1}]",
       {.format = SourceFormat::kShareGpt, .max_tokens = 4},
       "element 1: missing array field 'conversations'"},
      {"{\"conversations\":[{\"from\":\"human\",\"value\":\"x\"},{\"from\":\"gpt\",\"value\":\"y\"}]}",
       {.format = SourceFormat::kShareGpt},
       "line 1: ShareGPT output lengths need a token counter"},
      {"\n", {}, "no usable requests"},
  };
  for (const auto& c : cases) {
    auto r = parse_source(c.text, c.opts);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

TEST(Sources, LongBenchUsesTheUpstreamTemplate) {
  std::string line =
      R"({"_id":"x","context":"CTX","question":"Q?","choice_A":"a","choice_B":"b","choice_C":"c","choice_D":"d","answer":"A"})";
  auto r = parse_source(line, {.format = SourceFormat::kLongBench, .max_tokens = 128, .temperature = 0.4});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Request& q = r->requests.at(0);
  EXPECT_EQ(q.messages.at(0).content, longbench_prompt("CTX", "Q?", "a", "b", "c", "d"));
  EXPECT_NE(q.messages[0].content.find("<text>\nCTX\n</text>"), std::string::npos);
  EXPECT_NE(q.messages[0].content.find("(D) d"), std::string::npos);
  EXPECT_EQ(q.max_tokens, 128);
  EXPECT_EQ(q.temperature, 0.4);
}

TEST(Sources, ShareGptTakesTheFirstHumanTurnAndItsReplyLength) {
  std::string text =
      R"({"conversations":[{"from":"system","value":"s"},{"from":"human","value":"what is up"},{"from":"gpt","value":"not much at all"}]})"
      "\n"
      R"({"conversations":[{"from":"human","value":"lonely"}]})"
      "\n"
      R"([])";
  // The third line is a JSON array, not an object: an error naming line 3.
  auto bad = parse_source(text, {.format = SourceFormat::kShareGpt}, count_words);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos);
  text.resize(text.rfind('\n'));
  auto r = parse_source(text, {.format = SourceFormat::kShareGpt}, count_words);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->requests.size(), 1u);
  EXPECT_EQ(r->skipped, 1u);
  EXPECT_EQ(r->requests[0].messages.at(0).content, "what is up");
  EXPECT_EQ(r->requests[0].max_tokens, 4);  // "not much at all"
  EXPECT_EQ(r->requests[0].prompt_tokens, 3);
}

}  // namespace
}  // namespace plumb::workload

namespace plumb::workload {
namespace {

TEST(CountWords, SplitsOnAnyWhitespaceRun) {
  EXPECT_EQ(*count_words(""), 0);
  EXPECT_EQ(*count_words("  \t\r\n "), 0);
  EXPECT_EQ(*count_words("one"), 1);
  EXPECT_EQ(*count_words(" one  two\tthree\r\nfour "), 4);
}

}  // namespace
}  // namespace plumb::workload
