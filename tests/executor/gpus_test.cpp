// The GPUs of one host without a GPU: slots from --gpus/--gpus-per-trial and their errors, which job
// holds which slot, the child environment, and nvidia-smi's output parsed from a fixture.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "core/subprocess.h"
#include "executor/executor.h"

namespace plumb::executor {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream f(std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/nvidia_smi/" + name);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(GpuSlots, SplitTheListInOrderIntoGroupsOfN) {
  auto s = gpu_slots("0,1,2,3", 2);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].visible_devices(), "0,1");
  EXPECT_EQ((*s)[1].visible_devices(), "2,3");
  EXPECT_EQ((*s)[1].index, 1);
  auto one = gpu_slots(" 3 , 1 ", 1);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 2u);
  EXPECT_EQ((*one)[0].visible_devices(), "3") << "the order given, not sorted";
  EXPECT_EQ((*one)[1].visible_devices(), "1");
}

TEST(GpuSlots, RefuseWhatCannotBeSplitSayingWhatToDo) {
  auto twice = gpu_slots("0,1,1,2", 1);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), Code::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("card 1 twice"), std::string::npos) << twice.status().message();
  auto odd = gpu_slots("0,1,2", 2);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("does not divide the 3 cards"), std::string::npos)
      << odd.status().message();
  auto zero = gpu_slots("0,1", 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("--gpus-per-trial must be >= 1"), std::string::npos);
  for (const char* bad : {"", "0,,1", "a,b", "-1", "0;1", "GPU-abc"}) {
    auto r = gpu_slots(bad, 1);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--gpus"), std::string::npos) << r.status().message();
  }
}

TEST(GpuSlotPool, GivesTheLowestFreeSlotAndKeepsItBusyUntilReleased) {
  GpuSlotPool pool(*gpu_slots("0,1,2,3", 2));
  EXPECT_EQ(pool.free_count(), 2u);
  auto a = pool.acquire("s1-j0-a0");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->visible_devices(), "0,1");
  auto b = pool.acquire("s1-j1-a0");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->visible_devices(), "2,3");
  auto c = pool.acquire("s1-j2-a0");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value()) << "both slots busy: the third job waits";
  EXPECT_EQ(pool.free_count(), 0u);
  EXPECT_EQ(pool.holder(0), "s1-j0-a0");
  auto freed = pool.release("s1-j0-a0");
  ASSERT_TRUE(freed.has_value());
  EXPECT_EQ(freed->index, 0);
  EXPECT_EQ(pool.holder(0), "");
  auto d = pool.acquire("s1-j2-a0");
  ASSERT_TRUE(d.ok() && d->has_value());
  EXPECT_EQ((*d)->visible_devices(), "0,1") << "the freed slot goes to the next job";
  EXPECT_FALSE(pool.release("never-held").has_value());
}

TEST(GpuSlotPool, RefusesAJobThatAlreadyHoldsASlotOrHasNoName) {
  GpuSlotPool pool(*gpu_slots("0,1", 1));
  ASSERT_TRUE(pool.acquire("j").ok());
  auto again = pool.acquire("j");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already holds"), std::string::npos);
  EXPECT_FALSE(pool.acquire("").ok());
  EXPECT_EQ(pool.free_count(), 1u);
}

TEST(ChildEnvironment, TurnsNvlinkMulticastOffOverAnyValue) {
  std::map<std::string, std::string> env{{"NCCL_NVLS_ENABLE", "1"}, {"X", "y"}};
  set_child_gpu_env(env);
  EXPECT_EQ(env.at("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(env.at("TORCH_SYMM_MEM_DISABLE_MULTICAST"), "1");
  EXPECT_EQ(env.at("NVSHMEM_DISABLE_NVLS"), "1");
  EXPECT_EQ(env.at("X"), "y");
}

// What main() does: every child of this process sees multicast off, over the caller's values.
TEST(ChildEnvironment, EveryChildInheritsMulticastOff) {
  ::setenv("NCCL_NVLS_ENABLE", "1", 1);
  ::unsetenv("NVSHMEM_DISABLE_NVLS");
  plumb::keep_multicast_off();
  auto out = run_capture(
      {"sh", "-c", "echo $NCCL_NVLS_ENABLE $TORCH_SYMM_MEM_DISABLE_MULTICAST $NVSHMEM_DISABLE_NVLS"});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->out, "0 1 1\n");
}

TEST(NvidiaSmi, ParsesTheQueryOutputOfAFourCardHost) {
  auto cards = parse_nvidia_smi(fixture("h100x4.csv"));
  ASSERT_TRUE(cards.ok()) << cards.status().to_string();
  ASSERT_EQ(cards->size(), 4u);
  const GpuIdentity& g = (*cards)[1];
  EXPECT_EQ(g.index, 1);
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.uuid, "GPU-bc5610b9-79c8-fedd-8899-07539c7f868a");
  EXPECT_EQ(g.max_sm_clock, "1980 MHz");
  EXPECT_EQ(g.driver, "550.54.15");
  EXPECT_EQ((*cards)[3].max_sm_clock, "[N/A]") << "kept as printed, not invented";
  auto argv = nvidia_smi_query_argv();
  ASSERT_EQ(argv.size(), 2u);
  EXPECT_EQ(argv[0], "--query-gpu=index,name,uuid,clocks.max.sm,driver_version");
  EXPECT_EQ(argv[1], "--format=csv,noheader");
}

TEST(NvidiaSmi, RefusesALineItCannotRead) {
  auto header = parse_nvidia_smi("index, name, uuid, clocks.max.sm [MHz], driver_version\n");
  ASSERT_FALSE(header.ok()) << "a header line (--format=csv without noheader)";
  EXPECT_NE(header.status().message().find("line 1: index 'index' is not a number"), std::string::npos)
      << header.status().message();
  auto short_line = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, GPU-abc\n");
  ASSERT_FALSE(short_line.ok());
  EXPECT_NE(short_line.status().message().find("has 3 fields, not 5"), std::string::npos);
  auto empty = parse_nvidia_smi("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(DeviceProvenance, KeepsTheVisibleCardsByIndexOrUuid) {
  std::string text = fixture("h100x4.csv");
  auto d = device_provenance_from("node7", "2,3", text);
  EXPECT_EQ(d.unavailable, "");
  ASSERT_EQ(d.gpus.size(), 2u);
  EXPECT_EQ(d.gpus[0].index, 2);
  EXPECT_EQ(d.gpus[1].index, 3);
  auto j = d.to_json();
  EXPECT_EQ(json::string_at(j, "host").value_or(""), "node7");
  EXPECT_EQ(json::string_at(j, "cuda_visible_devices").value_or(""), "2,3");
  EXPECT_EQ(json::string_at(j, "gpu_identity").value_or(""), "ok");
  ASSERT_EQ(j.at("gpus").as_array().size(), 2u);
  EXPECT_NE(d.summary().find("GPU-2a7fadae-a692-1c44-2c57-6645a0d117e4"), std::string::npos) << d.summary();
  auto by_uuid = device_provenance_from("node7", "GPU-bc5610b9-79c8-fedd-8899-07539c7f868a", text);
  ASSERT_EQ(by_uuid.gpus.size(), 1u);
  EXPECT_EQ(by_uuid.gpus[0].index, 1);
  EXPECT_EQ(device_provenance_from("node7", "", text).gpus.size(), 4u);
}

TEST(DeviceProvenance, SaysWhyTheIdentityIsUnavailableInsteadOfInventingIt) {
  auto none = device_provenance_from("node7", "0", Result<std::string>(not_found("nvidia-smi not found")));
  EXPECT_TRUE(none.gpus.empty());
  EXPECT_EQ(none.unavailable, "gpu identity unavailable: nvidia-smi not found");
  EXPECT_EQ(json::string_at(none.to_json(), "gpu_identity").value_or(""),
            "gpu identity unavailable: nvidia-smi not found");
  auto garbled = device_provenance_from("node7", "0", std::string("NVIDIA-SMI has failed\n"));
  EXPECT_NE(garbled.unavailable.find("gpu identity unavailable: nvidia-smi output line 1"), std::string::npos)
      << garbled.unavailable;
  // On this machine: a program that is not there.
  auto here = device_provenance("/nonexistent/nvidia-smi");
  EXPECT_EQ(here.unavailable, "gpu identity unavailable: /nonexistent/nvidia-smi not found");
  EXPECT_FALSE(here.host.empty());
}

TEST(DeviceProvenance, SaysSoWhenNvidiaSmiFails) {
  auto d = device_provenance("false");  // exits 1, as nvidia-smi does without a driver
  EXPECT_NE(d.unavailable.find("gpu identity unavailable: false failed (exit"), std::string::npos)
      << d.unavailable;
}

}  // namespace
}  // namespace plumb::executor
