// Unit tests of the gate model, answer extraction, the multiple-choice reader and the fidelity
// estimator (including bf16-vs-f32 logits of the shipped model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/file.h"
#include "gates/checks.h"
#include "gates/fidelity.h"
#include "gates/gate.h"
#include "gates/multiple_choice.h"

namespace plumb::gates {
namespace {

TEST(Gate, ConstraintsAreAndedAndNanFails) {
  GateResult g{"quality", {check("a", 0.9, ">=", 0.8, "fix a"), check("b", 0.01, "<=", 0.05, "fix b")}};
  EXPECT_TRUE(g.passed());
  g.constraints.push_back(check("c", std::nan(""), ">=", 0, "fix c"));
  EXPECT_EQ(g.constraints.back().verdict, Verdict::kFail);
  EXPECT_FALSE(g.passed());
  EXPECT_EQ(check("eq", 0, "==", 0, "").verdict, Verdict::kPass);
  EXPECT_EQ(check("eq", 1, "==", 0, "").verdict, Verdict::kFail);
  EXPECT_EQ(check("bad op", 1, "<", 2, "").verdict, Verdict::kFail);
}

TEST(Gate, NotEvaluatedNeverPassesSilently) {
  GateReport r{{GateResult{"integrity", {check("a", 1, ">=", 1, ""), not_evaluated("roofline", "no data")}}}};
  EXPECT_TRUE(r.passed(false));
  EXPECT_FALSE(r.passed(true));
  EXPECT_FALSE(r.complete());
  std::string table = render_table(r);
  EXPECT_NE(table.find("NOT EVALUATED"), std::string::npos);
  EXPECT_NE(table.find("no data"), std::string::npos);
  EXPECT_NE(table.find("some constraints were not evaluated"), std::string::npos);
  json::object j = to_json(r, true);
  EXPECT_FALSE(j.at("passed").as_bool());
  EXPECT_FALSE(j.at("complete").as_bool());
  const auto& c = j.at("gates").as_array()[0].as_object().at("constraints").as_array()[1].as_object();
  EXPECT_EQ(c.at("verdict").as_string(), "not_evaluated");
  EXPECT_TRUE(c.at("value").is_null());
  EXPECT_FALSE(c.at("pass").as_bool());
}

TEST(Gate, TablePrintsFixOnlyForFailures) {
  GateReport r{{GateResult{"quality",
                           {check("accuracy", 0.5, ">=", 0.779, "use less quantization"),
                            check("kl", 0.001, "<=", 0.05, "never shown")}}}};
  std::string t = render_table(r);
  EXPECT_NE(t.find("fix: use less quantization"), std::string::npos);
  EXPECT_EQ(t.find("never shown"), std::string::npos);
  EXPECT_NE(t.find("verdict: FAIL"), std::string::npos);
  EXPECT_NE(t.find("0.779"), std::string::npos);
}

std::optional<int> ex(std::string_view s, int n = 4) { return extract_answer(s, n); }

TEST(Extract, TrickyOutputs) {
  EXPECT_EQ(ex("The answer is (B)."), 1);
  EXPECT_EQ(ex("B"), 1);
  EXPECT_EQ(ex(" B"), 1);
  EXPECT_EQ(ex(" b)"), 1);
  EXPECT_EQ(ex("(c)"), 2);
  EXPECT_EQ(ex("Answer: C because 4 > 3"), 2);
  EXPECT_EQ(ex("answer: (d)"), 3);
  EXPECT_EQ(ex("the answer is a"), 0);  // lower-case letter at the end of an explicit statement
  EXPECT_EQ(ex("D. 617"), 3);
  EXPECT_EQ(ex("I think it is C."), 2);
  // Multiple letters: ambiguous, counted wrong.
  EXPECT_EQ(ex("A or B"), std::nullopt);
  EXPECT_EQ(ex("The answer is (A). The answer is (B)."), std::nullopt);
  EXPECT_EQ(ex("B, C"), std::nullopt);
  // An explicit statement wins over other letters.
  EXPECT_EQ(ex("Not A. The answer is (C)."), 2);
  // None.
  EXPECT_EQ(ex(""), std::nullopt);
  EXPECT_EQ(ex("   "), std::nullopt);
  EXPECT_EQ(ex("a number"), std::nullopt);  // the article "a" is not an answer
  EXPECT_EQ(ex("Because it is larger"), std::nullopt);
  EXPECT_EQ(ex("E"), std::nullopt);  // outside the 4 options
  EXPECT_EQ(ex("E", 10), 4);
  EXPECT_EQ(ex("The answer is (J)", 10), 9);
  EXPECT_EQ(ex("Banana"), std::nullopt);  // a letter inside a word
}

TEST(McSet, ParsesMmluProFormat) {
  auto items = parse_mc_jsonl(
      "{\"question_id\": 7, \"question\": \"q1\", \"options\": [\"x\", \"y\", \"z\"], \"answer\": \"C\", "
      "\"answer_index\": 2}\n\n"
      "{\"question\": \"q2\", \"options\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\"], "
      "\"answer_index\": 9}\n");
  ASSERT_TRUE(items.ok()) << items.status().to_string();
  ASSERT_EQ(items->size(), 2u);
  EXPECT_EQ((*items)[0].id, "7");
  EXPECT_EQ((*items)[0].answer_index, 2);
  EXPECT_EQ((*items)[1].answer_index, 9);
  EXPECT_EQ((*items)[1].id, "3");
  EXPECT_EQ(completion_prompt((*items)[0]), "Question: q1\nOptions:\nA. x\nB. y\nC. z\nAnswer:");
  EXPECT_EQ(chat_prompt((*items)[0]),
            "Question: q1\nOptions:\nA. x\nB. y\nC. z\nAnswer with the letter of the correct option.");
}

TEST(McSet, BadInputNamesTheLine) {
  auto bad = [](std::string_view t) {
    auto r = parse_mc_jsonl(t);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad("{\"question\":\"q\",\"options\":[\"a\",\"b\"],\"answer\":\"C\"}").find("line 1"),
            std::string::npos);
  EXPECT_NE(bad("\n{\"question\":\"q\",\"options\":[\"a\"],\"answer\":\"A\"}").find("line 2"),
            std::string::npos);
  EXPECT_NE(bad("{\"question\":\"q\",\"options\":[\"a\",\"b\"],\"answer\":\"A\",\"answer_index\":1}")
                .find("disagree"),
            std::string::npos);
  EXPECT_NE(bad("{\"question\":\"q\",\"options\":[\"a\",\"b\"]}").find("required"), std::string::npos);
  EXPECT_NE(bad("not json").find("JSON"), std::string::npos);
  EXPECT_NE(bad("").find("no items"), std::string::npos);
  EXPECT_FALSE(load_mc_jsonl("/nonexistent/x.jsonl").ok());
}

TEST(McSet, ShippedHeldOutSetLoads) {
  auto items = load_mc_jsonl(std::string(PLUMB_SOURCE_DIR) + "/data/mc_heldout.jsonl");
  ASSERT_TRUE(items.ok()) << items.status().to_string();
  EXPECT_EQ(items->size(), 200u);
  int per_letter[4] = {0, 0, 0, 0};
  for (const auto& i : *items) per_letter[i.answer_index]++;
  EXPECT_EQ(per_letter[0], 50);
  EXPECT_EQ(per_letter[3], 50);
}

using Top = std::vector<std::pair<std::string, double>>;

TEST(Fidelity, IdenticalListsHaveZeroKl) {
  Top a{{"x", std::log(0.6)}, {"y", std::log(0.3)}};
  EXPECT_DOUBLE_EQ(position_kl(a, a), 0.0);
}

TEST(Fidelity, CoarseGrainedKlExactValue) {
  // Shared {x}: p = (0.6, other 0.4), q = (0.3, other 0.7).
  Top p{{"x", std::log(0.6)}, {"y", std::log(0.3)}};
  Top q{{"x", std::log(0.3)}, {"z", std::log(0.5)}};
  double want = 0.6 * std::log(0.6 / 0.3) + 0.4 * std::log(0.4 / 0.7);
  EXPECT_NEAR(position_kl(p, q), want, 1e-12);
}

TEST(Fidelity, DisjointListsUseTheUpperBoundOfQ) {
  Top p{{"x", std::log(0.9)}};
  Top q{{"y", std::log(0.8)}, {"z", std::log(0.1)}};
  double want = 0.9 * std::log(0.9 / 0.1) + 0.1 * std::log(0.1 / 0.9);
  EXPECT_NEAR(position_kl(p, q), want, 1e-12);
}

TEST(Fidelity, CompareCountsAgreementAndMismatches) {
  PromptLogprobs r{{{"a", {}}, {"b", {{"c", -0.1}, {"d", -2.5}}}, {"c", {{"e", -0.2}, {"f", -1.8}}}}};
  PromptLogprobs same = r;
  PromptLogprobs other{{{"a", {}}, {"b", {{"d", -0.1}, {"c", -2.5}}}, {"x", {{"e", -0.2}}}}};
  auto s = compare_fidelity({r, r}, {same, other});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->positions, 3);  // 2 from the first prompt, 1 from the second (one token mismatch)
  EXPECT_EQ(s->token_mismatches, 1);
  EXPECT_NEAR(s->top1_agreement, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(s->token_match, 5.0 / 6.0, 1e-12);
  EXPECT_GT(s->mean_kl, 0.5);
  EXPECT_FALSE(compare_fidelity({r}, {}).ok());
  PromptLogprobs shorter{{{"a", {}}}};
  auto none = compare_fidelity({r}, {shorter});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no comparable position"), std::string::npos);
}

TEST(Fidelity, NearTiesCountAsAgreement) {
  PromptLogprobs r{{{"a", {{"x", -0.70}, {"y", -0.72}, {"z", -3.0}}}}};
  PromptLogprobs tie{{{"a", {{"y", -0.69}, {"x", -0.71}}}}};
  PromptLogprobs far{{{"a", {{"z", -0.1}, {"x", -2.5}}}}};
  auto s = compare_fidelity({r}, {tie});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->top1_agreement, 1.0);
  EXPECT_EQ(s->strict_top1_agreement, 0.0);
  auto f = compare_fidelity({r}, {far});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->top1_agreement, 0.0);
  EXPECT_EQ(compare_fidelity({r}, {tie}, 0.0)->top1_agreement, 0.0);
}

TEST(Fidelity, ParsesCompletionLogprobs) {
  auto v = json::parse(
      R"({"tokens":["He","llo"," x"],"token_logprobs":[null,-1.0,-0.5],
          "top_logprobs":[null,{"llo":-1.0,"y":-0.2},{" x":-0.5}],"text_offset":[0,2,5]})");
  ASSERT_TRUE(v.ok());
  auto p = parse_completion_logprobs(*v, 2);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->positions.size(), 2u);
  EXPECT_TRUE(p->positions[0].top.empty());
  ASSERT_EQ(p->positions[1].top.size(), 2u);
  EXPECT_EQ(p->positions[1].top[0].first, "y");  // sorted most likely first
  EXPECT_FALSE(parse_completion_logprobs(*v, 4).ok());
  EXPECT_FALSE(parse_completion_logprobs(json::value(nullptr), 1).ok());
}

// Top-k lists from full logits, as a server would report them.
std::vector<PromptLogprobs> topk_from_logits(const float* logits, int rows, int vocab, int k) {
  PromptLogprobs p;
  for (int r = 0; r < rows; ++r) {
    const float* l = logits + size_t(r) * vocab;
    double mx = -1e30;
    for (int i = 0; i < vocab; ++i) mx = std::max(mx, double(l[i]));
    double z = 0;
    for (int i = 0; i < vocab; ++i) z += std::exp(double(l[i]) - mx);
    std::vector<std::pair<std::string, double>> all;
    for (int i = 0; i < vocab; ++i) all.emplace_back(std::to_string(i), double(l[i]) - mx - std::log(z));
    std::partial_sort(all.begin(), all.begin() + k, all.end(),
                      [](auto& a, auto& b) { return a.second > b.second; });
    all.resize(k);
    p.positions.push_back({"t" + std::to_string(r), all});
  }
  return {p};
}

// The shipped model's bf16 vs f32 logits (reference.safetensors) pass the default bounds; logits
// of a different position (an unrelated distribution) fail them. These are the figures the bounds
// in FidelityBounds are set from.
TEST(Fidelity, ShippedModelBf16VsF32PassesDefaultBounds) {
  // safetensors: u64 header length, JSON header {name: {dtype, shape, data_offsets}}, data.
  auto file = read_file(std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny/reference.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  uint64_t hlen = 0;
  std::memcpy(&hlen, file->data(), 8);
  auto header = json::parse_object(std::string_view(*file).substr(8, hlen));
  ASSERT_TRUE(header.ok());
  auto tensor = [&](const char* name, int* rows, int* cols) -> std::vector<float> {
    const auto& t = header->at(name).as_object();
    EXPECT_EQ(t.at("dtype").as_string(), "F32");
    *rows = int(t.at("shape").as_array()[0].as_int64());
    *cols = int(t.at("shape").as_array()[1].as_int64());
    size_t off = size_t(t.at("data_offsets").as_array()[0].as_int64());
    std::vector<float> v(size_t(*rows) * size_t(*cols));
    std::memcpy(v.data(), file->data() + 8 + hlen + off, v.size() * sizeof(float));
    return v;
  };
  int rows = 0, vocab = 0;
  std::vector<float> va = tensor("logits_f32", &rows, &vocab);
  std::vector<float> vb = tensor("logits_bf16", &rows, &vocab);
  ASSERT_GT(rows, 2);
  const float* fa = va.data();
  const float* fb = vb.data();
  auto ref = topk_from_logits(fa, rows, vocab, 5);
  auto cand = topk_from_logits(fb, rows, vocab, 5);
  auto s = compare_fidelity(ref, cand);
  ASSERT_TRUE(s.ok());
  FidelityBounds bounds;
  std::printf(
      "plumb-tiny bf16 vs f32, top-5: top1 %.4f (strict %.4f) mean KL %.3g max KL %.3g over %lld positions\n",
      s->top1_agreement, s->strict_top1_agreement, s->mean_kl, s->max_kl, (long long)s->positions);
  EXPECT_GE(s->top1_agreement, bounds.min_top1_agreement);
  EXPECT_LE(s->mean_kl, bounds.max_mean_kl);
  // Shifted by one position: the distribution of a different context, as a different model gives.
  auto shifted = topk_from_logits(fb + vocab, rows - 1, vocab, 5);
  auto ref_head = topk_from_logits(fa, rows - 1, vocab, 5);
  auto d = compare_fidelity(ref_head, shifted);
  ASSERT_TRUE(d.ok());
  std::printf("plumb-tiny shifted by one position: top1 %.4f mean KL %.3g\n", d->top1_agreement, d->mean_kl);
  EXPECT_LT(d->top1_agreement, bounds.min_top1_agreement);
  EXPECT_GT(d->mean_kl, bounds.max_mean_kl);
}

TEST(Prometheus, SumsSeriesBySuffix) {
  std::string text =
      "# HELP plumb:generation_tokens_total Generated tokens.\n"
      "# TYPE plumb:generation_tokens_total counter\n"
      "plumb:generation_tokens_total{model_name=\"m\"} 120\n"
      "vllm:generation_tokens_total{model_name=\"a b\"} 3.5\n"
      "plumb:prompt_tokens_total 7\n";
  EXPECT_EQ(prometheus_sum(text, "generation_tokens_total"), 123.5);
  EXPECT_EQ(prometheus_sum(text, "prompt_tokens_total"), 7.0);
  EXPECT_EQ(prometheus_sum(text, "nothing_total"), std::nullopt);
}

TEST(FreshPrompts, SeededAndDistinct) {
  auto a = fresh_prompts(5, 3, 10);
  EXPECT_EQ(a, fresh_prompts(5, 3, 10));
  EXPECT_NE(a, fresh_prompts(6, 3, 10));
  EXPECT_NE(a[0], a[1]);
  EXPECT_EQ(std::count(a[0].begin(), a[0].end(), ' '), 9);
}

}  // namespace
}  // namespace plumb::gates
