// Ledger write throughput: one million per-request records, one transaction per run of 10,000
// records (how `plumb bench` writes a run), through the same prepared-statement path and with every
// validator trigger active, each run sealed. Target on the 2-core dev machine: under 5 s for the
// million on SQLite; under 15 s on a local PostgreSQL (BM_LedgerInsertRequestsPostgres: COPY per
// run, the database named by PLUMB_BENCH_POSTGRES, a server URL: a fresh database is created on it
// and dropped after; skipped without it). And the cost of sealing alone: Ledger::seal_run on a stored run of
// N per-request rows with its headline metrics (the triggers recompute TTFT p50, TPOT p50, req/s and the
// objective from the rows; plumb hashes the run's content).
#include <benchmark/benchmark.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ledger/ledger.h"
#include "protocol/protocol.h"

#ifdef PLUMB_HAVE_POSTGRES
#include <pqxx/pqxx>
#endif

namespace {

using namespace plumb::ledger;

// Opens a fresh ledger for one iteration; `done` cleans up after it.
using Fresh = std::function<std::string(std::function<void()>* done)>;

void insert_requests(benchmark::State& state, const Fresh& fresh) {
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
    std::function<void()> cleanup;
    std::string where = fresh(&cleanup);
    if (where.empty()) {
      state.SkipWithError("no database to write to (PLUMB_BENCH_POSTGRES unset or unreachable)");
      return;
    }
    auto l = Ledger::open(where);
    if (!l.ok()) {
      state.SkipWithError(l.status().to_string().c_str());
      return;
    }
    Ledger& led = **l;
    std::string h(64, 'a');
    int64_t m = *led.insert_machine({h, "cpu", 2, 1 << 30, "none", "none", "Linux"});
    int64_t b = *led.insert_build({"0.1.0", "abc", "Release", "GNU"});
    int64_t p = *led.insert_protocol(
        {plumb::protocol::kVersion, plumb::protocol::protocol_hash(), plumb::protocol::canonical_json()});
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
    run.objective = 1000.0 / (4990 / 1e6);  // scenario A: 1 / median TTFT, as the rows give it
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
    cleanup();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * total);
}

void BM_LedgerInsertRequests(benchmark::State& state) {
  insert_requests(state, [](std::function<void()>* done) {
    char tmpl[] = "/tmp/plumb_ledger_bench_XXXXXX";
    std::string dir = mkdtemp(tmpl);
    *done = [dir] { std::filesystem::remove_all(dir); };
    return dir + "/bench.db";
  });
}
BENCHMARK(BM_LedgerInsertRequests)->Args({10000, 1000000})->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_LedgerInsertRequestsPostgres(benchmark::State& state) {
  insert_requests(state, [](std::function<void()>* done) -> std::string {
    *done = [] {};
    const char* env = std::getenv("PLUMB_BENCH_POSTGRES");
    if (!env || !*env) return "";
#ifdef PLUMB_HAVE_POSTGRES
    std::string admin = env;
    std::string name = "plumb_bench_" + std::to_string(getpid());
    try {
      pqxx::connection c(admin);
      pqxx::nontransaction w(c);
      w.exec("DROP DATABASE IF EXISTS " + name);
      w.exec("CREATE DATABASE " + name);
    } catch (const std::exception&) {
      return "";
    }
    *done = [admin, name] {
      try {
        pqxx::connection c(admin);
        pqxx::nontransaction w(c);
        w.exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
      } catch (const std::exception&) {
      }
    };
    size_t slash = admin.find('/', admin.find("://") + 3);
    return (slash == std::string::npos ? admin : admin.substr(0, slash)) + "/" + name;
#else
    return "";
#endif
  });
}
BENCHMARK(BM_LedgerInsertRequestsPostgres)
    ->Args({10000, 1000000})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// One run of n rows written and sealed: insert_run (rows, metrics and seal in one transaction), and
// seal_run alone on the same content written unsealed through raw SQL.
struct SealFixture {
  std::string dir;
  std::unique_ptr<Ledger> led;
  sqlite3* raw = nullptr;
  RunRow run;
  std::vector<RequestRow> reqs;
  std::vector<MetricRow> metrics;
  explicit SealFixture(int64_t n) {
    char tmpl[] = "/tmp/plumb_ledger_seal_XXXXXX";
    dir = mkdtemp(tmpl);
    led = std::move(Ledger::open(dir + "/seal.db")).value();
    sqlite3_open((dir + "/seal.db").c_str(), &raw);
    std::string h(64, 'a');
    run.machine_id = *led->insert_machine({h, "cpu", 2, 1 << 30, "none", "none", "Linux"});
    run.build_id = *led->insert_build({"0.1.0", "abc", "Release", "GNU"});
    run.protocol_id = *led->insert_protocol(
        {plumb::protocol::kVersion, plumb::protocol::protocol_hash(), plumb::protocol::canonical_json()});
    run.request_set_id = *led->insert_request_set({h, "D", "small", 21, n});
    run.scenario = "D";
    run.size_class = "small";
    run.target_engine = "plumb";
    run.engine_config = "{}";
    run.engine_config_hash = h;
    run.model_identity = "dummy:0";
    run.effective_settings = "{}";
    run.started_at = run.ended_at = "2026-01-01T00:00:00.000Z";
    run.valid = true;
    run.validity_json = "[]";
    // Burst at concurrency 4: sends every 25 ms, TTFT 5..9 ms, 64 tokens 2 ms apart.
    for (int64_t i = 0; i < n; ++i) {
      RequestRow r;
      r.idx = i;
      r.request_hash = h;
      r.input_tokens = 256;
      r.output_requested = r.output_server = r.output_local = 64;
      r.scheduled_ns = 0;
      r.sent_ns = i * 25'000'000;
      r.first_token_ns = r.sent_ns + 5'000'000 + (i % 5) * 1'000'000;
      r.end_ns = r.first_token_ns + 63 * 2'000'000;
      reqs.push_back(r);
    }
    double ttft = 7.0, tpot = 2.0;  // medians of the rows above
    int64_t last_send = (n - 1) * 25'000'000, first_end = 5'000'000 + 126'000'000;
    int64_t counted = 0;
    for (const auto& r : reqs) counted += r.end_ns > first_end && r.end_ns <= last_send;
    double rps = double(counted) / (last_send / 1e9 - first_end / 1e9);
    run.objective = std::cbrt(1000.0 / ttft * (1000.0 / tpot) * rps);
    metrics = {{"ttft_p50_ms", ttft, "ms"},
               {"tpot_p50_ms", tpot, "ms"},
               {"request_throughput", rps, "req/s"},
               {"objective", *run.objective, "1"}};
  }
  ~SealFixture() {
    sqlite3_close(raw);
    led.reset();
    std::filesystem::remove_all(dir);
  }
  // The run and its rows written without a seal (raw SQL, one transaction); returns its id.
  int64_t write_unsealed() {
    sqlite3_exec(raw, "BEGIN", nullptr, nullptr, nullptr);
    char sql[1024];
    std::snprintf(
        sql, sizeof sql,
        "INSERT INTO runs (machine_id, build_id, protocol_id, request_set_id, scenario, size_class, "
        "target_engine, engine_config, engine_config_hash, model_identity, seed, effective_settings, "
        "started_at, ended_at, valid, validity_json, gate_status, objective) VALUES (%lld, %lld, "
        "%lld, %lld, 'D', 'small', 'plumb', '{}', '%s', 'dummy:0', 0, '{}', "
        "'2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z', 1, '[]', 'not_run', %.17g)",
        (long long)run.machine_id, (long long)run.build_id, (long long)run.protocol_id,
        (long long)run.request_set_id, run.engine_config_hash.c_str(), *run.objective);
    sqlite3_exec(raw, sql, nullptr, nullptr, nullptr);
    int64_t id = sqlite3_last_insert_rowid(raw);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(
        raw,
        "INSERT INTO requests (run_id, idx, profile, request_hash, status, input_tokens, "
        "output_requested, output_server, output_local, scheduled_ns, sent_ns, first_token_ns, "
        "end_ns) VALUES (?, ?, 0, ?, 'ok', ?, ?, ?, ?, ?, ?, ?, ?)",
        -1, &st, nullptr);
    for (const auto& r : reqs) {
      sqlite3_reset(st);
      sqlite3_bind_int64(st, 1, id);
      sqlite3_bind_int64(st, 2, r.idx);
      sqlite3_bind_text(st, 3, r.request_hash.c_str(), -1, SQLITE_STATIC);
      int64_t v[] = {r.input_tokens, r.output_requested, r.output_server,  r.output_local,
                     r.scheduled_ns, r.sent_ns,          r.first_token_ns, r.end_ns};
      for (int k = 0; k < 8; ++k) sqlite3_bind_int64(st, 4 + k, v[k]);
      sqlite3_step(st);
    }
    sqlite3_finalize(st);
    for (const auto& m : metrics) {
      std::snprintf(sql, sizeof sql,
                    "INSERT INTO metrics (run_id, name, value, unit) VALUES (%lld, '%s', %.17g, '%s')",
                    (long long)id, m.name.c_str(), m.value, m.unit.c_str());
      sqlite3_exec(raw, sql, nullptr, nullptr, nullptr);
    }
    sqlite3_exec(raw, "COMMIT", nullptr, nullptr, nullptr);
    return id;
  }
};

void BM_LedgerInsertSealedRun(benchmark::State& state) {
  SealFixture f(state.range(0));
  for (auto _ : state) {
    auto id = f.led->insert_run(f.run, f.reqs, f.metrics);
    if (!id.ok()) {
      state.SkipWithError(id.status().to_string().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_LedgerInsertSealedRun)->Arg(1000)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_LedgerSealRun(benchmark::State& state) {
  SealFixture f(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    int64_t id = f.write_unsealed();
    state.ResumeTiming();
    auto s = f.led->seal_run(id);
    if (!s.ok()) {
      state.SkipWithError(s.status().to_string().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_LedgerSealRun)->Arg(1000)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
