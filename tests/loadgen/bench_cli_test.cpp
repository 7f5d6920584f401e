// End to end: the real `plumb bench` binary against the in-process null target. Checks outputs,
// replay of a saved request set, and that bad input is a usage error naming the problem. No timing
// assertions: whether the run is VALID depends on the machine, so only its consistency is checked.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "ledger/ledger.h"
#include "server/serve_helpers.h"

namespace plumb {
namespace {

struct Out {
  int code = -1;
  std::string out, err;
};

Out run_plumb(std::vector<std::string> args) {
  // Per-test file names: ctest runs the tests of this file in parallel processes.
  std::string dir = ::testing::TempDir() + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  SpawnOptions o;
  o.argv = {PLUMB_BINARY, "bench"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = dir + ".out";
  o.stderr_path = dir + ".err";
  auto p = Subprocess::spawn(o);
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return {};
  ExitInfo e = p->wait();
  Out r;
  r.code = e.exited ? e.exit_code : -1;
  r.out = read_file(o.stdout_path).value();
  r.err = read_file(o.stderr_path).value();
  return r;
}

TEST(BenchCli, NullTargetWritesJsonCsvAndAReplayableRequestSet) {
  std::string dir = ::testing::TempDir();
  std::string j = dir + "/cli_b.json", c = dir + "/cli_b.csv", r = dir + "/cli_b.jsonl";
  Out o = run_plumb({"--target", "null", "--input-len", "16", "--output-len", "8", "--num-prompts", "20",
                     "--arrival", "constant", "--request-rate", "2000", "--json", j, "--csv", c,
                     "--save-requests", r, "--quiet"});
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok());
  const auto& obj = v->as_object();
  EXPECT_EQ(obj.at("schema_version").as_int64(), 3);
  // The null target sends no server timings: the block says so instead of inventing figures.
  const auto& st = obj.at("server_timings").as_object();
  EXPECT_TRUE(st.at("source").is_null());
  EXPECT_EQ(st.at("requests").as_int64(), 0);
  EXPECT_NE(std::string(st.at("unavailable").as_string()).find("sent no timings object"), std::string::npos);
  EXPECT_NE(o.out.find("server timings: none"), std::string::npos) << o.out;
  EXPECT_EQ(obj.at("validity").at("valid").as_bool(), o.code == 0);
  EXPECT_EQ(obj.at("counts").at("requests").as_int64(), 20);
  EXPECT_EQ(obj.at("counts").at("completed").as_int64(), 20);
  EXPECT_EQ(obj.at("counts").at("warmup").as_int64(), 1);
  EXPECT_EQ(obj.at("load").at("arrival").as_string(), "constant");
  EXPECT_EQ(obj.at("settings").at("num_prompts").as_int64(), 20);
  std::string set_hash(obj.at("request_set_hash").as_string());
  std::string csv = read_file(c).value();
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 21);
  EXPECT_NE(o.out.find("validity: "), std::string::npos);

  // Replaying the saved set sends byte-identical requests: same set hash.
  Out again = run_plumb({"--target", "null", "--requests", r, "--json", j, "--quiet"});
  ASSERT_TRUE(again.code == 0 || again.code == 1) << again.err;
  EXPECT_EQ(json::parse_file(j)->as_object().at("request_set_hash").as_string(), set_hash);

  // A tampered request file is a usage error naming the line.
  std::string text = read_file(r).value();
  size_t second = text.find('\n') + 1;
  size_t at = text.find("\"max_tokens\":", second);
  text.replace(at, 13, "\"max_tokens\":9");
  ASSERT_TRUE(write_file_atomic(r, text).ok());
  Out bad = run_plumb({"--target", "null", "--requests", r, "--quiet"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("line 2: content hash mismatch"), std::string::npos) << bad.err;
}

TEST(BenchCli, BadInputIsAUsageError) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"--target", "null", "--serve-args", "--preset naive", "--input-len", "8", "--output-len", "4",
        "--num-prompts", "2"},
       "--serve-args applies only when plumb starts its own server"},
      {{"--target", "null", "--input-len", "8", "--output-len", "4", "--num-prompts", "2", "--slo", "itl=5"},
       "unknown SLO 'itl'"},
      {{"--target", "null", "--requests", "/nonexistent/set.jsonl"}, "/nonexistent/set.jsonl"},
      {{"--target", "null", "--input-len", "8", "--output-len", "4"}, "--num-prompts"},
      {{"--target", "null", "--input-len", "8", "--output-len", "4", "--num-prompts", "2", "--arrival",
        "bursty"},
       "unknown arrival kind 'bursty'"},
      {{"--target", "null", "--scenario", "E"}, "E"},
      {{"--target", "https://example.com", "--input-len", "8", "--output-len", "4", "--num-prompts", "2"},
       "https"},
      {{"--target", "null", "--input-len", "8", "--output-len", "4", "--num-prompts", "2", "--ledger",
        "/nonexistent/plumb.db"},
       "--ledger records protocol scenario runs"},
  };
  for (const auto& c : cases) {
    Out o = run_plumb(c.args);
    EXPECT_EQ(o.code, 2) << c.expect << "\n" << o.err;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << o.err;
  }
}

// With no --target, plumb starts its own `plumb serve` (shipped model) through launch/, benchmarks it,
// says so, records it in the settings, and stops it; the log stays.
TEST(BenchCli, WithoutTargetStartsAndStopsItsOwnPlumbServe) {
  std::string j = ::testing::TempDir() + "/cli_self.json";
  Out o = run_plumb({"--input-len", "48", "--output-len", "8", "--num-prompts", "4", "--max-concurrency", "2",
                     "--json", j, "--quiet"});
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  EXPECT_NE(o.err.find("benchmarking plumb serve started by plumb at http://127.0.0.1:"), std::string::npos)
      << o.err;
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const auto& obj = v->as_object();
  EXPECT_EQ(obj.at("counts").at("completed").as_int64(), 4) << o.err;
  const auto& s = obj.at("settings").as_object();
  const auto& l = s.at("launched_server").as_object();
  EXPECT_EQ(l.at("adapter").as_string(), "plumb");
  EXPECT_TRUE(l.at("port_owner_verified").as_bool());
  EXPECT_EQ(s.at("target").as_string(), l.at("base_url").as_string());
  // Prompts sized with the shipped model's tokenizer, not words (they must fit its context).
  EXPECT_NE(std::string(s.at("tokenizer").as_string()).find("plumb-tiny"), std::string::npos);
  // The launched server answered as the verified target: the validity list says so.
  bool verified = false;
  for (const auto& c : obj.at("validity").at("constraints").as_array())
    if (c.at("name").as_string() == "target_verified") verified = c.at("verdict").as_string() == "pass";
  EXPECT_TRUE(verified) << json::dump(obj.at("validity"));
  // plumb serve ends each stream with plumb_timings: every request's TTFT and TPOT against the
  // server's own. The server's TTFT (arrival to first token) lies inside plumb's (send to first
  // token read), so no difference may be negative; a unit mix-up (seconds for ms) would make them so.
  const auto& st = obj.at("server_timings").as_object();
  EXPECT_EQ(st.at("version").as_int64(), 1);
  EXPECT_EQ(st.at("source").as_string(), "plumb");
  EXPECT_EQ(st.at("requests").as_int64(), 4);
  EXPECT_GE(st.at("ttft").at("diff_ms").at("min").as_double(), 0.0) << json::dump(st);
  EXPECT_GT(st.at("ttft").at("server_p50_ms").as_double(), 0.0);
  EXPECT_LE(st.at("ttft").at("server_p50_ms").as_double(),
            obj.at("latency_ms").at("ttft").at("p50").as_double());
  EXPECT_EQ(st.at("tpot").at("diff_ms").at("count").as_int64(), 4);
  EXPECT_NE(o.out.find("server timings (plumb, 4 requests)"), std::string::npos) << o.out;
  // Stopped at the end (the whole group), its log kept.
  pid_t pid = pid_t(l.at("pid").as_int64());
  EXPECT_NE(::kill(pid, 0), 0);
  auto log = read_file(std::string(l.at("log").as_string()));
  ASSERT_TRUE(log.ok()) << log.status().to_string();
  EXPECT_NE(log->find("listening on"), std::string::npos);
  // The kept log's directory is plumb bench's own ($TMPDIR/plumb-bench-serve-<pid>): tidy up.
  std::filesystem::remove_all(std::filesystem::path(std::string(l.at("log").as_string())).parent_path());
}

// A run whose every request the server refused says why: the first failure of each category with
// the server's own message. Here the real plumb serve (plumb-tiny, a 512-token context) gets prompts
// sized in words (no --tokenizer against a --target) far past its context.
TEST(BenchCli, RefusedRequestsShowTheServersMessage) {
  testing::ServeProcess server;
  std::string error;
  ASSERT_TRUE(server.start({}, &error)) << error;
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  Out o = run_plumb({"--target", url, "--model", "plumb-tiny", "--input-len", "3000", "--output-len", "4",
                     "--num-prompts", "3", "--max-concurrency", "1"});
  EXPECT_NE(o.out.find("failures: http_4xx=3"), std::string::npos) << o.out << o.err;
  EXPECT_NE(o.out.find("  first http_4xx (request 0): http_status"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("context"), std::string::npos) << o.out;  // the server's words, not only a count
}

// --no-keep-alive against the real plumb serve: every measured request opened its own connection
// (a connect time in the CSV), and the effective settings say so.
TEST(BenchCli, NoKeepAliveGivesEveryRequestItsOwnConnection) {
  std::string j = ::testing::TempDir() + "/cli_nka.json", c = ::testing::TempDir() + "/cli_nka.csv";
  Out o = run_plumb({"--input-len", "32", "--output-len", "4", "--num-prompts", "5", "--max-concurrency", "2",
                     "--no-keep-alive", "--json", j, "--csv", c, "--quiet"});
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->at("counts").at("completed").as_int64(), 5) << o.err;
  EXPECT_FALSE(v->at("settings").at("measure").at("keep_alive").as_bool());
  std::string csv = read_file(c).value();
  size_t rows = 0;
  for (size_t pos = csv.find('\n') + 1; pos < csv.size(); pos = csv.find('\n', pos) + 1) {
    std::string line = csv.substr(pos, csv.find('\n', pos) - pos);
    // connect_ms is the second-to-last column: non-empty for a request that opened its connection.
    size_t last = line.rfind(','), before = line.rfind(',', last - 1);
    EXPECT_GT(last - before, 1u) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 5u);
}

TEST(BenchCli, OwnServerThatFailsToStartIsAClearError) {
  Out o = run_plumb({"--serve-args", "--no-such-flag", "--input-len", "8", "--output-len", "4",
                     "--num-prompts", "2", "--quiet"});
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_NE(o.err.find("starting plumb serve (no --target given)"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("--no-such-flag"), std::string::npos) << o.err;  // the log tail names it
  // The error names the kept log; its directory is plumb bench's own: tidy up.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.err, m, std::regex("(/[^ ]*/plumb-bench-serve-[0-9]+)/"))) << o.err;
  std::filesystem::remove_all(m[1].str());
}

// A request file as users write them for OpenAI servers (no "hash" fields): accepted, hashed by plumb,
// and said so; the computed set hash is the one a saved (hashed) copy of the same requests carries.
TEST(BenchCli, OpenAiStyleRequestFileWithoutHashesIsHashedAndSaysSo) {
  std::string dir = ::testing::TempDir();
  std::string own = dir + "/cli_own.jsonl", saved = dir + "/cli_own_saved.jsonl", j = dir + "/cli_own.json";
  ASSERT_TRUE(write_file_atomic(
                  own,
                  "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi there\"}], "
                  "\"max_tokens\": 8, \"stream\": true}\n"
                  "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"and again\"}], "
                  "\"max_tokens\": 4, \"temperature\": 0.5}\n")
                  .ok());
  Out o = run_plumb({"--target", "null", "--requests", own, "--warmup", "0", "--json", j, "--save-requests",
                     saved, "--quiet"});
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  EXPECT_NE(o.err.find("2 of 2 requests had no \"hash\": computed their content hashes"), std::string::npos)
      << o.err;
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->as_object().at("counts").at("requests").as_int64(), 2);
  EXPECT_EQ(v->as_object().at("settings").at("requests_hashes_computed").as_int64(), 2);
  std::string set_hash(v->as_object().at("request_set_hash").as_string());

  Out again = run_plumb({"--target", "null", "--requests", saved, "--warmup", "0", "--json", j, "--quiet"});
  ASSERT_TRUE(again.code == 0 || again.code == 1) << again.err;
  EXPECT_EQ(again.err.find("had no \"hash\""), std::string::npos) << again.err;
  EXPECT_EQ(json::parse_file(j)->as_object().at("request_set_hash").as_string(), set_hash);
}

// --ledger records the run with its provenance through the ledger's public API, as compare does.
TEST(BenchCli, LedgerRecordsAScenarioRunWithItsProvenance) {
  std::string db = ::testing::TempDir() + "/cli_bench_ledger_" + std::to_string(::getpid()) + ".db";
  std::filesystem::remove(db);
  Out o = run_plumb({"--target", "null", "--scenario", "D", "--size", "small", "--seed", "21", "--tokenizer",
                     "words", "--ledger", db, "--quiet"});
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  EXPECT_NE(o.err.find("recorded run 1 in " + db), std::string::npos) << o.err;
  auto l = ledger::Ledger::open(db);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto runs = (*l)->list_runs();
  ASSERT_TRUE(runs.ok()) << runs.status().to_string();
  ASSERT_EQ(runs->size(), 1u);
  const auto& r = (*runs)[0];
  EXPECT_EQ(r.scenario, "D");
  EXPECT_EQ(r.size_class, "small");
  EXPECT_EQ(r.target_engine, "null");
  EXPECT_EQ(r.valid, o.code == 0);
  EXPECT_TRUE(r.objective.has_value());
  auto requests = (*l)->dump("requests", r.id);
  ASSERT_TRUE(requests.ok()) << requests.status().to_string();
  EXPECT_EQ(requests->rows.size(), 64u);  // scenario D small's requests, each with its accounting
  std::filesystem::remove(db);
}

// SIGKILL cannot be caught, so the engine plumb started must die by itself with the plumb that
// started it (PR_SET_PDEATHSIG), not keep holding its port and cores.
TEST(BenchCli, TheEngineDiesWithAPlumbThatIsKilled) {
  std::string dir = ::testing::TempDir() + "/cli_pdeath_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  SpawnOptions o;
  o.argv = {PLUMB_BINARY, "bench",         "--input-len", "48",     "--output-len",
            "64",         "--num-prompts", "500",         "--quiet"};
  o.stdout_path = dir + "/out";
  o.stderr_path = dir + "/err";
  auto p = Subprocess::spawn(o);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  // Wait (bounded) for the line naming the engine's pid.
  std::smatch m;
  std::string err;
  for (int i = 0; i < 600; ++i) {
    err = read_file(o.stderr_path).value();
    if (std::regex_search(err, m, std::regex("started by plumb at [^ ]+ \\(pid ([0-9]+), log ([^)]+)\\)")))
      break;
    if (!p->running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(m.size(), 3u) << err;
  pid_t engine = pid_t(std::stol(m[1].str()));
  std::string log_dir = std::filesystem::path(m[2].str()).parent_path().string();
  ASSERT_EQ(::kill(engine, 0), 0) << "the engine should be running";
  ::kill(p->pid(), SIGKILL);
  p->wait();
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    // A killed child that nobody reaped is a zombie: it holds no port or core any more.
    auto stat_text = read_file("/proc/" + std::to_string(engine) + "/stat");
    std::string stat = stat_text.ok() ? *stat_text : std::string();
    gone = ::kill(engine, 0) != 0 || stat.find(") Z ") != std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "engine pid " << engine << " outlived the SIGKILLed plumb bench";
  std::filesystem::remove_all(log_dir);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb
