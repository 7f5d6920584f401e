// The server's edges, against the real `plumb serve` (and `plumb generate`) binary over real
// sockets: malformed framing answered at once, the connection cap, lenient values refused by name,
// the sampling fields that change the output (and the ones refused), and a model with NaN weights.
//
// Bounded time: every read has a limit well below the server's 60 s timeouts, so "at once" means
// "before a timeout could have fired", not a wall-clock assertion.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/file.h"
#include "server/serve_helpers.h"

namespace plumb::testing {
namespace {

namespace fs = std::filesystem;

std::string tiny_model() { return std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny"; }

std::string body_with(const std::string& prompt, int max_tokens, const std::string& extra = "") {
  json::object o;
  o["prompt"] = prompt;
  o["max_tokens"] = max_tokens;
  o["temperature"] = 0;
  std::string s = json::dump(o);
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

int64_t completion_tokens(const HttpReply& r) {
  auto o = obj(r.body);
  if (!o.contains("usage")) return -1;
  return o.at("usage").as_object().at("completion_tokens").as_int64();
}

// Reads what the server sends until it closes or `limit` passes without data.
std::string read_until_close(int fd, std::chrono::milliseconds limit) {
  std::string out;
  char buf[16384];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(limit.count())) <= 0) return out + "<no close>";
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, size_t(n));
  }
}

// The error object of an OpenAI error body, or an empty object.
json::object error_of(const HttpReply& r) {
  auto o = obj(r.body);
  if (!o.contains("error") || !o.at("error").is_object()) return {};
  return o.at("error").as_object();
}

std::string param_of(const HttpReply& r) {
  auto e = error_of(r);
  if (!e.contains("param") || !e.at("param").is_string()) return "<none: " + r.body + ">";
  return std::string(e.at("param").as_string());
}

class Edges : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServeProcess();
    std::string err;
    ok_ = server_->start({"--model", tiny_model(), "--max-num-seqs", "8"}, &err);
    if (!ok_) error_ = err;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << error_; }
  uint16_t port() const { return server_->port(); }
  HttpReply post(const std::string& path, const std::string& body) {
    return http(port(), "POST", path, body);
  }

  static ServeProcess* server_;
  static bool ok_;
  static std::string error_;
};
ServeProcess* Edges::server_ = nullptr;
bool Edges::ok_ = false;
std::string Edges::error_;

// --- 1. framing ---

TEST_F(Edges, ChunkedBodyWithLfOnlyLinesGets400AtOnce) {
  int fd = connect_to(port());
  ASSERT_GE(fd, 0);
  send_all(fd,
           "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\n\r\n"
           "e\n{\"prompt\":\"x\"}\n0\n\n");
  // The client keeps its side open: only the server's answer can end this, and it must come well
  // before the 60 s body timeout.
  std::string out = read_until_close(fd, std::chrono::milliseconds(20'000));
  ::close(fd);
  auto r = parse_reply(out);
  EXPECT_EQ(r.status, 400) << out;
  EXPECT_NE(r.headers.find("Connection: close"), std::string::npos) << out;
  EXPECT_NE(r.body.find("bare LF"), std::string::npos) << out;
  // The same body with CRLF is served.
  fd = connect_to(port());
  send_all(fd,
           "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
           "e\r\n{\"prompt\":\"x\"}\r\n0\r\n\r\n");
  out = read_until_close(fd, std::chrono::milliseconds(60'000));
  ::close(fd);
  EXPECT_EQ(parse_reply(out).status, 200) << out;
}

// --- 3. validation ---

TEST_F(Edges, LenientValuesGet400NamingTheField) {
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  struct Case {
    std::string path, body, param;
  };
  const std::vector<Case> cases = {
      {cmpl, body_with("x", 2, R"("temperature": 1e29)"), "temperature"},
      {cmpl, R"({"prompt": "x", "max_tokens": 2, "temperature": 1e38})", "temperature"},
      {cmpl, body_with("x", 2, R"("top_p": 1.5)"), "top_p"},
      {cmpl, body_with("x", 2, R"("top_k": -7)"), "top_k"},
      {cmpl, body_with("x", 2, R"("stop": "")"), "stop"},
      {cmpl, body_with("x", 2, R"("stop": ["a", ""])"), "stop"},
      {cmpl, R"({"model": null, "prompt": "x"})", "model"},
      {chat, R"({"messages": [{"role": "bogus", "content": "hi"}]})", "messages.[0].role"},
      {chat, R"({"messages": [{"role": "", "content": "hi"}]})", "messages.[0].role"},
      {chat, R"({"messages": [{"role": "user"}]})", "messages.[0].content"},
      {chat, R"({"messages": [{"role": "user", "content": null}]})", "messages.[0].content"},
      {chat, R"({"messages": [{"role": "user", "content": []}]})", "messages.[0].content"},
      {chat, R"({"messages": [{"role": "user", "content": "hi"}], "model": null})", "model"},
  };
  for (const auto& c : cases) {
    for (bool stream : {false, true}) {
      std::string b = stream ? "{\"stream\": true, " + c.body.substr(1) : c.body;
      auto r = post(c.path, b);
      EXPECT_EQ(r.status, 400) << b << " -> " << r.body;
      EXPECT_EQ(param_of(r), c.param) << b;
      auto e = error_of(r);
      EXPECT_EQ(e.contains("type") ? std::string(e.at("type").as_string()) : "", "invalid_request_error")
          << b;
    }
  }
}

// --- 4. fields that change the output ---

TEST_F(Edges, LogitBiasPlus100ForcesATokenUnderGreedy) {
  // The id of " blue" (any id whose text is plain would do).
  auto tok = obj(post("/tokenize", R"({"prompt": " blue", "add_special_tokens": false})").body);
  ASSERT_TRUE(tok.contains("tokens")) << json::dump(tok);
  const int64_t id = tok.at("tokens").as_array().at(0).as_int64();
  json::object d;
  json::array ids;
  for (int i = 0; i < 5; ++i) ids.push_back(id);
  d["tokens"] = ids;
  const std::string forced =
      std::string(obj(post("/detokenize", json::dump(d)).body).at("prompt").as_string());
  const std::string bias = "\"logit_bias\": {\"" + std::to_string(id) + "\": 100}";
  auto plain = post("/v1/completions", body_with("Once upon a time", 5, R"("ignore_eos": true)"));
  auto biased = post("/v1/completions", body_with("Once upon a time", 5, R"("ignore_eos": true, )" + bias));
  ASSERT_EQ(biased.status, 200) << biased.body;
  EXPECT_EQ(text_of(biased), forced);
  EXPECT_NE(text_of(plain), forced);
  // Streamed and chat alike.
  auto chat = post("/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 5,
                       "temperature": 0, "ignore_eos": true, )" +
                       bias + "}");
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(text_of(chat), forced);
  // -100 on the greedy first token moves it.
  auto first = obj(
      post("/tokenize", json::dump(json::object{{"prompt", text_of(plain)}, {"add_special_tokens", false}}))
          .body);
  const int64_t t0 = first.at("tokens").as_array().at(0).as_int64();
  auto banned = post("/v1/completions", body_with("Once upon a time", 5,
                                                  R"("ignore_eos": true, "logit_bias": {")" +
                                                      std::to_string(t0) + R"(": -100})"));
  ASSERT_EQ(banned.status, 200) << banned.body;
  EXPECT_NE(text_of(banned), text_of(plain));
}

TEST_F(Edges, PenaltiesChangeTheGreedyOutput) {
  // A prompt the small model answers with repeated words (its greedy margins are wide elsewhere).
  const std::string prompt = "The cat sat. The cat sat. The cat sat.";
  auto base = post("/v1/completions", body_with(prompt, 24, R"("ignore_eos": true)"));
  ASSERT_EQ(base.status, 200) << base.body;
  for (const char* f : {R"("presence_penalty": 2)", R"("frequency_penalty": 2)", R"("repetition_penalty": 3)",
                        R"("presence_penalty": -2)"}) {
    auto r = post("/v1/completions", body_with(prompt, 24, std::string(R"("ignore_eos": true, )") + f));
    ASSERT_EQ(r.status, 200) << f << " " << r.body;
    EXPECT_NE(text_of(r), text_of(base)) << f << ": the penalty changed nothing";
    EXPECT_EQ(completion_tokens(r), 24) << f;
  }
  // Neutral values are the plain request, token for token.
  auto neutral =
      post("/v1/completions", body_with(prompt, 24,
                                        R"("ignore_eos": true, "presence_penalty": 0, "frequency_penalty": 0,
                                   "repetition_penalty": 1, "min_tokens": 0, "logit_bias": {})"));
  EXPECT_EQ(text_of(neutral), text_of(base));
}

TEST_F(Edges, MinTokensKeepsEosAwayUntilReached) {
  // A chat answer ends with the model's end token well before max_tokens.
  const std::string msgs = R"({"messages": [{"role": "user", "content": "What colour is the sky?"}],
                               "temperature": 0, "max_tokens": 60)";
  auto natural = post("/v1/chat/completions", msgs + "}");
  ASSERT_EQ(natural.status, 200) << natural.body;
  const int64_t n = completion_tokens(natural);
  ASSERT_LT(n, 50) << "the model should stop by itself here: " << natural.body;
  EXPECT_NE(natural.body.find("\"finish_reason\":\"stop\""), std::string::npos) << natural.body;
  auto longer = post("/v1/chat/completions", msgs + ", \"min_tokens\": " + std::to_string(n + 8) + "}");
  ASSERT_EQ(longer.status, 200) << longer.body;
  EXPECT_GE(completion_tokens(longer), n + 8) << longer.body;
  EXPECT_EQ(text_of(longer).rfind(text_of(natural), 0), 0u)
      << "greedy: the first tokens are the same: " << text_of(natural) << " | " << text_of(longer);
}

TEST_F(Edges, FieldsPlumbDoesNotImplementGet400NotA200) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, )";
  const std::vector<std::pair<std::string, std::string>> chat_cases = {
      {R"("response_format": {"type": "json_object"})", "response_format"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])", "tools"},
      {R"("n": 3)", "n"},
      {R"("min_p": 0.05)", "min_p"},
      {R"("guided_choice": ["a", "b"])", "guided_choice"},
  };
  for (const auto& [field, param] : chat_cases) {
    auto r = post("/v1/chat/completions", chat + field + "}");
    EXPECT_EQ(r.status, 400) << field << " -> " << r.body;
    EXPECT_EQ(param_of(r), param) << field;
  }
  for (const auto& [field, param] : std::vector<std::pair<std::string, std::string>>{
           {R"("best_of": 2)", "best_of"}, {R"("suffix": "x")", "suffix"}}) {
    auto r = post("/v1/completions", body_with("x", 2, field));
    EXPECT_EQ(r.status, 400) << field << " -> " << r.body;
    EXPECT_EQ(param_of(r), param) << field;
  }
  // {"type": "text"} is what the server does anyway.
  auto ok = post("/v1/chat/completions", chat + R"("response_format": {"type": "text"}})");
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// --- 2. the connection cap ---

// Opens `n` connections and keeps them idle.
std::vector<int> open_idle(uint16_t port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = connect_to(port);
    if (fd >= 0) fds.push_back(fd);
  }
  return fds;
}

// A request on a fresh connection with a read limit far below the server's timeouts.
HttpReply bounded_request(uint16_t port, const std::string& method, const std::string& path,
                          const std::string& body = "") {
  int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, request_text(method, path, body));
  std::string out = read_until_close(fd, std::chrono::milliseconds(10'000));
  ::close(fd);
  return parse_reply(out);
}

// Polls until a request succeeds again (the server noticed the closed connections); bounded.
// *turned_away counts the 503s met on the way.
HttpReply until_served(uint16_t port, const std::string& path, int* turned_away = nullptr) {
  HttpReply r;
  for (int i = 0; i < 200; ++i) {
    r = bounded_request(port, "GET", path);
    if (r.status == 200) break;
    if (r.status == 503 && turned_away) ++*turned_away;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return r;
}

void expect_503_too_many(const HttpReply& r) {
  EXPECT_EQ(r.status, 503) << r.headers << "\n" << r.body;
  EXPECT_NE(r.headers.find("Retry-After: 1"), std::string::npos) << r.headers;
  auto e = error_of(r);
  ASSERT_TRUE(e.contains("message")) << r.body;
  EXPECT_EQ(e.at("code").as_string(), "too_many_connections") << r.body;
  EXPECT_EQ(e.at("type").as_string(), "server_error") << r.body;
}

TEST(EdgesLimits, MaxConnectionsAnswers503AtOnceAndServesAgainAfterClose) {
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(s.start({"--model", tiny_model(), "--max-connections", "8"}, &err)) << err;
  std::vector<int> idle = open_idle(s.port(), 12);  // more idle connections than the cap
  ASSERT_EQ(idle.size(), 12u);
  // A request now: 503 at once (the idle connections would hold their slots for 60 s).
  auto r = bounded_request(s.port(), "POST", "/v1/completions", body_with("x", 2));
  expect_503_too_many(r);
  for (int fd : idle) ::close(fd);
  auto back = until_served(s.port(), "/health");
  EXPECT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(http(s.port(), "POST", "/v1/completions", body_with("x", 2)).status, 200);
  std::string m = http(s.port(), "GET", "/metrics").body;
  EXPECT_GE(metric(m, "plumb:http_connections_rejected_total"), 5) << m;  // 4 idle + the request
}

TEST(EdgesLimits, TheDefaultCapComesFromTheDescriptorLimit) {
  // Under a 64-descriptor limit the default cap is 64 - min(128, 64/2) = 32: idle connections past
  // it are turned away with 503 instead of starving the server of descriptors (accept failing with
  // EMFILE and new requests waiting out the 60 s timeouts).
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(s.start({"--model", tiny_model()}, &err, 64)) << err;
  // 60 idle: 32 served, 28 turned away, of which 16 (half the 32 spare descriptors) linger to read
  // their request and the rest are answered and closed at once, so no accept runs out of
  // descriptors.
  std::vector<int> idle = open_idle(s.port(), 60);
  ASSERT_EQ(idle.size(), 60u);
  for (int i = 0; i < 3; ++i) expect_503_too_many(bounded_request(s.port(), "GET", "/health"));
  for (int fd : idle) ::close(fd);
  int retries = 0;
  auto back = until_served(s.port(), "/health", &retries);
  EXPECT_EQ(back.status, 200) << back.body;
  // Accepted in order: the first 32 were served, the other 28 and the 3 requests turned away.
  std::string m = http(s.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric(m, "plumb:http_connections_rejected_total"), 31 + retries) << m;
  EXPECT_EQ(metric(m, "plumb:http_accept_errors_total"), 0) << m;
}

TEST(EdgesLimits, AcceptErrorsAreLoggedAtMostOnceASecondWithACount) {
  // A cap above what 64 descriptors allow: accept() fails with EMFILE while the connections stay.
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(s.start({"--model", tiny_model(), "--max-connections", "1000"}, &err, 64)) << err;
  std::vector<int> idle = open_idle(s.port(), 80);
  ASSERT_EQ(idle.size(), 80u);
  // Wait (bounded) for the first logged error, then keep the pressure on for a while: the server
  // retries every 50 ms, so errors pile up much faster than once a second.
  for (int i = 0; i < 400 && s.output().find("event=accept_error") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_NE(s.output().find("event=accept_error"), std::string::npos) << s.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  for (int fd : idle) ::close(fd);
  auto back = until_served(s.port(), "/health");
  EXPECT_EQ(back.status, 200) << back.body;
  std::string m = http(s.port(), "GET", "/metrics").body;
  const double errors = metric(m, "plumb:http_accept_errors_total");
  const std::string log = s.output();
  int lines = 0;
  for (size_t at = log.find("event=accept_error "); at != std::string::npos;
       at = log.find("event=accept_error ", at + 1)) {
    ++lines;
  }
  EXPECT_GE(errors, 10) << m;
  EXPECT_LT(lines, errors / 3) << log;  // one line stands for many errors
  EXPECT_NE(log.find("suppressed_since_last="), std::string::npos) << log;
  EXPECT_NE(log.find("event=accept_errors_ended"), std::string::npos) << log;
}

TEST(EdgesLimits, TimeoutFlagsCloseIdleAndSlowConnections) {
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(
      s.start({"--model", tiny_model(), "--idle-timeout-s", "0.3", "--header-timeout-s", "0.3"}, &err))
      << err;
  int fd = connect_to(s.port());  // sends nothing
  ASSERT_GE(fd, 0);
  EXPECT_EQ(read_until_close(fd, std::chrono::milliseconds(20'000)), "");
  ::close(fd);
  fd = connect_to(s.port());  // a head that never ends
  send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n");
  EXPECT_EQ(read_until_close(fd, std::chrono::milliseconds(20'000)), "");
  ::close(fd);
  EXPECT_EQ(http(s.port(), "GET", "/health").status, 200);
  // A bad value is a usage error.
  ServeProcess bad;
  EXPECT_FALSE(bad.start({"--model", tiny_model(), "--idle-timeout-s", "0"}, &err));
  EXPECT_NE(err.find("--idle-timeout-s"), std::string::npos) << err;
}

// --- 5. non-finite weights ---

// A copy of plumb-tiny whose down_proj of layer 3 holds one NaN at flat index 1234.
fs::path nan_model(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    fs::copy_file(fs::path(tiny_model()) / f, dir / f, fs::copy_options::overwrite_existing);
  }
  std::ifstream in(fs::path(tiny_model()) / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto header = obj(bytes.substr(8, size_t(n)));
  const auto& t = header.at("model.layers.3.mlp.down_proj.weight").as_object();
  EXPECT_EQ(t.at("dtype").as_string(), "BF16");
  const size_t begin = size_t(t.at("data_offsets").as_array().at(0).as_int64());
  const size_t at = 8 + size_t(n) + begin + 1234 * 2;
  bytes[at] = char(0xC0);  // bf16 0x7FC0: a quiet NaN, little-endian
  bytes[at + 1] = char(0x7F);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  return dir;
}

TEST(EdgesWeights, NanWeightsFailRequestsClearlyAndCountInMetrics) {
  fs::path dir = nan_model(fs::temp_directory_path() / ("plumb_nan_model_" + std::to_string(::getpid())));
  ServeProcess s;
  std::string err;
  ASSERT_TRUE(s.start({"--model", dir.string()}, &err)) << err;  // loads and serves without the check
  auto r = http(s.port(), "POST", "/v1/completions", body_with("Once upon a time", 4));
  EXPECT_EQ(r.status, 500) << r.body;
  auto e = error_of(r);
  ASSERT_TRUE(e.contains("code")) << r.body;
  EXPECT_EQ(e.at("code").as_string(), "nonfinite_logits") << r.body;
  EXPECT_EQ(e.at("type").as_string(), "server_error") << r.body;
  EXPECT_NE(r.body.find("non-finite logits"), std::string::npos) << r.body;
  // Streamed: the 200 head is out, so the stream ends with the error event, no finish_reason.
  auto st = http(s.port(), "POST", "/v1/chat/completions",
                 R"({"messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 4})");
  EXPECT_EQ(st.status, 200);
  auto data = sse_data(st.body);
  ASSERT_GE(data.size(), 2u) << st.body;
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_NE(data[data.size() - 2].find("nonfinite_logits"), std::string::npos) << st.body;
  EXPECT_EQ(st.body.find("\"finish_reason\":\"stop\""), std::string::npos) << st.body;
  std::string m = wait_until_idle(s.port());
  EXPECT_NE(m.find("plumb:request_errors_total{model_name=\"" + dir.filename().string() +
                   "\",reason=\"nonfinite_logits\"} 2"),
            std::string::npos)
      << m;
  EXPECT_EQ(metric(m, "plumb:kv_cache_blocks_used"), 0) << m;
  s.process().stop();

  // --check-weights refuses to start, naming the tensor and the element.
  for (const char* cmd : {"serve", "generate"}) {
    // serve would keep running if the check let it through: `timeout` bounds that failure.
    const std::string line = std::string("timeout 120 \"$0\" ") + cmd + " --model \"$1\" --check-weights" +
                             (std::string(cmd) == "serve" ? " --port 0" : " --max-tokens 2") + " 2>&1";
    auto out = run_capture({"/bin/sh", "-c", line, PLUMB_BINARY, dir.string()});
    ASSERT_TRUE(out.ok()) << cmd;
    EXPECT_NE(out->exit.exit_code, 0) << cmd << ": " << out->out;
    EXPECT_NE(out->out.find("model.layers.3.mlp.down_proj.weight"), std::string::npos)
        << cmd << ": " << out->out;
    EXPECT_NE(out->out.find("NaN at element 1234"), std::string::npos) << cmd << ": " << out->out;
  }
  // Without the check, generate fails at the first token, by name.
  auto gen = run_capture(
      {"/bin/sh", "-c", "\"$0\" generate --model \"$1\" --max-tokens 2 2>&1", PLUMB_BINARY, dir.string()});
  ASSERT_TRUE(gen.ok());
  EXPECT_NE(gen->exit.exit_code, 0) << gen->out;
  EXPECT_NE(gen->out.find("non-finite logits"), std::string::npos) << gen->out;
  fs::remove_all(dir);
}

// The CUDA flags on the CPU are a usage error (exit 2) that names what they need, and a
// tensor-parallel size that does not split the model is refused naming the sizes that do, before
// any device is asked for (so this holds on a machine without CUDA as well: a build without it says so).
TEST(EdgesFlags, DeviceFlagsWithoutTheirDeviceAreRefusedSayingWhy) {
  auto cpu = run_capture(
      {"/bin/sh", "-c", "timeout 60 \"$0\" serve --port 0 --tensor-parallel-size 2 2>&1", PLUMB_BINARY});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->exit.exit_code, 2) << cpu->out;
  EXPECT_NE(cpu->out.find("--tensor-parallel-size need --device cuda[:N]"), std::string::npos) << cpu->out;
  auto three = run_capture({"/bin/sh", "-c",
                            "timeout 60 \"$0\" serve --port 0 --device cuda --tensor-parallel-size 3 2>&1",
                            PLUMB_BINARY});
  ASSERT_TRUE(three.ok());
  EXPECT_NE(three->exit.exit_code, 0) << three->out;
  const bool refused_split = three->out.find("does not divide the model's 2 KV heads") != std::string::npos &&
                             three->out.find("sizes that split this model: 1, 2") != std::string::npos;
  const bool no_cuda = three->out.find("built without CUDA") != std::string::npos;
  EXPECT_TRUE(refused_split || no_cuda) << three->out;
  // generate takes the flag too; the CPU engine runs a model whole.
  auto gen =
      run_capture({"/bin/sh", "-c", "timeout 60 \"$0\" generate --max-tokens 2 --tensor-parallel-size 2 2>&1",
                   PLUMB_BINARY});
  ASSERT_TRUE(gen.ok());
  EXPECT_NE(gen->exit.exit_code, 0) << gen->out;
  EXPECT_NE(gen->out.find("use --device cuda or leave it at 1"), std::string::npos) << gen->out;
}

// A kernel configuration with CUDA candidate kernels ("cuda" entries) on the CPU: a usage error that
// says to add --device cuda, before the model is loaded.
TEST(EdgesFlags, CudaCandidateKernelsWithoutTheDeviceAreAUsageError) {
  const fs::path k =
      fs::temp_directory_path() / ("plumb_edges_cuda_kernels_" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(write_file_atomic(k.string(), R"({"cuda": {"swiglu": "/k/s.cubin"}})").ok());
  auto out = run_capture(
      {"/bin/sh", "-c", "timeout 60 \"$0\" serve --port 0 --kernels \"$1\" 2>&1", PLUMB_BINARY, k.string()});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->exit.exit_code, 2) << out->out;
  EXPECT_NE(out->out.find("names CUDA candidate kernels"), std::string::npos) << out->out;
  EXPECT_NE(out->out.find("add --device cuda"), std::string::npos) << out->out;
  EXPECT_EQ(out->out.find("listening on"), std::string::npos) << out->out;
  fs::remove(k);
}

TEST(EdgesWeights, CheckWeightsPassesAGoodModel) {
  auto out = run_capture(
      {"/bin/sh", "-c", "\"$0\" generate --check-weights --max-tokens 2 --prompt hi 2>&1", PLUMB_BINARY});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->exit.exit_code, 0) << out->out;
}

}  // namespace
}  // namespace plumb::testing
