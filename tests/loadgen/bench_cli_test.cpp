// End to end: the real `plumb bench` binary against the in-process null target. Checks outputs,
// replay of a saved request set, and that bad input is a usage error naming the problem. No timing
// assertions: whether the run is VALID depends on the machine, so only its consistency is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"

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
  EXPECT_EQ(obj.at("schema_version").as_int64(), 1);
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
      {{"--input-len", "8", "--output-len", "4", "--num-prompts", "2"}, "--target"},
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
  };
  for (const auto& c : cases) {
    Out o = run_plumb(c.args);
    EXPECT_EQ(o.code, 2) << c.expect << "\n" << o.err;
    EXPECT_NE(o.err.find(c.expect), std::string::npos) << o.err;
  }
}

}  // namespace
}  // namespace plumb
