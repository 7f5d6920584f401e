// The runner factory and the device setting (model_runner.h, llm_engine.h): parsing, the CPU
// runner, and CUDA refused with the reason in a build without it or for a device that does not
// exist. Runs everywhere (no GPU needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/model.h"
#include "engine/sampling.h"
#include "engine/scheduler/llm_engine.h"
#include "engine/scheduler/model_runner.h"

namespace plumb::scheduler {
namespace {

std::unique_ptr<engine::Model> tiny_dummy() {
  auto c = engine::parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true})");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  engine::ModelOptions o;
  o.threads = 1;
  auto m = engine::Model::dummy(*c, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(m).value();
}

TEST(Device, ParsesTheThreeForms) {
  auto cpu = parse_device("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->kind, Device::Kind::kCpu);
  EXPECT_EQ(cpu->name(), "cpu");
  auto cuda = parse_device("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->kind, Device::Kind::kCuda);
  EXPECT_EQ(cuda->name(), "cuda:0");
  auto three = parse_device("cuda:3");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->index, 3);
  EXPECT_EQ(three->name(), "cuda:3");
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cuda:99999"}) {
    auto d = parse_device(bad);
    EXPECT_FALSE(d.ok()) << bad;
    if (!d.ok()) {
      EXPECT_NE(d.status().message().find("cpu, cuda, cuda:N"), std::string::npos) << bad;
    }
  }
}

TEST(Device, CpuRunnerComesFromTheFactory) {
  auto r = make_runner(Device{}, tiny_dummy(), "tiny");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->vocab_size(), 256);
  EXPECT_EQ((*r)->describe(), "tiny");
  ASSERT_TRUE((*r)->init_kv(4, 16).ok());
  std::vector<int32_t> tokens{1, 2, 3}, table{0};
  std::vector<StepSeq> batch{{tokens, 0, table, StepSeq::Logits::kLast}};
  std::vector<float> logits;
  ASSERT_TRUE((*r)->forward(batch, logits).ok());
  EXPECT_EQ(logits.size(), 256u);
}

TEST(Device, CudaIsRefusedWithTheReason) {
  auto r = make_runner(Device{Device::Kind::kCuda, 99}, tiny_dummy(), "tiny");
  ASSERT_FALSE(r.ok());
  if (cuda_built()) {
    // No machine has a 100th GPU: the device check answers before any upload.
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().to_string();
    EXPECT_NE(r.status().message().find("cuda:99 does not exist"), std::string::npos)
        << r.status().to_string();
  } else {
    EXPECT_EQ(r.status().code(), Code::kFailedPrecondition) << r.status().to_string();
    EXPECT_NE(r.status().message().find("built without CUDA"), std::string::npos) << r.status().to_string();
    EXPECT_NE(r.status().message().find("PLUMB_CUDA=on"), std::string::npos) << r.status().to_string();
  }
}

// A kernel configuration's CUDA candidates replace the CUDA runner's kernels; the CPU runner has none
// to replace and says so rather than ignoring them.
TEST(Device, CudaCandidatesAreRefusedOnTheCpu) {
  RunnerOptions ro;
  ro.cuda_candidates_decode["swiglu"] = "/k/s.cubin";
  auto r = make_runner(Device{}, tiny_dummy(), "tiny", ro);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("--device cuda"), std::string::npos) << r.status().to_string();
}

// The default forward_greedy (the host's argmax): a greedy row's id is the argmax of its forward()
// row, lowest id on ties, and it leaves logits; the other rows come back in batch order.
TEST(Runner, DefaultForwardGreedyTakesTheArgmaxAndKeepsTheOtherRows) {
  auto r = make_model_runner(tiny_dummy(), "cpu");
  ASSERT_TRUE(r->init_kv(16, 16).ok());
  EXPECT_FALSE(r->greedy_on_device());
  const std::vector<int32_t> a{5, 6, 7}, b{9, 10}, c{11, 12, 13, 14};
  const std::vector<int32_t> ta{0}, tb{1}, tc{2};
  std::vector<StepSeq> batch{{a, 0, ta, StepSeq::Logits::kLast, true},
                             {b, 0, tb, StepSeq::Logits::kAll, false},
                             {c, 0, tc, StepSeq::Logits::kLast, true}};
  std::vector<float> all;
  ASSERT_TRUE(r->forward(batch, all).ok());
  const auto V = size_t(r->vocab_size());
  ASSERT_EQ(all.size(), 4 * V);  // a: 1, b: 2, c: 1
  // The same step again over fresh blocks, greedy.
  const std::vector<int32_t> ta2{3}, tb2{4}, tc2{5};
  std::vector<StepSeq> again{{a, 0, ta2, StepSeq::Logits::kLast, true},
                             {b, 0, tb2, StepSeq::Logits::kAll, false},
                             {c, 0, tc2, StepSeq::Logits::kLast, true}};
  std::vector<float> rest;
  std::vector<int32_t> ids;
  ASSERT_TRUE(r->forward_greedy(again, rest, ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  auto argmax = [&](size_t row) {
    return int32_t(std::max_element(all.begin() + long(row * V), all.begin() + long((row + 1) * V)) -
                   (all.begin() + long(row * V)));
  };
  EXPECT_EQ(ids[0], argmax(0));
  EXPECT_EQ(ids[1], argmax(3));
  ASSERT_EQ(rest.size(), 2 * V);
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), all.begin() + long(V)));
}

TEST(Runner, HostArgmaxTakesTheLowestIdOnTiesAndReportsNonFinite) {
  EXPECT_EQ(ModelRunner::host_argmax(std::vector<float>{1, 3, 2, 3}), 1);
  EXPECT_EQ(ModelRunner::host_argmax(std::vector<float>{-5, -4, -4.5f}), 1);
  EXPECT_EQ(ModelRunner::host_argmax(std::vector<float>{1, std::nanf(""), 9, INFINITY}), -2);
}

// ModelRunner::sample_plain (the rule a runner applies to the rows it draws itself) gives exactly
// the id engine::Sampler gives with the same seed, through each built-in sampling kernel, over many
// seeds and temperatures; a non-finite row is reported as -1 - its first non-finite id.
TEST(Runner, SamplePlainIsTheSamplersDraw) {
  std::vector<float> row(1000);
  for (size_t i = 0; i < row.size(); ++i)
    row[i] = float(std::sin(double(i) * 0.37) * 4.0 + double(i % 7) * 0.1);
  int differ_from_argmax = 0;
  for (const char* kernel : {"reference", "select"}) {
    auto v = engine::KernelRegistry::instance().find(engine::Op::kSample, kernel);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    for (uint64_t seed = 1; seed <= 300; ++seed) {
      engine::SamplingParams p;
      p.temperature = 0.3f + float(seed % 5) * 0.4f;
      p.seed = seed;
      engine::Sampler host(p, (*v)->cpu<engine::SampleFn>()), runner(p, (*v)->cpu<engine::SampleFn>());
      ASSERT_TRUE(runner.plain_draw());
      auto want = host.sample(row);
      ASSERT_TRUE(want.ok());
      const int32_t got = ModelRunner::sample_plain(row, p.temperature, runner.next_u());
      ASSERT_EQ(got, want->id) << kernel << " seed " << seed;
      differ_from_argmax += got != ModelRunner::host_argmax(row) ? 1 : 0;
    }
  }
  EXPECT_GT(differ_from_argmax, 100);  // the draws are spread, not the argmax
  std::vector<float> bad = row;
  bad[17] = std::nanf("");
  EXPECT_EQ(ModelRunner::sample_plain(bad, 1.0f, 0.5), -18);
  engine::SamplingParams top_p;
  top_p.temperature = 1.0f;
  top_p.top_p = 0.9f;
  EXPECT_FALSE(engine::Sampler(top_p).plain_draw());
}

TEST(Device, EffectiveSettingsCarryTheNormalizedDevice) {
  LlmEngineConfig c;
  EXPECT_EQ(c.device, "cpu");
  c.device = "cuda";
  std::vector<std::string> notes;
  auto eff = normalize(c, 128, &notes);
  ASSERT_TRUE(eff.ok()) << eff.status().to_string();
  EXPECT_EQ(eff->device, "cuda:0");
  bool noted = false;
  for (const auto& n : notes) noted |= n.find("cuda:0") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_NE(llm_engine_config_json(*eff).find(R"("device":"cuda:0")"), std::string::npos);
  // One card leaves no trace (earlier settings are unchanged); a split says how many cards.
  EXPECT_EQ(llm_engine_config_json(*eff).find("tensor_parallel_size"), std::string::npos);
  c.tensor_parallel_size = 4;
  auto split = normalize(c, 128);
  ASSERT_TRUE(split.ok());
  EXPECT_NE(llm_engine_config_json(*split).find(R"("tensor_parallel_size":4)"), std::string::npos);
  c.device = "tpu";
  EXPECT_EQ(normalize(c, 128).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace plumb::scheduler
