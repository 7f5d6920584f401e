// The one measurement path end to end, against the real `plumb serve --engine synthetic` and the real
// launcher: `plumb bench` and compare::measure (what compare, tune and evaluate call) account every
// request's tokens the same way and reach the same validity verdict on the same request set; and each
// Outcome is classified from what happened (an engine that exits, one that never becomes ready, a run
// past its limit, a broken rule, a target nobody answers), never from message text.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compare/measure.h"
#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "launch/launcher.h"
#include "launch/port.h"

namespace plumb::compare {
namespace {

class MeasureE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("plumb_measure_e2e_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .lexically_normal()
               .string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_);
  }

  // `plumb serve --engine synthetic` through the plumb adapter, with these delays.
  static launch::EngineConfig synthetic(double ttft_ms, double itl_ms) {
    launch::EngineConfig c;
    c.adapter = "plumb";
    c.resolved = launch::builtin_adapter("plumb").value();
    c.params = {{"plumb_binary", std::string(PLUMB_BINARY)},
                {"engine", std::string("synthetic")},
                {"ttft_ms", ttft_ms},
                {"itl_ms", itl_ms},
                {"threads", int64_t(1)}};
    return c;
  }
  // An adapter whose command is `argv` (placeholders allowed) with this readiness timeout.
  static launch::EngineConfig script(const std::string& argv_toml, int readiness_s) {
    auto a = launch::parse_adapter("name = \"script\"\ncommand = " + argv_toml +
                                   "\nhealth_url = \"http://127.0.0.1:{port}/health\"\n"
                                   "readiness_timeout_s = " +
                                   std::to_string(readiness_s) + "\n");
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    launch::EngineConfig c;
    c.adapter = "script";
    c.resolved = *a;
    return c;
  }
  static Workload scenario_d(uint64_t seed) {
    auto counter = make_token_counter("");
    EXPECT_TRUE(counter.ok()) << counter.status().to_string();
    auto sc = protocol::find_scenario("D", protocol::SizeClass::kSmall);
    EXPECT_TRUE(sc.ok());
    auto w = make_workload(*sc, seed, *counter);
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    return *w;
  }
  MeasureOptions options() const {
    MeasureOptions o;
    o.work_dir = dir_;
    o.progress = [](const std::string&) {};
    return o;
  }

  std::string dir_;
};

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string f; std::getline(in, f, ',');) out.push_back(f);
  return out;
}

// One request set through `plumb bench` and through measure(), against one running synthetic server:
// the same per-request token accounting and the same validity verdict.
TEST_F(MeasureE2eTest, BenchAndMeasureAccountTheSameRequestSetTheSameWay) {
  auto cfg = synthetic(2.0, 1.0);
  auto spec = launch::render(cfg.resolved, cfg.params, launch::pick_free_port().value());
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  launch::LaunchOptions lo;
  lo.work_dir = dir_;
  lo.progress = [](const std::string&) {};
  auto server = launch::Engine::start(*spec, lo);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string url = (*server)->base_url();

  // plumb bench: scenario D (small), seed 21, prompts sized in the shipped tokenizer (as compare does).
  auto tokenizer = default_tokenizer_dir();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  const std::string csv = dir_ + "/bench.csv", js = dir_ + "/bench.json";
  SpawnOptions so;
  so.argv = {PLUMB_BINARY,  "bench",    "--target", url, "--scenario", "D", "--size", "small", "--seed", "21",
             "--tokenizer", *tokenizer, "--csv",    csv, "--json",     js,  "--quiet"};
  so.stdout_path = dir_ + "/bench.out";
  so.stderr_path = dir_ + "/bench.err";
  auto bench = Subprocess::spawn(so);
  ASSERT_TRUE(bench.ok()) << bench.status().to_string();
  ExitInfo e = bench->wait();
  ASSERT_TRUE(e.exited && (e.exit_code == 0 || e.exit_code == 1)) << read_file(so.stderr_path).value();

  // measure() on the same server with the workload compare draws for scenario D, seed 21.
  Workload w = scenario_d(21);
  auto m = measure(Subject{.url = url}, w, options());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(m->started);

  auto report = json::parse_file(js);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  const auto& r = report->as_object();
  EXPECT_EQ(r.at("profiles").as_array()[0].at("request_set_hash").as_string(), w.set.set_hash);

  // Per request: hash, status, requested, server-reported and locally re-counted output tokens.
  std::string text = read_file(csv).value();
  std::stringstream lines(text);
  std::string line;
  std::getline(lines, line);
  auto header = split_csv_line(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  size_t n = 0;
  for (; std::getline(lines, line); ++n) {
    auto f = split_csv_line(line);
    ASSERT_LT(n, m->requests.size());
    const auto& q = m->requests[n];
    SCOPED_TRACE("request " + std::to_string(n));
    EXPECT_EQ(f[col.at("index")], std::to_string(q.idx));
    EXPECT_EQ(f[col.at("hash")], q.request_hash);
    EXPECT_EQ(f[col.at("status")], q.status);
    EXPECT_EQ(f[col.at("requested_output_tokens")], std::to_string(q.output_requested));
    EXPECT_EQ(f[col.at("usage_output_tokens")], std::to_string(q.output_server));
    EXPECT_EQ(f[col.at("local_output_tokens")], std::to_string(q.output_local));
  }
  EXPECT_EQ(n, m->requests.size());
  EXPECT_EQ(n, w.set.requests.size());

  // The same constraints with the same verdicts. The client's send lag is a property of the moment
  // (this machine is shared), so it alone may differ between the two runs; when it agrees, so does
  // the whole verdict.
  const auto& bench_constraints = r.at("profiles").as_array()[0].at("validity").at("constraints").as_array();
  ASSERT_EQ(bench_constraints.size(), m->validity[0].size());
  bool lag_agrees = true;
  for (size_t i = 0; i < bench_constraints.size(); ++i) {
    const auto& c = m->validity[0][i];
    EXPECT_EQ(bench_constraints[i].at("name").as_string(), c.name);
    bool same = bench_constraints[i].at("verdict").as_string() == metrics::verdict_name(c.verdict);
    if (c.name == "send_lag_p99_ms") {
      lag_agrees = same;
    } else {
      EXPECT_TRUE(same) << c.name;
    }
  }
  if (lag_agrees) {
    EXPECT_EQ(r.at("valid").as_bool(), m->valid);
    EXPECT_EQ(r.at("outcome").as_string(), outcome_name(m->outcome));
  }
  EXPECT_EQ(r.at("valid").as_bool(), e.exit_code == 0);
}

TEST_F(MeasureE2eTest, AnEngineThatExitsDuringStartUpCrashed) {
  Workload w = scenario_d(21);
  auto m = measure(script(R"(["sh", "-c", "echo no model here; exit 3"])", 30), *w.scenario, w, options());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_FALSE(m->started);
  EXPECT_EQ(m->outcome, Outcome::kCrashed);
  EXPECT_EQ(m->start_failure, launch::StartFailure::kExited);
  EXPECT_FALSE(m->valid);
  EXPECT_EQ(m->start_error.code(), Code::kFailedPrecondition);
  EXPECT_TRUE(m->requests.empty());
}

TEST_F(MeasureE2eTest, AnEngineThatNeverBecomesReadyTimedOut) {
  Workload w = scenario_d(21);
  auto m = measure(script(R"(["sleep", "60"])", 1), *w.scenario, w, options());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_FALSE(m->started);
  EXPECT_EQ(m->outcome, Outcome::kTimedOut);
  EXPECT_EQ(m->start_failure, launch::StartFailure::kNotReady);
  EXPECT_EQ(m->start_error.code(), Code::kTimeout);
}

TEST_F(MeasureE2eTest, AnEngineThatDiesDuringTheRunCrashed) {
  Workload w = scenario_d(21);
  MeasureOptions o = options();
  pid_t group = -1;
  o.on_launched = [&](const launch::Engine& e) { group = e.pid(); };
  // At the driver's first progress report (a second into the run) the engine's group is killed.
  o.on_progress = [&](const loadgen::ProgressInfo&) {
    if (group > 0) ::kill(-group, SIGKILL);
  };
  auto m = measure(synthetic(5.0, 20.0), *w.scenario, w, o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->started);
  EXPECT_GT(group, 0);
  EXPECT_EQ(m->outcome, Outcome::kCrashed) << outcome_name(m->outcome) << ": " << m->failure;
  EXPECT_FALSE(m->valid);
  EXPECT_FALSE(m->row.valid);
}

TEST_F(MeasureE2eTest, ARunPastItsTimeLimitTimedOut) {
  Workload w = scenario_d(21);
  MeasureOptions o = options();
  o.max_duration = std::chrono::seconds(2);  // the run needs ~40 s at 20 ms per token
  auto m = measure(synthetic(5.0, 20.0), *w.scenario, w, o);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->started);
  EXPECT_TRUE(m->timed_out);
  EXPECT_EQ(m->outcome, Outcome::kTimedOut) << m->failure;
}

TEST_F(MeasureE2eTest, ARunThatBreaksARuleIsInvalidAndOneThatHoldsIsValid) {
  Workload w = scenario_d(21);
  auto held = measure(synthetic(1.0, 0.5), *w.scenario, w, options());
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  // Valid, unless this shared machine made the client miss its schedule (send lag): then invalid.
  if (held->outcome != Outcome::kValid) {
    EXPECT_EQ(held->outcome, Outcome::kInvalid);
    EXPECT_NE(held->failure.find("send_lag"), std::string::npos) << held->failure;
  }
  EXPECT_EQ(held->valid, held->outcome == Outcome::kValid);

  // A custom workload asking for more completed requests than it has breaks completed_requests.
  Workload custom = w;
  custom.scenario.reset();
  custom.bounds.min_completed = int64_t(w.set.requests.size()) + 1;
  Subject s;
  s.launch = synthetic(1.0, 0.5);
  auto broke = measure(s, custom, options());
  ASSERT_TRUE(broke.ok()) << broke.status().to_string();
  EXPECT_EQ(broke->outcome, Outcome::kInvalid);
  EXPECT_NE(broke->failure.find("completed_requests"), std::string::npos) << broke->failure;
  EXPECT_TRUE(std::isnan(broke->objective));
}

TEST_F(MeasureE2eTest, ATargetNobodyAnswersIsAnInfrastructureFailure) {
  Workload w = scenario_d(21);
  std::vector<workload::Request> four(w.set.requests.begin(), w.set.requests.begin() + 4);
  w.set = workload::make_request_set(std::move(four)).value();
  w.warmup.erase(w.warmup.begin() + 1, w.warmup.end());
  auto port = launch::pick_free_port();
  ASSERT_TRUE(port.ok());
  auto m = measure(Subject{.url = "http://127.0.0.1:" + std::to_string(*port)}, w, options());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->started);
  EXPECT_EQ(m->outcome, Outcome::kInfrastructureFailure) << m->failure;
  for (const auto& q : m->requests) EXPECT_EQ(q.status, "connect");
}

}  // namespace
}  // namespace plumb::compare
