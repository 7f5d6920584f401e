// compute-sanitizer's reports as screening reads them (kernels/cuda/sanitize.h), on captured and
// written logs (tests/fixtures/compute_sanitizer/README.md says which is which); the tool list; where
// the tool is looked for; the record's round trip. The runs under the tools are in
// screen_gpu_test.cpp (label gpu).
#include "kernels/cuda/sanitize.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/file.h"
#include "kernels/cuda/screen.h"

namespace plumb::kernels::cuda {
namespace {

std::string fixture(const std::string& name) {
  auto t = read_file(std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/compute_sanitizer/" + name);
  EXPECT_TRUE(t.ok()) << name;
  return t.ok() ? *t : "";
}

TEST(Sanitize, ACleanMemcheckRunHasNoErrors) {
  const SanitizerReport r = parse_sanitizer_log("memcheck", fixture("memcheck_clean_h200.txt"));
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.errors, 0);
  EXPECT_EQ(r.first, "");
}

TEST(Sanitize, MemcheckErrorsAreCountedWithTheFirstReport) {
  const SanitizerReport r = parse_sanitizer_log("memcheck", fixture("memcheck_oob_written.txt"));
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.errors, 2);
  EXPECT_EQ(r.first, "Invalid __global__ read of size 4 bytes");
}

TEST(Sanitize, RacecheckCountsErrorsAndWarningsApartFromItsHazards) {
  const SanitizerReport r = parse_sanitizer_log("racecheck", fixture("racecheck_errors_h200.txt"));
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.errors, 188);
  EXPECT_EQ(r.warnings, 4);
  EXPECT_TRUE(r.first.starts_with("Error: Race reported between Read access at nvjet_sm90")) << r.first;
}

TEST(Sanitize, ARunWithoutASummaryDidNotFinish) {
  const SanitizerReport r = parse_sanitizer_log("initcheck", fixture("killed_written.txt"));
  EXPECT_FALSE(r.completed);
  EXPECT_NE(r.first.find("did not finish"), std::string::npos) << r.first;
  EXPECT_FALSE(parse_sanitizer_log("memcheck", "").completed);
}

TEST(Sanitize, TheToolListIsCheckedAndNoneMeansNone) {
  auto all = parse_sanitizers("memcheck,racecheck,initcheck");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, kDefaultSanitizers);
  auto none = parse_sanitizers("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto bad = parse_sanitizers("memcheck,leakcheck");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'leakcheck'"), std::string::npos);
  EXPECT_FALSE(parse_sanitizers("").ok());
}

TEST(Sanitize, AnExplicitToolThatIsNotThereIsNamed) {
  const char* old = std::getenv("PLUMB_COMPUTE_SANITIZER");
  const std::string saved = old ? old : "";
  ::setenv("PLUMB_COMPUTE_SANITIZER", "/nonexistent/compute-sanitizer", 1);
  auto r = find_compute_sanitizer();
  if (old) {
    ::setenv("PLUMB_COMPUTE_SANITIZER", saved.c_str(), 1);
  } else {
    ::unsetenv("PLUMB_COMPUTE_SANITIZER");
  }
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/compute-sanitizer"), std::string::npos);
}

TEST(Sanitize, TheScreeningRecordKeepsWhatEachToolReported) {
  ScreenResult r;
  r.verdict = ScreenVerdict::kSanitizerError;
  r.reason = "compute-sanitizer memcheck: 2 error(s)";
  r.sanitizers = {parse_sanitizer_log("memcheck", fixture("memcheck_oob_written.txt"))};
  auto back = screen_result_from_json(to_json(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->verdict, ScreenVerdict::kSanitizerError);
  EXPECT_EQ(verdict_name(back->verdict), "sanitizer_error");
  ASSERT_EQ(back->sanitizers.size(), 1u);
  EXPECT_EQ(back->sanitizers[0].tool, "memcheck");
  EXPECT_EQ(back->sanitizers[0].errors, 2);
  EXPECT_TRUE(back->sanitizers[0].completed);
}

}  // namespace
}  // namespace plumb::kernels::cuda
