// The plugin ABI and loader: a tiny correct plugin is refused before screening, loaded after it,
// selectable per phase through a kernel selection, and matches the reference; a library changed
// after screening is refused; an ABI-version mismatch is a clear error; the sampling kernels agree.
#include "engine/cpu/plugin.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/random.h"
#include "engine/cpu/reference.h"
#include "engine/cpu/thread_pool.h"
#include "test_util.h"

namespace plumb::kernels {
namespace {

using namespace plumb::kernels::testing;
using engine::Op;
using engine::Phase;

// `trials` random rows (vocabulary 1..max_vocab, logits on a 0.25 grid: many ties on purpose) over
// every path of the sampling rule: kernel `b` must return kernel `a`'s ids.
void expect_same_ids(engine::SampleFn a_fn, engine::SampleFn b_fn, int trials, int64_t max_vocab,
                     uint64_t seed) {
  Rng rng(seed);
  engine::SampleScratch s1, s2;
  const engine::KernelContext ctx{nullptr, Phase::kDecode};
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<float> logits(size_t(1 + rng.uniform_int(0, max_vocab - 1)));
    for (auto& v : logits) v = float(rng.uniform_int(-20, 20)) * 0.25f;
    engine::SampleArgs a;
    a.logits = logits.data();
    a.vocab = int64_t(logits.size());
    a.temperature = trial % 4 == 0 ? 0.0f : float(0.2 + rng.uniform());
    a.top_k = int32_t(trial % 3 == 0 ? 0 : rng.uniform_int(1, 50));
    a.top_p = trial % 5 == 0 ? 1.0f : float(0.3 + 0.7 * rng.uniform());
    a.u = rng.uniform();
    ASSERT_EQ(b_fn(ctx, a, &s2), a_fn(ctx, a, &s1)) << "trial " << trial;
  }
}

TEST(Plugin, LoadedOnlyAfterScreeningThenSelectablePerPhase) {
  const std::string dir = temp_dir("plugin_ok");
  Task task = rmsnorm_task(dir + "/task");
  ScreenOptions o = fast_screen();
  ScreenResult comp = compile_candidate(candidate("tiny_rms", rmsnorm_source("tiny_rms")), dir + "/cand", o);
  ASSERT_EQ(comp.verdict, "compiled") << comp.detail;

  // Not screened yet: refused, and the message says what to do.
  auto early = engine::load_screened_plugin(comp.so_path);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), Code::kNotFound);
  EXPECT_NE(early.status().message().find("plumb kernels search"), std::string::npos)
      << early.status().message();

  ScreenResult r =
      screen_candidate(task, candidate("tiny_rms", rmsnorm_source("tiny_rms")), dir + "/cand", o);
  ASSERT_TRUE(r.passed()) << r.verdict << ": " << r.detail;
  ASSERT_TRUE(std::filesystem::exists(engine::certificate_path(r.so_path)));

  auto sel = engine::KernelSelection::parse_json(R"({"plugins": [")" + r.so_path +
                                                 R"("], "rmsnorm": {"decode": "tiny_rms"}})");
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  EXPECT_EQ(sel->plugins.size(), 1u);
  auto sets = engine::resolve_kernels(*sel);
  ASSERT_TRUE(sets.ok()) << sets.status().to_string();
  EXPECT_EQ((*sets)[size_t(Phase::kDecode)].names.at(Op::kRmsNorm), "tiny_rms");
  EXPECT_NE((*sets)[size_t(Phase::kPrefill)].names.at(Op::kRmsNorm),
            "tiny_rms");  // auto never picks a plugin

  // Through the registry trampoline, on a pool: same numbers as the reference.
  engine::ThreadPool pool(2);
  const engine::KernelContext ctx{&pool, Phase::kDecode};
  const CapturedCall& c = task.cases[1];
  std::vector<float> y(c.x.size()), ref(c.x.size());
  (*sets)[size_t(Phase::kDecode)].rmsnorm(ctx, c.x.data(), c.x2.data(), c.m, c.k, c.eps, y.data());
  engine::ref::rmsnorm(ctx, c.x.data(), c.x2.data(), c.m, c.k, c.eps, ref.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-5f * (1 + std::fabs(ref[i])));

  // Round trip of the selection keeps the plugin list.
  auto again = engine::KernelSelection::parse_json(sel->to_json());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->plugins, sel->plugins);

  // Loading again is idempotent.
  EXPECT_TRUE(engine::load_screened_plugin(r.so_path).ok());
}

TEST(Plugin, ChangedAfterScreeningIsRefused) {
  const std::string dir = temp_dir("plugin_changed");
  Task task = rmsnorm_task(dir + "/task");
  ScreenResult r = screen_candidate(task, candidate("changed_rms", rmsnorm_source("changed_rms")),
                                    dir + "/cand", fast_screen());
  ASSERT_TRUE(r.passed()) << r.detail;
  std::ofstream(r.so_path, std::ios::app) << "tampered";
  auto l = engine::load_screened_plugin(r.so_path);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("changed since it was screened"), std::string::npos)
      << l.status().message();
}

TEST(Plugin, FailedCertificateIsRefused) {
  const std::string dir = temp_dir("plugin_failcert");
  Task task = rmsnorm_task(dir + "/task");
  ScreenResult comp =
      compile_candidate(candidate("failed_rms", rmsnorm_source("failed_rms")), dir + "/cand", fast_screen());
  ASSERT_EQ(comp.verdict, "compiled");
  engine::PluginCertificate cert;
  cert.verdict = "fail";
  cert.detail = "unsafe";
  ASSERT_TRUE(engine::write_certificate(comp.so_path, cert).ok());
  auto l = engine::load_screened_plugin(comp.so_path);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("failed screening"), std::string::npos);
}

TEST(Plugin, AbiVersionMismatchIsAClearError) {
  const std::string dir = temp_dir("plugin_abi");
  Task task = rmsnorm_task(dir + "/task");
  ScreenOptions o = fast_screen();
  ScreenResult comp =
      compile_candidate(candidate("future_rms", rmsnorm_source("future_rms", "", "99u")), dir + "/c", o);
  ASSERT_EQ(comp.verdict, "compiled") << comp.detail;
  auto p = engine::open_plugin_unscreened(comp.so_path);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("ABI v99"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("rebuild"), std::string::npos) << p.status().message();
  // Screening reports it as a load error with its own signature, and certifies nothing.
  ScreenResult r = screen_library(task, comp.so_path, o);
  EXPECT_EQ(r.verdict, "load_error");
  EXPECT_EQ(r.signature, "abi_mismatch");
  EXPECT_FALSE(std::filesystem::exists(engine::certificate_path(comp.so_path)));
}

TEST(Plugin, AVersionOnePluginStillLoads) {
  // ABI v2 only added the sample op: a library built against v1 is screened and loaded unchanged.
  const std::string dir = temp_dir("plugin_v1");
  Task task = rmsnorm_task(dir + "/task");
  ScreenResult r = screen_candidate(task, candidate("old_rms", rmsnorm_source("old_rms", "", "1u")),
                                    dir + "/c", fast_screen());
  ASSERT_TRUE(r.passed()) << r.verdict << ": " << r.detail;
  auto p = engine::load_screened_plugin(r.so_path);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->abi_version, 1u);
}

TEST(Plugin, ASamplingPluginClaimingAbiV1IsRefusedByName) {
  // Sampling came with v2: a descriptor that says v1 and op 6 is not a plugin op of its version.
  const std::string dir = temp_dir("plugin_sample_v1");
  std::string src = sample_source("v1_sample");
  const std::string from = "{PLUMB_KERNEL_ABI_VERSION, sizeof";
  ASSERT_NE(src.find(from), std::string::npos);
  src.replace(src.find(from), from.size(), "{1u, sizeof");
  ScreenResult comp = compile_candidate(candidate("v1_sample", src), dir + "/c", fast_screen());
  ASSERT_EQ(comp.verdict, "compiled") << comp.detail;
  auto p = engine::open_plugin_unscreened(comp.so_path);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
  EXPECT_NE(p.status().message().find("not a plugin op of ABI v1"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("sample 6 from v2"), std::string::npos) << p.status().message();
}

TEST(Plugin, SamplingPluginServesTheDecodeSampler) {
  const std::string dir = temp_dir("plugin_sample");
  Task task = sample_task(dir + "/task");
  ScreenResult r = screen_candidate(task, candidate("plug_sample", sample_source("plug_sample")), dir + "/c",
                                    fast_screen());
  ASSERT_TRUE(r.passed()) << r.verdict << ": " << r.detail;
  auto sel = engine::KernelSelection::parse_json(R"({"plugins": [")" + r.so_path +
                                                 R"("], "sampling": {"decode": "plug_sample"}})");
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  auto sets = engine::resolve_kernels(*sel);
  ASSERT_TRUE(sets.ok()) << sets.status().to_string();
  EXPECT_EQ((*sets)[size_t(Phase::kDecode)].names.at(Op::kSample), "plug_sample");
  // Through the trampoline (scratch from the caller's buffers): the reference's ids on every path
  // (this plugin computes in the reference's arithmetic, so exactly its ids).
  auto fr = (*engine::KernelRegistry::instance().find(Op::kSample, "reference"))->cpu<engine::SampleFn>();
  engine::SampleFn fp = (*sets)[size_t(Phase::kDecode)].sample;
  expect_same_ids(fr, fp, 300, 700, 4);
}

TEST(Plugin, SelectionRejectsRelativePluginPaths) {
  auto sel = engine::KernelSelection::parse_json(R"({"plugins": ["cand.so"]})");
  ASSERT_FALSE(sel.ok());
  EXPECT_NE(sel.status().message().find("absolute"), std::string::npos);
  auto sel2 = engine::KernelSelection::parse_json(R"({"plugins": "x.so"})");
  ASSERT_FALSE(sel2.ok());
}

TEST(Sampling, SelectVariantReturnsTheReferenceIds) {
  auto& reg = engine::KernelRegistry::instance();
  auto ref = reg.find(Op::kSample, "reference");
  auto sel = reg.find(Op::kSample, "select");
  ASSERT_TRUE(ref.ok() && sel.ok());
  auto fr = (*ref)->cpu<engine::SampleFn>(), fs = (*sel)->cpu<engine::SampleFn>();
  expect_same_ids(fr, fs, 400, 300, 3);
}

}  // namespace
}  // namespace plumb::kernels
