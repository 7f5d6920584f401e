// register / readout / list against a real SQLite ledger file, with runs written through the
// ledger API (the measured `run` path is exercised end to end in compare_e2e_test.cpp).
#include "compare/compare.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/clock.h"
#include "core/random.h"
#include "ledger/ledger_fixture.h"

namespace plumb::compare {
namespace {

std::string hex64(char c) { return std::string(64, c); }

class CompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::path(::testing::TempDir()) /
            ("plumb_compare_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .lexically_normal()
               .string();
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/a.toml")
        << "adapter = \"plumb\"\n[params]\nengine = \"synthetic\"\nitl_ms = 10.0\n";
    std::ofstream(dir_ + "/b.toml")
        << "adapter = \"plumb\"\n[params]\nengine = \"synthetic\"\nitl_ms = 11.0\n";
    auto l = ledger::Ledger::open(dir_ + "/plumb.db");
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    ledger_ = std::move(l).value();
  }
  void TearDown() override {
    ledger_.reset();
    std::filesystem::remove_all(dir_);
  }

  RegisterOptions options() {
    RegisterOptions o;
    o.config_a = dir_ + "/a.toml";
    o.config_b = dir_ + "/b.toml";
    o.scenario = "B";
    o.size = "small";
    return o;
  }

  int64_t register_ok(const RegisterOptions& o) {
    auto id = register_comparison(*ledger_, o);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    // Runs must start strictly after the registration (millisecond timestamps).
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return id.ok() ? *id : 0;
  }

  // Writes one run of a registered comparison the way `compare run` does, with a given objective.
  void add_run(int64_t reg_id, int64_t pair, const std::string& arm, double objective, bool valid = true,
               const std::string& settings = "{}") {
    auto reg = ledger_->get_registration(reg_id);
    ASSERT_TRUE(reg.ok());
    int64_t machine = *ledger_->insert_machine({hex64('a'), "Test CPU", 2, 1 << 30, "none", "none", "Linux"});
    int64_t build = *ledger_->insert_build({"0.1.0", "abc123", "RelWithDebInfo", "GNU 12.2.0"});
    int64_t seed = reg->seeds[size_t(pair)];
    std::string set_hash = hex64(char('0' + pair));
    int64_t set = *ledger_->insert_request_set({set_hash, reg->scenario, reg->size_class, seed, 16});
    ledger::RunRow r;
    r.machine_id = machine;
    r.build_id = build;
    r.protocol_id = reg->protocol_id;
    r.request_set_id = set;
    r.registration_id = reg_id;
    r.arm = arm;
    r.pair_index = pair;
    r.scenario = reg->scenario;
    r.size_class = reg->size_class;
    r.target_engine = "plumb";
    r.engine_config = arm == "A" ? reg->arm_a_config : reg->arm_b_config;
    r.engine_config_hash = hex64('c');
    r.model_identity = "synthetic (no model)";
    r.seed = seed;
    r.effective_settings = settings;
    r.started_at = utc_timestamp_now();
    r.ended_at = utc_timestamp_now();
    r.valid = valid;
    r.validity_json = "[]";
    r.objective = objective;
    std::vector<ledger::MetricRow> m{{"objective", objective, "1"}};
    // The per-request rows that back the objective (scenario B: 1 / median TPOT), so it is sealed.
    auto reqs = ledger::testing::backed_requests(16, objective, /*decode=*/true);
    auto id = ledger_->insert_run(r, reqs, m);
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }

  // n pairs: A has cross-run spread `spread` (relative), B = A * ratio * (1 + tiny pair noise).
  void add_pairs(int64_t reg_id, int n, double ratio, double spread, uint64_t seed = 7) {
    Rng rng(seed);
    for (int i = 0; i < n; ++i) {
      double a = 100.0 * (1.0 + spread * (2 * rng.uniform() - 1));
      double b = a * ratio * (1.0 + 0.002 * (2 * rng.uniform() - 1));
      std::string order(protocol::pair_order(i));
      add_run(reg_id, i, order.substr(0, 1), order[0] == 'A' ? a : b);
      add_run(reg_id, i, order.substr(1, 1), order[1] == 'A' ? a : b);
    }
  }

  std::string dir_;
  std::unique_ptr<ledger::Ledger> ledger_;
};

// What `compare run` stores as "devices" for a run on card `uuid` of `host`.
std::string on_card(const std::string& host, const std::string& uuid) {
  return R"({"devices":{"host":")" + host +
         R"(","cuda_visible_devices":"0","gpus":[{"index":0,"name":"NVIDIA H100 80GB HBM3","uuid":")" + uuid +
         R"(","max_sm_clock":"1980 MHz","driver":"550.54.15"}],"gpu_identity":"ok","nccl_nvls_enable":"0"}})";
}

TEST_F(CompareTest, AReadoutOverPairsOnDifferentCardsSaysSoInItsReason) {
  int64_t id = register_ok(options());
  Rng rng(3);
  for (int i = 0; i < 5; ++i) {
    double a = 100.0 * (1.0 + 0.01 * (2 * rng.uniform() - 1));
    std::string where = on_card("n1", i < 3 ? "GPU-aaa" : "GPU-bbb");
    add_run(id, i, "A", a, true, where);
    add_run(id, i, "B", a * 1.1, true, i == 4 ? on_card("n2", "GPU-ccc") : where);
  }
  auto r = readout_comparison(*ledger_, id, /*store=*/true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(r->devices_note.find("runs on different cards or nodes"), std::string::npos) << r->devices_note;
  EXPECT_NE(r->devices_note.find("pairs 0 1 2 on host n1 cards GPU-aaa"), std::string::npos)
      << r->devices_note;
  EXPECT_NE(r->devices_note.find("pairs 3 4 on host n1 cards GPU-bbb"), std::string::npos) << r->devices_note;
  EXPECT_NE(r->devices_note.find("arms of one pair apart: pairs 4"), std::string::npos) << r->devices_note;
  EXPECT_NE(r->readout.reason.find(r->devices_note), std::string::npos) << "the stored reason says it";
  EXPECT_NE(r->row.reason.find("different cards or nodes"), std::string::npos) << r->row.reason;
  EXPECT_NE(format_readout(*r).find("different cards or nodes"), std::string::npos);
}

TEST_F(CompareTest, AReadoutOverPairsOnOneCardSaysNothingAboutCards) {
  int64_t id = register_ok(options());
  for (int i = 0; i < 5; ++i) {
    add_run(id, i, "A", 100.0 + i, true, on_card("n1", "GPU-aaa"));
    add_run(id, i, "B", 110.0 + i, true, on_card("n1", "GPU-aaa"));
  }
  auto r = readout_comparison(*ledger_, id, /*store=*/false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->devices_note, "");
  EXPECT_EQ(r->readout.reason.find("cards"), std::string::npos) << r->readout.reason;
  EXPECT_EQ(devices_of_run(on_card("n1", "GPU-aaa")), "host n1 cards GPU-aaa");
  EXPECT_EQ(devices_of_run("{}"), "");
}

TEST_F(CompareTest, RegisterStoresHashedArmsSeedsAndRule) {
  int64_t id = register_ok(options());
  ASSERT_GT(id, 0);
  auto r = ledger_->get_registration(id);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->arm_a_config, R"({"adapter":"plumb","params":{"engine":"synthetic","itl_ms":1E1}})");
  EXPECT_EQ(r->arm_b_config, R"({"adapter":"plumb","params":{"engine":"synthetic","itl_ms":1.1E1}})");
  EXPECT_EQ(r->scenario, "B");
  EXPECT_EQ(r->size_class, "small");
  EXPECT_EQ(r->metric, "inv_median_tpot");
  EXPECT_EQ(r->direction, "higher");
  EXPECT_EQ(r->pairs, 5);
  EXPECT_EQ(r->seeds, pair_seeds(21, 5));
  EXPECT_EQ(r->registration_hash, ledger::registration_hash(*r));
  EXPECT_NE(r->rule.find("better if lo > 1+0.05"), std::string::npos) << r->rule;
  // Seeds differ between pairs and fit 31 bits.
  auto seeds = pair_seeds(21, 5);
  for (size_t i = 0; i < seeds.size(); ++i) {
    EXPECT_GE(seeds[i], 0);
    EXPECT_LT(seeds[i], int64_t(1) << 31);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(seeds[i], seeds[j]);
  }
  // The stored arm round-trips to the config it came from.
  auto c = arm_config(r->arm_b_config);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->resolved.name, "plumb");
  EXPECT_EQ(std::get<double>(c->params.at("itl_ms")), 11.0);
}

TEST_F(CompareTest, RegisterRejectsBadInput) {
  RegisterOptions o = options();
  o.pairs = 3;
  auto r = register_comparison(*ledger_, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("at least 5"), std::string::npos) << r.status().message();

  o = options();
  o.metric = "ttft_p99_ms";
  r = register_comparison(*ledger_, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'inv_median_tpot'"), std::string::npos) << r.status().message();

  o = options();
  o.scenario = "E";
  EXPECT_EQ(register_comparison(*ledger_, o).status().code(), Code::kInvalidArgument);
  o = options();
  o.delta = 0;
  EXPECT_EQ(register_comparison(*ledger_, o).status().code(), Code::kInvalidArgument);
  o = options();
  o.config_b = dir_ + "/missing.toml";
  r = register_comparison(*ledger_, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--b: "), std::string::npos) << r.status().message();
  auto regs = ledger_->list_registrations();
  ASSERT_TRUE(regs.ok());
  EXPECT_TRUE(regs->empty());
}

TEST_F(CompareTest, TenPercentBetterArmReadsBetter) {
  int64_t id = register_ok(options());
  add_pairs(id, 5, 1.10, 0.01);
  auto r = readout_comparison(*ledger_, id);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->row.verdict, "better");
  EXPECT_EQ(r->pairs_complete, 5);
  EXPECT_GT(r->readout_id, 0);
  EXPECT_LT(r->readout.lo, 1.10);
  EXPECT_GT(r->readout.hi, 1.10);
  EXPECT_NEAR(r->readout.ratio, 1.10, 0.003);
  auto stored = ledger_->readouts_for(id);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].verdict, "better");
  std::string text = format_readout(*r);
  EXPECT_NE(text.find("verdict      better"), std::string::npos) << text;
  EXPECT_NE(text.find("5 with two valid runs, of 5 registered"), std::string::npos) << text;
  // The spread the paired interval sees, beside the arms' CVs.
  EXPECT_NE(text.find("pair spread "), std::string::npos) << text;
}

TEST_F(CompareTest, SlowerArmReadsWorseAndSelfReadsEquivalent) {
  int64_t worse = register_ok(options());
  add_pairs(worse, 5, 1.0 / 1.10, 0.01);
  auto r = readout_comparison(*ledger_, worse);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->row.verdict, "worse");

  RegisterOptions self = options();
  self.config_b = self.config_a;
  int64_t same = register_ok(self);
  add_pairs(same, 5, 1.0, 0.01, 11);
  r = readout_comparison(*ledger_, same);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->row.verdict, "equivalent");
  EXPECT_GT(r->readout.lo, 0.95);
  EXPECT_LT(r->readout.hi, 1.05);
}

TEST_F(CompareTest, NoisyArmIsNoisyAndStoredWithoutVerdict) {
  int64_t id = register_ok(options());
  add_pairs(id, 5, 1.10, 0.15);  // 15% run-to-run spread: CV well above 5%
  auto r = readout_comparison(*ledger_, id);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->row.verdict, "noisy");
  EXPECT_GT(r->readout.cv_a, protocol::kCvCap);
}

TEST_F(CompareTest, MissingPairsAreInconclusiveWithPairsNeeded) {
  int64_t id = register_ok(options());
  add_pairs(id, 3, 1.10, 0.01);
  add_run(id, 3, "B", 110.0);  // pair 3 has one arm only
  add_run(id, 4, "A", 100.0, /*valid=*/false);
  add_run(id, 4, "B", 110.0);
  auto r = readout_comparison(*ledger_, id);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->row.verdict, "inconclusive");
  EXPECT_EQ(r->pairs_complete, 3);
  EXPECT_EQ(r->runs_invalid, 1);
  EXPECT_EQ(r->readout.more_pairs_needed, 2);
  EXPECT_NE(format_readout(*r).find("pairs needed 2 more"), std::string::npos);
}

TEST_F(CompareTest, NoRunsYetIsInconclusive) {
  int64_t id = register_ok(options());
  auto r = readout_comparison(*ledger_, id, /*store=*/false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->row.verdict, "inconclusive");
  EXPECT_EQ(r->readout.more_pairs_needed, 5);
  EXPECT_EQ(r->readout_id, 0);
  EXPECT_EQ(readout_comparison(*ledger_, 999).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace plumb::compare
