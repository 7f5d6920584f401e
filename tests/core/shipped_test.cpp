// The one search for shipped folders (core/shipped.h): the variable first, the repository above the
// executable, the install prefix, the working directory; errors name every place looked in.
#include "core/shipped.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace plumb {
namespace {

namespace fs = std::filesystem;

class ShippedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("PLUMB_MODELS_DIR");
    unsetenv("PLUMB_DATA_DIR");
    dir_ = fs::path(::testing::TempDir()) / ("plumb_shipped_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    unsetenv("PLUMB_MODELS_DIR");
    unsetenv("PLUMB_DATA_DIR");
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(ShippedTest, TheVariableComesFirst) {
  fs::create_directories(dir_ / "d");
  std::ofstream(dir_ / "d" / "mc_heldout.jsonl") << "{}\n";
  setenv("PLUMB_DATA_DIR", (dir_ / "d").c_str(), 1);
  auto f = find_shipped_file(Shipped::kData, "mc_heldout.jsonl");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(fs::path(*f), fs::weakly_canonical(dir_ / "d" / "mc_heldout.jsonl"));
  auto c = shipped_candidates(Shipped::kData);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front(), (dir_ / "d").string());
}

TEST_F(ShippedTest, DataBesideTheModelsVariableIsACandidate) {
  setenv("PLUMB_MODELS_DIR", (dir_ / "m" / "models").c_str(), 1);
  auto c = shipped_candidates(Shipped::kData);
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c.front(), (dir_ / "m" / "data").string());
}

// This test binary lives in the build tree inside the repository: models/ and data/ are found there.
TEST_F(ShippedTest, TheRepositoryAboveTheExecutableIsFound) {
  auto models = find_shipped_dir(Shipped::kModels);
  ASSERT_TRUE(models.ok()) << models.status().to_string();
  EXPECT_EQ(fs::path(*models), fs::weakly_canonical(fs::path(PLUMB_SOURCE_DIR) / "models"));
  auto mc = find_shipped_file(Shipped::kData, "mc_heldout.jsonl");
  ASSERT_TRUE(mc.ok()) << mc.status().to_string();
  EXPECT_EQ(fs::path(*mc), fs::weakly_canonical(fs::path(PLUMB_SOURCE_DIR) / "data" / "mc_heldout.jsonl"));
}

TEST_F(ShippedTest, TheInstallPrefixIsACandidateAndAMissingFileNamesWhereItLooked) {
  auto c = shipped_candidates(Shipped::kModels);
  fs::path exe = fs::read_symlink("/proc/self/exe");
  std::string prefix = (exe.parent_path().parent_path() / "share" / "plumb" / "models").string();
  EXPECT_NE(std::find(c.begin(), c.end(), prefix), c.end());
  EXPECT_EQ(c.back(), "models");

  auto f = find_shipped_file(Shipped::kData, "no_such_file.jsonl");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Code::kNotFound);
  const std::string& m = f.status().message();
  EXPECT_NE(m.find("share/plumb/data/no_such_file.jsonl"), std::string::npos) << m;
  EXPECT_NE(m.find("PLUMB_DATA_DIR"), std::string::npos) << m;
}

}  // namespace
}  // namespace plumb
