// End to end: `plumb bench` reads InferenceBench's files and writes IB's metrics JSON, against a real
// `plumb serve --engine synthetic` that plumb bench starts itself. The IB JSON's values are checked
// against plumb's own JSON and per-request CSV of the same run. No timing assertions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "server/serve_helpers.h"

namespace plumb {
namespace {

struct Out {
  int code = -1;
  std::string out, err;
};

std::string tmp(const std::string& name) {
  return ::testing::TempDir() + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
}

std::string fixture(const std::string& name) {
  return std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/inferencebench/" + name;
}

Out run_bench(std::vector<std::string> args) {
  SpawnOptions o;
  o.argv = {PLUMB_BINARY, "bench"};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_path = tmp("stdout");
  o.stderr_path = tmp("stderr");
  auto p = Subprocess::spawn(o);
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return {};
  ExitInfo e = p->wait();
  return {e.exited ? e.exit_code : -1, read_file(o.stdout_path).value(), read_file(o.stderr_path).value()};
}

// The per-request CSV as rows of column name -> cell.
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::istringstream in(read_file(path).value());
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string c; std::getline(hs, c, ',');) header.push_back(c);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    std::map<std::string, std::string> row;
    std::stringstream ls(line);
    std::string c;
    for (size_t i = 0; i < header.size() && std::getline(ls, c, ','); ++i) row[header[i]] = c;
    rows.push_back(std::move(row));
  }
  return rows;
}

const json::value& at(const json::value& v, const std::string& dotted) {
  const json::value* cur = &v;
  std::stringstream ss(dotted);
  for (std::string k; std::getline(ss, k, '.');) cur = &cur->as_object().at(k);
  return *cur;
}
double d(const json::value& v) { return v.is_int64() ? double(v.as_int64()) : v.as_double(); }

const std::vector<std::string> kServe = {"--serve-args", "--engine synthetic --ttft-ms 4 --itl-ms 1"};

// An IB request file (with one line the server refuses: more tokens than its context) with IB's
// scenario C: three profiles, IB's names, IB's fields, values agreeing with plumb's JSON.
TEST(BenchIb, RequestFileAndScenarioGiveIbMetricsAgreeingWithPlumbs) {
  std::string reqs = tmp("requests.jsonl");
  std::string text = read_file(fixture("requests.jsonl")).value();
  text += R"({"messages": [{"role": "user", "content": "too long an answer"}], "max_new_tokens": 100000000})";
  text += "\n";
  ASSERT_TRUE(write_file_atomic(reqs, text).ok());
  std::string j = tmp("plumb.json"), ib = tmp("ib.json"), csv = tmp("requests.csv");
  std::vector<std::string> args = {"--ib-scenario", fixture("scenario_c.json"),
                                   "--requests",    reqs,
                                   "--json",        j,
                                   "--ib-json",     ib,
                                   "--csv",         csv,
                                   "--quiet"};
  args.insert(args.end(), kServe.begin(), kServe.end());
  Out o = run_bench(args);
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  EXPECT_NE(o.err.find("plumb content hashes computed"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("Poisson arrivals seeded"), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("scenario C (High load, custom)"), std::string::npos) << o.out;

  auto pv = json::parse_file(j);
  auto iv = json::parse_file(ib);
  ASSERT_TRUE(pv.ok() && iv.ok()) << o.err;
  EXPECT_EQ(at(*pv, "size").as_string(), "custom");
  EXPECT_EQ(at(*iv, "scenario").as_string(), "C");
  // GPU memory: sampled with nvidia-smi where there is one; else null, never 0, with the reason.
  EXPECT_EQ(at(*iv, "vram_peak_mb").is_null(), at(*iv, "plumb.vram.peak_mib").is_null());
  EXPECT_EQ(at(*pv, "vram.peak_mib").is_null(), at(*iv, "vram_peak_mb").is_null());
  if (at(*iv, "vram_peak_mb").is_null()) {
    EXPECT_FALSE(at(*iv, "plumb.vram.unavailable").as_string().empty());
  }
  EXPECT_TRUE(at(*iv, "quality_check").is_null());
  EXPECT_EQ(at(*iv, "eval_pipeline.name").as_string(), "plumb");
  EXPECT_FALSE(at(*iv, "model_id").as_string().empty());
  EXPECT_EQ(at(*iv, "plumb.request_set_hash").as_string(),
            at(*pv, "profiles").as_array()[0].at("request_set_hash").as_string());
  EXPECT_EQ(at(*iv, "plumb.request_file.lines_with_ib_content_hash").as_int64(), 7);

  const auto& profiles = at(*pv, "profiles").as_array();
  ASSERT_EQ(profiles.size(), 3u);
  const char* names[] = {"burst", "poisson", "constant"};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    const json::value& p = profiles[i];
    const json::value& q = at(*iv, std::string("profiles.") + names[i]);
    // Failure counting: the over-long request fails in both; empties are completed for plumb.
    EXPECT_EQ(at(q, "request_count").as_int64(), 9);
    EXPECT_EQ(at(q, "failure_count").as_int64(), at(p, "counts.failed").as_int64());
    EXPECT_GE(at(q, "failure_count").as_int64(), 1);
    EXPECT_EQ(at(q, "success_count").as_int64() + at(q, "empty_output_count").as_int64(),
              at(p, "counts.completed").as_int64());
    EXPECT_DOUBLE_EQ(d(at(q, "failure_rate")), double(at(q, "failure_count").as_int64()) / 9.0);
    // Same medians and tails, seconds against milliseconds.
    for (const char* k : {"ttft", "tpot"}) {
      for (const char* pc : {"p50", "p90", "p99"}) {
        double ms = d(at(p, std::string("latency_ms.") + k + "." + pc));
        EXPECT_NEAR(d(at(q, std::string(k) + "." + pc)), ms / 1000.0, 1e-9) << k << " " << pc;
      }
    }
    EXPECT_NEAR(d(at(q, "itl.p50")), d(at(p, "latency_ms.itl.p50")) / 1000.0, 1e-9);
    EXPECT_EQ(at(q, "plumb.arrival").as_string(), names[i]);
    EXPECT_EQ(at(q, "plumb.max_concurrency").as_int64(), at(p, "load.max_concurrency").as_int64());
    // IB's throughputs from the per-request rows: every request over first send to last end, and
    // success tokens over the sum of their decode times.
    auto rows = read_csv(csv + "." + std::to_string(i));
    ASSERT_EQ(rows.size(), 9u);
    double first_send = 1e300, last_end = -1e300, tokens = 0, decode_ms = 0;
    for (const auto& r : rows) {
      if (!r.at("sent_ms").empty()) first_send = std::min(first_send, std::stod(r.at("sent_ms")));
      if (!r.at("end_ms").empty()) last_end = std::max(last_end, std::stod(r.at("end_ms")));
      if (r.at("status") == "ok" && !r.at("first_token_ms").empty()) {
        tokens += std::stod(r.at("usage_output_tokens")) >= 0 ? std::stod(r.at("usage_output_tokens"))
                                                              : std::stod(r.at("local_output_tokens"));
        decode_ms += std::stod(r.at("end_ms")) - std::stod(r.at("first_token_ms"));
      }
    }
    EXPECT_NEAR(d(at(q, "request_throughput_req_per_s")), 9.0 / ((last_end - first_send) / 1000.0),
                1e-3 * d(at(q, "request_throughput_req_per_s")));
    EXPECT_NEAR(d(at(q, "generation_throughput_tokens_per_s")), tokens / (decode_ms / 1000.0),
                1e-3 * d(at(q, "generation_throughput_tokens_per_s")));
    // IB counts the failure in req/s; plumb's completed req/s does not.
    EXPECT_FALSE(at(q, "plumb.completed_request_throughput_req_per_s").is_null());
  }
}

// The scenario alone: requests drawn by plumb at IB's lengths; D's declared concurrency executed,
// or IB's runner's with --ib-concurrency runner.
TEST(BenchIb, ScenarioAloneDrawsRequestsAndHonoursTheConcurrencyRule) {
  for (std::string rule : {"declared", "runner"}) {
    SCOPED_TRACE(rule);
    std::string j = tmp(rule + ".json"), ib = tmp(rule + "_ib.json");
    std::vector<std::string> args = {
        "--ib-scenario", fixture("scenario_d.json"), "--ib-concurrency", rule, "--json", j, "--ib-json", ib,
        "--quiet"};
    args.insert(args.end(), kServe.begin(), kServe.end());
    Out o = run_bench(args);
    ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
    auto pv = json::parse_file(j);
    auto iv = json::parse_file(ib);
    ASSERT_TRUE(pv.ok() && iv.ok()) << o.err;
    const auto& p = at(*pv, "profiles").as_array()[0];
    EXPECT_EQ(at(p, "counts.requests").as_int64(), 8);
    EXPECT_EQ(at(p, "load.max_concurrency").as_int64(), rule == "declared" ? 4 : 1);
    EXPECT_EQ(at(*iv, "profiles.burst.request_count").as_int64(), 8);
    EXPECT_EQ(at(*iv, "profiles.burst.failure_count").as_int64(), at(p, "counts.failed").as_int64());
    EXPECT_NEAR(d(at(*iv, "profiles.burst.ttft.p50")), d(at(p, "latency_ms.ttft.p50")) / 1000.0, 1e-9);
    if (rule == "declared") {
      EXPECT_NE(o.err.find("IB's runner reads only the profile's own"), std::string::npos) << o.err;
    }
  }
}

// IB's --request-limit, as plumb's: the first N requests of the scenario's set, said in the IB JSON.
TEST(BenchIb, RequestLimitRunsTheFirstRequestsAndSaysSo) {
  std::string ib = tmp("limit_ib.json");
  std::vector<std::string> args = {
      "--ib-scenario", fixture("scenario_d.json"), "--request-limit", "3", "--ib-json", ib, "--quiet"};
  args.insert(args.end(), kServe.begin(), kServe.end());
  Out o = run_bench(args);
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  EXPECT_NE(o.err.find("measuring the first 3 of the set's 8 requests"), std::string::npos) << o.err;
  auto iv = json::parse_file(ib);
  ASSERT_TRUE(iv.ok()) << o.err;
  EXPECT_EQ(at(*iv, "profiles.burst.request_count").as_int64(), 3);
  EXPECT_EQ(at(*iv, "plumb.subset.kind").as_string(), "limit");
  EXPECT_EQ(at(*iv, "plumb.subset.whole_requests").as_int64(), 8);
  EXPECT_NE(at(*iv, "plumb.subset.whole_set_hash").as_string(),
            at(*iv, "plumb.request_set_hash").as_string());
}

// An IB request file with no scenario: IB's runner's defaults fill the missing fields, the IB JSON
// names the run "custom" and keeps IB's hashes beside plumb's.
TEST(BenchIb, RequestFileAloneUsesIbsDefaults) {
  std::string j = tmp("plumb.json"), ib = tmp("ib.json"), saved = tmp("saved.jsonl");
  Out o = run_bench({"--target", "null", "--requests", fixture("requests.jsonl"), "--json", j, "--ib-json",
                     ib, "--save-requests", saved, "--quiet"});
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  EXPECT_NE(o.err.find("plumb content hashes computed"), std::string::npos) << o.err;
  auto iv = json::parse_file(ib);
  ASSERT_TRUE(iv.ok()) << o.err;
  EXPECT_EQ(at(*iv, "scenario").as_string(), "custom");
  EXPECT_EQ(at(*iv, "profiles.burst.request_count").as_int64(), 8);
  EXPECT_EQ(at(*iv, "plumb.request_file.lines_with_ib_content_hash").as_int64(), 7);
  const auto& rows = at(*iv, "plumb.request_file.requests").as_array();
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_EQ(rows[0].at("sample_id").as_string(), "s0");
  // The saved set is plumb's format with plumb's hashes: line 6 took IB's default max_new_tokens 256.
  std::string text = read_file(saved).value();
  EXPECT_NE(text.find(std::string("\"hash\":\"") + std::string(rows[5].at("plumb_hash").as_string())),
            std::string::npos);
  EXPECT_NE(text.find("\"max_tokens\":256"), std::string::npos);
}

TEST(BenchIb, MalformedFilesAreUsageErrorsNamingTheField) {
  std::string bad_scenario = tmp("scenario.json");
  ASSERT_TRUE(write_file_atomic(bad_scenario, R"({"profile": {"pattern": "poisson"}})").ok());
  Out o = run_bench({"--target", "null", "--ib-scenario", bad_scenario});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("profile.rate_per_s"), std::string::npos) << o.err;

  std::string bad_requests = tmp("requests.jsonl");
  ASSERT_TRUE(write_file_atomic(bad_requests,
                                "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                "\"max_new_tokens\": \"many\"}\n")
                  .ok());
  o = run_bench({"--target", "null", "--requests", bad_requests});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("line 1: field 'max_new_tokens'"), std::string::npos) << o.err;

  o = run_bench({"--target", "null", "--ib-concurrency", "runner", "--input-len", "8", "--output-len", "4",
                 "--num-prompts", "2"});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--ib-concurrency applies only with --ib-scenario"), std::string::npos) << o.err;

  o = run_bench(
      {"--target", "null", "--ib-scenario", fixture("scenario_d.json"), "--ib-concurrency", "both"});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--ib-concurrency"), std::string::npos) << o.err;

  o = run_bench({"--target", "null", "--ib-scenario", fixture("scenario_a.json"), "--scenario", "A"});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_NE(o.err.find("--ib-scenario"), std::string::npos) << o.err;
}

// --ib-quality-baseline: IB's quality check the plumb way, against a server given by --target: the
// accuracy on plumb's multiple-choice set against tau x the baseline, in quality_check and --json's
// "quality"; a failed check makes the exit code 1. The synthetic engine answers nothing right, so
// a baseline of 0 passes and one of 0.9 fails.
TEST(BenchIb, QualityCheckAgainstABaselineFillsQualityCheck) {
  testing::ServeProcess server;
  std::string error;
  ASSERT_TRUE(server.start({"--engine", "synthetic", "--ttft-ms", "1", "--itl-ms", "1"}, &error)) << error;
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  for (double baseline : {0.0, 0.9}) {
    std::string ib = tmp("quality_ib.json"), j = tmp("quality.json");
    Out o = run_bench({"--target", url, "--num-prompts", "4", "--input-len", "8", "--output-len", "4",
                       "--ib-json", ib, "--json", j, "--ib-quality-baseline", std::to_string(baseline),
                       "--ib-quality-items", "6", "--quiet"});
    auto iv = json::parse_file(ib);
    auto pv = json::parse_file(j);
    ASSERT_TRUE(iv.ok() && pv.ok()) << o.err;
    const bool pass = baseline == 0.0;
    EXPECT_EQ(o.code, pass ? 0 : 1) << o.err;
    EXPECT_EQ(at(*iv, "quality_check.pass").as_bool(), pass) << o.err;
    EXPECT_EQ(at(*iv, "quality_check.items").as_int64(), 6);
    EXPECT_DOUBLE_EQ(at(*iv, "quality_check.baseline_accuracy").as_double(), baseline);
    EXPECT_DOUBLE_EQ(at(*iv, "quality_check.tau").as_double(), 0.95);
    EXPECT_EQ(at(*pv, "quality.pass").as_bool(), pass);
    EXPECT_NE(o.err.find(pass ? "quality check PASS" : "quality check FAIL"), std::string::npos) << o.err;
  }
  // Without --target there is no server left to ask: a usage error before anything runs.
  Out u = run_bench({"--num-prompts", "4", "--ib-quality-baseline", "0.5"});
  EXPECT_EQ(u.code, 2) << u.err;
  EXPECT_NE(u.err.find("give its --target"), std::string::npos) << u.err;
}

}  // namespace
}  // namespace plumb
