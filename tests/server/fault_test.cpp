// Fault tests of the real `plumb serve` binary: a checked-in corpus of malformed and hostile
// request bodies and HTTP framings (tests/server/corpus/, see its README.md), generated oversized
// inputs, slow clients, 1,000 concurrent idle-then-streaming connections, and clients vanishing
// mid-stream. After every fault the server must still be running, answer a greedy request with
// exactly the text it gave before the faults, and return its KV usage to zero (no leaked blocks).
//
// Bounded time: every socket read has a timeout, and the slow-client test holds its partial
// requests for a fixed two seconds rather than waiting for the server's 60 s header timeout.
// Runs under the asan preset too (ctest -R '^(serve|server_fault)_test$').
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/time.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "server/serve_helpers.h"

namespace plumb::testing {
namespace {

namespace fs = std::filesystem;

std::string tiny_model() { return std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny"; }
fs::path corpus_dir() { return fs::path(PLUMB_SOURCE_DIR) / "tests/server/corpus"; }

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The 1,000-connection tests need more descriptors than some default soft limits allow; the
// server inherits the raised limit.
void raise_nofile(rlim_t want) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  if (r.rlim_cur >= want) return;
  r.rlim_cur = std::min(want, r.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &r);
}

void set_recv_timeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = long(t.count() / 1000);
  tv.tv_usec = long((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

std::string greedy_body(const std::string& prompt, int max_tokens, const std::string& extra = "") {
  json::object o;
  o["prompt"] = prompt;
  o["max_tokens"] = max_tokens;
  o["temperature"] = 0;
  o["ignore_eos"] = true;
  std::string s = json::dump(o);
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

std::string completion_text(const HttpReply& r) {
  auto o = obj(r.body);
  if (!o.contains("choices")) return "<no choices: status " + std::to_string(r.status) + " " + r.body + ">";
  return std::string(o.at("choices").as_array().at(0).as_object().at("text").as_string());
}

// --- the raw-framing corpus format (corpus/README.md) ---

struct FramingCase {
  std::string expect;      // regex over the outcome, e.g. "^400 close$"
  bool half_close = true;  // shut the write side after sending
  std::string bytes;       // what is sent
};

FramingCase load_framing(const fs::path& p) {
  std::string text = read_bytes(p);
  FramingCase c;
  std::istringstream in(text);
  std::string line, payload;
  bool header = true;
  while (std::getline(in, line)) {
    if (header && line.rfind("#", 0) == 0) {
      if (line.rfind("# expect:", 0) == 0) {
        c.expect = line.substr(9);
        c.expect.erase(0, c.expect.find_first_not_of(' '));
      }
      if (line.rfind("# half-close: no", 0) == 0) c.half_close = false;
      continue;
    }
    header = false;
    payload += line;  // literal newlines are layout only
  }
  for (size_t i = 0; i < payload.size(); ++i) {
    char ch = payload[i];
    if (ch != '\\' || i + 1 >= payload.size()) {
      c.bytes += ch;
      continue;
    }
    char n = payload[++i];
    if (n == 'r') {
      c.bytes += '\r';
    } else if (n == 'n') {
      c.bytes += '\n';
    } else if (n == 't') {
      c.bytes += '\t';
    } else if (n == '\\') {
      c.bytes += '\\';
    } else if (n == 'x' && i + 2 < payload.size()) {
      c.bytes += char(std::stoi(payload.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      c.bytes += '\\';
      c.bytes += n;
    }
  }
  return c;
}

// Splits everything the server wrote into responses and describes them: "200 400 close".
// "close": the server closed the connection; "reset": it reset it; "timeout": neither within the
// read timeout; "junk": bytes that are not an HTTP response.
std::string describe_responses(const std::string& raw, const std::string& ending) {
  std::string out;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t head_end = raw.find("\r\n\r\n", pos);
    if (raw.compare(pos, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos) {
      out += "junk ";
      break;
    }
    std::string head = raw.substr(pos, head_end - pos);
    int status = std::atoi(head.c_str() + 9);
    std::string lower = head;
    for (auto& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    pos = head_end + 4;
    if (status == 100) continue;
    out += std::to_string(status) + " ";
    size_t cl = lower.find("content-length: ");
    if (cl != std::string::npos) {
      pos += std::stoul(lower.substr(cl + 16));
    } else if (lower.find("transfer-encoding: chunked") != std::string::npos) {
      while (pos < raw.size()) {
        size_t eol = raw.find("\r\n", pos);
        if (eol == std::string::npos) break;
        size_t n = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
        pos = eol + 2 + n + 2;
        if (n == 0) break;
      }
    } else {
      pos = raw.size();
    }
  }
  return out + ending;
}

// Sends `bytes`, half-closes (the client has nothing more to say) and reads until the server
// closes. Without the half-close, a server that keeps the connection open ends the read after
// 1.5 s of silence: the ending is then "open".
std::string exchange(uint16_t port, const std::string& bytes, bool half_close = true) {
  int fd = connect_to(port);
  if (fd < 0) return "connect-failed";
  set_recv_timeout(fd, half_close ? std::chrono::milliseconds(15000) : std::chrono::milliseconds(1500));
  send_all(fd, bytes);
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string raw, ending = "close";
  char buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      raw.append(buf, size_t(n));
      continue;
    }
    if (n < 0) {
      bool silent = errno == EAGAIN || errno == EWOULDBLOCK;
      ending = silent ? (half_close ? "timeout" : "open") : "reset";
    }
    break;
  }
  ::close(fd);
  return describe_responses(raw, ending);
}

// One server with the shipped model for the corpus tests; the reference answer is taken before
// any fault.
class Faults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    raise_nofile(8192);
    server_ = new ServeProcess();
    std::string err;
    ok_ =
        server_->start({"--model", tiny_model(), "--max-num-seqs", "32", "--kv-cache-tokens", "16384"}, &err);
    if (!ok_) {
      error_ = err;
      return;
    }
    auto r = http(server_->port(), "POST", "/v1/completions", greedy_body(kProbe, 12));
    reference_ = completion_text(r);
    if (r.status != 200) {
      ok_ = false;
      error_ = "the reference request failed: " + r.body;
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << error_; }
  void TearDown() override { expect_healthy(); }
  uint16_t port() const { return server_->port(); }

  // Still running, same greedy answer, nothing left running, no KV block in use.
  void expect_healthy() {
    ASSERT_TRUE(server_->process().running()) << server_->output();
    auto r = http(port(), "POST", "/v1/completions", greedy_body(kProbe, 12));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(completion_text(r), reference_);
    std::string m = wait_until_idle(port());
    EXPECT_EQ(metric(m, "plumb:num_requests_running"), 0) << m;
    EXPECT_EQ(metric(m, "plumb:kv_cache_usage_perc"), 0) << m;
    EXPECT_EQ(metric(m, "plumb:kv_cache_blocks_used"), 0) << m;
  }

  static constexpr const char* kProbe = "The quick brown fox";
  static ServeProcess* server_;
  static bool ok_;
  static std::string error_;
  static std::string reference_;
};
ServeProcess* Faults::server_ = nullptr;
bool Faults::ok_ = false;
std::string Faults::error_;
std::string Faults::reference_;

TEST_F(Faults, CorpusJsonBodiesGetOpenAiErrors) {
  const std::map<std::string, std::string> endpoints = {{"completions", "/v1/completions"},
                                                        {"chat", "/v1/chat/completions"},
                                                        {"tokenize", "/tokenize"},
                                                        {"detokenize", "/detokenize"}};
  int cases = 0;
  for (const auto& [dir, path] : endpoints) {
    for (const auto& f : files_in(corpus_dir() / dir, ".json")) {
      std::string body = read_bytes(f);
      for (bool stream : {false, true}) {
        // Streamed: the same body with "stream": true spliced in front when it is an object.
        std::string b = body;
        if (stream) {
          if (b.rfind("{", 0) != 0 || b.size() < 2) continue;
          b = "{\"stream\": true, " + b.substr(1);
        }
        auto r = http(port(), "POST", path, b);
        ++cases;
        std::string where = dir + "/" + f.filename().string() + (stream ? " (stream)" : "");
        EXPECT_GE(r.status, 400) << where << " -> " << r.status << " " << r.body;
        EXPECT_LT(r.status, 500) << where << " -> " << r.body;
        auto o = obj(r.body);
        ASSERT_TRUE(o.contains("error") && o.at("error").is_object()) << where << " -> " << r.body;
        EXPECT_FALSE(std::string(o.at("error").as_object().at("message").as_string()).empty()) << where;
      }
    }
  }
  EXPECT_GT(cases, 100);
}

TEST_F(Faults, CorpusHttpFramingsGet4xxOrACleanClose) {
  auto files = files_in(corpus_dir() / "http", ".http");
  ASSERT_GE(files.size(), 30u);
  for (const auto& f : files) {
    FramingCase c = load_framing(f);
    ASSERT_FALSE(c.expect.empty()) << f << " has no '# expect:' line";
    std::string outcome = exchange(port(), c.bytes, c.half_close);
    EXPECT_TRUE(std::regex_search(outcome, std::regex(c.expect)))
        << f.filename() << ": got '" << outcome << "', expected /" << c.expect << "/";
    EXPECT_FALSE(std::regex_search(outcome, std::regex("(^| )5[0-9][0-9] ")))
        << f.filename() << ": " << outcome;
  }
}

TEST_F(Faults, OversizedAndGeneratedBodies) {
  // A body over the 16 MiB limit: 413 before the body is read in full.
  std::string huge = "{\"prompt\": \"" + std::string(17u << 20, 'a') + "\"}";
  std::string outcome = exchange(port(), request_text("POST", "/v1/completions", huge));
  EXPECT_TRUE(std::regex_search(outcome, std::regex("^413 (close|reset)$"))) << outcome;

  // 100,000 keys (valid JSON, no prompt): 400 naming the prompt.
  std::string many = "{";
  for (int i = 0; i < 100000; ++i) many += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  many += "\"max_tokens\": 2}";
  auto r = http(port(), "POST", "/v1/completions", many);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(obj(r.body).at("error").as_object().at("param").as_string(), "prompt") << r.body;

  // A 2 MB prompt: tokenized, then refused as longer than the context.
  std::string words;
  while (words.size() < (2u << 20)) words += "lorem ipsum ";
  r = http(port(), "POST", "/v1/completions", greedy_body(words, 4));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("context_length_exceeded"), std::string::npos) << r.body.substr(0, 300);

  // 10,000 token ids beyond the context, and a list of 100,000 single-element lists.
  std::string ids = "{\"prompt\": [";
  for (int i = 0; i < 10000; ++i) ids += (i ? ",5" : "5");
  ids += "], \"max_tokens\": 2}";
  r = http(port(), "POST", "/v1/completions", ids);
  EXPECT_EQ(r.status, 400) << r.body;
  std::string lists = "{\"prompt\": [";
  for (int i = 0; i < 100000; ++i) lists += (i ? ",[1]" : "[1]");
  lists += "]}";
  r = http(port(), "POST", "/v1/completions", lists);
  EXPECT_EQ(r.status, 400) << r.body;
}

// Slowloris: many connections dribble partial heads and bodies; the server keeps answering others
// (it does not wait for them on its IO threads) and drops them cleanly when they go.
TEST_F(Faults, SlowClientsDoNotStarveOthers) {
  std::vector<int> slow;
  const std::string head_part = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  const std::string body_part =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{\"prompt\": \"";
  for (int i = 0; i < 300; ++i) {
    int fd = connect_to(port());
    ASSERT_GE(fd, 0) << i;
    send_all(fd, i % 3 == 0 ? body_part : head_part);
    slow.push_back(fd);
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int answered = 0;
  while (std::chrono::steady_clock::now() < until) {
    for (int fd : slow) send_all(fd, "a");  // one byte each, every round
    auto r = http(port(), "POST", "/v1/completions", greedy_body(kProbe, 12));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(completion_text(r), reference_);
    ++answered;
  }
  EXPECT_GE(answered, 1);
  // The slow connections are still open (nothing was answered on them) and then vanish.
  for (int fd : slow) {
    char b;
    EXPECT_EQ(::recv(fd, &b, 1, MSG_DONTWAIT), -1);
    ::close(fd);
  }
}

// A non-blocking client connection for the many-connection tests.
struct Conn {
  int fd = -1;
  std::string raw;
  bool closed = false;
};

// Reads every connection until each is closed by the server or `bound` passes.
void pump(std::vector<Conn>& conns, std::chrono::seconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  std::vector<pollfd> pfds;
  char buf[16384];
  while (std::chrono::steady_clock::now() < deadline) {
    pfds.clear();
    std::vector<size_t> idx;
    for (size_t i = 0; i < conns.size(); ++i) {
      if (conns[i].closed) continue;
      pfds.push_back({conns[i].fd, POLLIN, 0});
      idx.push_back(i);
    }
    if (pfds.empty()) return;
    int n = ::poll(pfds.data(), nfds_t(pfds.size()), 200);
    if (n <= 0) continue;
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Conn& c = conns[idx[k]];
      while (true) {
        ssize_t got = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (got > 0) {
          c.raw.append(buf, size_t(got));
          continue;
        }
        if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) c.closed = true;
        break;
      }
    }
  }
}

// 1,000 connections are opened and held idle, then each streams a completion at once; every
// stream must end with [DONE] and the requested number of tokens.
TEST_F(Faults, ThousandConcurrentIdleThenStreamingClients) {
  raise_nofile(8192);
  constexpr int kClients = 1000;
  constexpr int kTokens = 6;
  std::vector<Conn> conns(kClients);
  for (int i = 0; i < kClients; ++i) {
    conns[size_t(i)].fd = connect_to(port());
    ASSERT_GE(conns[size_t(i)].fd, 0) << "connection " << i;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // idle, keep-alive
  for (int i = 0; i < kClients; ++i) {
    std::string body = greedy_body("Story number " + std::to_string(i) + " starts", kTokens,
                                   R"("stream": true, "stream_options": {"include_usage": true})");
    send_all(conns[size_t(i)].fd, request_text("POST", "/v1/completions", body));
  }
  pump(conns, std::chrono::seconds(600));  // a bound for slow (sanitizer) builds, not a speed check
  int ok = 0;
  for (int i = 0; i < kClients; ++i) {
    Conn& c = conns[size_t(i)];
    ::close(c.fd);
    EXPECT_TRUE(c.closed) << "client " << i << " got no complete response: " << c.raw.substr(0, 200);
    auto reply = parse_reply(c.raw);
    EXPECT_EQ(reply.status, 200) << "client " << i << ": " << c.raw.substr(0, 300);
    auto data = sse_data(reply.body);
    if (data.size() < 2 || data.back() != "[DONE]") {
      ADD_FAILURE() << "client " << i << " stream did not end with [DONE]: " << reply.body.substr(0, 300);
      continue;
    }
    auto usage = obj(data[data.size() - 2]);
    if (!usage.contains("usage")) {
      ADD_FAILURE() << "client " << i << " has no usage chunk";
      continue;
    }
    EXPECT_EQ(usage.at("usage").as_object().at("completion_tokens").as_int64(), kTokens) << i;
    ++ok;
  }
  EXPECT_EQ(ok, kClients);
}

// Streaming clients vanish at random points (before the head, after some chunks, with a reset)
// while others finish; the vanished ones are cancelled and free their blocks.
TEST_F(Faults, ClientsVanishingMidStreamAmongFinishingOnes) {
  constexpr int kClients = 120;
  std::mt19937 rng(7);
  std::vector<Conn> stay;
  std::vector<std::thread> leavers;
  for (int i = 0; i < kClients; ++i) {
    int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    bool leaves = i % 2 == 0;
    std::string body = greedy_body("Leaver " + std::to_string(i), leaves ? 300 : 8, R"("stream": true)");
    send_all(fd, request_text("POST", "/v1/completions", body));
    if (!leaves) {
      stay.push_back({fd, "", false});
      continue;
    }
    int how = int(rng() % 3);
    int wait_bytes = int(rng() % 2000);
    leavers.emplace_back([fd, how, wait_bytes] {
      set_recv_timeout(fd, std::chrono::seconds(30));
      if (how > 0) {  // read some of the stream first
        int got = 0;
        char buf[512];
        while (got <= wait_bytes) {
          ssize_t n = ::recv(fd, buf, sizeof buf, 0);
          if (n <= 0) break;
          got += int(n);
        }
      }
      if (how == 2) {  // RST instead of FIN
        linger l{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
      }
      ::close(fd);
    });
  }
  for (auto& t : leavers) t.join();
  pump(stay, std::chrono::seconds(600));
  for (auto& c : stay) {
    ::close(c.fd);
    auto data = sse_data(parse_reply(c.raw).body);
    ASSERT_FALSE(data.empty()) << c.raw.substr(0, 200);
    EXPECT_EQ(data.back(), "[DONE]");
  }
  std::string m = wait_until_idle(port());
  EXPECT_GE(metric(m, "plumb:request_cancelled_total"), 1) << m;
}

}  // namespace
}  // namespace plumb::testing
