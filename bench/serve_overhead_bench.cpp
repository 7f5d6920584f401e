// HTTP+SSE overhead of plumb serve at batch 1, measured side by side in one process: the same
// LlmEngine is driven directly (in-process: submit() and a sink that timestamps every event) and
// through the OpenAiServer over loopback HTTP (a raw-socket client that timestamps every SSE
// event on receipt), alternating A, B, A, B, ... so drift and machine load hit both arms alike.
//
// TPOT per run = (t_end - t_first_token) / (n - 1), docs/metrics.md's definition: in-process, the
// final event and the first event with a token; over HTTP, the `data: [DONE]` line and the first
// chunk (every token is a chunk: both arms ask for logprobs). Reported: each arm's median over
// runs, the ratio of the medians (HTTP / in-process; 1.00 = no overhead), the median of per-pair
// ratios, and, for each HTTP request, client TPOT / the same request's engine-side TPOT
// (plumb_timings.decode_ms / (n - 1)): the transport's share with no run-to-run noise in it.
//
// Usage: serve_overhead_bench [--model DIR | --model-config NAME] [--tokens N] [--reps K]
//                             [--threads T]
// Defaults: the shipped plumb-tiny model, 64 tokens, 7 pairs, $PLUMB_BENCH_THREADS or all cores.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/json.h"
#include "core/log.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/scheduler/llm_engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/server.h"

namespace {

using namespace plumb;
using Clock = std::chrono::steady_clock;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// In-process: one request straight into the backend.
double tpot_in_process(scheduler::ServingEngine& be, const std::vector<int32_t>& prompt, int n) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Clock::time_point first{}, end{};
  int64_t tokens = 0;
  scheduler::GenerationRequest g;
  g.prompt = prompt;
  g.sampling.temperature = 0;
  g.sampling.max_tokens = n;
  g.sampling.ignore_eos = true;
  g.sampling.logprobs = 0;  // as the HTTP arm, where it makes every token a chunk
  g.sink = [&](scheduler::TokenEvent&& ev) {
    auto now = Clock::now();
    std::lock_guard l(mu);
    if (!ev.tokens.empty() && tokens == 0) first = now;
    tokens += int64_t(ev.tokens.size());
    if (ev.finished) {
      end = now;
      done = true;
      cv.notify_all();
    }
  };
  if (!be.submit(std::move(g)).ok()) return -1;
  std::unique_lock l(mu);
  cv.wait(l, [&] { return done; });
  return tokens >= 2 ? ms(end - first) / double(tokens - 1) : -1;
}

// Over HTTP: a streamed /v1/completions on a fresh loopback connection. `engine_tpot` gets the
// same request's TPOT as the engine saw it (plumb_timings.decode_ms / (n - 1), server side).
double tpot_http(uint16_t port, const std::vector<int32_t>& prompt, int n, double* engine_tpot = nullptr) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  json::object o;
  json::array ids;
  for (int32_t t : prompt) ids.push_back(int64_t(t));
  o["prompt"] = std::move(ids);
  o["max_tokens"] = n;
  o["temperature"] = 0;
  o["ignore_eos"] = true;
  o["stream"] = true;
  o["skip_special_tokens"] = false;
  // A logprob entry per token makes every token a chunk, even one with no text of its own (dummy
  // weights generate ids the shipped tokenizer has no text for).
  o["logprobs"] = 0;
  std::string body = json::dump(o);
  std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  Clock::time_point first{}, end{};
  bool have_first = false, have_end = false;
  std::string buf;
  char chunk[16384];
  size_t scanned = 0;
  while (!have_end) {
    ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
    if (got <= 0) break;
    auto now = Clock::now();
    buf.append(chunk, size_t(got));
    // Each SSE event is one "data: ..." line; look at complete lines only.
    size_t eol;
    while ((eol = buf.find('\n', scanned)) != std::string::npos) {
      std::string_view line(buf.data() + scanned, eol - scanned);
      scanned = eol + 1;
      if (line.rfind("data: ", 0) != 0) continue;
      if (line.find("[DONE]") != std::string_view::npos) {
        end = now;
        have_end = true;
        break;
      }
      if (engine_tpot && line.find("plumb_timings") != std::string_view::npos) {
        auto fin = json::parse_object(line.substr(6));
        if (fin.ok() && fin->contains("plumb_timings")) {
          *engine_tpot =
              fin->at("plumb_timings").as_object().at("decode_ms").to_number<double>() / double(n - 1);
        }
      }
      if (!have_first) {  // the first chunk carries the first token
        first = now;
        have_first = true;
      }
    }
  }
  ::close(fd);
  return have_first && have_end ? ms(end - first) / double(n - 1) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace plumb::engine;
  std::string model_dir, model_config;
  int tokens = 64, reps = 7, threads = plumb::bench::bench_threads();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") {
      model_dir = v;
    } else if (k == "--model-config") {
      model_config = v;
    } else if (k == "--tokens") {
      tokens = std::atoi(v.c_str());
    } else if (k == "--reps") {
      reps = std::atoi(v.c_str());
    } else if (k == "--threads") {
      threads = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "unknown option %s (see the header of bench/serve_overhead_bench.cpp)\n",
                   k.c_str());
      return 2;
    }
  }
  plumb::log::init("warn");
  auto models = find_models_dir();
  if (!models.ok()) {
    std::fprintf(stderr, "%s\n", models.status().to_string().c_str());
    return 1;
  }
  std::string tiny = *models + "/plumb-tiny";
  if (model_dir.empty() && model_config.empty()) model_dir = tiny;
  std::string config_path =
      model_dir.empty() ? *resolve_model_config(model_config) : model_dir + "/config.json";
  auto cfg = load_model_config(config_path);
  auto tok = Tokenizer::load(model_dir.empty() ? tiny : model_dir);
  if (!cfg.ok() || !tok.ok()) {
    std::fprintf(stderr, "cannot load the model or tokenizer\n");
    return 1;
  }
  ModelOptions mo;
  mo.threads = threads;
  auto model = model_dir.empty() ? Model::dummy(*cfg, mo) : Model::load(model_dir, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  auto preset = scheduler::llm_engine_preset("default");
  scheduler::LlmEngineConfig c = *preset;
  c.threads = threads;
  auto eff = scheduler::normalize(c, cfg->max_context(), nullptr);
  if (!eff.ok()) {
    std::fprintf(stderr, "%s\n", eff.status().to_string().c_str());
    return 1;
  }
  auto engine =
      scheduler::LlmEngine::create(*eff, scheduler::make_model_runner(std::move(model).value(), "bench"));
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
    return 1;
  }
  scheduler::ServingEngine& be = **engine;
  server::ServerOptions so;
  so.port = 0;
  so.served_model_name = "bench";
  server::OpenAiServer srv(so, be, **tok);
  if (!srv.start().ok()) return 1;

  std::vector<int32_t> prompt = (*tok)->encode("The quick brown fox jumps over the lazy dog", true);
  // Warm both paths once (caches, the prefix cache, the first connection).
  tpot_in_process(be, prompt, 4);
  tpot_http(srv.port(), prompt, 4);
  std::vector<double> a, b, ratio, same;
  for (int r = 0; r < reps; ++r) {
    double x, y, e = -1;
    if (r % 2 == 0) {
      x = tpot_in_process(be, prompt, tokens);
      y = tpot_http(srv.port(), prompt, tokens, &e);
    } else {
      y = tpot_http(srv.port(), prompt, tokens, &e);
      x = tpot_in_process(be, prompt, tokens);
    }
    if (x <= 0 || y <= 0) {
      std::fprintf(stderr, "pair %d failed\n", r);
      return 1;
    }
    a.push_back(x);
    b.push_back(y);
    ratio.push_back(y / x);
    same.push_back(y / e);
    std::printf(
        "pair %d (%s): in-process %.3f ms, http %.3f ms (engine side of the same request %.3f ms), "
        "ratio %.4f, same-request ratio %.4f\n",
        r, r % 2 ? "BA" : "AB", x, y, e, y / x, y / e);
    std::fflush(stdout);
  }
  std::printf("model %s, %d tokens per run, %d pairs, %d threads\n",
              model_dir.empty() ? model_config.c_str() : model_dir.c_str(), tokens, reps, threads);
  std::printf(
      "median TPOT in-process %.3f ms, through HTTP+SSE %.3f ms: ratio of medians %.4f, "
      "median of pair ratios %.4f\n",
      median(a), median(b), median(b) / median(a), median(ratio));
  std::printf("same request, client TPOT / engine TPOT (plumb_timings): median %.4f, min %.4f, max %.4f\n",
              median(same), *std::min_element(same.begin(), same.end()),
              *std::max_element(same.begin(), same.end()));
  srv.drain(std::chrono::milliseconds(1000));
  be.stop();
  return 0;
}
