// The screening parent without a GPU: no device is a clear verdict (not a crash), a screening child
// that hangs is killed at the limit and one that dies is a crashed verdict with its output; the
// record round-trips. The hanging and dying children are stand-in scripts: on a machine without a
// GPU a real candidate cannot hang or fault a device (screen_gpu_test.cpp does that on one).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "kernels/cuda/screen.h"

namespace plumb::kernels::cuda {
namespace {

std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() /
           ("plumb_kcuda_parent_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string script(const std::string& dir, const std::string& body) {
  std::string path = dir + "/fake-plumb.sh";
  EXPECT_TRUE(write_file_atomic(path, "#!/bin/sh\n" + body + "\n").ok());
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST(CudaScreenParent, NoDeviceIsAClearVerdict) {
  std::string why;
  if (cuda_device_count(&why) > 0)
    GTEST_SKIP() << "a CUDA device is visible: screen_gpu_test.cpp screens on it";
  const std::string dir = temp_dir("nodev");
  auto r = run_capture({PLUMB_BINARY, "kernels", "screen", "--device", "cuda", "--op", "swiglu", "--source",
                        std::string(PLUMB_SOURCE_DIR) + "/tests/kernels/cuda/candidates/swiglu_good.cu",
                        "--out", dir, "--json"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit.exit_code, 3) << r->out;
  auto j = json::parse(r->out);
  ASSERT_TRUE(j.ok() && j->is_object()) << r->out;
  EXPECT_EQ(j->as_object().at("compile").as_object().at("verdict").as_string(), "ok");
  const auto& s = j->as_object().at("screen").as_object();
  EXPECT_EQ(s.at("verdict").as_string(), "no_device");
  EXPECT_NE(std::string(s.at("reason").as_string()).find("screening runs on a GPU"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir + "/screen/screen.json"));
}

TEST(CudaScreenParent, HangingChildIsKilledAtTheLimit) {
  const std::string dir = temp_dir("hang");
  ScreenOptions o;
  o.timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = screen_in_child(script(dir, "echo started; exec sleep 60"), "/nonexistent.cubin", dir + "/out", o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->verdict, ScreenVerdict::kTimedOut);
  EXPECT_NE(r->reason.find("1 s limit"), std::string::npos) << r->reason;
  EXPECT_NE(r->log.find("started"), std::string::npos);
  EXPECT_LT(s, 15);
  auto rec = json::parse_file(dir + "/out/screen.json");
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->as_object().at("verdict").as_string(), "timed_out");
}

TEST(CudaScreenParent, DyingChildIsACrashWithItsOutput) {
  const std::string dir = temp_dir("crash");
  auto r = screen_in_child(script(dir, "echo 'illegal memory access'; kill -SEGV $$"), "/nonexistent.cubin",
                           dir + "/out", ScreenOptions{});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->verdict, ScreenVerdict::kCrashed);
  EXPECT_NE(r->reason.find("without a result"), std::string::npos) << r->reason;
  EXPECT_NE(r->log.find("illegal memory access"), std::string::npos);
}

TEST(CudaScreenParent, RecordRoundTrips) {
  ScreenResult r;
  r.verdict = ScreenVerdict::kMeasurementError;
  r.reason = "too fast";
  r.device = "NVIDIA H100";
  r.calls_checked = 44;
  r.time = {12.5, 12.0, 13.0, 20};
  r.copy_gb_s = 2900;
  r.implied_gb_s = 4000;
  r.timed_shape = "256x4096";
  auto back = screen_result_from_json(to_json(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->verdict, ScreenVerdict::kMeasurementError);
  EXPECT_EQ(back->reason, "too fast");
  EXPECT_EQ(back->calls_checked, 44);
  EXPECT_DOUBLE_EQ(back->time.median_us, 12.5);
  EXPECT_EQ(back->time.reps, 20);
  EXPECT_EQ(verdict_name(back->verdict), "measurement_error");
  boost::json::object bad = to_json(r);
  bad["schema_version"] = 2;
  EXPECT_EQ(screen_result_from_json(bad).status().code(), Code::kCorrupt);
}

}  // namespace
}  // namespace plumb::kernels::cuda
