// Studies end to end against the real `plumb serve --engine synthetic` (trials are real launches
// over real sockets, recorded in a real SQLite ledger): a scripted external proposer with an
// infeasible proposal, and a study killed with SIGKILL in the middle of a trial, then resumed.
// Scenario D (small) with synthetic delays: about 8 s per trial.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "core/subprocess.h"
#include "launch/port.h"
#include "tune/study.h"

namespace plumb::tune {
namespace {

namespace fs = std::filesystem;

class StudyE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
    dir_ =
        (fs::path(::testing::TempDir()) / ("plumb_tune_e2e_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name()))
            .lexically_normal()
            .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // ttft 20/40/60 ms, 3 ms between tokens: a D-small run lasts ~6.5 s.
    std::ofstream(dir_ + "/space.toml") << R"(name = "synthetic"
adapter = "plumb"
[fixed]
engine = "synthetic"
itl_ms = 3.0
threads = 1
[[param]]
name = "ttft_ms"
type = "float"
values = [20.0, 40.0, 60.0]
[[param]]
name = "distribution"
type = "categorical"
values = ["constant", "no_such_distribution"]
)";
  }
  void TearDown() override {
    kill_orphans();
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }
  // Engines whose launcher was SIGKILLed keep running in their own process group: stop them by the
  // port in their log file's name.
  void kill_orphans() {
    if (dir_.empty() || !fs::exists(dir_)) return;
    std::regex re("plumb-serve-([0-9]+)\\.log");
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::smatch m;
      std::string name = e.path().filename().string();
      if (!std::regex_match(name, m, re)) continue;
      auto ls = launch::port_listeners(uint16_t(std::stoi(m[1])));
      if (!ls.ok()) continue;
      for (const auto& l : *ls)
        if (l.pgid > 1 && l.cmdline.find("serve") != std::string::npos) ::kill(-l.pgid, SIGKILL);
    }
  }
  StudyOptions options(const std::string& strategy, int64_t trials) {
    StudyOptions o;
    o.space = dir_ + "/space.toml";
    o.strategy = strategy;
    o.scenario = "D";
    o.size = "small";
    o.trials = trials;
    o.request_timeout_s = 30;
    return o;
  }
  std::string dir_;
};

TEST_F(StudyE2eTest, ScriptedExternalProposerDrivesTheStudyAndInfeasibleTrialsAreRecorded) {
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  StudyOptions o = options("external", 3);
  o.strategy_options.proposer_argv = {"python3",
                                      std::string(PLUMB_SOURCE_DIR) + "/tests/tune/scripted_proposer.py",
                                      dir_ + "/contexts.jsonl"};
  auto id = create_study(**l, o);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  RunContext ctx;
  ctx.plumb_binary = PLUMB_BINARY;
  ctx.work_dir = dir_;
  auto r = run_study(**l, *id, ctx);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->trials_total, 3);
  EXPECT_EQ(r->stop_reason, "trial budget");
  auto st = load_study(**l, *id);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->trials.size(), 3u);
  // Trial 1: ttft 60; trial 2: an unknown distribution, the engine refuses to start; trial 3: ttft 20.
  // Trials 1 and 3 ran: "ok", or "invalid" when this (shared, loaded) machine made the client miss
  // its schedule (send lag); either way their run and objective are recorded.
  for (size_t i : {size_t(0), size_t(2)}) {
    const auto& ob = st->trials[i].obs;
    EXPECT_TRUE(ob.status == "ok" || ob.status == "invalid") << ob.status << ": " << ob.failure;
    EXPECT_EQ(ob.feasible, ob.status == "ok");
    ASSERT_TRUE(st->trials[i].run_id.has_value());
    ASSERT_TRUE(ob.objective.has_value());
    EXPECT_TRUE((*l)->row("runs", *st->trials[i].run_id).ok());
  }
  EXPECT_EQ(st->trials[1].obs.status, "startup_failed");
  EXPECT_FALSE(st->trials[1].obs.feasible);
  EXPECT_NE(st->trials[1].obs.failure.find("no_such_distribution"), std::string::npos)
      << st->trials[1].obs.failure;
  EXPECT_FALSE(st->trials[1].run_id.has_value());
  // The script saw the history (with the failure) and its own notes, and said so in its rationale.
  EXPECT_EQ(st->trials[0].rationale, "history 0, notes 0");
  EXPECT_EQ(st->trials[2].rationale, "history 2 (1 infeasible), notes 2");
  EXPECT_EQ(st->trials[2].obs.notes, "note 3");
  // A third of the TTFT scores higher (the objective is a geometric mean with 1/TTFT in it).
  EXPECT_GT(*st->trials[2].obs.objective, 1.2 * *st->trials[0].obs.objective);
  if (st->trials[2].obs.feasible) {
    ASSERT_TRUE(st->best().has_value());
    EXPECT_EQ(*st->best(), 2u);
  }
  // The report names the infeasible trial and why.
  std::string text = report_text(*st, nullptr);
  EXPECT_NE(text.find("startup_failed"), std::string::npos) << text;
  auto j = report_json(*st, nullptr);
  EXPECT_EQ(j.at("schema_version").as_int64(), kReportSchemaVersion);
  size_t infeasible = 0;
  for (const auto& t : st->trials) infeasible += t.obs.feasible ? 0 : 1;
  EXPECT_EQ(j.at("infeasible").as_array().size(), infeasible);
  EXPECT_GE(infeasible, 1u);
}

TEST_F(StudyE2eTest, KilledMidTrialResumesWithNoTrialLostOrRepeated) {
  std::string db = dir_ + "/plumb.db";
  std::vector<std::string> argv = {PLUMB_BINARY,
                                   "tune",
                                   "--space",
                                   dir_ + "/space.toml",
                                   "--strategy",
                                   "grid",
                                   "--trials",
                                   "4",
                                   "--ledger",
                                   db,
                                   "--work-dir",
                                   dir_,
                                   "--no-revalidate",
                                   "--request-timeout",
                                   "30",
                                   "--time-budget",
                                   "-1"};
  SpawnOptions so;
  so.argv = argv;
  so.stdout_path = dir_ + "/tune1.out";
  so.stderr_path = dir_ + "/tune1.err";
  auto p = Subprocess::spawn(so);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  // Grid order: (ttft 20, constant), (20, no_such_distribution: fails at start-up in ~1 s),
  // (40, constant), ... Wait for two finished trials, then kill during the third (an ~8 s run).
  int64_t finished = 0;
  for (int i = 0; i < 900 && finished < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto l = ledger::Ledger::open(db);
    if (!l.ok()) continue;
    auto t = (*l)->dump("trials");
    if (t.ok()) finished = int64_t(t->rows.size());
  }
  ASSERT_EQ(finished, 2) << "two trials did not finish within 90 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // trial 3 is in flight
  ::kill(p->pid(), SIGKILL);
  auto ex = p->wait();
  EXPECT_FALSE(ex.exited);
  EXPECT_EQ(ex.signal, SIGKILL);
  kill_orphans();
  {
    auto l = ledger::Ledger::open(db);
    ASSERT_TRUE(l.ok());
    auto t = (*l)->dump("trials");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->rows.size(), 2u) << "the trial in flight must not be recorded";
    auto runs = (*l)->list_runs();
    ASSERT_TRUE(runs.ok());
    EXPECT_EQ(runs->size(), 1u);  // trial 2 failed at start-up: no run
  }
  // Resume: the trial in flight is run again, then one more grid point, then the trial budget.
  auto out = run_capture({PLUMB_BINARY, "tune", "--resume", "1", "--ledger", db, "--work-dir", dir_,
                          "--no-revalidate", "--quiet"});
  ASSERT_TRUE(out.ok());
  // 0, or 1 when no trial was feasible (a loaded machine can make every run miss its schedule).
  EXPECT_TRUE(out->exit.exited && (out->exit.exit_code == 0 || out->exit.exit_code == 1)) << out->out;
  auto l = ledger::Ledger::open(db);
  ASSERT_TRUE(l.ok());
  auto st = load_study(**l, 1);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->trials.size(), 4u);
  std::set<std::string> keys;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(st->trials[i].obs.index, int64_t(i));
    keys.insert(config_key(st->trials[i].obs.config));
  }
  EXPECT_EQ(keys.size(), 4u) << "a grid point was measured twice";
  // Trials 1 and 3 ran (ok, or invalid on a loaded machine); 2 and 4 cannot start.
  for (size_t i : {size_t(0), size_t(2)}) {
    EXPECT_TRUE(st->trials[i].obs.status == "ok" || st->trials[i].obs.status == "invalid")
        << st->trials[i].obs.status;
    EXPECT_TRUE(st->trials[i].run_id.has_value());
  }
  EXPECT_EQ(st->trials[1].obs.status, "startup_failed");
  EXPECT_EQ(st->trials[3].obs.status, "startup_failed");
  EXPECT_EQ(std::get<double>(st->trials[2].obs.config.at("ttft_ms")), 40.0);
  auto runs = (*l)->list_runs();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 2u);  // one per trial that ran; none from the killed attempt
  // The database itself refuses a repeated or skipped trial index.
  ledger::TrialRow dup;
  dup.study_id = 1;
  dup.idx = 1;
  dup.config_json = "{}";
  dup.status = "error";
  dup.failure = "x";
  dup.rationale = "x";
  dup.started_at = dup.ended_at = "2026-01-01T00:00:00.000Z";
  auto ins = (*l)->insert_trial(dup, nullptr, {}, {});
  ASSERT_FALSE(ins.ok());
  EXPECT_NE(ins.status().message().find("no gap, no repeat"), std::string::npos) << ins.status().message();
  dup.idx = 6;
  EXPECT_FALSE((*l)->insert_trial(dup, nullptr, {}, {}).ok());
}

// --no-revalidate and --no-gates are stored with the study: a resume without them still skips the
// re-validation and the gates. One grid point that cannot start (about a second): the search is
// cheap; what is checked is what the study stored and what the resume does with it.
TEST_F(StudyE2eTest, AResumedStudyKeepsItsReValidationSettings) {
  std::ofstream(dir_ + "/fail.toml") << R"(name = "fails"
adapter = "plumb"
[fixed]
engine = "synthetic"
threads = 1
[[param]]
name = "distribution"
type = "categorical"
values = ["no_such_distribution"]
)";
  std::string db = dir_ + "/plumb.db";
  // Runs plumb to completion; returns its stderr.
  auto stderr_of = [&](std::vector<std::string> argv) {
    SpawnOptions so;
    so.argv = std::move(argv);
    so.stdout_path = dir_ + "/out.txt";
    so.stderr_path = dir_ + "/err.txt";
    auto p = Subprocess::spawn(so);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok()) return std::string();
    p->wait();
    std::ifstream in(dir_ + "/err.txt");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  stderr_of({PLUMB_BINARY, "tune", "--space", dir_ + "/fail.toml", "--strategy", "grid", "--trials", "1",
             "--ledger", db, "--work-dir", dir_, "--no-revalidate", "--no-gates", "--pairs", "6",
             "--time-budget", "-1"});
  {
    auto l = ledger::Ledger::open(db);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    auto st = load_study(**l, 1);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_FALSE(st->options.revalidate);
    EXPECT_FALSE(st->options.gates);
    EXPECT_FALSE(st->options.naive);
    EXPECT_EQ(st->options.pairs, 6);
  }
  std::string err =
      stderr_of({PLUMB_BINARY, "tune", "--resume", "1", "--trials", "1", "--ledger", db, "--work-dir", dir_});
  EXPECT_NE(
      err.find("after the search: re-validation off, gates off, naive off, 6 pairs (stored with the study)"),
      std::string::npos)
      << err;
  // A flag given with the resume applies on top, and is said.
  err = stderr_of({PLUMB_BINARY, "tune", "--resume", "1", "--trials", "1", "--ledger", db, "--work-dir", dir_,
                   "--naive"});
  EXPECT_NE(err.find("naive on, 6 pairs (stored with the study; given now: --naive)"), std::string::npos)
      << err;
}

TEST_F(StudyE2eTest, ATrialPastItsTimeLimitIsStoppedAndRecordedAsATimeout) {
  // 5 s to the first token: a D-small run would take ~90 s; the trial limit is 15 s.
  std::ofstream(dir_ + "/slow.toml") << R"(name = "slow"
adapter = "plumb"
[fixed]
engine = "synthetic"
itl_ms = 3.0
threads = 1
[[param]]
name = "ttft_ms"
type = "float"
values = [5000.0]
)";
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok());
  StudyOptions o = options("grid", 1);
  o.space = dir_ + "/slow.toml";
  o.trial_timeout_s = 15;
  auto id = create_study(**l, o);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  RunContext ctx;
  ctx.plumb_binary = PLUMB_BINARY;
  ctx.work_dir = dir_;
  auto r = run_study(**l, *id, ctx);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto st = load_study(**l, *id);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->trials.size(), 1u);
  const auto& t = st->trials[0];
  EXPECT_EQ(t.obs.status, "timeout") << t.obs.failure;
  EXPECT_FALSE(t.obs.feasible);
  EXPECT_NE(t.obs.failure.find("time limit of 15 s"), std::string::npos) << t.obs.failure;
  EXPECT_LT(t.elapsed_s, 60.0);       // stopped, not run to the end (~90 s)
  EXPECT_TRUE(t.run_id.has_value());  // the partial run is recorded, invalid
}

// confirm_best: after a grid of the three TTFTs (constant distribution: 3 feasible trials), the top 2
// are measured twice more each, stored as full trials with a confirmation rationale; the best is
// then one of them by its mean over 3 measurements; a second call measures nothing more.
TEST_F(StudyE2eTest, ConfirmationMeasuresTheTopAgainAndTheBestIsTheirMean) {
  std::ofstream(dir_ + "/ttft.toml") << R"(name = "ttft"
adapter = "plumb"
[fixed]
engine = "synthetic"
itl_ms = 1.0
threads = 1
[[param]]
name = "ttft_ms"
type = "float"
values = [20.0, 40.0, 60.0]
)";
  auto l = ledger::Ledger::open(dir_ + "/plumb.db");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  StudyOptions o = options("grid", 3);
  o.space = dir_ + "/ttft.toml";
  auto id = create_study(**l, o);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  RunContext ctx;
  ctx.plumb_binary = PLUMB_BINARY;
  ctx.work_dir = dir_;
  ASSERT_TRUE(run_study(**l, *id, ctx).ok());
  auto ran = confirm_best(**l, *id, ctx, 2, 2);
  ASSERT_TRUE(ran.ok()) << ran.status().to_string();
  EXPECT_EQ(*ran, 4);
  auto st = load_study(**l, *id);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->trials.size(), 7u);
  for (size_t i = 3; i < 7; ++i)
    EXPECT_EQ(st->trials[i].rationale.rfind(kConfirmationRationale, 0), 0u) << st->trials[i].rationale;
  auto b = st->best_configuration();
  ASSERT_TRUE(b.has_value());
  if (st->trials[b->trial].obs.feasible && b->measurements == 3) {
    // One of the two confirmed (TTFT 20 or 40), never the unconfirmed TTFT 60.
    EXPECT_NE(std::get<double>(st->trials[b->trial].obs.config.at("ttft_ms")), 60.0);
  }
  EXPECT_NE(report_text(*st, nullptr).find("measurements)"), std::string::npos) << report_text(*st, nullptr);
  auto again = confirm_best(**l, *id, ctx, 2, 2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
}

}  // namespace
}  // namespace plumb::tune
