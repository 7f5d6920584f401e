#include "engine/model_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <numbers>

#include "core/json.h"

namespace plumb::engine {
namespace {

std::string shipped(const std::string& name) {
  return std::string(PLUMB_SOURCE_DIR) + "/models/configs/" + name + "/config.json";
}

constexpr const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 16, "intermediate_size": 40,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": [2, 3], "torch_dtype": "float32"})";

TEST(ModelConfig, ParsesLlamaFields) {
  auto c = parse_model_config(kTinyLlama);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Architecture::kLlama);
  EXPECT_EQ(c->vocab_size, 100);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->qk_norm);
  ASSERT_TRUE(c->bos_token_id.has_value());
  EXPECT_EQ(*c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c->rope_scaling.type, "default");
  EXPECT_EQ(c->max_context(), 64);
}

// Each shipped config against its published parameter count and head geometry.
struct Shipped {
  const char* name;
  Architecture arch;
  int64_t params;
  int64_t heads, kv_heads, head_dim, layers;
};

TEST(ModelConfig, ShippedConfigsMatchPublishedModels) {
  const Shipped all[] = {
      {"qwen2.5-0.5b", Architecture::kQwen2, 494032768, 14, 2, 64, 24},
      {"llama-3.2-1b", Architecture::kLlama, 1235814400, 32, 8, 64, 16},
      {"smollm2-135m", Architecture::kLlama, 134515008, 9, 3, 64, 30},
      {"tinyllama-1.1b", Architecture::kLlama, 1100048384, 32, 4, 64, 22},
      {"qwen3-0.6b", Architecture::kQwen3, 596049920, 16, 8, 128, 28},
      {"mistral-7b", Architecture::kMistral, 7241732096, 32, 8, 128, 32},
      {"llama-3-8b", Architecture::kLlama, 8030261248, 32, 8, 128, 32},
      {"llama-3-70b", Architecture::kLlama, 70553706496, 64, 8, 128, 80},
  };
  for (const auto& s : all) {
    SCOPED_TRACE(s.name);
    auto c = load_model_config(shipped(s.name));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->arch, s.arch);
    EXPECT_EQ(c->num_parameters(), s.params);
    EXPECT_EQ(c->num_attention_heads, s.heads);
    EXPECT_EQ(c->num_key_value_heads, s.kv_heads);
    EXPECT_EQ(c->head_dim, s.head_dim);
    EXPECT_EQ(c->num_hidden_layers, s.layers);
  }
}

TEST(ModelConfig, QwenAndMistralSpecifics) {
  auto q2 = load_model_config(shipped("qwen2.5-0.5b"));
  ASSERT_TRUE(q2.ok());
  EXPECT_TRUE(q2->attention_bias);
  EXPECT_FALSE(q2->qk_norm);
  EXPECT_EQ(q2->sliding_window, 0);  // use_sliding_window: false
  EXPECT_EQ(q2->max_context(), 32768);
  auto q3 = load_model_config(shipped("qwen3-0.6b"));
  ASSERT_TRUE(q3.ok());
  EXPECT_TRUE(q3->qk_norm);
  EXPECT_FALSE(q3->attention_bias);
  EXPECT_EQ(q3->eos_token_ids, (std::vector<int64_t>{151645}));
  auto m = load_model_config(shipped("mistral-7b"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_EQ(m->max_context(), 4096);
}

TEST(ModelConfig, DefaultInvFreq) {
  auto c = parse_model_config(kTinyLlama);
  ASSERT_TRUE(c.ok());
  auto inv = rope_inv_freq(*c);
  ASSERT_EQ(inv.size(), 2u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_FLOAT_EQ(inv[1], 0.01f);  // 1 / 10000^(2/4)
}

TEST(ModelConfig, Llama3RopeScalingMatchesTransformersFormula) {
  auto c = load_model_config(shipped("llama-3.2-1b"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  auto inv = rope_inv_freq(*c);
  ASSERT_EQ(inv.size(), 32u);
  // Recompute the three regimes independently in double: high frequencies untouched, low
  // frequencies divided by factor 32, the band between smoothly interpolated.
  int high = 0, low = 0, mid = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    double base = 1.0 / std::pow(500000.0, double(2 * i) / 64.0);
    double wavelen = 2 * std::numbers::pi / base;
    double expect;
    if (wavelen < 8192.0 / 4.0) {
      expect = base;
      ++high;
    } else if (wavelen > 8192.0 / 1.0) {
      expect = base / 32.0;
      ++low;
    } else {
      double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      expect = (1 - smooth) * base / 32.0 + smooth * base;
      ++mid;
    }
    EXPECT_NEAR(inv[i], expect, 1e-5 * expect) << "i=" << i;
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
}

TEST(ModelConfig, LinearRopeScalingDividesByFactor) {
  auto o = *json::parse_object(kTinyLlama);
  o["rope_scaling"] = json::object{{"type", "linear"}, {"factor", 4.0}};
  auto c = parse_model_config(json::dump(o));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto inv = rope_inv_freq(*c);
  EXPECT_FLOAT_EQ(inv[0], 0.25f);
}

Status parse_modified(const std::function<void(json::object&)>& edit) {
  auto o = *json::parse_object(kTinyLlama);
  edit(o);
  return parse_model_config(json::dump(o)).status();
}

TEST(ModelConfig, ErrorsNameTheField) {
  struct Case {
    std::function<void(json::object&)> edit;
    Code code;
    const char* needle;
  };
  const Case cases[] = {
      {[](json::object& o) { o.erase("hidden_size"); }, Code::kInvalidArgument, "'hidden_size'"},
      {[](json::object& o) { o["vocab_size"] = "big"; }, Code::kInvalidArgument, "'vocab_size'"},
      {[](json::object& o) { o["num_hidden_layers"] = 0; }, Code::kInvalidArgument, "'num_hidden_layers'"},
      {[](json::object& o) { o["num_key_value_heads"] = 3; }, Code::kInvalidArgument,
       "'num_key_value_heads'"},
      {[](json::object& o) { o["hidden_size"] = 18; }, Code::kInvalidArgument, "hidden_size (18)"},
      {[](json::object& o) { o["architectures"] = json::array{"GPT2LMHeadModel"}; }, Code::kUnimplemented,
       "GPT2LMHeadModel"},
      {[](json::object& o) { o.erase("architectures"); }, Code::kInvalidArgument, "'architectures'"},
      {[](json::object& o) { o["hidden_act"] = "gelu"; }, Code::kUnimplemented, "'hidden_act'"},
      {[](json::object& o) { o["eos_token_id"] = 100; }, Code::kInvalidArgument, "'eos_token_id'"},
      {[](json::object& o) {
         o["rope_scaling"] = json::object{{"rope_type", "yarn"}, {"factor", 2.0}};
       },
       Code::kUnimplemented, "yarn"},
      {[](json::object& o) {
         o["rope_scaling"] = json::object{{"rope_type", "llama3"}, {"factor", 8.0}};
       },
       Code::kInvalidArgument, "low_freq_factor"},
      {[](json::object& o) { o["head_dim"] = 5; }, Code::kInvalidArgument, "'head_dim'"},
      {[](json::object& o) { o["rope_theta"] = 1e39; }, Code::kInvalidArgument, "'rope_theta'"},
  };
  for (const auto& c : cases) {
    Status s = parse_modified(c.edit);
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
  EXPECT_EQ(parse_model_config("{not json").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(load_model_config("/nonexistent/config.json").status().code(), Code::kNotFound);
}

TEST(ModelConfig, ResolvesShippedNamesThroughEnv) {
  ::setenv("PLUMB_MODELS_DIR", (std::string(PLUMB_SOURCE_DIR) + "/models").c_str(), 1);
  auto p = resolve_model_config("smollm2-135m");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_NE(p->find("models/configs/smollm2-135m/config.json"), std::string::npos);
  auto missing = resolve_model_config("no-such-model");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-model"), std::string::npos);
  EXPECT_EQ(resolve_model_config("../etc").status().code(), Code::kInvalidArgument);
  ::unsetenv("PLUMB_MODELS_DIR");
}

}  // namespace
}  // namespace plumb::engine
