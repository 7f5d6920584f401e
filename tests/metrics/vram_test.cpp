// GPU memory sampling for InferenceBench's vram_peak_mb (metrics/vram.h): nvidia-smi's output
// parsed, the sampling loop, and a machine without nvidia-smi. CI has no GPU, so the loop is driven
// here by a stand-in program that prints what nvidia-smi prints; vram_gpu_test.cpp runs the real
// nvidia-smi (ctest -L gpu).
#include "metrics/vram.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace plumb::metrics {
namespace {

TEST(Vram, ParsesTheLargestCard) {
  EXPECT_DOUBLE_EQ(*parse_memory_used("1024\n81559\n"), 81559.0);
  EXPECT_DOUBLE_EQ(*parse_memory_used(" 512 \r\n\n"), 512.0);
  EXPECT_DOUBLE_EQ(*parse_memory_used("0\n"), 0.0);
  auto na = parse_memory_used("[N/A]\n");
  ASSERT_FALSE(na.ok());
  EXPECT_NE(na.status().message().find("[N/A]"), std::string::npos) << na.status().message();
  EXPECT_FALSE(parse_memory_used("").ok());
  EXPECT_FALSE(parse_memory_used("NVIDIA-SMI has failed because it couldn't communicate\n").ok());
  EXPECT_FALSE(parse_memory_used("-5\n").ok());
}

TEST(Vram, WithoutNvidiaSmiThereIsNoFigureAndTheReason) {
  VramSampler s(std::chrono::milliseconds(10), "/nonexistent/nvidia-smi");
  s.start();
  VramPeak p = s.stop();
  EXPECT_FALSE(p.peak_mib.has_value());
  EXPECT_EQ(p.samples, 0);
  EXPECT_NE(p.unavailable.find("could not be run"), std::string::npos) << p.unavailable;
}

TEST(Vram, TheLoopKeepsThePeakUntilStopped) {
  const std::string dir = ::testing::TempDir() + "/plumb_vram_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  // Prints 100, 300, 200, 300, 200, ... MiB on successive calls, one line per card (two cards).
  const std::string prog = dir + "/nvidia-smi";
  std::ofstream(prog) << "#!/bin/sh\nn=$(cat " << dir << "/n 2>/dev/null || echo 0)\n"
                      << "echo $((n + 1)) > " << dir << "/n\n"
                      << "if [ \"$n\" = 0 ]; then echo 100; elif [ $((n % 2)) = 1 ]; then echo 300; "
                      << "else echo 200; fi\necho 50\n";
  ::chmod(prog.c_str(), 0755);
  VramSampler s(std::chrono::milliseconds(20), prog);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  VramPeak p = s.stop();
  ASSERT_TRUE(p.peak_mib.has_value()) << p.unavailable;
  EXPECT_DOUBLE_EQ(*p.peak_mib, 300.0);
  EXPECT_GE(p.samples, 3);
  EXPECT_EQ(p.unavailable, "");
  // stop() again returns the same and does not hang.
  EXPECT_EQ(s.stop().samples, p.samples);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::metrics
