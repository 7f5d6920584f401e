// accept's pieces that need no engine runs: the best screened patch of a search folder, the floor on
// u, the patched selection, and the refusals before anything is registered. (The comparison itself
// is compare/'s, tested there; BENCHMARKS.md has real accept runs.)
#include "kernels/accept.h"

#include <gtest/gtest.h>

#include "core/file.h"
#include "core/sha256.h"
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

// A CUDA search's folder (`kernels search --device cuda`): its named best, cubin and hashes.
void write_cuda_search(const std::string& dir, const std::string& cubin, const std::string& sha, double u) {
  ASSERT_TRUE(write_file_atomic(dir + "/search.json",
                                R"({"schema_version": 1, "device": "cuda", "op": "swiglu", "rows": 256,
    "cols": 4096, "tried": [], "best": {"name": "swiglu.b256.v4.i1.full", "utility": )" +
                                    std::to_string(u) + R"(, "cubin": ")" + cubin +
                                    R"(", "cubin_sha256": ")" + sha +
                                    R"(", "source_sha256": "abc", "nvrtc_version": "13.0", "card": "H100"}})")
                  .ok());
}

TEST(Accept, CudaPatchIsTheSearchesBestCubinAtItsHash) {
  const std::string dir = temp_dir("accept_cuda");
  const std::string cubin = dir + "/candidate.cubin";
  ASSERT_TRUE(write_file_atomic(cubin, "not really a cubin, but bytes with a hash").ok());
  auto sha = sha256_file(cubin);
  ASSERT_TRUE(sha.ok());
  write_cuda_search(dir, cubin, *sha, 0.62);
  auto p = best_patch(dir, 0.0, engine::Phase::kPrefill);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->cuda());
  EXPECT_EQ(p->name, "swiglu.b256.v4.i1.full");
  EXPECT_EQ(p->cuda_op, "swiglu");
  EXPECT_EQ(p->op, engine::Op::kSwiglu);
  EXPECT_EQ(p->phase, engine::Phase::kPrefill);
  EXPECT_EQ(p->cubin_path, cubin);
  EXPECT_EQ(p->card, "H100");
  EXPECT_DOUBLE_EQ(p->utility, 0.62);
  EXPECT_FALSE(best_patch(dir, 0.7).ok());  // the floor still applies where one is asked for

  auto base = engine::KernelSelection::parse_json(R"({"attention": "reference"})");
  ASSERT_TRUE(base.ok());
  auto s = patched_selection(*base, {*p});
  EXPECT_EQ(s.cuda_prefill.at("swiglu"), cubin);
  EXPECT_TRUE(s.cuda_decode.empty());
  EXPECT_TRUE(s.plugins.empty());
  EXPECT_EQ(s.prefill.at(engine::Op::kAttention), "reference");
  EXPECT_EQ(accept_groups({*p}, false, "", "D")[0].scenario, "D");

  // A cubin changed since its screening is not the one measured: refused, naming both hashes.
  ASSERT_TRUE(write_file_atomic(cubin, "another cubin").ok());
  auto changed = best_patch(dir, 0.0);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("is not the cubin its search screened"), std::string::npos)
      << changed.status().message();
}

// CUDA searches go with --device cuda and CPU searches with the CPU, each refused before anything
// is registered with the other.
TEST(Accept, ASearchOfTheOtherDeviceIsRefused) {
  const std::string dir = temp_dir("accept_cuda_device");
  const std::string cubin = dir + "/candidate.cubin";
  ASSERT_TRUE(write_file_atomic(cubin, "bytes").ok());
  write_cuda_search(dir, cubin, *sha256_file(cubin), 0.5);
  AcceptOptions o;
  o.search_dirs = {dir};
  o.kernels_out = dir + "/k.json";
  o.ledger_path = dir + "/plumb.db";
  o.min_utility = 0.0;
  auto r = run_accept(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a CUDA search"), std::string::npos) << r.status().message();
  const std::string cpu = temp_dir("accept_cpu_device");
  write_search(cpu, "/abs/good.so");
  o.search_dirs = {cpu};
  o.device = "cuda";
  r = run_accept(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a CPU search"), std::string::npos) << r.status().message();
  o.cuda_phase = "warmup";
  r = run_accept(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--phase warmup"), std::string::npos) << r.status().message();
  EXPECT_FALSE(std::filesystem::exists(o.kernels_out));
  EXPECT_FALSE(std::filesystem::exists(o.ledger_path));
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
