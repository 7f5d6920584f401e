// Screening on the device (label gpu): each cheat of tests/kernels/cuda/cheats/ refused with its
// reason, a crashing and a hanging candidate ending only their child, and honest built-in variants
// passing with a plausible time. Every test skips with the reason where no CUDA device is visible.
// The two cheats refused at compile time (other_stream, l2_persist) are tested without a GPU in
// cheats_compile_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "kernels/cuda/generate.h"
#include "kernels/cuda/screen.h"

namespace plumb::kernels::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                   \
    std::string why;                                                                     \
    if (cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why; \
  } while (0)

struct Outcome {
  int exit = -1;
  std::string verdict, reason, out;
  double median_us = 0;
};

// Screens `source`; compute-sanitizer stays off (`--sanitizers none`) unless `extra` names tools:
// the tools multiply a screening's time, and CudaSanitizeGpu below runs them.
Outcome screen(const std::string& source, const std::string& op, std::vector<std::string> extra = {},
               const std::string& dim = "4095") {
  static int n = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("plumb_kcuda_screen_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  std::vector<std::string> argv = {PLUMB_BINARY, "kernels",  "screen", "--device", "cuda",       "--op",
                                   op,           "--source", source,   "--out",    dir.string(), "--json",
                                   "--rows",     "256",      "--dim",  dim,        "--reps",     "20"};
  if (std::find(extra.begin(), extra.end(), "--sanitizers") == extra.end())
    extra.insert(extra.end(), {"--sanitizers", "none"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  Outcome o;
  auto r = run_capture(argv);
  if (!r.ok()) return o;
  o.exit = r->exit.exited ? r->exit.exit_code : -1;
  o.out = r->out;
  auto j = json::parse(r->out);
  if (!j.ok() || !j->is_object() || !j->as_object().contains("screen")) return o;
  const auto& s = j->as_object().at("screen").as_object();
  o.verdict = std::string(s.at("verdict").as_string());
  o.reason = std::string(s.at("reason").as_string());
  o.median_us = s.at("time_us").as_object().at("median").to_number<double>();
  return o;
}

std::string cheat(const std::string& name) {
  return std::string(PLUMB_SOURCE_DIR) + "/tests/kernels/cuda/cheats/" + name;
}

struct Case {
  const char* file;
  const char* op;
  const char* verdict;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.file; }

class CheatRefused : public ::testing::TestWithParam<Case> {};

TEST_P(CheatRefused, WithItsReason) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  Outcome o = screen(cheat(c.file), c.op, {"--screen-timeout", "60"});
  EXPECT_EQ(o.exit, 1) << o.out;
  EXPECT_EQ(o.verdict, c.verdict) << o.reason << "\n" << o.out;
  EXPECT_FALSE(o.reason.empty());
}

INSTANTIATE_TEST_SUITE_P(Cheats, CheatRefused,
                         ::testing::Values(Case{"cached_output.cu", "swiglu", "wrong_output"},
                                           Case{"partial_work.cu", "rmsnorm_residual", "wrong_output"},
                                           Case{"precomputed_table.cu", "swiglu",
                                                "wrong_output_after_timing"},
                                           Case{"low_precision.cu", "rmsnorm_residual", "wrong_output"},
                                           Case{"oob_last_block.cu", "rmsnorm_residual", "wrong_output"},
                                           Case{"zeros_when_small.cu", "rmsnorm_residual", "wrong_output"},
                                           Case{"reuse_ref_output.cu", "swiglu", "wrong_output"},
                                           Case{"mutates_inputs.cu", "rmsnorm_residual", "mutated_input"},
                                           Case{"oob_write.cu", "swiglu", "guard_overwritten"}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string n = i.param.file;
                           return n.substr(0, n.find('.'));
                         });

TEST(CudaScreenGpu, CrashEndsOnlyItsChild) {
  SKIP_WITHOUT_GPU();
  Outcome o = screen(cheat("crash.cu"), "swiglu", {"--screen-timeout", "60"});
  EXPECT_EQ(o.exit, 1) << o.out;
  EXPECT_TRUE(o.verdict == "launch_error" || o.verdict == "crashed") << o.verdict << ": " << o.reason;
}

TEST(CudaScreenGpu, HangIsKilledAtTheLimit) {
  SKIP_WITHOUT_GPU();
  Outcome o = screen(cheat("hang.cu"), "swiglu", {"--screen-timeout", "15"});
  EXPECT_EQ(o.exit, 1) << o.out;
  EXPECT_EQ(o.verdict, "timed_out") << o.reason;
}

TEST(CudaScreenGpu, BuiltInVariantsPassWithAPlausibleTime) {
  SKIP_WITHOUT_GPU();
  const auto dir =
      std::filesystem::temp_directory_path() / ("plumb_kcuda_variants_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (CudaOp op : {CudaOp::kRmsNormResidual, CudaOp::kSwiglu}) {
    const auto variants = generate_variants(op);
    for (size_t i = 0; i < variants.size(); i += 7) {  // a spread of the grid
      const std::string file = (dir / (variants[i].name + ".cu")).string();
      ASSERT_TRUE(write_file_atomic(file, variants[i].source).ok());
      for (const char* dim : {"4096", "4095"}) {
        Outcome o = screen(file, std::string(op_name(op)), {}, dim);
        EXPECT_EQ(o.exit, 0) << variants[i].name << " dim " << dim << ": " << o.verdict << " " << o.reason;
        EXPECT_EQ(o.verdict, "pass") << variants[i].name;
        EXPECT_GT(o.median_us, 0) << variants[i].name;
      }
    }
  }
}

// compute-sanitizer over candidates that pass every correctness draw (kernels/cuda/sanitize.h): an
// out-of-bounds read whose value is never used is refused by memcheck, a shared-memory race that
// happens to give the right answer by racecheck, and an honest built-in variant passes all three
// tools with each one's report in the record.
TEST(CudaSanitizeGpu, LatentBugsTheDrawsMissAreRefusedAndAnHonestVariantIsClean) {
  SKIP_WITHOUT_GPU();
  Outcome oob = screen(cheat("oob_read_unused.cu"), "rmsnorm_residual", {"--sanitizers", "memcheck"});
  EXPECT_EQ(oob.verdict, "sanitizer_error") << oob.reason << "\n" << oob.out;
  EXPECT_NE(oob.reason.find("memcheck"), std::string::npos) << oob.reason;
  Outcome race = screen(cheat("smem_race.cu"), "rmsnorm_residual", {"--sanitizers", "racecheck"});
  EXPECT_EQ(race.verdict, "sanitizer_error") << race.reason << "\n" << race.out;
  EXPECT_NE(race.reason.find("racecheck"), std::string::npos) << race.reason;
  const auto dir =
      std::filesystem::temp_directory_path() / ("plumb_kcuda_clean_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto variants = generate_variants(CudaOp::kRmsNormResidual);
  ASSERT_FALSE(variants.empty());
  const std::string file = (dir / (variants[0].name + ".cu")).string();
  ASSERT_TRUE(write_file_atomic(file, variants[0].source).ok());
  Outcome clean = screen(file, "rmsnorm_residual", {"--sanitizers", "memcheck,racecheck,initcheck"});
  EXPECT_EQ(clean.verdict, "pass") << clean.reason << "\n" << clean.out;
  auto j = json::parse_object(clean.out);
  ASSERT_TRUE(j.ok()) << clean.out;
  const auto& tools = j->at("screen").as_object().at("sanitizers").as_array();
  ASSERT_EQ(tools.size(), 3u) << clean.out;
  for (const auto& t : tools) {
    EXPECT_TRUE(t.as_object().at("completed").as_bool()) << json::dump(t);
    EXPECT_EQ(json::number_at(t.as_object(), "errors").value_or(-1), 0) << json::dump(t);
  }
}

// `plumb kernels search --device cuda` (kernels/cuda/search.h): two episodes over swiglu's built-in
// variants find a passing best with a utility at most the roofline's, and the best passed
// compute-sanitizer's three tools.
TEST(CudaSearchGpu, TwoEpisodesFindASanitizedBestUnderTheRoofline) {
  SKIP_WITHOUT_GPU();
  const auto dir =
      std::filesystem::temp_directory_path() / ("plumb_kcuda_search_" + std::to_string(::getpid()));
  auto r =
      run_capture({PLUMB_BINARY, "kernels",      "search", "--device", "cuda",       "--op",  "swiglu",
                   "--rows",     "64",           "--dim",  "4096",     "--reps",     "10",    "--episodes",
                   "2",          "--candidates", "4",      "--out",    dir.string(), "--json"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit.exit_code, 0) << r->out;
  auto j = json::parse_object(r->out);
  ASSERT_TRUE(j.ok()) << r->out;
  EXPECT_EQ(j->at("tried").as_array().size(), 8u);
  ASSERT_TRUE(j->at("best").is_object()) << r->out;
  const double u = json::number_at(j->at("best").as_object(), "utility").value_or(0);
  EXPECT_GT(u, 0.0);
  EXPECT_LE(u, 1.05);
  std::string best = json::string_at(j->at("best").as_object(), "name").value_or("");
  for (const auto& t : j->at("tried").as_array()) {
    if (json::string_at(t.as_object(), "name").value_or("") != best) continue;
    EXPECT_EQ(t.as_object().at("sanitizers").as_array().size(), 3u) << json::dump(t);
  }
}

// `plumb kernels profile --device cuda` (kernels/profile.h): every op of the CUDA runner timed with
// CUDA events, in prefill and in decode (decode graphs included), the instrumented time within the
// end-to-end time, and the overhead of profiling measured by an unprofiled second run.
TEST(CudaProfileGpu, EveryOpOfTheRunnerIsTimedAndTheOverheadMeasured) {
  SKIP_WITHOUT_GPU();
  auto r = run_capture({PLUMB_BINARY, "kernels", "profile", "--device", "cuda", "--workload", "D",
                        "--requests", "8", "--json"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->exit.exit_code, 0) << r->out;
  auto j = json::parse_object(r->out);
  ASSERT_TRUE(j.ok()) << r->out;
  EXPECT_EQ(json::string_at(*j, "device").value_or(""), "cuda:0");
  const double e2e = json::number_at(*j, "e2e_ms").value_or(0);
  const double instrumented = json::number_at(*j, "instrumented_ms").value_or(0);
  EXPECT_GT(instrumented, 0);
  EXPECT_LT(instrumented, e2e);
  EXPECT_GT(json::number_at(*j, "unprofiled_e2e_ms").value_or(0), 0) << r->out;
  std::set<std::string> seen;
  for (const auto& m : j->at("modules").as_array()) {
    const auto& o = m.as_object();
    seen.insert(json::string_at(o, "module").value_or("") + "/" + json::string_at(o, "phase").value_or(""));
    EXPECT_GT(json::number_at(o, "ms").value_or(0), 0) << json::dump(m);
  }
  for (const char* want :
       {"qkv_proj/prefill", "attention/prefill", "o_proj/prefill", "down_proj/prefill", "qkv_proj/decode",
        "attention/decode", "rope/decode", "lm_head/decode", "input_norm/decode", "embedding/decode"}) {
    EXPECT_TRUE(seen.count(want)) << want << " missing from " << r->out;
  }
}

}  // namespace
}  // namespace plumb::kernels::cuda
