// The external proposer protocol: the context it receives, and every failure mode handled as a
// clear error (cannot start, timeout, non-zero exit, garbage, a configuration outside the space).
#include "tune/proposer.h"

#include <gtest/gtest.h>

#include "core/subprocess.h"

namespace plumb::tune {
namespace {

SearchSpace space() {
  auto sp = parse_space(R"(
name = "p"
adapter = "plumb"
[[param]]
name = "max_num_seqs"
type = "int"
values = [1, 4]
)");
  EXPECT_TRUE(sp.ok());
  return *sp;
}

std::unique_ptr<Strategy> external(const std::string& script, int timeout_ms = 5000) {
  StrategyOptions o;
  o.name = "external";
  o.proposer_argv = {"/bin/sh", "-c", script};
  o.proposer_timeout = std::chrono::milliseconds(timeout_ms);
  auto s = make_strategy(space(), o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

TEST(Proposer, ContextCarriesSpaceHistoryBudgetAndNotes) {
  Observation o;
  o.index = 0;
  o.config = {{"max_num_seqs", int64_t(4)}};
  o.feasible = false;
  o.status = "crashed";
  o.failure = "boom";
  o.notes = "try 1 next";
  auto ctx = proposer_context(space(), {o}, BudgetLeft{3, 12.5}, json::object{{"objective", "x"}});
  EXPECT_EQ(
      json::canonical(ctx),
      R"({"budget_left":{"seconds":1.25E1,"trials":3},"history":[{"config":{"max_num_seqs":4},"failure":"boom","feasible":false,"index":0,"metrics":{},"objective":null,"stage":"full","status":"crashed"}],"notes":["try 1 next"],"objective":"x","schema_version":1,"space":{"adapter":"plumb","fixed":{},"name":"p","params":[{"name":"max_num_seqs","type":"int","values":[1,4]}]}})");
}

TEST(Proposer, AGoodProposalIsParsed) {
  // The script echoes the history length back through the rationale, so the context really arrived.
  auto s = external(
      R"(python3 -c 'import json,sys; c=json.load(sys.stdin); print(json.dumps({"config":{"max_num_seqs":4},"rationale":"seen %d" % len(c["history"]),"notes":"n1"}))')");
  auto p = s->propose({}, {});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE(p->has_value());
  EXPECT_EQ(std::get<int64_t>((*p)->config.at("max_num_seqs")), 4);
  EXPECT_EQ((*p)->rationale, "seen 0");
  EXPECT_EQ((*p)->notes, "n1");
  EXPECT_EQ((*p)->stage, "full");
}

TEST(Proposer, StopEndsTheSearch) {
  auto s = external(R"(cat >/dev/null; echo '{"stop": true, "rationale": "enough"}')");
  auto p = s->propose({}, {});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->has_value());
}

TEST(Proposer, FailuresAreClearErrors) {
  struct Case {
    std::string script;
    Code code;
    std::string expect;
  } cases[] = {
      {"cat >/dev/null; echo 'I think max_num_seqs=4 is good'", Code::kInvalidArgument,
       "not one JSON object"},
      {"cat >/dev/null", Code::kInvalidArgument, "stdout is empty"},
      {R"(cat >/dev/null; echo '{"rationale":"x"}')", Code::kInvalidArgument, "no \"config\""},
      {R"(cat >/dev/null; echo '{"config":{"max_num_seqs":3}}')", Code::kInvalidArgument,
       "outside its domain"},
      {R"(cat >/dev/null; echo '{"config":{"threads":3}}')", Code::kInvalidArgument, "not a parameter"},
      {R"(cat >/dev/null; echo '{"config":{"max_num_seqs":4},"stage":"later"}')", Code::kInvalidArgument,
       "stage"},
      {"cat >/dev/null; echo oops >&2; exit 3", Code::kFailedPrecondition,
       "exited with code 3; stderr: oops"},
      {"sleep 30", Code::kTimeout, "did not answer within 300 ms"},
  };
  for (const auto& c : cases) {
    auto s = external(c.script, 300);
    auto p = s->propose({}, {});
    ASSERT_FALSE(p.ok()) << c.script;
    EXPECT_EQ(p.status().code(), c.code) << c.script << ": " << p.status().to_string();
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find("external proposer"), std::string::npos) << p.status().message();
  }
}

TEST(Proposer, AMissingProgramIsNotFound) {
  auto r = run_with_stdin({"/nonexistent/agent"}, "{}", std::chrono::milliseconds(1000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("cannot start"), std::string::npos);
}

TEST(Proposer, LargeContextsAreWrittenWhole) {
  std::string big(1 << 20, 'x');
  auto r = run_with_stdin({"/bin/sh", "-c", "wc -c"}, big, std::chrono::milliseconds(5000));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(std::stoll(*r), int64_t(big.size()));
}

}  // namespace
}  // namespace plumb::tune
