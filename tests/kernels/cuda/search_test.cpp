// The CUDA search loop (kernels/cuda/search.h) where it runs without a GPU: the generator's spread
// and neighbourhood, the experience record and the proposer's context, and `plumb kernels search
// --device cuda` end to end up to the device: proposals compiled or recorded as failed, and a stop
// that says there is no device (the screening and the sanitized best need a GPU).
#include "kernels/cuda/search.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"

namespace plumb::kernels::cuda {
namespace {

TEST(CudaSearch, TheFirstEpisodeSpreadsOverTheGridAndLaterOnesStayNearTheBest) {
  const auto all = generate_variants(CudaOp::kRmsNormResidual);
  ASSERT_EQ(all.size(), 36u);
  const auto first = spread(all.size(), 6);
  ASSERT_EQ(first.size(), 6u);
  std::set<int> blocks;
  for (size_t i : first) blocks.insert(all[i].block_threads);
  EXPECT_EQ(blocks.size(), 3u) << "a spread covers every block size";
  EXPECT_TRUE(spread(5, 0).empty());
  EXPECT_EQ(spread(3, 10).size(), 3u);
  const Variant& best = all[first[2]];
  std::set<std::string> tried;
  for (size_t i : first) tried.insert(all[i].name);
  const auto next = nearest_untried(all, best, tried, 5);
  ASSERT_EQ(next.size(), 5u);
  int last = 1;  // nearest first: one parameter changed, then two
  for (size_t i : next) {
    EXPECT_FALSE(tried.count(all[i].name));
    const int dist = variant_distance(all[i], best);
    EXPECT_GE(dist, last) << all[i].name << " vs " << best.name;
    EXPECT_LE(dist, 2) << all[i].name << " vs " << best.name;
    last = dist;
  }
  EXPECT_EQ(variant_distance(all[next[0]], best), 1);
  EXPECT_EQ(variant_distance(best, best), 0);
}

TEST(CudaSearch, TheExperienceRecordCountsVerdictsAndKeepsTheBest) {
  std::vector<CudaTried> tried(3);
  tried[0].name = "a", tried[0].origin = "generator", tried[0].screened = true;
  tried[0].screen.verdict = ScreenVerdict::kPass, tried[0].utility = 0.7;
  tried[1].name = "b", tried[1].origin = "generator", tried[1].screened = true;
  tried[1].screen.verdict = ScreenVerdict::kWrongOutput;
  tried[2].name = "p", tried[2].origin = "proposer", tried[2].error = "the proposer failed";
  const json::object e = cuda_experience(tried, 0, 1);
  EXPECT_EQ(json::number_at(e.at("verdicts").as_object(), "pass").value_or(0), 1);
  EXPECT_EQ(json::number_at(e.at("verdicts").as_object(), "wrong_output").value_or(0), 1);
  EXPECT_EQ(json::number_at(e.at("verdicts").as_object(), "proposal_failed").value_or(0), 1);
  EXPECT_EQ(json::string_at(e.at("best").as_object(), "name").value_or(""), "a");
  CudaSearchOptions o;
  o.screen.op = CudaOp::kSwiglu;
  const json::object ctx = cuda_proposer_context(o, tried, 0);
  EXPECT_EQ(json::string_at(ctx, "op").value_or(""), "swiglu");
  EXPECT_NE(json::string_at(ctx, "abi").value_or("").find("plumb_swiglu_args"), std::string::npos);
  EXPECT_EQ(ctx.at("tried").as_array().size(), 3u);
}

class CudaSearchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("plumb_cuda_search_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  RunOutput search(const std::string& extra) {
    auto r =
        run_capture({"/bin/sh", "-c",
                     "exec \"$0\" kernels search --device cuda --op swiglu --out \"$1\" " + extra + " 2>&1",
                     PLUMB_BINARY, (dir_ / "s").string()});
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }
  std::filesystem::path dir_;
};

// A proposer that prints garbage is a failed proposal, recorded in search.json and the experience
// records, never fatal: the search ends with no best (exit 1). It read the context on stdin.
TEST_F(CudaSearchCli, AFailingProposerIsRecordedNotFatal) {
  const std::string ctx = (dir_ / "ctx.json").string();
  auto r = search("--candidates 0 --episodes 2 --proposer 'cat > " + ctx + "; echo not json'");
  EXPECT_EQ(r.exit.exit_code, 1) << r.out;
  auto s = json::parse_file((dir_ / "s" / "search.json").string());
  ASSERT_TRUE(s.ok()) << r.out;
  const auto& tried = s->as_object().at("tried").as_array();
  ASSERT_EQ(tried.size(), 2u);
  for (const auto& t : tried) {
    EXPECT_EQ(json::string_at(t.as_object(), "verdict").value_or(""), "proposal_failed") << json::dump(t);
    EXPECT_NE(json::string_at(t.as_object(), "reason").value_or("").find("not one JSON object"),
              std::string::npos);
  }
  EXPECT_TRUE(s->as_object().at("best").is_null());
  EXPECT_TRUE(std::filesystem::exists(dir_ / "s" / "experience-2.json"));
  auto c = json::parse_file(ctx);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(json::number_at(c->as_object(), "schema_version").value_or(0), 1);
  EXPECT_EQ(json::string_at(c->as_object(), "op").value_or(""), "swiglu");
}

// Built-in candidates compile (NVRTC, no GPU needed); the first screening finds no device and the
// search stops saying so, the compiled candidate kept. Skips where a GPU is visible.
TEST_F(CudaSearchCli, WithoutADeviceTheSearchStopsAfterCompilingSayingSo) {
  std::string why;
  if (cuda_device_count(&why) > 0) GTEST_SKIP() << "a GPU is visible: CudaSearchGpu covers the search";
  auto r = search("--candidates 2");
  EXPECT_EQ(r.exit.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("nothing can be screened"), std::string::npos) << r.out;
  bool compiled = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "s" / "candidates"))
    compiled = compiled || e.path().filename() == "candidate.cubin";
  EXPECT_TRUE(compiled) << r.out;
}

}  // namespace
}  // namespace plumb::kernels::cuda
