// The OpenAI target against a fake OpenAI server (net::HttpServer) that streams scripted SSE:
// good streams are measured fully and every fault lands in its own failure category.
#include "loadgen/openai_target.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <future>
#include <mutex>

#include "loadgen/driver.h"
#include "metrics/metrics.h"
#include "net/http_server.h"
#include "net/sse.h"

namespace plumb::loadgen {
namespace {

using workload::Request;

TEST(OpenAiBody, ChatAndCompletions) {
  Request chat;
  chat.messages = {{"user", "hi"}};
  chat.max_tokens = 7;
  chat.temperature = 0.5;
  auto b = openai_request_body(chat, Api::kChat, "m");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b,
            R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":7,"temperature":5E-1,)"
            R"("ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})");
  Request comp;
  comp.prompt = "once";
  comp.max_tokens = 3;
  comp.stream = false;
  auto c = openai_request_body(comp, Api::kCompletions, "");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, R"({"prompt":"once","max_tokens":3,"temperature":0E0,"ignore_eos":true,"stream":false})");
  EXPECT_FALSE(openai_request_body(comp, Api::kChat, "").ok());
  EXPECT_FALSE(openai_request_body(chat, Api::kCompletions, "").ok());
  auto shown = openai_request_body(comp, Api::kCompletions, "", /*show_special_tokens=*/true);
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(
      *shown,
      R"({"prompt":"once","max_tokens":3,"temperature":0E0,"ignore_eos":true,"skip_special_tokens":false,)"
      R"("stream":false})");
}

TEST(OpenAiEvents, ParsesContentUsageDoneAndErrors) {
  auto e = parse_stream_event(R"({"choices":[{"index":0,"delta":{"content":"He"},"finish_reason":null}]})",
                              Api::kChat);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->has_content);
  EXPECT_EQ(e->text, "He");
  EXPECT_FALSE(e->finished);
  auto role = parse_stream_event(R"({"choices":[{"delta":{"role":"assistant"}}]})", Api::kChat);
  ASSERT_TRUE(role.ok());
  EXPECT_FALSE(role->has_content);
  auto u =
      parse_stream_event(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}})", Api::kChat);
  ASSERT_TRUE(u.ok());
  ASSERT_TRUE(u->usage.has_value());
  EXPECT_EQ(u->usage->prompt_tokens, 5);
  EXPECT_EQ(u->usage->completion_tokens, 9);
  auto t = parse_stream_event(R"({"choices":[{"text":"x","finish_reason":"length"}]})", Api::kCompletions);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->text, "x");
  EXPECT_TRUE(t->finished);
  EXPECT_TRUE(parse_stream_event("[DONE]", Api::kChat)->done);
  EXPECT_EQ(parse_stream_event("{oops", Api::kChat).status().code(), Code::kCorrupt);
  EXPECT_FALSE(parse_stream_event(R"({"error":{"message":"boom"}})", Api::kChat).ok());
  EXPECT_FALSE(parse_stream_event(R"({"choices":3})", Api::kChat).ok());
  EXPECT_FALSE(parse_stream_event(R"({"choices":[{"delta":{"content":5}}]})", Api::kChat).ok());
}

// The final chunk of llama.cpp's llama-server (c392e50, to_json_oaicompat_chat_stream): finish_reason,
// usage and "timings" in one object. Its predicted_ms runs from the first token to the last, so the
// server's TPOT is predicted_ms / (predicted_n - 1), not its predicted_per_token_ms.
constexpr const char* kLlamaCppFinalChunk =
    R"({"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1733000000,)"
    R"("id":"chatcmpl-x","model":"gpt-3.5-turbo","system_fingerprint":"b4753-c392e50",)"
    R"("object":"chat.completion.chunk","usage":{"completion_tokens":128,"prompt_tokens":1024,)"
    R"("total_tokens":1152},"timings":{"prompt_n":1024,"prompt_ms":110.5,"prompt_per_token_ms":0.1079,)"
    R"("prompt_per_second":9266.9,"predicted_n":128,"predicted_ms":1244.6,)"
    R"("predicted_per_token_ms":9.7234,"predicted_per_second":102.84}})";

TEST(OpenAiEvents, ReadsLlamaCppTimingsFromItsFinalChunk) {
  auto e = parse_stream_event(kLlamaCppFinalChunk, Api::kChat);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_TRUE(e->finished);
  ASSERT_TRUE(e->usage.has_value());
  ASSERT_TRUE(e->server_timings.has_value());
  const metrics::ServerTimings& t = *e->server_timings;
  EXPECT_EQ(t.source, metrics::ServerClock::kLlamaCpp);
  EXPECT_EQ(metrics::server_clock_name(t.source), "llama.cpp");
  EXPECT_DOUBLE_EQ(t.queue_ms, 0.0);  // llama.cpp reports no queue time
  EXPECT_DOUBLE_EQ(t.prefill_ms, 110.5);
  EXPECT_DOUBLE_EQ(t.decode_ms, 1244.6);
  EXPECT_EQ(t.completion_tokens, 128);
  EXPECT_DOUBLE_EQ(t.ttft_ms(), 110.5);
  EXPECT_DOUBLE_EQ(*t.tpot_ms(), 1244.6 / 127.0);
}

TEST(OpenAiEvents, ReadsPlumbTimingsAndSkipsWhatItCannotRead) {
  auto p = parse_stream_event(
      R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"plumb_timings":{"queue_ms":1.5,)"
      R"("prefill_ms":20,"decode_ms":70,"prompt_tokens":9,"completion_tokens":8,"cached_prompt_tokens":0,)"
      R"("preemptions":0}})",
      Api::kChat);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->server_timings.has_value());
  EXPECT_EQ(p->server_timings->source, metrics::ServerClock::kPlumb);
  EXPECT_DOUBLE_EQ(p->server_timings->ttft_ms(), 21.5);
  EXPECT_DOUBLE_EQ(*p->server_timings->tpot_ms(), 10.0);
  // Only an event that ends the response is read: a content chunk's timings object is not looked at.
  auto mid = parse_stream_event(
      R"({"choices":[{"delta":{"content":"a"},"finish_reason":null}],"timings":{"prompt_ms":1,)"
      R"("predicted_ms":1,"predicted_n":1}})",
      Api::kChat);
  ASSERT_TRUE(mid.ok());
  EXPECT_FALSE(mid->server_timings.has_value());
  // A timings object that cannot be read is skipped; the event (and the request) stays good.
  for (const char* bad :
       {R"({"prompt_ms":"fast","predicted_ms":1,"predicted_n":2})", R"({"prompt_ms":1,"predicted_n":2})",
        R"({"prompt_ms":-1,"predicted_ms":1,"predicted_n":2})"}) {
    auto b = parse_stream_event(
        std::string(R"({"choices":[{"delta":{},"finish_reason":"stop"}],"timings":)") + bad + "}",
        Api::kChat);
    ASSERT_TRUE(b.ok()) << bad;
    EXPECT_TRUE(b->finished);
    EXPECT_FALSE(b->server_timings.has_value()) << bad;
  }
  auto none = parse_stream_event(R"({"choices":[{"delta":{},"finish_reason":"stop"}]})", Api::kChat);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->server_timings.has_value());
}

// A fake OpenAI server. The user message picks the behaviour: "ok", "500", "400", "malformed",
// "nodone", "truncate", "stall".
class FakeServer {
 public:
  FakeServer() {
    server_.route(
        "POST", "/v1/chat/completions",
        [this](const net::Request& req, std::shared_ptr<net::ResponseWriter> w) {
          auto body = json::parse_object(req.body);
          std::string mode =
              std::string(body->at("messages").as_array()[0].as_object().at("content").as_string());
          int64_t n = body->at("max_tokens").as_int64();
          if (!body->at("stream").as_bool()) {
            w->send(
                200, "application/json",
                R"({"choices":[{"index":0,"message":{"role":"assistant","content":"a b c"},"finish_reason":"length"}],)"
                R"("usage":{"prompt_tokens":3,"completion_tokens":3}})");
            return;
          }
          if (mode == "500" || mode == "400") {
            int status = std::stoi(mode);
            w->send(status, "application/json", net::json_error_body(status, "scripted", "server_error"));
            return;
          }
          w->start_stream(200, "text/event-stream");
          w->write(net::sse_format_data(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})"));
          for (int64_t i = 0; i < n; ++i) {
            if (mode == "malformed" && i == 1) {
              w->write(net::sse_format_data("{not json"));
              w->end();
              return;
            }
            if ((mode == "truncate" || mode == "stall") && i == 2) {
              std::lock_guard<std::mutex> l(mu_);
              held_.push_back(w);  // keep the stream open (stall) or drop it unterminated (truncate)
              if (mode == "truncate") held_.pop_back();
              return;
            }
            w->write(net::sse_format_data(R"({"choices":[{"index":0,"delta":{"content":"t)" +
                                          std::to_string(i) + R"( "},"finish_reason":null}]})"));
          }
          if (mode == "llama") {  // llama-server's one final chunk: finish_reason, usage, timings
            w->write(net::sse_format_data(kLlamaCppFinalChunk));
            w->write(net::sse_format_data("[DONE]"));
            w->end();
            return;
          }
          w->write(net::sse_format_data(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})"));
          w->write(net::sse_format_data(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":)" +
                                        std::to_string(n) + "}}"));
          if (mode != "nodone") w->write(net::sse_format_data("[DONE]"));
          w->end();
        });
    EXPECT_TRUE(server_.start().ok());
  }
  ~FakeServer() {
    {
      std::lock_guard<std::mutex> l(mu_);
      held_.clear();
    }
    server_.stop(std::chrono::milliseconds(0));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }

 private:
  net::HttpServer server_;
  std::mutex mu_;
  std::vector<std::shared_ptr<net::ResponseWriter>> held_;
};

workload::RequestSet modes(const std::vector<std::string>& ms, int64_t max_tokens) {
  std::vector<Request> rs;
  for (const auto& m : ms) {
    Request r;
    r.messages = {{"user", m}};
    r.max_tokens = max_tokens;
    rs.push_back(r);
  }
  return *workload::make_request_set(std::move(rs));
}

TEST(OpenAiTarget, MeasuresGoodStreamsAndCategorizesEveryFault) {
  FakeServer server;
  // Short timeouts: the stall must end as a timeout, and nothing may hang the test.
  auto target = OpenAiTarget::create({.base_url = server.url(),
                                      .model = "fake",
                                      .first_byte_timeout = std::chrono::milliseconds(2000),
                                      .idle_timeout = std::chrono::milliseconds(300)});
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  auto set = modes({"ok", "500", "400", "malformed", "nodone", "truncate", "stall", "ok"}, 5);
  auto schedule = workload::make_schedule({.kind = workload::ArrivalKind::kBurst, .max_concurrency = 4},
                                          set.requests.size());
  auto run = run_load(set, *schedule, **target);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  using metrics::Failure;
  std::vector<Failure> want{Failure::kNone,       Failure::kHttp5xx, Failure::kHttp4xx, Failure::kMalformed,
                            Failure::kIncomplete, Failure::kReset,   Failure::kTimeout, Failure::kNone};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(run->requests[i].failure, want[i]) << i << ": " << run->requests[i].error;
  }
  for (size_t i : {0u, 7u}) {
    const auto& r = run->requests[i];
    ASSERT_TRUE(r.completed());
    EXPECT_EQ(r.chunks.size(), 5u);  // the role-only delta is not a content chunk
    EXPECT_EQ(r.local_output_tokens, 5);
    EXPECT_EQ(r.usage_output_tokens, 5);
    EXPECT_EQ(r.usage_prompt_tokens, 3);
    ASSERT_TRUE(r.first_byte && r.first_token && r.end);
    EXPECT_LE(*r.sent, *r.first_byte);
    EXPECT_LE(*r.first_byte, *r.first_token);
    EXPECT_LE(*r.first_token, *r.end);
  }
  EXPECT_EQ(run->requests[1].http_status, 500);
  EXPECT_EQ(run->requests[2].http_status, 400);
  EXPECT_LE(run->requests[5].chunks.size(), 2u);  // the server may close before flushing its queue
  EXPECT_EQ(run->target, "openai chat " + server.url() + " model=fake");
}

// set_realtime moves the IO thread, which delivers every callback, to SCHED_FIFO where this process
// may (and reports whether it did), and back to the policy it had.
TEST(OpenAiTarget, IoThreadTakesAndGivesBackRealtimePriority) {
  struct PolicySink final : StreamSink {
    int policy = -1;
    std::promise<void> done;
    void on_first_byte(SteadyTime) override {}
    void on_chunk(SteadyTime, int32_t, std::string_view) override {}
    void on_usage(const Usage&) override {}
    void on_end(SteadyTime) override {
      policy = sched_getscheduler(0);
      done.set_value();
    }
    void on_failure(SteadyTime, Failure, int, std::string) override {
      policy = sched_getscheduler(0);
      done.set_value();
    }
  };
  sched_param rt{}, old{};
  rt.sched_priority = sched_get_priority_min(SCHED_FIFO);
  const int before = sched_getscheduler(0);
  ASSERT_EQ(sched_getparam(0, &old), 0);
  const bool permitted = sched_setscheduler(0, SCHED_FIFO, &rt) == 0;  // is it ours to ask here?
  if (permitted) {
    ASSERT_EQ(sched_setscheduler(0, before, &old), 0);
  }

  FakeServer server;
  auto target = OpenAiTarget::create({.base_url = server.url(), .model = "fake"});
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  auto set = modes({"ok"}, 2);
  auto policy_of_one_request = [&] {
    PolicySink sink;
    auto done = sink.done.get_future();
    (*target)->send(set.requests[0], &sink);
    EXPECT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    return sink.policy;
  };
  EXPECT_EQ((*target)->set_realtime(true), permitted);
  EXPECT_EQ(policy_of_one_request(), permitted ? SCHED_FIFO : before);
  EXPECT_FALSE((*target)->set_realtime(false));
  EXPECT_EQ(policy_of_one_request(), before);
}

TEST(OpenAiTarget, RefusedConnectionsAreConnectFailures) {
  // Bind and stop a server to get a port with nothing listening.
  std::string url;
  {
    FakeServer s;
    url = s.url();
  }
  auto target = OpenAiTarget::create({.base_url = url});
  ASSERT_TRUE(target.ok());
  auto set = modes({"ok", "ok"}, 2);
  auto run = run_load(set, *workload::make_schedule({}, 2), **target);
  ASSERT_TRUE(run.ok());
  for (const auto& r : run->requests) EXPECT_EQ(r.failure, metrics::Failure::kConnect) << r.error;
}

TEST(OpenAiTarget, KeepAliveReusesConnections) {
  FakeServer server;
  auto target = OpenAiTarget::create({.base_url = server.url()});
  ASSERT_TRUE(target.ok());
  auto set = modes(std::vector<std::string>(20, "ok"), 3);
  auto run = run_load(
      set, *workload::make_schedule({.kind = workload::ArrivalKind::kClosedLoop, .max_concurrency = 2}, 20),
      **target);
  ASSERT_TRUE(run.ok());
  for (const auto& r : run->requests) EXPECT_TRUE(r.completed()) << r.error;
  EXPECT_LE((*target)->connections_opened(), 4u);  // 2 clients, not 20 connections
}

// keep_alive off: "Connection: close" on every request, so none reuses a connection (and prepare
// opens none ahead); each request records the connect it waited for.
TEST(OpenAiTarget, WithoutKeepAliveEachRequestOpensItsOwnConnection) {
  FakeServer server;
  auto target = OpenAiTarget::create({.base_url = server.url(), .keep_alive = false});
  ASSERT_TRUE(target.ok());
  (*target)->prepare(4);
  EXPECT_EQ((*target)->connections_opened(), 0u);
  auto set = modes(std::vector<std::string>(6, "ok"), 3);
  auto run = run_load(
      set, *workload::make_schedule({.kind = workload::ArrivalKind::kClosedLoop, .max_concurrency = 2}, 6),
      **target);
  ASSERT_TRUE(run.ok());
  for (const auto& r : run->requests) {
    EXPECT_TRUE(r.completed()) << r.error;
    EXPECT_TRUE(r.connect.has_value()) << r.index;
  }
  EXPECT_EQ((*target)->connections_opened(), 6u);
}

// Over a real socket, llama-server's final chunk reaches the request's record; a server that sends no
// timings leaves it empty.
TEST(OpenAiTarget, RecordsTheServerTimingsOfTheFinalChunk) {
  FakeServer server;
  auto target = OpenAiTarget::create({.base_url = server.url()});
  ASSERT_TRUE(target.ok());
  auto set = modes({"llama", "ok"}, 4);
  auto run = run_load(set, *workload::make_schedule({}, set.requests.size()), **target);
  ASSERT_TRUE(run.ok());
  const auto& llama = run->requests[0];
  ASSERT_TRUE(llama.completed()) << llama.error;
  EXPECT_EQ(llama.usage_output_tokens, 128);
  ASSERT_TRUE(llama.server_timings.has_value());
  EXPECT_EQ(llama.server_timings->source, metrics::ServerClock::kLlamaCpp);
  EXPECT_DOUBLE_EQ(llama.server_timings->prefill_ms, 110.5);
  EXPECT_EQ(llama.server_timings->completion_tokens, 128);
  ASSERT_TRUE(run->requests[1].completed());
  EXPECT_FALSE(run->requests[1].server_timings.has_value());
  metrics::Metrics m = metrics::compute(*run);
  EXPECT_EQ(m.server_timing.requests, 1);
  EXPECT_EQ(m.server_timing.source, "llama.cpp");
}

TEST(OpenAiTarget, NonStreamedResponsesAreOneChunkAtTheEnd) {
  FakeServer server;
  auto words = [](std::string_view s) -> Result<int64_t> {
    return int64_t(std::count(s.begin(), s.end(), ' ') + 1);
  };
  auto target = OpenAiTarget::create({.base_url = server.url(), .count_tokens = words});
  ASSERT_TRUE(target.ok());
  auto set = modes({"ok"}, 3);
  set.requests[0].stream = false;
  auto run = run_load(set, *workload::make_schedule({}, 1), **target);
  ASSERT_TRUE(run.ok());
  const auto& r = run->requests[0];
  ASSERT_TRUE(r.completed()) << r.error;
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_EQ(r.local_output_tokens, 3);
  EXPECT_EQ(r.usage_output_tokens, 3);
  EXPECT_EQ(*r.first_token, *r.end);
}

TEST(OpenAiTarget, DriverTimeoutAbandonsTheRequestAtTheTarget) {
  FakeServer server;
  auto target =
      OpenAiTarget::create({.base_url = server.url(), .idle_timeout = std::chrono::milliseconds(60'000)});
  ASSERT_TRUE(target.ok());
  auto set = modes({"stall", "ok"}, 4);
  DriverOptions opts;
  opts.request_timeout = std::chrono::milliseconds(300);
  auto run = run_load(set, *workload::make_schedule({}, 2), **target, opts);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->requests[0].failure, metrics::Failure::kTimeout);
  EXPECT_NE(run->requests[0].error.find("request timeout"), std::string::npos) << run->requests[0].error;
  EXPECT_TRUE(run->requests[1].completed()) << run->requests[1].error;
}

TEST(OpenAiTarget, BadUrlsAreErrors) {
  EXPECT_FALSE(OpenAiTarget::create({.base_url = "https://x"}).ok());
  EXPECT_FALSE(OpenAiTarget::create({.base_url = "not a url"}).ok());
}

}  // namespace
}  // namespace plumb::loadgen
