// Reading InferenceBench's files: the four scenario shapes (fixtures in IB's format under
// tests/fixtures/inferencebench/), malformed fields refused by name, and IB request files.
#include "workload/inferencebench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/file.h"

namespace plumb::workload {
namespace {

std::string fixture(const std::string& name) {
  return std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/inferencebench/" + name;
}

TEST(IbScenario, ReadsTheFourShapes) {
  auto a = read_ib_scenario(fixture("scenario_a.json"));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->scenario_id, "A");
  EXPECT_EQ(a->name, "Input heavy");
  EXPECT_EQ(a->input_len, 96);
  EXPECT_EQ(a->output_len, 8);
  EXPECT_DOUBLE_EQ(a->range_ratio, 0.8);
  EXPECT_TRUE(a->ignore_eos);
  EXPECT_EQ(a->num_requests, 6);
  EXPECT_EQ(a->max_new_tokens, 8);
  EXPECT_DOUBLE_EQ(a->temperature, 0.2);
  ASSERT_EQ(a->profiles.size(), 1u);
  EXPECT_EQ(a->profiles[0].name, "burst");
  EXPECT_EQ(a->profiles[0].pattern, ArrivalKind::kBurst);
  EXPECT_EQ(ib_profile_concurrency(*a, 0, IbConcurrency::kDeclared), 1);

  auto b = read_ib_scenario(fixture("scenario_b.json"));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_DOUBLE_EQ(b->range_ratio, 0.5);
  EXPECT_FALSE(b->concurrency.has_value());
  EXPECT_EQ(ib_profile_concurrency(*b, 0, IbConcurrency::kDeclared), 1);
  // range_ratio reaches the drawn lengths: [ceil(0.5 * 48), 48].
  auto spec = ib_synthetic_spec(*b, 21);
  EXPECT_DOUBLE_EQ(spec.range_ratio, 0.5);
  auto lens = sample_lengths(21, "output_len", 48, 200, 0.5);
  ASSERT_TRUE(lens.ok());
  int64_t lo = 48, hi = 0;
  for (int64_t x : *lens) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GE(lo, 24);
  EXPECT_LT(lo, 30);  // 200 draws reach near the floor
  EXPECT_EQ(hi, 48);
  // Ratio 0.8 is exactly the protocol's draw.
  EXPECT_EQ(*sample_lengths(7, "input_len", 100, 50, 0.8), *sample_lengths(7, "input_len", 100, 50));

  auto c = read_ib_scenario(fixture("scenario_c.json"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->profiles.size(), 3u);
  EXPECT_EQ(c->profiles[1].name, "poisson");
  EXPECT_EQ(c->profiles[1].pattern, ArrivalKind::kPoisson);
  EXPECT_DOUBLE_EQ(c->profiles[1].rate_per_s, 40);
  EXPECT_EQ(c->profiles[2].pattern, ArrivalKind::kConstant);
  auto arr = ib_arrivals(*c, 21, IbConcurrency::kDeclared);
  ASSERT_EQ(arr.size(), 3u);
  EXPECT_EQ(arr[0].max_concurrency, 8);
  EXPECT_EQ(arr[1].max_concurrency, 4);
  EXPECT_EQ(arr[2].max_concurrency, 2);
  EXPECT_EQ(arr[1].seed_dimension, "arrival/1");
  // Seeded: the same seed gives the same Poisson schedule, another seed another one.
  auto s1 = make_schedule(arr[1], 10),
       s2 = make_schedule(ib_arrivals(*c, 21, IbConcurrency::kDeclared)[1], 10);
  auto s3 = make_schedule(ib_arrivals(*c, 22, IbConcurrency::kDeclared)[1], 10);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  EXPECT_EQ(s1->offsets, s2->offsets);
  EXPECT_NE(s1->offsets, s3->offsets);

  // D declares concurrency 4 at the top level; IB's runner reads only the profile's (1).
  auto d = read_ib_scenario(fixture("scenario_d.json"));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->concurrency, 4);
  EXPECT_EQ(ib_profile_concurrency(*d, 0, IbConcurrency::kDeclared), 4);
  EXPECT_EQ(ib_profile_concurrency(*d, 0, IbConcurrency::kRunner), 1);
  EXPECT_EQ(ib_arrivals(*d, 21, IbConcurrency::kRunner)[0].max_concurrency, 1);
  EXPECT_EQ(ib_arrivals(*d, 21, IbConcurrency::kDeclared)[0].seed_dimension, "arrival");
}

TEST(IbScenario, DefaultsAreIbRunnersWhenFieldsAreAbsent) {
  auto s = parse_ib_scenario(R"({"scenario_id": "X"})");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->num_requests, 32);
  EXPECT_EQ(s->max_new_tokens, 256);
  EXPECT_EQ(s->output_len, 256);
  EXPECT_EQ(s->input_len, 1024);
  EXPECT_DOUBLE_EQ(s->temperature, 0.2);
  ASSERT_EQ(s->profiles.size(), 1u);
  EXPECT_EQ(s->profiles[0].name, "default");
  EXPECT_EQ(s->profiles[0].pattern, ArrivalKind::kBurst);
  // Request-file fallbacks: IB's request reader defaults ignore_eos to false unless the scenario says.
  EXPECT_FALSE(ib_request_defaults(*s).ignore_eos);
}

TEST(IbScenario, MalformedFieldsAreRefusedByName) {
  struct Case {
    std::string text, field;
  } cases[] = {
      {R"({"synthetic": {"input_len": "long"}})", "synthetic.input_len"},
      {R"({"synthetic": {"input_len": 0}})", "synthetic.input_len"},
      {R"({"synthetic": {"output_len": 8.5}})", "synthetic.output_len"},
      {R"({"synthetic": {"range_ratio": 1.5}})", "synthetic.range_ratio"},
      {R"({"synthetic": {"range_ratio": 0}})", "synthetic.range_ratio"},
      {R"({"synthetic": {"ignore_eos": "yes"}})", "synthetic.ignore_eos"},
      {R"({"synthetic": [1]})", "'synthetic'"},
      {R"({"num_requests": -3})", "num_requests"},
      {R"({"max_new_tokens": null, "temperature": -1})", "temperature"},
      {R"({"profile": {"pattern": "bursty"}})", "profile.pattern"},
      {R"({"profile": {"pattern": "poisson"}})", "profile.rate_per_s"},
      {R"({"profile": {"pattern": "constant", "rate_per_s": 0}})", "profile.rate_per_s"},
      {R"({"profile": {"pattern": "burst", "concurrency": 0}})", "profile.concurrency"},
      {R"({"profiles": []})", "'profiles'"},
      {R"({"profiles": [{"pattern": "burst"}, {"pattern": "burst"}]})", "profiles[1].name"},
      {R"({"num_requests": 8, "profiles": [{"pattern": "burst", "num_requests": 4}]})",
       "profiles[0].num_requests"},
      {R"({"profiles": [{"pattern": "burst"}], "profile": {"pattern": "burst"}})", "'profiles'"},
      {R"({"scenario_id": 4})", "scenario_id"},
      {R"([1, 2])", "not a JSON object"},
  };
  for (const auto& c : cases) {
    auto s = parse_ib_scenario(c.text);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(s.status().message().find(c.field), std::string::npos)
        << c.text << " -> " << s.status().message();
  }
  EXPECT_FALSE(parse_ib_concurrency("both").ok());
}

TEST(IbRequests, ReadsMessagesWithFallbacksAndComputesPlumbHashes) {
  auto text = read_file(fixture("requests.jsonl"));
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(looks_like_ib_requests(*text));
  IbRequestDefaults d{.max_new_tokens = 12, .temperature = 0.3, .ignore_eos = true};
  auto f = parse_ib_requests(*text, d);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->set.requests.size(), 8u);
  EXPECT_EQ(f->meta.size(), 8u);
  EXPECT_EQ(f->ib_hashes, 7u);
  EXPECT_EQ(f->defaulted, 2u);
  const Request& r0 = f->set.requests[0];
  EXPECT_EQ(r0.max_tokens, 10);
  EXPECT_DOUBLE_EQ(r0.temperature, 0.3);
  EXPECT_TRUE(r0.ignore_eos);
  EXPECT_EQ(r0.prompt_tokens, 20);
  EXPECT_EQ(f->set.requests[5].max_tokens, 12);  // from the defaults
  EXPECT_EQ(f->meta[0].sample_id, "s0");
  EXPECT_EQ(f->meta[0].content_hash, std::string(63, '0') + "1");
  EXPECT_EQ(f->meta[3].target_input_token_count, 23);
  EXPECT_TRUE(f->meta[7].content_hash.empty());
  // plumb's own hashes (docs/protocol.md §2), not IB's.
  for (size_t i = 0; i < f->set.requests.size(); ++i)
    EXPECT_EQ(f->set.hashes[i], content_hash(f->set.requests[i]));
  EXPECT_EQ(f->set.set_hash, set_hash_of(f->set.hashes));
  // Written as a plumb set, it reads back byte for byte (and is no longer taken for an IB file).
  std::string jsonl = to_jsonl(f->set);
  EXPECT_FALSE(looks_like_ib_requests(jsonl));
  // OpenAI-style request files (plumb's "max_tokens", no hash) are not IB's either.
  EXPECT_FALSE(
      looks_like_ib_requests(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})"));
  EXPECT_FALSE(looks_like_ib_requests(R"({"prompt": "x", "max_tokens": 4})"));
  auto again = parse_jsonl(jsonl);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->set_hash, f->set.set_hash);
}

TEST(IbRequests, MalformedLinesAreRefusedWithLineAndField) {
  IbRequestDefaults d;
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"{\"messages\": []}\n", "line 1: field 'messages'"},
      {"\n{\"prompt\": \"hi\"}\n", "line 2: field 'messages' is missing"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_new_tokens": 0})", "max_new_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": 1})", "ignore_eos"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5})", "max_tokens"},
      {"not json\n", "line 1"},
      {"\n\n", "no requests"},
  };
  for (const auto& c : cases) {
    auto f = parse_ib_requests(c.text, d);
    ASSERT_FALSE(f.ok()) << c.text;
    EXPECT_NE(f.status().message().find(c.expect), std::string::npos)
        << c.text << " -> " << f.status().message();
  }
}

}  // namespace
}  // namespace plumb::workload
