// Black-box tests of `plumb serve`: the real binary on a free port with the shipped small model
// (models/plumb-tiny), talked to over HTTP exactly as a client would.
//
// Greedy-equality tolerance: the reference engine computes every sequence's rows independently of
// the others in the batch (per-token matmul rows, per-sequence attention), so greedy output is
// required to be IDENTICAL (same text) alone, in a batch of 16 mixed prefill/decode requests, and
// after preemption; no tolerance is applied.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "server/serve_helpers.h"

namespace plumb::testing {
namespace {

std::string tiny_model() { return std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny"; }

std::string completion_body(const std::string& prompt, int max_tokens, const std::string& extra = "") {
  json::object o;
  o["model"] = "plumb-tiny";
  o["prompt"] = prompt;
  o["max_tokens"] = max_tokens;
  o["temperature"] = 0;
  o["ignore_eos"] = true;
  std::string s = json::dump(o);
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

// Text of a streamed response (completions or chat) and its payloads.
std::string stream_text(const std::vector<std::string>& data) {
  std::string t;
  for (const auto& d : data) {
    if (d == "[DONE]") continue;
    auto o = obj(d);
    if (!o.contains("choices")) continue;
    for (const auto& c : o.at("choices").as_array()) {
      const auto& co = c.as_object();
      if (co.contains("text")) t += std::string(co.at("text").as_string());
      if (co.contains("delta") && co.at("delta").as_object().contains("content")) {
        t += std::string(co.at("delta").as_object().at("content").as_string());
      }
    }
  }
  return t;
}

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServeProcess();
    std::string err;
    ok_ =
        server_->start({"--model", tiny_model(), "--max-num-seqs", "16", "--kv-cache-tokens", "16384"}, &err);
    if (!ok_) error_ = err;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << error_; }
  uint16_t port() const { return server_->port(); }

  static ServeProcess* server_;
  static bool ok_;
  static std::string error_;
};
ServeProcess* Serve::server_ = nullptr;
bool Serve::ok_ = false;
std::string Serve::error_;

TEST_F(Serve, ModelsAndHealth) {
  auto r = http(port(), "GET", "/v1/models");
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = obj(r.body);
  EXPECT_EQ(o.at("object").as_string(), "list");
  const auto& m = o.at("data").as_array().at(0).as_object();
  EXPECT_EQ(m.at("id").as_string(), "plumb-tiny");
  EXPECT_EQ(m.at("max_model_len").as_int64(), 512);
  // The effective settings are reported.
  EXPECT_EQ(m.at("plumb").as_object().at("settings").as_object().at("max_num_seqs").as_int64(), 16);
  auto h = http(port(), "GET", "/health");
  ASSERT_EQ(h.status, 200);
  EXPECT_EQ(obj(h.body).at("status").as_string(), "ok");
  auto nf = http(port(), "GET", "/nope");
  EXPECT_EQ(nf.status, 404);
  EXPECT_TRUE(obj(nf.body).contains("error"));
}

TEST_F(Serve, CompletionUsageAndTimings) {
  auto tk = http(port(), "POST", "/tokenize", R"({"prompt": "Once upon a time"})");
  ASSERT_EQ(tk.status, 200) << tk.body;
  int64_t n_prompt = obj(tk.body).at("count").as_int64();
  auto r = http(port(), "POST", "/v1/completions", completion_body("Once upon a time", 12));
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = obj(r.body);
  EXPECT_EQ(o.at("object").as_string(), "text_completion");
  EXPECT_EQ(o.at("usage").as_object().at("prompt_tokens").as_int64(), n_prompt);
  EXPECT_EQ(o.at("usage").as_object().at("completion_tokens").as_int64(), 12);
  EXPECT_EQ(o.at("usage").as_object().at("total_tokens").as_int64(), n_prompt + 12);
  EXPECT_EQ(o.at("choices").as_array().at(0).as_object().at("finish_reason").as_string(), "length");
  const auto& t = o.at("plumb_timings").as_object();
  for (const char* k : {"queue_ms", "prefill_ms", "decode_ms"}) EXPECT_GE(t.at(k).as_double(), 0.0) << k;
  EXPECT_EQ(t.at("completion_tokens").as_int64(), 12);
  EXPECT_EQ(t.at("prompt_tokens").as_int64(), n_prompt);
  // Detokenize the tokenized prompt back.
  json::object d;
  d["tokens"] = obj(tk.body).at("tokens");
  auto dt = http(port(), "POST", "/detokenize", json::dump(d));
  ASSERT_EQ(dt.status, 200);
  EXPECT_NE(std::string(obj(dt.body).at("prompt").as_string()).find("Once upon a time"), std::string::npos);
}

TEST_F(Serve, StreamEqualsNonStream) {
  auto whole = http(port(), "POST", "/v1/completions", completion_body("The little dog", 20));
  ASSERT_EQ(whole.status, 200);
  auto s = http(
      port(), "POST", "/v1/completions",
      completion_body("The little dog", 20, R"("stream": true, "stream_options": {"include_usage": true})"));
  ASSERT_EQ(s.status, 200);
  EXPECT_NE(s.headers.find("text/event-stream"), std::string::npos);
  auto data = sse_data(s.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(stream_text(data), text_of(whole));
  // The finishing chunk carries the timings; the usage chunk has no choices.
  auto usage = obj(data[data.size() - 2]);
  EXPECT_TRUE(usage.at("choices").as_array().empty());
  EXPECT_EQ(usage.at("usage").as_object().at("completion_tokens").as_int64(), 20);
  auto fin = obj(data[data.size() - 3]);
  EXPECT_EQ(fin.at("choices").as_array().at(0).as_object().at("finish_reason").as_string(), "length");
  EXPECT_TRUE(fin.contains("plumb_timings"));
}

TEST_F(Serve, ChatStreamAndNonStream) {
  std::string body =
      R"({"model": "plumb-tiny", "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 10,
          "temperature": 0, "ignore_eos": true)";
  auto r = http(port(), "POST", "/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = obj(r.body);
  EXPECT_EQ(o.at("object").as_string(), "chat.completion");
  EXPECT_EQ(o.at("choices").as_array().at(0).as_object().at("message").as_object().at("role").as_string(),
            "assistant");
  auto s = http(port(), "POST", "/v1/chat/completions", body + R"(, "stream": true})");
  auto data = sse_data(s.body);
  ASSERT_GE(data.size(), 3u);
  auto first = obj(data[0]);
  EXPECT_EQ(first.at("object").as_string(), "chat.completion.chunk");
  EXPECT_EQ(first.at("choices").as_array().at(0).as_object().at("delta").as_object().at("role").as_string(),
            "assistant");
  EXPECT_EQ(stream_text(data), text_of(r));
}

TEST_F(Serve, StopStringsCutTheText) {
  auto whole = http(port(), "POST", "/v1/completions", completion_body("Once upon a time", 30));
  std::string full = text_of(whole);
  ASSERT_GT(full.size(), 12u);
  // A stop string from the middle of the greedy text: the output is everything before it.
  std::string stop = full.substr(full.size() / 2, 3);
  size_t at = full.find(stop);
  json::array stops;
  stops.push_back(json::value(stop));
  stops.push_back(json::value("zzzz-never"));
  for (bool stream : {false, true}) {
    std::string extra = "\"stop\": " + json::dump(stops) + (stream ? ", \"stream\": true" : "");
    auto r = http(port(), "POST", "/v1/completions", completion_body("Once upon a time", 30, extra));
    ASSERT_EQ(r.status, 200) << r.body;
    if (stream) {
      auto data = sse_data(r.body);
      EXPECT_EQ(stream_text(data), full.substr(0, at));
      EXPECT_EQ(obj(data[data.size() - 2])
                    .at("choices")
                    .as_array()
                    .at(0)
                    .as_object()
                    .at("finish_reason")
                    .as_string(),
                "stop");
    } else {
      EXPECT_EQ(text_of(r), full.substr(0, at));
      auto o = obj(r.body);
      EXPECT_EQ(o.at("choices").as_array().at(0).as_object().at("finish_reason").as_string(), "stop");
      EXPECT_LT(o.at("usage").as_object().at("completion_tokens").as_int64(), 30);
    }
  }
}

// A client's stop_token_ids end the output under ignore_eos: logit_bias forces token 7 at every
// step, so without the stop id the output is 12 of them, with it one, finish_reason "stop".
TEST_F(Serve, ClientStopTokenIdsEndTheOutputUnderIgnoreEos) {
  const std::string force = "\"logit_bias\": {\"7\": 100}";
  auto free_run = http(port(), "POST", "/v1/completions", completion_body("Once upon a time", 12, force));
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  auto o = obj(free_run.body);
  EXPECT_EQ(o.at("usage").as_object().at("completion_tokens").as_int64(), 12);
  EXPECT_EQ(o.at("choices").as_array().at(0).as_object().at("finish_reason").as_string(), "length");
  auto stopped = http(port(), "POST", "/v1/completions",
                      completion_body("Once upon a time", 12, force + ", \"stop_token_ids\": [7]"));
  ASSERT_EQ(stopped.status, 200) << stopped.body;
  o = obj(stopped.body);
  EXPECT_EQ(o.at("usage").as_object().at("completion_tokens").as_int64(), 1);
  EXPECT_EQ(o.at("choices").as_array().at(0).as_object().at("finish_reason").as_string(), "stop");
  auto bad = http(port(), "POST", "/v1/completions", completion_body("a", 4, "\"stop_token_ids\": [-3]"));
  EXPECT_EQ(bad.status, 400) << bad.body;
}

TEST_F(Serve, SeedsAreReproducible) {
  std::string body = R"({"model": "plumb-tiny", "prompt": "A cat", "max_tokens": 16, "temperature": 1.0,
                         "ignore_eos": true, "seed": )";
  auto a = http(port(), "POST", "/v1/completions", body + "7}");
  auto b = http(port(), "POST", "/v1/completions", body + "7}");
  auto c = http(port(), "POST", "/v1/completions", body + "8}");
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(text_of(a), text_of(b));
  EXPECT_NE(text_of(a), text_of(c));
}

TEST_F(Serve, GreedyMatchesPlumbGenerate) {
  auto gen =
      run_capture({PLUMB_BINARY, "--log-level", "warn", "generate", "--model", tiny_model(), "--prompt",
                   "Once upon a time", "--max-tokens", "16", "--temperature", "0", "--ignore-eos"});
  ASSERT_TRUE(gen.ok());
  ASSERT_TRUE(gen->exit.exited && gen->exit.exit_code == 0) << gen->out;
  std::string gen_text = gen->out.substr(0, gen->out.find("\n---\n"));
  auto r = http(port(), "POST", "/v1/completions", completion_body("Once upon a time", 16));
  EXPECT_EQ(text_of(r), gen_text);
}

TEST_F(Serve, GreedyAloneEqualsGreedyInABatchOf16) {
  std::vector<std::string> prompts;
  for (int i = 0; i < 16; ++i) {
    std::string p = "Story number " + std::to_string(i) + ":";
    for (int k = 0; k < i * 3; ++k) p += " and then";  // mixed prompt lengths: prefill next to decode
    prompts.push_back(p);
  }
  std::vector<std::string> alone(16), batched(16);
  for (int i = 0; i < 16; ++i)
    alone[size_t(i)] =
        text_of(http(port(), "POST", "/v1/completions", completion_body(prompts[size_t(i)], 8 + i)));
  std::vector<std::thread> ts;
  for (int i = 0; i < 16; ++i) {
    ts.emplace_back([&, i] {
      batched[size_t(i)] =
          text_of(http(port(), "POST", "/v1/completions", completion_body(prompts[size_t(i)], 8 + i)));
    });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(batched[size_t(i)], alone[size_t(i)]) << "request " << i;
}

TEST_F(Serve, BadRequestsGetOpenAiErrors) {
  struct Case {
    std::string path, body;
    int status;
    std::string param;
  };
  std::string big;
  for (int i = 0; i < 700; ++i) big += " word";
  std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", "[1, 2]", 400, ""},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "n": 2})", 400, "n"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "stop": 5})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
      {"/v1/completions", R"({"prompt": [1, 99999999]})", 400, "prompt"},
      {"/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"/v1/completions", R"({"model": "gpt-4", "prompt": "x"})", 404, "model"},
      {"/v1/completions", "{\"prompt\": \"" + big + "\", \"max_tokens\": 1}", 400, "prompt"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", 400,
       "top_logprobs"},
      {"/tokenize", "{", 400, ""},
      {"/detokenize", R"({"tokens": ["a"]})", 400, "tokens"},
  };
  for (const auto& c : cases) {
    auto r = http(port(), "POST", c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    auto o = obj(r.body);
    ASSERT_TRUE(o.contains("error")) << r.body;
    const auto& e = o.at("error").as_object();
    for (const char* k : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(e.contains(k)) << k << " in " << r.body;
    }
    EXPECT_FALSE(std::string(e.at("message").as_string()).empty());
    if (!c.param.empty()) {
      EXPECT_EQ(e.at("param").as_string(), c.param) << r.body;
    }
  }
  // The too-long prompt says why.
  auto r = http(port(), "POST", "/v1/completions", "{\"prompt\": \"" + big + "\", \"max_tokens\": 1}");
  EXPECT_NE(r.body.find("maximum context length is 512"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("context_length_exceeded"), std::string::npos);
  // Unknown fields are ignored.
  auto ok = http(port(), "POST", "/v1/completions", completion_body("x", 2, R"("frobnicate": {"a": 1})"));
  EXPECT_EQ(ok.status, 200) << ok.body;
  // Still healthy.
  EXPECT_EQ(http(port(), "GET", "/health").status, 200);
}

TEST_F(Serve, LogprobsAndEcho) {
  auto r = http(port(), "POST", "/v1/completions",
                completion_body("Once upon a time", 4, R"("logprobs": 2, "echo": true)"));
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = obj(r.body);
  const auto& c = o.at("choices").as_array().at(0).as_object();
  EXPECT_EQ(std::string(c.at("text").as_string()).rfind("Once upon a time", 0), 0u);
  const auto& lp = c.at("logprobs").as_object();
  int64_t n_prompt = o.at("usage").as_object().at("prompt_tokens").as_int64();
  ASSERT_EQ(int64_t(lp.at("tokens").as_array().size()), n_prompt + 4);
  EXPECT_TRUE(lp.at("token_logprobs").as_array().at(0).is_null());
  for (size_t i = 1; i < lp.at("token_logprobs").as_array().size(); ++i) {
    EXPECT_LE(lp.at("token_logprobs").as_array()[i].as_double(), 0.0);
  }
  // Streamed: the first chunk carries the prompt and its logprobs (as vLLM does), identical to the
  // non-streamed ones; the generated tokens' entries follow in later chunks.
  auto sr = http(port(), "POST", "/v1/completions",
                 completion_body("Once upon a time", 4, R"("logprobs": 2, "echo": true, "stream": true)"));
  ASSERT_EQ(sr.status, 200) << sr.body;
  auto sdata = sse_data(sr.body);
  ASSERT_GE(sdata.size(), 3u) << sr.body;
  const auto first_chunk = obj(sdata[0]);
  ASSERT_TRUE(first_chunk.contains("choices")) << sdata[0];
  const auto& first = first_chunk.at("choices").as_array().at(0).as_object();
  EXPECT_EQ(first.at("text").as_string(), "Once upon a time");
  ASSERT_TRUE(first.at("logprobs").is_object()) << sdata[0];
  const auto& flp = first.at("logprobs").as_object();
  ASSERT_EQ(int64_t(flp.at("tokens").as_array().size()), n_prompt) << sdata[0];
  EXPECT_TRUE(flp.at("token_logprobs").as_array().at(0).is_null());
  for (int64_t i = 0; i < n_prompt; ++i) {
    EXPECT_EQ(flp.at("tokens").as_array()[size_t(i)], lp.at("tokens").as_array()[size_t(i)]) << i;
    if (i > 0) {
      EXPECT_NEAR(flp.at("token_logprobs").as_array()[size_t(i)].as_double(),
                  lp.at("token_logprobs").as_array()[size_t(i)].as_double(), 1e-6)
          << i;
      EXPECT_EQ(flp.at("top_logprobs").as_array()[size_t(i)].as_object().size(), 2u) << i;
    }
  }
  size_t generated_entries = 0;
  for (size_t k = 1; k < sdata.size(); ++k) {
    if (sdata[k] == "[DONE]") continue;
    auto chunk = obj(sdata[k]);
    if (!chunk.contains("choices") || chunk.at("choices").as_array().empty()) continue;
    const auto& ch = chunk.at("choices").as_array().at(0).as_object();
    if (ch.at("logprobs").is_object()) {
      generated_entries += ch.at("logprobs").as_object().at("tokens").as_array().size();
    }
  }
  EXPECT_EQ(generated_entries, 4u);
  EXPECT_EQ(stream_text(sdata), text_of(r));

  auto chat = http(port(), "POST", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0,
                       "ignore_eos": true, "logprobs": true, "top_logprobs": 2})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  auto chat_o = obj(chat.body);
  const auto& content =
      chat_o.at("choices").as_array().at(0).as_object().at("logprobs").as_object().at("content").as_array();
  ASSERT_EQ(content.size(), 3u);
  // Greedy: the chosen token is the most likely alternative.
  const auto& e0 = content[0].as_object();
  EXPECT_EQ(e0.at("top_logprobs").as_array().size(), 2u);
  EXPECT_DOUBLE_EQ(e0.at("logprob").as_double(),
                   e0.at("top_logprobs").as_array()[0].as_object().at("logprob").as_double());
}

TEST_F(Serve, VanishingClientsAreCancelledAndFreeTheirBlocks) {
  for (int i = 0; i < 8; ++i) {
    int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    send_all(fd,
             request_text("POST", "/v1/completions", completion_body("Run away", 400, R"("stream": true)")));
    char buf[512];
    ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);  // the stream started
    ::close(fd);
  }
  // The streams start (response head) before the engine schedules them, so wait for the cancels.
  std::string m;
  for (int tries = 0; tries < 1000; ++tries) {
    m = http(port(), "GET", "/metrics").body;
    if (metric(m, "plumb:request_cancelled_total") >= 8 && metric(m, "plumb:num_requests_running") == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(metric(m, "plumb:num_requests_running"), 0) << m;
  EXPECT_EQ(metric(m, "plumb:kv_cache_usage_perc"), 0) << m;
  EXPECT_GE(metric(m, "plumb:request_cancelled_total"), 8) << m;
  // 400 tokens each would take far longer than the wait above, so they really were cut short.
  EXPECT_EQ(http(port(), "POST", "/v1/completions", completion_body("Still here", 2)).status, 200);
}

TEST_F(Serve, MetricsArePrometheusText) {
  auto r = http(port(), "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  for (const char* name :
       {"plumb:num_requests_running", "plumb:num_requests_waiting", "plumb:kv_cache_usage_perc",
        "plumb:prefix_cache_hit_rate", "plumb:prompt_tokens_total", "plumb:generation_tokens_total",
        "plumb:num_preemptions_total", "plumb:time_to_first_token_seconds_count",
        "plumb:time_per_output_token_seconds_count", "plumb:e2e_request_latency_seconds_count"}) {
    EXPECT_GE(metric(r.body, name), 0) << name;
  }
  EXPECT_NE(r.body.find("# TYPE plumb:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(r.body.find("le=\"+Inf\""), std::string::npos);
}

// A server with a tiny KV cache and one running sequence: preemption and a full queue.
TEST(ServeLimits, KvExhaustionPreemptsWithoutChangingAnswers) {
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(s.start(
      {"--model", tiny_model(), "--kv-cache-tokens", "320", "--kv-block-size", "16", "--max-num-seqs", "8"},
      &err))
      << err;
  std::vector<std::string> prompts, alone(6), together(6);
  for (int i = 0; i < 6; ++i) prompts.push_back("Tale " + std::to_string(i) + " begins with a small fox");
  for (int i = 0; i < 6; ++i) {
    alone[size_t(i)] =
        text_of(http(s.port(), "POST", "/v1/completions", completion_body(prompts[size_t(i)], 120)));
  }
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i) {
    ts.emplace_back([&, i] {
      together[size_t(i)] =
          text_of(http(s.port(), "POST", "/v1/completions", completion_body(prompts[size_t(i)], 120)));
    });
  }
  for (auto& t : ts) t.join();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(together[size_t(i)], alone[size_t(i)]) << i;
  auto m = http(s.port(), "GET", "/metrics").body;
  EXPECT_GT(metric(m, "plumb:num_preemptions_total"), 0) << m;
  EXPECT_EQ(metric(m, "plumb:kv_cache_usage_perc"), 0) << m;
  EXPECT_EQ(metric(m, "plumb:kv_cache_blocks_used"), 0) << m;
  // And it still answers as before.
  EXPECT_EQ(text_of(http(s.port(), "POST", "/v1/completions", completion_body(prompts[0], 120))), alone[0]);
}

TEST(ServeLimits, FullQueueAnswers429) {
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(s.start({"--model", tiny_model(), "--max-num-seqs", "1", "--max-queue", "1"}, &err)) << err;
  std::vector<int> status(4);
  std::vector<std::string> bodies(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&, i] {
      auto r = http(s.port(), "POST", "/v1/completions", completion_body("Wait your turn", 200));
      status[size_t(i)] = r.status;
      bodies[size_t(i)] = r.body;
    });
  }
  for (auto& t : ts) t.join();
  int n429 = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(status[size_t(i)] == 200 || status[size_t(i)] == 429) << status[size_t(i)];
    if (status[size_t(i)] == 429) {
      n429++;
      EXPECT_NE(bodies[size_t(i)].find("queue_full"), std::string::npos);
    }
  }
  // One runs, one waits: at least two of four are refused.
  EXPECT_GE(n429, 2);
  EXPECT_EQ(http(s.port(), "POST", "/v1/completions", completion_body("After", 2)).status, 200);
  // Refused requests hold nothing.
  std::string m = wait_until_idle(s.port());
  EXPECT_EQ(metric(m, "plumb:kv_cache_blocks_used"), 0) << m;
  EXPECT_GE(metric(m, "plumb:request_rejected_total"), 2) << m;
}

TEST(ServeSynthetic, StreamFollowsTheConfiguredSchedule) {
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(s.start({"--model", tiny_model(), "--engine", "synthetic", "--ttft-ms", "30", "--itl-ms", "5",
                       "--tokens-per-chunk", "2"},
                      &err))
      << err;
  auto r = http(
      s.port(), "POST", "/v1/completions",
      R"({"prompt": "hello", "max_tokens": 10, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto data = sse_data(r.body);
  // 5 chunks of 2 tokens (text pieces may merge or hold back, so count chunks with text or logprobs
  // loosely), the finishing chunk, the usage chunk, [DONE].
  ASSERT_GE(data.size(), 4u);
  EXPECT_EQ(data.back(), "[DONE]");
  auto usage = obj(data[data.size() - 2]);
  EXPECT_EQ(usage.at("usage").as_object().at("completion_tokens").as_int64(), 10);
  const auto& t = usage.at("plumb_timings").as_object();
  // The engine never delivers before its plan: the first chunk >= 30 ms after arrival, the last
  // >= 30 + 4 * 5 ms (a late first chunk may shorten decode_ms, so only the sum is bounded).
  EXPECT_GE(t.at("prefill_ms").as_double(), 30.0);
  EXPECT_GE(t.at("prefill_ms").as_double() + t.at("decode_ms").as_double(), 50.0);
  EXPECT_EQ(t.at("queue_ms").as_double(), 0.0);
  EXPECT_FALSE(stream_text(data).empty());
}

// --launch-jitter outside [0, 1) is a usage error naming the flag, before anything is served.
TEST(ServeSynthetic, LaunchJitterOutOfRangeIsAUsageError) {
  for (const char* bad : {"1", "1.5", "-0.1"}) {
    auto r = run_capture({"sh", "-c",
                          std::string("'") + PLUMB_BINARY + "' serve --port 0 --model '" + tiny_model() +
                              "' --engine synthetic --launch-jitter " + bad + " 2>&1"});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(r->exit.exited);
    EXPECT_EQ(r->exit.exit_code, 2) << bad << ": " << r->out;
    EXPECT_NE(r->out.find("--launch-jitter must be in [0, 1)"), std::string::npos) << bad << ": " << r->out;
  }
}

TEST(ServeSynthetic, SigtermDrainsRunningStreamsThenExitsZero) {
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(
      s.start({"--model", tiny_model(), "--engine", "synthetic", "--ttft-ms", "5", "--itl-ms", "10"}, &err))
      << err;
  int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  send_all(fd,
           request_text("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 30, "stream": true})"));
  std::string raw;
  char buf[4096];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ASSERT_GT(n, 0);
  raw.append(buf, size_t(n));
  ::kill(s.process().pid(), SIGTERM);
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, size_t(n));
  ::close(fd);
  auto reply = parse_reply(raw);
  auto data = sse_data(reply.body);
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(data.back(), "[DONE]");  // the running stream finished
  auto exit = s.process().wait_for(std::chrono::seconds(20));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->exited);
  EXPECT_EQ(exit->exit_code, 0);
}

}  // namespace
}  // namespace plumb::testing
