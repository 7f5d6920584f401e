// Replays the fuzz targets' inputs through their checks (fuzz/fuzz_target.h): the committed seed
// corpus of each target, and every crash input saved under tests/fixtures/fuzz/<target>/, which
// is how a crash the fuzzer found becomes a regression test (docs/fuzzing.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/file.h"
#include "fuzz/fuzz_target.h"

namespace plumb::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_in(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "README.md") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

const Target* find_target(const std::string& name) {
  for (const Target& t : registry()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

class FuzzReplay : public ::testing::TestWithParam<std::string> {};

void replay(const Target& t, const std::vector<fs::path>& files) {
  for (const fs::path& f : files) {
    auto bytes = read_file(f.string());
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    EXPECT_EQ(t.check(*bytes), "") << "target " << t.name << ", input " << f;
  }
}

TEST_P(FuzzReplay, SeedCorpus) {
  const Target* t = find_target(GetParam());
  ASSERT_NE(t, nullptr);
  auto files = inputs_in(fs::path(PLUMB_SOURCE_DIR) / "fuzz" / "corpus" / GetParam());
  EXPECT_FALSE(files.empty()) << "fuzz/corpus/" << GetParam() << " has no seeds";
  replay(*t, files);
}

TEST_P(FuzzReplay, SavedCrashInputs) {
  const Target* t = find_target(GetParam());
  ASSERT_NE(t, nullptr);
  replay(*t, inputs_in(fs::path(PLUMB_SOURCE_DIR) / "tests" / "fixtures" / "fuzz" / GetParam()));
}

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (const Target& t : registry()) names.emplace_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, ::testing::ValuesIn(target_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Every target has its folder of seeds and a fuzz/fuzz_<name>.cpp, and the list in
// scripts/fuzz.sh names them all (a target CI never runs rots).
TEST(FuzzTargets, EveryTargetRunsInCi) {
  auto script = read_file(std::string(PLUMB_SOURCE_DIR) + "/scripts/fuzz.sh");
  ASSERT_TRUE(script.ok());
  EXPECT_GE(registry().size(), 13u);
  for (const Target& t : registry()) {
    EXPECT_NE(script->find(t.name), std::string::npos) << t.name << " missing in scripts/fuzz.sh";
    EXPECT_TRUE(fs::exists(fs::path(PLUMB_SOURCE_DIR) / "fuzz" / ("fuzz_" + std::string(t.name) + ".cpp")));
  }
}

}  // namespace
}  // namespace plumb::fuzz
