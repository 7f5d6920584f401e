// `plumb compare calibrate` end to end at the smallest size that is still the protocol: one A-vs-A and
// one A-vs-slow comparison of 5 pairs each on scenario D (small), with the real `plumb serve --engine
// synthetic` (constant delays, so the verdicts are known): the A-vs-A comparison must not read better
// or worse, the slow arm (--debug-step-slowdown 0.10: every delay 10% longer) must read worse, and
// both comparisons must be registered and stored in the ledger with the placement recorded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "compare/calibrate.h"
#include "compare/preflight.h"
#include "core/file.h"
#include "core/subprocess.h"

namespace plumb::compare {
namespace {

TEST(CalibrateE2eTest, SelfComparisonIsNotAFindingAndTheSlowArmReadsWorse) {
  if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
  auto help = run_capture({PLUMB_BINARY, "serve", "--help"});
  if (!help.ok() || help->out.find("--debug-step-slowdown") == std::string::npos)
    GTEST_SKIP() << "`plumb serve --debug-step-slowdown` is not in this build";
  std::string dir =
      (std::filesystem::path(::testing::TempDir()) / ("plumb_calibrate_e2e_" + std::to_string(::getpid())))
          .lexically_normal()
          .string();
  std::filesystem::create_directories(dir);
  // D small: 64 requests of ~115-128 tokens, 4 at a time: with 2 ms between tokens a run takes ~5 s.
  std::ofstream(dir + "/arm.toml")
      << "adapter = \"plumb\"\n[params]\nengine = \"synthetic\"\nttft_ms = 10.0\n"
         "itl_ms = 2.0\n";
  auto l = ledger::Ledger::open(dir + "/plumb.db");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  CalibrateOptions o;
  o.config = dir + "/arm.toml";
  o.comparisons = 1;
  o.scenarios = {"D"};
  o.work_dir = dir;
  o.run.plumb_binary = PLUMB_BINARY;
  o.run.request_timeout = std::chrono::seconds(60);
  auto r = calibrate(**l, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->comparisons.size(), 2u);
  EXPECT_EQ(r->comparisons[0].kind, "a_vs_a");
  EXPECT_NE(r->comparisons[0].verdict, "better");
  EXPECT_NE(r->comparisons[0].verdict, "worse");
  EXPECT_EQ(r->comparisons[1].kind, "a_vs_slow");
  EXPECT_EQ(r->comparisons[1].verdict, "worse");
  EXPECT_NEAR(r->comparisons[1].ratio, 1 / 1.1, 0.03);
  EXPECT_EQ(r->false_positives.k, 0);
  EXPECT_EQ(r->false_positives.n, 1);
  EXPECT_EQ(r->power.k, 1);
  EXPECT_EQ(r->power.n, 1);
  auto slow = read_file(r->config_slow);
  ASSERT_TRUE(slow.ok());
  EXPECT_NE(slow->find("debug_step_slowdown = 0.1"), std::string::npos) << *slow;
  // Both are registered comparisons with 10 runs each, and the placement is in the stored settings.
  auto regs = (*l)->list_registrations();
  ASSERT_TRUE(regs.ok());
  EXPECT_EQ(regs->size(), 2u);
  for (const auto& c : r->comparisons) {
    auto runs = (*l)->comparison_runs(c.registration_id);
    ASSERT_TRUE(runs.ok());
    EXPECT_EQ(runs->size(), 10u);
  }
  EXPECT_FALSE(r->placement.empty());
  EXPECT_NE(format_calibration(*r, o).find("power (A-vs-slow read worse):"), std::string::npos);
  l->reset();
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

// The pre-flight noise check on a steady synthetic engine reads quiet; with run-to-run jitter injected
// (--launch-jitter 0.9: every delay of a launch scaled by one factor from [0.1, 1.9]) it reads too noisy
// and says what to do.
TEST(CalibrateE2eTest, PreflightNamesAMachineTooNoisyForAVerdict) {
  if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built: " << PLUMB_BINARY;
  std::string dir =
      (std::filesystem::path(::testing::TempDir()) / ("plumb_preflight_e2e_" + std::to_string(::getpid())))
          .lexically_normal()
          .string();
  std::filesystem::create_directories(dir);
  std::string arm = "adapter = \"plumb\"\n[params]\nengine = \"synthetic\"\nttft_ms = 10.0\nitl_ms = 1.0\n";
  std::ofstream(dir + "/steady.toml") << arm;
  std::ofstream(dir + "/jittery.toml") << arm << "launch_jitter = 0.9\n";
  NoiseCheckOptions o;
  o.runs = 4;
  o.run.plumb_binary = PLUMB_BINARY;
  o.run.work_dir = dir;
  o.run.request_timeout = std::chrono::seconds(60);
  o.config = dir + "/steady.toml";
  auto quiet = noise_check(o);
  ASSERT_TRUE(quiet.ok()) << quiet.status().to_string();
  EXPECT_EQ(quiet->objectives.size(), 4u);
  EXPECT_LE(quiet->cv, quiet->cap) << format_noise_check(*quiet, o);
  EXPECT_EQ(quiet->noise, Noise::kQuiet);
  EXPECT_TRUE(quiet->advice.empty());
  o.config = dir + "/jittery.toml";
  o.runs = 8;
  auto noisy = noise_check(o);
  ASSERT_TRUE(noisy.ok()) << noisy.status().to_string();
  // The objective scales as 1/factor: 8 draws give a CV over 10% with probability 0.9999 (simulated).
  EXPECT_GT(noisy->cv, 2 * noisy->cap) << format_noise_check(*noisy, o);
  EXPECT_EQ(noisy->noise, Noise::kTooNoisy);
  EXPECT_NE(noisy->advice.find("Quiet the machine"), std::string::npos);
  EXPECT_EQ(noisy->suggested_pairs, o.max_pairs);
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::compare
