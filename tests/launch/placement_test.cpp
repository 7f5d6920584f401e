// The placement plan and CPU binding of launch/placement.h.
#include "launch/placement.h"

#include <gtest/gtest.h>

namespace plumb::launch {
namespace {

TEST(PlacementTest, CpuListCompressesRuns) {
  EXPECT_EQ(cpu_list({}), "");
  EXPECT_EQ(cpu_list({3}), "3");
  EXPECT_EQ(cpu_list({0, 1}), "0,1");
  EXPECT_EQ(cpu_list({8, 7, 5, 3, 2, 1, 0}), "0-3,5,7,8");
}

TEST(PlacementTest, TwoCpusGiveTheClientOneAndTheEngineTheOther) {
  auto p = plan_placement({1, 0}, PlacementMode::kAuto);
  EXPECT_TRUE(p.pinned());
  EXPECT_EQ(p.client_cpus, std::vector<int>({0}));
  EXPECT_EQ(p.engine_cpus, std::vector<int>({1}));
  EXPECT_EQ(p.describe(), "engine on CPU 1, client on CPU 0");
  EXPECT_EQ(json::canonical(p.to_json()),
            R"({"available":"0,1","client_cpus":"0","engine_cpus":"1","mode":"auto","note":""})");
}

TEST(PlacementTest, ManyCpusGiveTheClientAnEighth) {
  std::vector<int> cpus;
  for (int c = 0; c < 16; ++c) cpus.push_back(c);
  auto p = plan_placement(cpus, PlacementMode::kAuto);
  EXPECT_EQ(cpu_list(p.client_cpus), "0,1");
  EXPECT_EQ(cpu_list(p.engine_cpus), "2-15");
  EXPECT_EQ(p.describe(), "engine on CPUs 2-15, client on CPUs 0,1");
}

TEST(PlacementTest, OneCpuOrOffPinsNothingAndSaysWhy) {
  auto one = plan_placement({5}, PlacementMode::kAuto);
  EXPECT_FALSE(one.pinned());
  EXPECT_TRUE(one.client_cpus.empty());
  EXPECT_NE(one.describe().find("one CPU"), std::string::npos);
  auto off = plan_placement({0, 1, 2, 3}, PlacementMode::kOff);
  EXPECT_FALSE(off.pinned());
  EXPECT_EQ(off.describe(), "not pinned: placement off");
}

TEST(PlacementTest, ParsesModes) {
  EXPECT_EQ(*parse_placement_mode("auto"), PlacementMode::kAuto);
  EXPECT_EQ(*parse_placement_mode("off"), PlacementMode::kOff);
  EXPECT_EQ(parse_placement_mode("on").status().code(), Code::kInvalidArgument);
}

TEST(PlacementTest, ScopedAffinityBindsAndRestoresTheCallingThread) {
  auto before = available_cpus();
  {
    ScopedAffinity bind({before.front()});
    ASSERT_TRUE(bind.status().ok()) << bind.status().to_string();
    EXPECT_EQ(available_cpus(), std::vector<int>({before.front()}));
  }
  EXPECT_EQ(available_cpus(), before);
  {
    ScopedAffinity none({});
    EXPECT_TRUE(none.status().ok());
    EXPECT_EQ(available_cpus(), before);
  }
}

}  // namespace
}  // namespace plumb::launch
