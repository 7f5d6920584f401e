// engine/engine.h is enough on its own: load a model, generate, and serve the same request through
// the runner factory; generate() and the serving engine are one loop, so their tokens agree.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace plumb {
namespace {

const std::string kTiny = std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny";

TEST(EngineHeader, GenerateAndTheServingEngineGiveTheSameTokens) {
  engine::ModelOptions o;
  o.threads = 1;
  auto a = engine::Model::load(kTiny, o);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto tok = engine::Tokenizer::load(kTiny);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::vector<int32_t> prompt = (*tok)->encode("Once upon a time", true);

  engine::GenerateOptions g;
  g.sampling.temperature = 0;
  g.sampling.max_tokens = 12;
  g.sampling.ignore_eos = true;
  auto generated = engine::generate(**a, prompt, g, nullptr, nullptr);
  ASSERT_TRUE(generated.ok()) << generated.status().to_string();
  ASSERT_EQ(generated->tokens.size(), 12u);

  auto b = engine::Model::load(kTiny, o);
  ASSERT_TRUE(b.ok());
  auto device = scheduler::parse_device("cpu");
  ASSERT_TRUE(device.ok());
  auto runner = scheduler::make_runner(*device, std::move(b).value(), "tiny");
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  auto served = scheduler::LlmEngine::create(scheduler::LlmEngineConfig{}, std::move(runner).value(),
                                             scheduler::LlmEngine::Mode::kManual);
  ASSERT_TRUE(served.ok()) << served.status().to_string();
  std::vector<int32_t> tokens;
  bool finished = false;
  scheduler::GenerationRequest req;
  req.prompt = prompt;
  req.sampling = g.sampling;
  req.sink = [&](scheduler::TokenEvent&& ev) {
    tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
    finished = finished || ev.finished;
  };
  ASSERT_TRUE((*served)->submit(std::move(req)).ok());
  while (!finished && (*served)->step()) {
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(tokens, generated->tokens);
}

}  // namespace
}  // namespace plumb
