// Screening: the two cases screening exists for — a latent out-of-bounds read that a naive isolated
// check passes is rejected by the guard pages, and a crashing candidate does not take plumb down —
// plus hangs, wrong answers, compile errors, timing, tasks and the search loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/file.h"
#include "core/json.h"
#include "engine/cpu/plugin.h"
#include "kernels/accept.h"
#include "kernels/search.h"
#include "test_util.h"

namespace plumb::kernels {
namespace {

using namespace plumb::kernels::testing;

// Reads the element just past x on the last row (a "prefetch" of the next row), times zero: the
// output is exact, so only a fault can tell.
const char* kOobRead =
    R"(if (r + 1 == a->rows) { volatile float next = a->x[(r + 1) * d]; y[0] += next * 0.0f; })";

TEST(Screen, LatentOutOfBoundsReadPassesNaiveCheckButNotGuardPages) {
  const std::string dir = temp_dir("oob");
  Task task = rmsnorm_task(dir + "/task");
  Candidate c = candidate("oob_rms", rmsnorm_source("oob_rms", kOobRead));

  ScreenOptions naive = fast_screen();
  naive.guard_pages = false;
  ScreenResult n = screen_candidate(task, c, dir + "/naive", naive);
  EXPECT_EQ(n.verdict, "pass") << "the naive check should pass it: " << n.detail;
  EXPECT_LE(n.max_rel_err, task.tolerance);

  ScreenResult g = screen_candidate(task, c, dir + "/guarded", fast_screen());
  EXPECT_EQ(g.verdict, "unsafe") << g.detail;
  EXPECT_EQ(g.signature, "guard:x:after");
  EXPECT_NE(g.detail.find("past its end"), std::string::npos) << g.detail;
  EXPECT_FALSE(std::filesystem::exists(engine::certificate_path(g.so_path)));
  // Unscreened code never runs in this process, and it cannot be loaded either.
  EXPECT_FALSE(engine::load_screened_plugin(g.so_path).ok());
}

TEST(Screen, UnderflowIsCaughtByTheLowerGuard) {
  const std::string dir = temp_dir("underflow");
  Task task = rmsnorm_task(dir + "/task");
  Candidate c = candidate(
      "under_rms",
      rmsnorm_source("under_rms",
                     R"(if (r == 0) { volatile float prev = a->weight[-1]; y[0] += prev * 0.0f; })"));
  ScreenResult g = screen_candidate(task, c, dir + "/c", fast_screen());
  EXPECT_EQ(g.verdict, "unsafe") << g.detail;
  EXPECT_EQ(g.signature, "guard:weight:before");
}

TEST(Screen, CrashingCandidateIsAVerdictNotADeath) {
  const std::string dir = temp_dir("crash");
  Task task = rmsnorm_task(dir + "/task");
  ScreenResult segv = screen_candidate(
      task, candidate("segv_rms", rmsnorm_source("segv_rms", "*(volatile int*)(uintptr_t)16 = 1;")),
      dir + "/a", fast_screen());
  EXPECT_EQ(segv.verdict, "crash") << segv.detail;
  EXPECT_EQ(segv.signature, "signal:SIGSEGV");
  ScreenResult abrt = screen_candidate(
      task, candidate("abort_rms", "#include <cstdlib>\n" + rmsnorm_source("abort_rms", "std::abort();")),
      dir + "/b", fast_screen());
  EXPECT_EQ(abrt.verdict, "crash") << abrt.detail;
  EXPECT_EQ(abrt.signature, "signal:SIGABRT");
  // Still here, and still able to screen a good one.
  ScreenResult ok =
      screen_candidate(task, candidate("fine_rms", rmsnorm_source("fine_rms")), dir + "/c", fast_screen());
  EXPECT_TRUE(ok.passed()) << ok.detail;
}

TEST(Screen, HangIsKilledAtTheTimeout) {
  const std::string dir = temp_dir("hang");
  Task task = rmsnorm_task(dir + "/task");
  ScreenOptions o = fast_screen();
  o.timeout = std::chrono::milliseconds(1500);
  ScreenResult r = screen_candidate(
      task, candidate("hang_rms", rmsnorm_source("hang_rms", "for (volatile int spin = 1; spin;) {}")),
      dir + "/c", o);
  EXPECT_EQ(r.verdict, "timeout") << r.detail;
}

TEST(Screen, WrongAnswerAndCompileErrorAreRejected) {
  const std::string dir = temp_dir("wrong");
  Task task = rmsnorm_task(dir + "/task");
  ScreenResult wrong =
      screen_candidate(task, candidate("wrong_rms", rmsnorm_source("wrong_rms", "y[d - 1] *= 1.001f;")),
                       dir + "/a", fast_screen());
  EXPECT_EQ(wrong.verdict, "incorrect") << wrong.detail;
  EXPECT_GT(wrong.max_rel_err, task.tolerance);
  ScreenResult bad =
      screen_candidate(task, candidate("bad_rms", "this is not C++"), dir + "/b", fast_screen());
  EXPECT_EQ(bad.verdict, "compile_error");
  EXPECT_NE(bad.detail.find("g++ failed"), std::string::npos);
}

TEST(Screen, TimingGivesUtilityAgainstTheBaseline) {
  const std::string dir = temp_dir("timing");
  Task task = rmsnorm_task(dir + "/task");  // baseline: the reference (double accumulation)
  ScreenOptions o = fast_screen();
  o.timing = true;
  o.warm_reps = 5;
  o.cold_reps = 2;
  ScreenResult r = screen_candidate(task, candidate("timed_rms", rmsnorm_source("timed_rms")), dir + "/c", o);
  ASSERT_TRUE(r.passed()) << r.detail;
  EXPECT_EQ(r.baseline, "reference");
  EXPECT_GT(r.warm_ns, 0);
  EXPECT_GT(r.cold_ns, 0);
  EXPECT_GT(r.base_warm_ns, 0);
  EXPECT_GT(r.utility, 0);  // the median of the blocks' ratios (not checkable exactly)
  EXPECT_TRUE(std::isfinite(r.utility));
  // Each warm sample repeats the call until it lasts >= 20 us (calibrated on the faster kernel; half
  // of that allows for the machine's noise between calibration and the timed samples).
  EXPECT_GE(double(r.warm_calls) * std::min(r.warm_ns, r.base_warm_ns), 10000.0) << r.warm_calls;
}

TEST(Screen, SamplingCandidateIsHeldToEveryPathOfTheContract) {
  // The task's captured rows use temperature 0.7, greedy and top_k + top_p, but an accepted kernel
  // serves every request: screening draws every path whatever the task holds.
  const std::string dir = temp_dir("sample_screen");
  Task task = sample_task(dir + "/task");
  ScreenResult ok =
      screen_candidate(task, candidate("ok_sample", sample_source("ok_sample")), dir + "/a", fast_screen());
  EXPECT_TRUE(ok.passed()) << ok.verdict << ": " << ok.detail;
  EXPECT_NE(ok.detail.find("top_k"), std::string::npos) << ok.detail;

  ScreenResult cuts = screen_candidate(
      task, candidate("cuts_sample", sample_source("cuts_sample", "ignore_cuts")), dir + "/b", fast_screen());
  EXPECT_EQ(cuts.verdict, "incorrect") << cuts.detail;
  EXPECT_TRUE(cuts.signature == "sample:top_k" || cuts.signature == "sample:top_p") << cuts.signature;
  EXPECT_NE(cuts.detail.find("the reference"), std::string::npos) << cuts.detail;

  ScreenResult tie = screen_candidate(task, candidate("tie_sample", sample_source("tie_sample", "last_tie")),
                                      dir + "/c", fast_screen());
  EXPECT_EQ(tie.verdict, "incorrect") << tie.detail;
  EXPECT_EQ(tie.signature, "sample:greedy");

  ScreenResult past = screen_candidate(
      task, candidate("past_sample", sample_source("past_sample", "read_past")), dir + "/d", fast_screen());
  EXPECT_EQ(past.verdict, "unsafe") << past.detail;
  EXPECT_EQ(past.signature, "guard:logits:after");
}

TEST(Screen, SamplingTimingRunsAgainstTheEngineVariant) {
  const std::string dir = temp_dir("sample_timing");
  Task task = sample_task(dir + "/task");
  ScreenOptions o = fast_screen();
  o.timing = true;
  o.warm_reps = 4;
  o.cold_reps = 2;
  ScreenResult r = screen_candidate(task, candidate("t_sample", sample_source("t_sample")), dir + "/c", o);
  ASSERT_TRUE(r.passed()) << r.detail;
  EXPECT_EQ(r.baseline, "select");
  EXPECT_GT(r.warm_ns, 0);
  EXPECT_GT(r.base_warm_ns, 0);
  EXPECT_TRUE(std::isfinite(r.utility) && r.utility > 0) << r.utility;
}

TEST(Task, SamplingTaskKeepsItsParameters) {
  const std::string dir = temp_dir("sample_task");
  Task t = sample_task(dir + "/t");
  ASSERT_EQ(t.cases.size(), 3u);
  EXPECT_EQ(t.op, engine::Op::kSample);
  EXPECT_FLOAT_EQ(t.cases[0].sample.temperature, 0.7f);
  EXPECT_EQ(t.cases[1].sample.temperature, 0.0f);
  EXPECT_EQ(t.cases[2].sample.top_k, 40);
  EXPECT_FLOAT_EQ(t.cases[2].sample.top_p, 0.9f);
  EXPECT_EQ(t.cases[2].x.size(), 1000u);
  // The stored reference output is the reference kernel's id.
  for (size_t i = 0; i < t.cases.size(); ++i)
    EXPECT_EQ(int32_t(t.ref_outputs[i][0]), reference_sample(t.cases[i], t.cases[i].sample.u)) << i;
  // A parameter out of range is named.
  auto doc = json::parse_file(dir + "/t/task.json");
  ASSERT_TRUE(doc.ok());
  doc->as_object()["cases"].as_array()[2].as_object()["top_p"] = 1.5;
  ASSERT_TRUE(write_file_atomic(dir + "/t/task.json", json::dump_pretty(*doc)).ok());
  auto bad = load_task(dir + "/t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sampling parameters"), std::string::npos) << bad.status().message();
}

TEST(Task, RoundTripAndDamage) {
  const std::string dir = temp_dir("task");
  Task t = rmsnorm_task(dir + "/t");
  EXPECT_EQ(t.cases.size(), 2u);
  EXPECT_EQ(t.m_min, 1);
  EXPECT_EQ(t.m_max, 8);
  EXPECT_EQ(t.rows_histogram.at(1), 100);
  ASSERT_EQ(t.ref_outputs.size(), 2u);
  EXPECT_EQ(t.ref_outputs[1], reference_output(t.cases[1]));
  // A truncated input file names itself.
  ASSERT_TRUE(write_file_atomic(dir + "/t/case-1.x.f32", "abc").ok());
  auto bad = load_task(dir + "/t");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("case-1.x.f32"), std::string::npos) << bad.status().message();
  auto missing = load_task(dir + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("plumb kernels tasks"), std::string::npos);
}

// A search of `episodes` episodes of `candidates` built-in candidates each into dir/out, screened
// fast.
SearchOptions search_options(const std::string& dir, int episodes, int candidates) {
  SearchOptions o;
  o.episodes = episodes;
  o.candidates_per_episode = candidates;
  o.out_dir = dir + "/out";
  o.screen = fast_screen();
  return o;
}

TEST(Search, EpisodesScreenBuiltinCandidatesAndKeepExperience) {
  const std::string dir = temp_dir("search");
  Task task = rmsnorm_task(dir + "/task");
  SearchOptions o = search_options(dir, 2, 2);
  // A proposer that returns a candidate with a latent OOB read: screened like any other.
  const std::string prop = dir + "/proposer.sh";
  std::string src = rmsnorm_source("proposed_oob", kOobRead);
  std::string escaped;
  for (char ch : src) {
    if (ch == '"' || ch == '\\') escaped += '\\';
    if (ch == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += ch;
  }
  ASSERT_TRUE(write_file_atomic(
                  dir + "/proposal.json",
                  "{\"name\": \"proposed_oob\", \"rationale\": \"prefetch the next row\", \"source\": \"" +
                      escaped + "\"}")
                  .ok());
  ASSERT_TRUE(write_file_atomic(
                  prop, "#!/bin/sh\ncat > " + dir + "/context-seen.json\ncat " + dir + "/proposal.json\n")
                  .ok());
  o.proposer_argv = {"/bin/sh", prop};
  auto r = run_search(task, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tried.size(), 2u * (2 + 1));
  EXPECT_EQ(r->experience_files.size(), 2u);
  int passed = 0, oob = 0;
  for (const auto& t : r->tried) {
    passed += t.result.passed();
    if (t.candidate.origin == "proposer") {
      EXPECT_EQ(t.result.verdict, "unsafe") << t.result.detail;
      ++oob;
    }
  }
  EXPECT_EQ(oob, 2);
  EXPECT_GE(passed, 1);
  ASSERT_GE(r->best, 0);
  // The second episode's record carries the first's failure signature; the proposer saw the record.
  auto rec = json::parse_file(r->experience_files[1]);
  ASSERT_TRUE(rec.ok());
  const auto& sig = rec->as_object().at("failure_signatures").as_object();
  EXPECT_EQ(sig.at("unsafe:guard:x:after").as_int64(), 2);
  auto seen = json::parse_file(dir + "/context-seen.json");
  ASSERT_TRUE(seen.ok());
  EXPECT_TRUE(seen->as_object().at("experience").is_object());
  EXPECT_NE(seen->as_object().at("abi_header").as_string().find("PLUMB_KERNEL_ABI_VERSION"),
            std::string::npos);
  // Episode 2 did not repeat episode 1's built-in candidates.
  std::set<std::string> names;
  for (const auto& t : r->tried) {
    if (t.candidate.origin == "builtin") {
      EXPECT_TRUE(names.insert(t.candidate.name).second) << t.candidate.name;
    }
  }
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/search.json"));
}

// A proposer that fails is a proposer_error in the record, with its exit and its stderr, never the
// end of the search; the context it was given and nothing else is left beside it.
TEST(Search, AFailingProposerIsRecordedWithItsStderr) {
  const std::string dir = temp_dir("failing_proposer");
  Task task = rmsnorm_task(dir + "/task");
  SearchOptions o = search_options(dir, 1, 0);
  o.proposer_argv = {"/bin/sh", "-c", "cat > /dev/null; echo 'no model today' >&2; exit 3"};
  auto r = run_search(task, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tried.size(), 1u);
  EXPECT_EQ(r->tried[0].result.verdict, "proposer_error");
  EXPECT_NE(r->tried[0].result.detail.find("exited with code 3"), std::string::npos)
      << r->tried[0].result.detail;
  EXPECT_NE(r->tried[0].result.detail.find("no model today"), std::string::npos) << r->tried[0].result.detail;
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/proposer/e1-0.context.json"));
  EXPECT_EQ(r->best, -1);
}

// With timing on, the best by u of the episodes are screened and timed a second time, and the best is
// chosen on the lower u of the two (the first u alone favours a lucky timing).
TEST(Search, TheBestAreTimedAgainAndChosenOnTheLowerU) {
  const std::string dir = temp_dir("confirm");
  Task task = rmsnorm_task(dir + "/task");
  SearchOptions o = search_options(dir, 1, 4);
  o.confirm = 2;
  o.screen.timing = true;
  o.screen.warm_reps = 5;
  o.screen.cold_reps = 1;
  auto r = run_search(task, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<const Tried*> passed, confirmed;
  for (const auto& t : r->tried) {
    if (t.result.passed()) passed.push_back(&t);
    if (t.confirmed_utility >= 0) confirmed.push_back(&t);
  }
  ASSERT_GE(passed.size(), 2u);
  ASSERT_EQ(confirmed.size(), 2u);
  // The re-timed ones are the two highest first-pass u.
  for (const Tried* p : passed) {
    if (p->confirmed_utility < 0) {
      for (const Tried* c : confirmed) EXPECT_GE(c->result.utility, p->result.utility) << p->candidate.name;
    }
  }
  ASSERT_GE(r->best, 0);
  const Tried& best = r->tried[size_t(r->best)];
  EXPECT_GE(best.confirmed_utility, 0.0);
  EXPECT_DOUBLE_EQ(best.score(), std::min(best.result.utility, best.confirmed_utility));
  for (const Tried* c : confirmed) EXPECT_GE(best.score(), c->score());
  // search.json carries both timings and names that best, which accept then takes at its score.
  auto j = json::parse_file(o.out_dir + "/search.json");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->as_object().at("best").as_string(), best.candidate.name);
  auto p = best_patch(o.out_dir, 0.0);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->name, best.candidate.name);
  EXPECT_DOUBLE_EQ(p->utility, best.score());
}

TEST(Search, EveryBuiltinTemplateCompilesAndPassesForItsOp) {
  // One candidate of each op's template, on a synthetic task of that op: catches a template that
  // no longer compiles or is wrong.
  const std::string dir = temp_dir("templates");
  Task rms = rmsnorm_task(dir + "/rms");
  auto cands = builtin_candidates(rms);
  ASSERT_FALSE(cands.empty());
  ScreenResult r = screen_candidate(rms, cands.front(), dir + "/c", fast_screen());
  EXPECT_TRUE(r.passed()) << cands.front().name << ": " << r.detail;
  for (engine::Op op : {engine::Op::kMatmul, engine::Op::kSwiglu, engine::Op::kRope, engine::Op::kSample}) {
    Task t = op == engine::Op::kSample ? sample_task(dir + "/sample")
                                       : op_task(op, dir + "/" + engine::op_name(op));
    auto all = builtin_candidates(t);
    ASSERT_GE(all.size(), 2u) << engine::op_name(op);
    for (const Candidate& c : {all.front(), all.back()}) {
      ScreenResult x = screen_candidate(t, c, dir + "/c", fast_screen());
      EXPECT_TRUE(x.passed()) << c.name << ": " << x.verdict << " " << x.detail;
    }
  }
}

}  // namespace
}  // namespace plumb::kernels
