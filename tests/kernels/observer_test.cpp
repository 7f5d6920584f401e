// The profiling observer on the real forward pass (shipped model): with an observer installed every
// module boundary reports once per layer per call, with its phase and shapes, and the inputs it
// sees are the kernel's inputs; with none installed nothing is reported and the logits are the same.
#include "engine/cpu/observer.h"

#include <gtest/gtest.h>

#include <map>

#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/sampling.h"

namespace plumb::engine {
namespace {

struct Counter final : KernelObserver {
  std::map<std::string, int> calls;
  std::map<std::string, Phase> phase;
  std::map<std::string, int64_t> rows;
  int64_t ns = 0;
  void before(const KernelCall& c) override {
    calls[c.module]++;
    phase[c.module] = c.phase;
    rows[c.module] = c.m;
  }
  void after(const KernelCall&, int64_t elapsed) override { ns += elapsed; }
};

TEST(Observer, SeesEveryModuleOfAPrefillAndADecodeStep) {
  ModelOptions mo;
  mo.threads = 1;
  auto m = Model::load(std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny", mo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  auto cache = KvCache::create(model.kv_config(4, 16));
  ASSERT_TRUE(cache.ok());
  std::vector<int32_t> prompt{5, 6, 7, 8, 9}, table{0};
  SequenceInput in{prompt, 0, table};
  ForwardOutput plain, seen;
  ASSERT_TRUE(model.forward(std::span(&in, 1), *cache, &plain).ok());

  Counter obs;
  ASSERT_EQ(set_kernel_observer(&obs), nullptr);
  ASSERT_TRUE(model.forward(std::span(&in, 1), *cache, &seen).ok());
  std::vector<int32_t> next{10};
  SequenceInput dec{next, 5, table};
  ForwardOutput d;
  ASSERT_TRUE(model.forward(std::span(&dec, 1), *cache, &d).ok());
  Sampler sampler(SamplingParams{.temperature = 0.0f});
  sampler.sample(d.last(0));
  EXPECT_EQ(set_kernel_observer(nullptr), &obs);

  const int L = int(model.config().num_hidden_layers);
  for (const char* per_layer :
       {"input_norm", "q_proj", "k_proj", "v_proj", "rope_q", "rope_k", "attention", "o_proj",
        "post_attention_norm", "gate_proj", "up_proj", "swiglu", "down_proj"}) {
    EXPECT_EQ(obs.calls[per_layer], 2 * L) << per_layer;  // one prefill step + one decode step
  }
  for (const char* once : {"embedding", "final_norm", "lm_head", "forward"})
    EXPECT_EQ(obs.calls[once], 2) << once;
  EXPECT_EQ(obs.calls["sampling"], 1);
  EXPECT_EQ(obs.phase["q_proj"], Phase::kDecode);  // the last call was the decode step
  EXPECT_EQ(obs.rows["q_proj"], 1);
  EXPECT_GT(obs.ns, 0);
  // Observing changes nothing: the same prompt gave the same logits with and without it.
  EXPECT_EQ(plain.logits, seen.logits);

  // Removed: silent again.
  const int before = obs.calls["q_proj"];
  ASSERT_TRUE(model.forward(std::span(&dec, 1), *cache, &d).ok());
  EXPECT_EQ(obs.calls["q_proj"], before);
}

}  // namespace
}  // namespace plumb::engine
