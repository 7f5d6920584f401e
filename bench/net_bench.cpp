// SSE throughput of net/ on loopback: one client thread (HttpClient on one io_context, parsing
// every event with SseParser, as the load generator does) against an in-process HttpServer fed by
// one "engine" thread. Reports events/s and the client thread's CPU µs per event. The server
// shares the machine, so events/s is a lower bound on the client's own ceiling; the CPU figure is
// the client's alone.
#include <benchmark/benchmark.h>
#include <time.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <mutex>
#include <thread>

#include "net/http_client.h"
#include "net/http_server.h"
#include "net/sse.h"

namespace plumb::net {
namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// An OpenAI-style chat.completion.chunk of ~150 bytes.
std::string token_event(int i) {
  return sse_format_data(R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",)"
                         R"("choices":[{"index":0,"delta":{"content":"tok)" +
                         std::to_string(i) + R"("},"finish_reason":null}]})");
}

// args: concurrent streams, events per stream, events per server write.
void BM_SseOneClientThread(benchmark::State& state) {
  const int streams = static_cast<int>(state.range(0));
  const int events = static_cast<int>(state.range(1));
  const int per_write = static_cast<int>(state.range(2));

  HttpServer server(HttpServerOptions{.io_threads = 1});
  std::mutex mu;
  std::vector<std::shared_ptr<ResponseWriter>> incoming;
  server.route("POST", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->start_stream(200, "text/event-stream");
    std::lock_guard lock(mu);
    incoming.push_back(std::move(w));
  });
  if (!server.start().ok()) {
    state.SkipWithError("server did not start");
    return;
  }
  std::atomic<bool> quit{false};
  std::thread engine([&] {
    struct Live {
      std::shared_ptr<ResponseWriter> w;
      int sent = 0;
    };
    std::vector<Live> live;
    std::vector<std::string> batch_cache;
    while (!quit) {
      {
        std::lock_guard lock(mu);
        for (auto& w : incoming) live.push_back({std::move(w), 0});
        incoming.clear();
      }
      bool did = false;
      for (auto& l : live) {
        if (!l.w) continue;
        if (l.w->queued_bytes() > (256 << 10)) continue;  // the client is behind: skip a round
        std::string chunk;
        for (int k = 0; k < per_write && l.sent < events; ++k) chunk += token_event(l.sent++);
        if (l.sent >= events) {
          chunk += sse_format_data("[DONE]");
          l.w->write(std::move(chunk));
          l.w->end();
          l.w.reset();
        } else {
          l.w->write(std::move(chunk));
        }
        did = true;
      }
      std::erase_if(live, [](const Live& l) { return !l.w; });
      if (!did) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });

  boost::asio::io_context io;
  auto client = HttpClient::create(io, "http://127.0.0.1:" + std::to_string(server.port()));
  uint64_t total_events = 0, failures = 0;
  double cpu = 0;
  for (auto _ : state) {
    struct Stream {
      SseParser parser;
      std::vector<SseEvent> scratch;
      uint64_t events = 0;
    };
    std::vector<Stream> ss(static_cast<std::size_t>(streams));
    for (auto& st : ss) {
      ClientRequest req;
      req.target = "/stream";
      req.body = R"({"stream":true})";
      ClientCallbacks cb;
      cb.on_body = [&st](std::string_view b, SteadyTime) {
        st.scratch.clear();
        if (st.parser.feed(b, st.scratch).ok()) st.events += st.scratch.size();
      };
      cb.on_done = [&failures](ClientResult&& r) { failures += r.ok() ? 0 : 1; };
      (*client)->submit(std::move(req), std::move(cb));
    }
    double c0 = thread_cpu_seconds();
    io.restart();
    io.run();
    cpu += thread_cpu_seconds() - c0;
    for (auto& st : ss) total_events += st.events;
  }
  quit = true;
  engine.join();
  server.stop(std::chrono::milliseconds(1000));
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(total_events), benchmark::Counter::kIsRate);
  state.counters["client_cpu_us_per_event"] =
      total_events ? cpu * 1e6 / static_cast<double>(total_events) : 0;
  state.counters["failures"] = static_cast<double>(failures);
}

BENCHMARK(BM_SseOneClientThread)
    ->ArgNames({"streams", "events", "per_write"})
    ->Args({1, 20000, 1})
    ->Args({100, 500, 1})
    ->Args({1000, 50, 1})
    ->Args({100, 2000, 8})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace plumb::net

BENCHMARK_MAIN();
