// The gates against real `plumb serve` processes (PLUMB_BINARY) on free ports, and against cheating
// proxies in front of them (tests/gates/cheaters/cheat_proxy.py): each cheat is caught by the check
// meant for it and the honest server passes every check. Kept small: a 12-question subset and a
// few short prompts, because the machine is shared.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>

#include "core/clock.h"
#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "engine/cpu/kernels.h"
#include "engine/safetensors.h"
#include "gates/checks.h"
#include "gates/gate_record.h"
#include "ledger/ledger.h"

namespace plumb::gates {
namespace {

namespace fs = std::filesystem;

// A child that prints "<key><url-or-port>" when ready.
struct Child {
  Subprocess proc;
  std::string url;
};

std::string tmp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("plumb-gates-" + std::to_string(::getpid()) + "-" + name)).string();
}

Result<std::unique_ptr<Child>> start(std::vector<std::string> argv, const std::string& log, bool proxy) {
  auto c = std::make_unique<Child>();
  SpawnOptions so;
  so.argv = std::move(argv);
  so.stdout_path = log;
  so.stderr_path = "=stdout";
  auto p = Subprocess::spawn(so);
  if (!p.ok()) return p.status();
  c->proc = std::move(*p);
  for (int i = 0; i < 1800; ++i) {
    auto text = read_file(log);
    if (text.ok()) {
      if (proxy) {
        size_t at = text->find("PORT ");
        if (at != std::string::npos && text->find('\n', at) != std::string::npos) {
          c->url = "http://127.0.0.1:" + text->substr(at + 5, text->find('\n', at) - at - 5);
          return c;
        }
      } else {
        size_t at = text->find("listening on ");
        if (at != std::string::npos) {
          size_t b = at + 13, e = text->find_first_of(" \n", b);
          c->url = text->substr(b, e - b);
          return c;
        }
      }
    }
    if (!c->proc.running()) {
      auto t = read_file(log);
      return Status(Code::kUnavailable, "exited: " + (t.ok() ? t->substr(0, 2000) : std::string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Status(Code::kTimeout, "not ready after 180 s");
}

// The binary that serves: PLUMB_SERVE_BINARY if set (e.g. a `plumb` built elsewhere), else PLUMB_BINARY.
std::string serve_binary() {
  const char* env = std::getenv("PLUMB_SERVE_BINARY");
  return env && *env ? std::string(env) : std::string(PLUMB_BINARY);
}

Result<std::unique_ptr<Child>> serve(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      serve_binary(), "serve", "--port",  "0",
      "--threads",    "1",     "--model", std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny"};
  for (auto& e : extra) argv.push_back(e);
  return start(argv, tmp_path(name + ".log"), false);
}

Result<std::unique_ptr<Child>> proxy(const std::string& upstream, const std::string& mode) {
  return start({"python3", std::string(PLUMB_SOURCE_DIR) + "/tests/gates/cheaters/cheat_proxy.py",
                "--upstream", upstream, "--mode", mode},
               tmp_path("proxy-" + mode + ".log"), true);
}

class GatesIntegration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Skipped only when the binary has no `serve` command at all; a serve that fails to start fails.
    auto help = run_capture({serve_binary(), "--help"});
    if (!help.ok() || help->out.find(" serve ") == std::string::npos) {
      skip_reason_ = serve_binary() + " has no `serve` command";
      return;
    }
    auto r = serve("reference", {"--dtype", "f32"});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    reference_ = r->release();
    auto t = serve("target", {"--dtype", "bf16"});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    target_ = t->release();
  }
  static void TearDownTestSuite() {
    delete target_;
    delete reference_;
    target_ = reference_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_NE(reference_, nullptr);
    ASSERT_NE(target_, nullptr);
  }

  static IntegrityOptions integrity_options() {
    IntegrityOptions o;
    o.seed = 11;
    o.fidelity_prompts = 1;
    o.fidelity_words = 12;
    o.cache_prompts = 3;
    o.cache_words = 12;
    o.cache_max_tokens = 32;  // long enough that a generation dwarfs a cache hit on a loaded machine
    o.sample_seeds = 3;
    o.accounting_requests = 2;
    o.accounting_max_tokens = 12;
    return o;
  }

  static std::map<std::string, Constraint> by_name(const GateResult& g) {
    std::map<std::string, Constraint> m;
    for (const auto& c : g.constraints) m[c.name] = c;
    return m;
  }

  static std::string table(const GateResult& g) { return render_table(GateReport{{g}}); }

  // The quality sample of these tests: the first 12 held-out questions, 2 fidelity prompts of 16 words.
  static QualityOptions small_quality() {
    QualityOptions q;
    auto items = load_mc_jsonl(std::string(PLUMB_SOURCE_DIR) + "/data/mc_heldout.jsonl");
    EXPECT_TRUE(items.ok()) << items.status().to_string();
    if (items.ok() && items->size() >= 12) q.items.assign(items->begin(), items->begin() + 12);
    q.fidelity_prompts = 2;
    q.fidelity_words = 16;
    return q;
  }

  static inline Child* reference_ = nullptr;
  static inline Child* target_ = nullptr;
  static inline std::string skip_reason_;
};

TEST_F(GatesIntegration, HonestServerPassesEveryIntegrityCheck) {
  OpenAiClient t({target_->url, ""}), r({reference_->url, ""});
  IntegrityOptions o = integrity_options();
  std::string file = tmp_path("harness.txt");
  ASSERT_TRUE(write_file_atomic(file, "dataset v1").ok());
  o.harness_before = hash_harness({file});
  o.bandwidth_gbs = 1000;  // generous: an honest CPU server is far below this ceiling
  o.weight_bytes =
      double(fs::file_size(std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny/model.safetensors"));
  auto g = run_integrity(t, &r, o);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::printf("%s", table(*g).c_str());
  auto m = by_name(*g);
  for (const auto& c : g->constraints) EXPECT_EQ(c.verdict, Verdict::kPass) << c.name << ": " << c.detail;
  EXPECT_TRUE(m.count("metrics_generation_tokens_error"));
  EXPECT_TRUE(g->complete());
  EXPECT_TRUE(g->passed(true));
}

TEST_F(GatesIntegration, HarnessChangeAndRooflineAreCaught) {
  OpenAiClient t({target_->url, ""});
  IntegrityOptions o = integrity_options();
  o.fidelity_prompts = 0;
  std::string file = tmp_path("harness2.txt");
  ASSERT_TRUE(write_file_atomic(file, "dataset v1").ok());
  o.harness_before = hash_harness({file});
  ASSERT_TRUE(write_file_atomic(file, "dataset v2").ok());  // the system under test rewrote it
  o.bandwidth_gbs = 1e-6;                                   // a ceiling no real server can respect
  o.weight_bytes = 1e9;
  auto g = run_integrity(t, nullptr, o);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto m = by_name(*g);
  EXPECT_EQ(m["harness_files_changed"].verdict, Verdict::kFail);
  EXPECT_EQ(m["harness_files_changed"].value, 1);
  EXPECT_EQ(m["decode_rate_over_roofline"].verdict, Verdict::kFail);
  EXPECT_EQ(m["fidelity"].verdict, Verdict::kNotEvaluated);
  // Without machine data the roofline is not evaluated, never passed.
  o.bandwidth_gbs = 0;
  o.harness_before = {};
  auto g2 = run_integrity(t, nullptr, o);
  ASSERT_TRUE(g2.ok());
  auto m2 = by_name(*g2);
  EXPECT_EQ(m2["decode_rate_over_roofline"].verdict, Verdict::kNotEvaluated);
  EXPECT_EQ(m2["harness_files_changed"].verdict, Verdict::kNotEvaluated);
  EXPECT_FALSE(g2->passed(true));
}

struct Cheat {
  const char* mode;
  std::vector<const char*> caught_by;  // constraints that must fail
};

TEST_F(GatesIntegration, EachCheatingProxyIsCaughtByItsCheck) {
  const std::vector<Cheat> cheats = {
      // With one fidelity prompt the canned reply is that prompt's own (it is the first request), so
      // fidelity alone would not see it; the output checks do.
      {"canned", {"prompt_dependent_outputs", "sampled_repeats_distinct"}},
      {"cache", {"repeat_time_ratio", "sampled_repeats_distinct"}},
      {"inflate", {"usage_prompt_tokens_match", "usage_completion_tokens_match"}},
      {"stopearly", {"delivered_length_ratio"}},
      {"truncate", {"text_recount_error"}},
  };
  OpenAiClient r({reference_->url, ""});
  for (const auto& cheat : cheats) {
    auto p = proxy(target_->url, cheat.mode);
    ASSERT_TRUE(p.ok()) << cheat.mode << ": " << p.status().to_string();
    OpenAiClient t({(*p)->url, ""});
    auto g = run_integrity(t, &r, integrity_options());
    ASSERT_TRUE(g.ok()) << cheat.mode << ": " << g.status().to_string();
    std::printf("== %s\n%s", cheat.mode, table(*g).c_str());
    EXPECT_FALSE(g->passed()) << cheat.mode;
    auto m = by_name(*g);
    for (const char* name : cheat.caught_by) {
      ASSERT_TRUE(m.count(name)) << cheat.mode << " " << name;
      EXPECT_EQ(m[name].verdict, Verdict::kFail) << cheat.mode << " not caught by " << name;
    }
  }
  // The proxy itself, forwarding honestly, passes.
  auto p = proxy(target_->url, "honest");
  ASSERT_TRUE(p.ok());
  OpenAiClient t({(*p)->url, ""});
  auto g = run_integrity(t, &r, integrity_options());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(g->passed()) << table(*g);
}

TEST_F(GatesIntegration, SubstitutedModelFailsFidelityAndQuality) {
  auto d = serve("dummy", {"--load-format", "dummy"});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  OpenAiClient t({(*d)->url, ""}), r({reference_->url, ""});
  QualityOptions q = small_quality();
  ASSERT_EQ(q.items.size(), 12u);
  auto g = run_quality(t, &r, q);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::printf("%s", table(*g).c_str());
  auto m = by_name(*g);
  EXPECT_EQ(m["fidelity_top1_agreement"].verdict, Verdict::kFail);
  EXPECT_EQ(m["fidelity_mean_kl"].verdict, Verdict::kFail);
  EXPECT_EQ(m["fidelity_token_match"].verdict, Verdict::kPass);  // same tokenizer
  EXPECT_FALSE(g->passed());
}

// "Quantization far past the bound": a copy of plumb-tiny whose linear weights are rounded to 2 bits
// (4 levels per output row, evenly between the row's min and max): a server that shrank its model
// far beyond int8/int4 and serves it as the same model. The fidelity gate catches it.
TEST_F(GatesIntegration, QuantizationFarPastTheBoundFailsFidelity) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(PLUMB_SOURCE_DIR) / "models" / "plumb-tiny";
  const fs::path dir = tmp_path("plumb-tiny-2bit");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(src / f, dir / f, fs::copy_options::overwrite_existing);
  auto file = engine::SafetensorsFile::open((src / "model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::vector<engine::TensorToWrite> out;
  int quantized = 0;
  for (const auto& info : file->tensors()) {
    auto v = file->get(info.name);
    ASSERT_TRUE(v.ok());
    engine::TensorToWrite t{info.name, v->dtype, v->shape,
                            std::string(reinterpret_cast<const char*>(v->data), v->nbytes)};
    const bool linear = info.name.find("_proj.weight") != std::string::npos && v->shape.size() == 2 &&
                        v->dtype == engine::TensorDType::kBF16;
    if (linear) {
      const int64_t rows = v->shape[0], cols = v->shape[1];
      auto* w = reinterpret_cast<uint16_t*>(t.bytes.data());
      for (int64_t r = 0; r < rows; ++r) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) {
          const float x = engine::bf16_to_f32(w[r * cols + c]);
          lo = std::min(lo, x);
          hi = std::max(hi, x);
        }
        const float step = (hi - lo) / 3.0f;
        for (int64_t c = 0; c < cols && step > 0; ++c) {
          const float x = engine::bf16_to_f32(w[r * cols + c]);
          w[r * cols + c] = engine::f32_to_bf16(lo + step * std::round((x - lo) / step));
        }
      }
      ++quantized;
    }
    out.push_back(std::move(t));
  }
  ASSERT_GE(quantized, 7 * 8) << "plumb-tiny has 7 projections in each of its 8 layers";
  ASSERT_TRUE(
      write_file_atomic((dir / "model.safetensors").string(), engine::serialize_safetensors(out)).ok());
  auto d = start({serve_binary(), "serve", "--port", "0", "--threads", "1", "--model", dir.string()},
                 tmp_path("2bit.log"), false);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  OpenAiClient t({(*d)->url, ""}), r({reference_->url, ""});
  QualityOptions q = small_quality();
  ASSERT_EQ(q.items.size(), 12u);
  auto g = run_quality(t, &r, q);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::printf("%s", table(*g).c_str());
  auto m = by_name(*g);
  EXPECT_EQ(m["fidelity_mean_kl"].verdict, Verdict::kFail) << "mean KL " << m["fidelity_mean_kl"].value;
  EXPECT_EQ(m["fidelity_token_match"].verdict, Verdict::kPass);  // same tokenizer: not a substitution
  EXPECT_FALSE(g->passed());
}

TEST_F(GatesIntegration, QualityGatePassesBf16AgainstF32AndRecordsInLedger) {
  OpenAiClient t({target_->url, ""}), r({reference_->url, ""});
  QualityOptions q = small_quality();
  ASSERT_EQ(q.items.size(), 12u);
  McResult tm, rm;
  auto g = run_quality(t, &r, q, &tm, &rm);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::printf("%s", table(*g).c_str());
  std::printf("accuracy on 12 items: target %.3f, reference %.3f\n", tm.accuracy, rm.accuracy);
  EXPECT_GE(rm.accuracy, 0.5);  // plumb-tiny is far above chance (25%)
  EXPECT_TRUE(g->passed()) << table(*g);

  std::string db = tmp_path("ledger.db");
  fs::remove(db);
  auto l = ledger::Ledger::open(db);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  GateRunInfo info;
  info.target_url = target_->url;
  info.target_model = t.endpoint().model;
  info.reference = reference_->url;
  info.dataset_sha256 = std::string(64, 'a');
  info.items = 12;
  info.seed = 1;
  info.started_at = utc_timestamp_now();
  info.ended_at = utc_timestamp_now();
  info.reference_accuracy = rm.accuracy;
  auto id = record_gate_run(**l, GateReport{{*g}}, info);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto base = ledger_baseline_accuracy(**l, info.dataset_sha256, info.target_model);
  ASSERT_TRUE(base.ok());
  ASSERT_TRUE(base->has_value());
  EXPECT_DOUBLE_EQ(**base, rm.accuracy);
  // A failed gate forbids a score for that run (the database refuses it).
  GateResult failed{"quality", {check("accuracy", 0.1, ">=", 0.8, "")}};
  auto fid = record_gate_run(**l, GateReport{{failed}}, info);
  ASSERT_TRUE(fid.ok()) << fid.status().to_string();
  EXPECT_FALSE((*l)->insert_score({*fid, *id, "default", 2.0}).ok());
  EXPECT_TRUE((*l)->insert_score({*fid, *id, "default", 1.0}).ok());
}

TEST_F(GatesIntegration, CliExitCodeIsTheVerdict) {
  std::string json_out = tmp_path("gate.json");
  auto ok = run_capture({PLUMB_BINARY, "gate", "all", "--target", target_->url, "--reference",
                         reference_->url, "--limit", "8", "--fidelity-prompts", "2", "--json", json_out});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->exit.exit_code, 0) << ok->out;
  EXPECT_NE(ok->out.find("accuracy"), std::string::npos);
  auto j = json::parse_file(json_out);
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(j->as_object().at("passed").as_bool());
  auto p = proxy(target_->url, "inflate");
  ASSERT_TRUE(p.ok());
  auto bad = run_capture({PLUMB_BINARY, "gate", "integrity", "--target", (*p)->url, "--reference",
                          reference_->url, "--fidelity-prompts", "1"});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->exit.exit_code, 1) << bad->out;
  EXPECT_NE(bad->out.find("usage_completion_tokens_match"), std::string::npos);
  auto usage = run_capture({PLUMB_BINARY, "gate", "quality", "--target", target_->url, "--dataset",
                            "/nonexistent.jsonl", "--reference", reference_->url});
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->exit.exit_code, 2);
}

}  // namespace
}  // namespace plumb::gates
