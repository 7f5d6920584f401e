// accept's pieces that need no engine runs: the best screened patch of a search folder, the floor on
// u, the patched selection, and the refusals before anything is registered. (The comparison itself
// is compare/'s, tested there; BENCHMARKS.md has real accept runs.)
#include "kernels/accept.h"

#include <gtest/gtest.h>

#include "core/file.h"
#include "engine/cpu/plugin.h"
#include "test_util.h"

namespace plumb::kernels {
namespace {

using namespace plumb::kernels::testing;

void write_search(const std::string& dir, const std::string& so_good) {
  ASSERT_TRUE(
      write_file_atomic(dir + "/search.json", R"({"schema_version": 1, "op": "rmsnorm", "phase": "decode",
    "module": "input_norm", "candidates": [
      {"name": "slow", "result": {"verdict": "pass", "utility": 1.2, "so_path": "/nope/slow.so"}},
      {"name": "unsafe_fast", "result": {"verdict": "unsafe", "utility": 0, "so_path": "/nope/u.so"}},
      {"name": "good", "result": {"verdict": "pass", "utility": 1.5, "so_path": ")" +
                                                  so_good + R"("}}]})")
          .ok());
}

TEST(Accept, BestPatchIsTheFastestPassingCandidateAboveTheFloor) {
  const std::string dir = temp_dir("accept_best");
  write_search(dir, "/abs/good.so");
  auto p = best_patch(dir, 1.0);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->name, "good");
  EXPECT_EQ(p->so_path, "/abs/good.so");
  EXPECT_EQ(p->op, engine::Op::kRmsNorm);
  EXPECT_EQ(p->phase, engine::Phase::kDecode);
  EXPECT_DOUBLE_EQ(p->utility, 1.5);
  auto floor = best_patch(dir, 1.6);
  ASSERT_FALSE(floor.ok());
  EXPECT_NE(floor.status().message().find("nothing to accept"), std::string::npos);
  auto none = best_patch(dir + "/missing", 1.0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("plumb kernels search"), std::string::npos);
}

// A search.json that names its best (chosen on the confirmed, lower u) is taken at its word and at
// that candidate's score, even where another candidate's single u is higher.
TEST(Accept, BestPatchIsTheOneTheSearchNamedAtItsScore) {
  const std::string dir = temp_dir("accept_named");
  ASSERT_TRUE(
      write_file_atomic(dir + "/search.json", R"({"schema_version": 1, "op": "rmsnorm", "phase": "decode",
    "module": "input_norm", "best": "steady", "candidates": [
      {"name": "lucky", "result": {"verdict": "pass", "utility": 1.9, "so_path": "/abs/lucky.so"},
       "confirmed_utility": 0.8, "score": 0.8},
      {"name": "steady", "result": {"verdict": "pass", "utility": 1.3, "so_path": "/abs/steady.so"},
       "confirmed_utility": 1.25, "score": 1.25}]})")
          .ok());
  auto p = best_patch(dir, 1.0);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->name, "steady");
  EXPECT_EQ(p->so_path, "/abs/steady.so");
  EXPECT_DOUBLE_EQ(p->utility, 1.25);
  EXPECT_FALSE(best_patch(dir, 1.3).ok());  // the floor applies to the score, not the first u
}

TEST(Accept, PatchedSelectionKeepsTheBaseAndAddsThePlugin) {
  auto base = engine::KernelSelection::parse_json(R"({"attention": "reference"})");
  ASSERT_TRUE(base.ok());
  Patch p;
  p.name = "good";
  p.so_path = "/abs/good.so";
  p.op = engine::Op::kRmsNorm;
  p.phase = engine::Phase::kDecode;
  auto s = patched_selection(*base, {p, p});
  EXPECT_EQ(s.plugins, std::vector<std::string>{"/abs/good.so"});
  EXPECT_EQ(s.decode.at(engine::Op::kRmsNorm), "good");
  EXPECT_EQ(s.prefill.count(engine::Op::kRmsNorm), 0u);
  EXPECT_EQ(s.prefill.at(engine::Op::kAttention), "reference");
}

TEST(Accept, GroupsPerPhaseOrJointWithTheirScenarios) {
  Patch dec, dec2, pre;
  dec.name = "s", dec.op = engine::Op::kSample, dec.phase = engine::Phase::kDecode;
  dec2.name = "r", dec2.op = engine::Op::kRope, dec2.phase = engine::Phase::kDecode;
  pre.name = "rp", pre.op = engine::Op::kRope, pre.phase = engine::Phase::kPrefill;
  auto per = accept_groups({dec, pre, dec2}, false, "");
  ASSERT_EQ(per.size(), 2u);
  EXPECT_EQ(per[0].label, "prefill");
  EXPECT_EQ(per[0].scenario, "A");
  EXPECT_EQ(per[0].patches.size(), 1u);
  EXPECT_EQ(per[1].label, "decode");
  EXPECT_EQ(per[1].scenario, "B");
  EXPECT_EQ(per[1].patches.size(), 2u);
  auto joint = accept_groups({dec, pre, dec2}, true, "");
  ASSERT_EQ(joint.size(), 1u);
  EXPECT_EQ(joint[0].label, "joint");
  EXPECT_EQ(joint[0].scenario, "D");  // both phases
  EXPECT_EQ(joint[0].patches.size(), 3u);
  EXPECT_EQ(accept_groups({dec, dec2}, true, "")[0].scenario, "B");
  EXPECT_EQ(accept_groups({pre}, true, "")[0].scenario, "A");
  EXPECT_EQ(accept_groups({dec, pre}, true, "C")[0].scenario, "C");
  for (const auto& g : accept_groups({dec, pre}, false, "D")) EXPECT_EQ(g.scenario, "D");
  EXPECT_TRUE(accept_groups({}, true, "").empty());
}

TEST(Accept, RefusesBeforeRegisteringAnything) {
  const std::string dir = temp_dir("accept_refuse");
  AcceptOptions o;
  EXPECT_FALSE(run_accept(o).ok());  // no search folders
  o.search_dirs = {dir};
  o.kernels_out = dir + "/k.json";
  EXPECT_FALSE(run_accept(o).ok());  // no ledger
  o.ledger_path = dir + "/plumb.db";
  // A search whose best library has no certificate: refused with the loader's message.
  Task task = rmsnorm_task(dir + "/task");
  ScreenResult comp = compile_candidate(candidate("good", rmsnorm_source("good")), dir + "/c", fast_screen());
  ASSERT_EQ(comp.verdict, "compiled");
  write_search(dir, comp.so_path);
  auto r = run_accept(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("screening certificate"), std::string::npos) << r.status().message();
  EXPECT_FALSE(std::filesystem::exists(o.kernels_out));
}

}  // namespace
}  // namespace plumb::kernels
