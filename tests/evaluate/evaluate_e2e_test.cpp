// `plumb evaluate` end to end with real start scripts, real `plumb serve` processes and real gates:
//   - an honest submission (plumb serve, default settings) passes both gates and scores > 0, its
//     score being exactly the measured speedup over the baseline, and the HTML/JSON outputs exist;
//     a second evaluation with the same ledger takes the baseline from the ledger;
//   - a cheating submission (tests/gates/cheaters/cheat_proxy.py in "canned" mode in front of a real
//     plumb serve) fails a gate and scores exactly 1.0 without being measured;
//   - a start script that exits at once, or is not executable, is a clear error.
// To keep the test's length bounded on a loaded 2-core machine, the scenario is A (small) on one
// seed, with a short quality set and the `default` preset as the baseline (the real default is
// `naive`; the arithmetic is the same). No timing assertion: only consistency.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

struct Out {
  int code = -1;
  std::string out, err;
};

class Evaluate : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("plumb_evaluate_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::string script(const std::string& name, const std::string& body, bool executable = true) {
    std::string p = (dir_ / name).string();
    EXPECT_TRUE(write_file_atomic(p, "#!/bin/sh\n" + body).ok());
    ::chmod(p.c_str(), executable ? 0755 : 0644);
    return p;
  }

  Out evaluate(std::vector<std::string> args, const std::string& tag) {
    SpawnOptions o;
    o.argv = {PLUMB_BINARY, "evaluate"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.stdout_path = (dir_ / (tag + ".out")).string();
    o.stderr_path = (dir_ / (tag + ".err")).string();
    auto p = Subprocess::spawn(o);
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return {};
    ExitInfo e = p->wait();
    auto out = read_file(o.stdout_path);
    auto err = read_file(o.stderr_path);
    return {e.exited ? e.exit_code : -1, out.ok() ? *out : "", err.ok() ? *err : ""};
  }

  // The quick settings every run here uses (see the header comment).
  std::vector<std::string> quick(const std::string& start, const std::string& tag) {
    return {"--start-script",
            start,
            "--scenario",
            "A",
            "--seeds",
            "1337",
            "--quality-limit",
            "12",
            "--fidelity-prompts",
            "2",
            "--baseline-preset",
            "default",
            "--work-dir",
            (dir_ / (tag + "-work")).string(),
            "--timeout",
            "300"};
  }

  fs::path dir_;
};

const std::string kServe = std::string(PLUMB_BINARY) + " serve --host 127.0.0.1";

TEST_F(Evaluate, HonestSubmissionPassesTheGatesAndScoresItsSpeedup) {
  std::string start = script("start_server.sh", "exec " + kServe + " --port \"$1\"\n");
  std::string j = (dir_ / "ev.json").string(), h = (dir_ / "ev.html").string();
  std::string ledger = (dir_ / "ledger.db").string();
  auto args = quick(start, "honest");
  std::string ib = (dir_ / "ib").string();
  args.insert(args.end(), {"--json", j, "--html", h, "--ledger", ledger, "--ib-json", ib});
  Out o = evaluate(args, "honest");
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  // --ib-json: the submission's run as InferenceBench's metrics JSON, its model named by the
  // submission's own /v1/models while it ran.
  auto iv = json::parse_file(ib + "/A_seed1337.json");
  ASSERT_TRUE(iv.ok()) << iv.status().to_string() << o.err;
  EXPECT_EQ(iv->at("scenario").as_string(), "A");
  EXPECT_EQ(iv->at("profiles").at("burst").at("request_count").as_int64(), 32);
  EXPECT_NE(iv->at("model_id").as_string(), "unknown");
  EXPECT_NE(iv->at("model_id").as_string(), "null");
  EXPECT_EQ(iv->at("plumb").at("seed").as_int64(), 1337);
  // GPU memory, sampled while the submission's run was measured: null where there is no nvidia-smi
  // (with the reason), never 0; the same figure in IB's field and in plumb's object.
  EXPECT_EQ(iv->at("vram_peak_mb").is_null(), iv->at("plumb").at("vram").at("peak_mib").is_null());
  if (iv->at("vram_peak_mb").is_null()) {
    EXPECT_FALSE(iv->at("plumb").at("vram").at("unavailable").as_string().empty());
  } else {
    EXPECT_GT(iv->at("vram_peak_mb").to_number<double>(), 0.0);
  }
  // IB's quality_check, from the evaluation's own quality gate (the gates run after the scenarios:
  // the file is rewritten in place): the same accuracy and verdict as --json's gate.
  ASSERT_TRUE(iv->at("quality_check").is_object()) << json::dump(iv->at("quality_check"));
  const auto& qc = iv->at("quality_check").as_object();
  EXPECT_TRUE(qc.at("pass").as_bool());
  EXPECT_DOUBLE_EQ(qc.at("tau").to_number<double>(), 0.95);
  EXPECT_EQ(qc.at("dataset_sha256").as_string().size(), 64u);
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const auto& e = v->as_object();
  EXPECT_EQ(e.at("schema_version").as_int64(), 1);
  // The ledger's chain head: the runs it measured are sealed, so it is not the empty chain's.
  EXPECT_EQ(e.at("ledger").at("chain_head").as_string().size(), 64u);
  EXPECT_NE(e.at("ledger").at("chain_head").as_string(), std::string(64, '0'));
  EXPECT_TRUE(e.at("gates_passed").as_bool()) << o.out;
  EXPECT_TRUE(e.at("harness_intact").as_bool());
  for (const auto& g : e.at("gates").at("gates").as_array())
    for (const auto& c : g.at("constraints").as_array())
      if (c.at("name").as_string() == "accuracy") {
        EXPECT_DOUBLE_EQ(qc.at("accuracy").to_number<double>(), c.at("value").to_number<double>());
        EXPECT_DOUBLE_EQ(qc.at("baseline_accuracy").to_number<double>() * 0.95,
                         c.at("bound").to_number<double>());
      }
  const auto& sc = e.at("scenarios").as_array();
  ASSERT_EQ(sc.size(), 1u);
  const auto& seeds = sc[0].at("seeds").as_array();
  ASSERT_EQ(seeds.size(), 1u);
  const auto& r = seeds[0].as_object();
  EXPECT_EQ(r.at("seed").as_int64(), 1337);
  // An invalid baseline run appends its reason: "(invalid run: ...)".
  EXPECT_EQ(
      std::string(r.at("baseline_source").as_string()).rfind("measured: plumb serve --preset default", 0), 0u)
      << r.at("baseline_source").as_string();
  double score = e.at("score").as_double();
  EXPECT_GT(score, 0);
  // Validity depends on the machine's load (send lag, steady window), so both outcomes are checked
  // for consistency: a valid run scores its speedup, an invalid one exactly 1.0 with the reason.
  bool baseline_valid = r.at("baseline_objective").is_double();
  if (r.at("valid").as_bool() && baseline_valid) {
    double obj = r.at("objective").as_double(), base = r.at("baseline_objective").as_double();
    EXPECT_GT(obj, 0);
    EXPECT_GT(base, 0);
    EXPECT_DOUBLE_EQ(r.at("speedup").as_double(), obj / base);
    EXPECT_DOUBLE_EQ(sc[0].at("score").as_double(), obj / base);  // one seed: the geomean is the speedup
    EXPECT_DOUBLE_EQ(score, obj / base);
    EXPECT_EQ(sc[0].at("score_note").as_string(), "");
  } else {
    std::printf("note: a run was invalid on this machine: %s / %s\n",
                std::string(r.at("failure").as_string()).c_str(),
                std::string(r.at("baseline_source").as_string()).c_str());
    EXPECT_EQ(score, 1.0);
    EXPECT_TRUE(r.at("speedup").is_null());
    EXPECT_NE(std::string(sc[0].at("score_note").as_string()).find("scores 1.0"), std::string::npos);
  }
  // Both gates ran, with the harness check at the end.
  std::string gates = json::dump(e.at("gates"));
  EXPECT_NE(gates.find("\"gate\":\"quality\""), std::string::npos);
  EXPECT_NE(gates.find("\"gate\":\"integrity\""), std::string::npos);
  EXPECT_NE(gates.find("harness_unchanged_at_end"), std::string::npos);
  // The harness covers plumb's binary, the quality set, the start script and the shipped model.
  std::string harness = json::dump(e.at("harness_before"));
  for (const char* f :
       {"mc_heldout.jsonl", "start_server.sh", "plumb-tiny/model.safetensors", "plumb-tiny/tokenizer.json"})
    EXPECT_NE(harness.find(f), std::string::npos) << f << " " << harness;
  EXPECT_EQ(e.at("harness_before"), e.at("harness_after"));
  auto html = read_file(h);
  ASSERT_TRUE(html.ok());
  EXPECT_NE(html->find("data-kind=\"bar\" data-points=\"1\""), std::string::npos);
  EXPECT_EQ(html->find("<script"), std::string::npos);
  EXPECT_NE(o.out.find("gates passed"), std::string::npos) << o.out;

  // Again with the same ledger: the baseline is the one registered there, not re-measured.
  std::string j2 = (dir_ / "ev2.json").string();
  auto args2 = quick(start, "honest2");
  args2.insert(args2.end(), {"--json", j2, "--ledger", ledger});
  Out o2 = evaluate(args2, "honest2");
  ASSERT_EQ(o2.code, 0) << o2.out << o2.err;
  auto v2 = json::parse_file(j2);
  ASSERT_TRUE(v2.ok());
  const auto& r2 = v2->as_object().at("scenarios").as_array()[0].at("seeds").as_array()[0].as_object();
  EXPECT_EQ(r2.at("request_set_hash").as_string(), r.at("request_set_hash").as_string());
  if (baseline_valid) {
    EXPECT_EQ(std::string(r2.at("baseline_source").as_string()).rfind("ledger (runs ", 0), 0u)
        << r2.at("baseline_source").as_string();
    EXPECT_DOUBLE_EQ(r2.at("baseline_objective").as_double(), r.at("baseline_objective").as_double());
  } else {
    // No valid baseline was registered: it is measured again.
    EXPECT_EQ(std::string(r2.at("baseline_source").as_string()).rfind("measured:", 0), 0u);
  }
}

TEST_F(Evaluate, CheatingSubmissionFailsAGateAndScoresExactlyOne) {
  // A real plumb serve behind a proxy that answers every completion with the same canned text.
  std::string proxy = std::string(PLUMB_SOURCE_DIR) + "/tests/gates/cheaters/cheat_proxy.py";
  std::string start =
      script("start_server.sh", kServe +
                                    " --port 0 > upstream.log 2>&1 &\n"
                                    "for i in $(seq 600); do grep -q 'listening on' upstream.log && break; "
                                    "sleep 0.1; done\n"
                                    "URL=$(sed -n 's/.*listening on \\(http[^ ]*\\).*/\\1/p' upstream.log)\n"
                                    "exec python3 " +
                                    proxy + " --upstream \"$URL\" --mode canned --port \"$1\"\n");
  std::string j = (dir_ / "ev.json").string();
  auto args = quick(start, "cheat");
  args.insert(args.end(), {"--json", j});
  Out o = evaluate(args, "cheat");
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok()) << v.status().to_string() << o.err;
  const auto& e = v->as_object();
  EXPECT_FALSE(e.at("gates_passed").as_bool());
  EXPECT_EQ(e.at("score").as_double(), 1.0);
  const auto& sc = e.at("scenarios").as_array()[0].as_object();
  EXPECT_EQ(sc.at("score").as_double(), 1.0);
  EXPECT_TRUE(sc.at("seeds").as_array().empty());  // not measured
  EXPECT_NE(std::string(sc.at("score_note").as_string()).find("a gate failed"), std::string::npos);
  EXPECT_NE(o.out.find("FAILED"), std::string::npos) << o.out;
}

TEST_F(Evaluate, StartScriptThatExitsAtOnceIsAClearError) {
  std::string start = script("start_server.sh", "echo 'cannot find my weights' >&2\nexit 3\n");
  Out o = evaluate(quick(start, "exits"), "exits");
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_NE(o.err.find("the start script did not bring up a server"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("cannot find my weights"), std::string::npos) << o.err;  // its log tail
}

TEST_F(Evaluate, BadInputIsAUsageError) {
  std::string not_exec = script("start_server.sh", "exit 0\n", /*executable=*/false);
  Out o = evaluate(quick(not_exec, "noexec"), "noexec");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("chmod +x"), std::string::npos) << o.err;

  o = evaluate(quick((dir_ / "missing.sh").string(), "missing"), "missing");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("missing.sh does not exist"), std::string::npos) << o.err;

  std::string ok = script("ok.sh", "exit 0\n");
  auto args = quick(ok, "badsc");
  args[3] = "E";
  o = evaluate(args, "badsc");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("unknown scenario 'E'"), std::string::npos) << o.err;

  args = quick(ok, "badseed");
  args[5] = "13x";
  o = evaluate(args, "badseed");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.err.find("--seeds: '13x'"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace plumb
