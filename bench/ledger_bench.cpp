// Ledger write throughput: one million per-request records, one transaction per run of 10,000
// records (how `plumb bench` writes a run), through the same prepared-statement path and with every
// validator trigger active. Target on the 2-core dev machine: under 10 s for the million.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ledger/ledger.h"

namespace {

using namespace plumb::ledger;

void BM_LedgerInsertRequests(benchmark::State& state) {
  const int64_t per_run = state.range(0);
  const int64_t total = state.range(1);
  std::vector<RequestRow> reqs(static_cast<size_t>(per_run));
  for (int64_t i = 0; i < per_run; ++i) {
    RequestRow& r = reqs[size_t(i)];
    r.idx = i;
    r.request_hash = std::string(64, '1');
    r.input_tokens = 512;
    r.output_requested = r.output_server = r.output_local = 64;
    r.scheduled_ns = i * 1000;
    r.sent_ns = i * 1000 + 10;
    r.first_token_ns = i * 1000 + 5000;
    r.end_ns = i * 1000 + 90000;
  }
  for (auto _ : state) {
    state.PauseTiming();
    char tmpl[] = "/tmp/plumb_ledger_bench_XXXXXX";
    std::string dir = mkdtemp(tmpl);
    auto l = Ledger::open(dir + "/bench.db");
    if (!l.ok()) {
      state.SkipWithError(l.status().to_string().c_str());
      return;
    }
    Ledger& led = **l;
    std::string h(64, 'a');
    int64_t m = *led.insert_machine({h, "cpu", 2, 1 << 30, "none", "none", "Linux"});
    int64_t b = *led.insert_build({"0.1.0", "abc", "Release", "GNU"});
    int64_t p = *led.insert_protocol({1, h, "{}"});
    int64_t s = *led.insert_request_set({h, "A", "small", 21, per_run});
    RunRow run;
    run.machine_id = m;
    run.build_id = b;
    run.protocol_id = p;
    run.request_set_id = s;
    run.scenario = "A";
    run.size_class = "small";
    run.target_engine = "plumb";
    run.engine_config = "{}";
    run.engine_config_hash = h;
    run.model_identity = "dummy:0";
    run.effective_settings = "{}";
    run.started_at = run.ended_at = "2026-01-01T00:00:00.000Z";
    run.valid = true;
    run.validity_json = "[]";
    run.objective = 1.0;
    state.ResumeTiming();
    for (int64_t done = 0; done < total; done += per_run) {
      auto id = led.insert_run(run, reqs, {});
      if (!id.ok()) {
        state.SkipWithError(id.status().to_string().c_str());
        break;
      }
    }
    state.PauseTiming();
    l->reset();
    std::filesystem::remove_all(dir);
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * total);
}
BENCHMARK(BM_LedgerInsertRequests)->Args({10000, 1000000})->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
