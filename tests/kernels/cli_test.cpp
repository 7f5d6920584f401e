// `plumb kernels` end to end on the shipped model: profile (table and JSON), tasks from a real run,
// a crashing candidate screened through the CLI (exit 1, plumb reports the crash), and a short
// search over a captured task.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "kernels/task.h"
#include "test_util.h"

namespace plumb::kernels {
namespace {

using namespace plumb::kernels::testing;

class KernelsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(PLUMB_BINARY)) GTEST_SKIP() << "plumb binary not built";
    model_ = std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny";
  }
  RunOutput run(std::vector<std::string> args) {
    args.insert(args.begin(), PLUMB_BINARY);
    auto r = run_capture(args);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  }
  std::string model_;
};

// With no --model, profile runs the shipped model wherever it is started from (found as plumb serve
// finds it: above the binary), not a "models/plumb-tiny" relative to the working directory.
TEST_F(KernelsCli, ProfileWithoutModelFindsTheShippedOneFromAnyDirectory) {
  const std::string dir = temp_dir("cli-cwd");
  auto r = run_capture({"/bin/sh", "-c",
                        "cd '" + dir + "' && exec '" + std::string(PLUMB_BINARY) +
                            "' kernels profile --workload B --requests 1 --json"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->exit.exit_code, 0) << r->out;
  auto j = json::parse(r->out);
  ASSERT_TRUE(j.ok()) << r->out;
  EXPECT_EQ(std::filesystem::canonical(std::string(j->as_object().at("model").as_string())),
            std::filesystem::canonical(model_));
}

// --device cuda on a machine without a GPU (or a build without CUDA): the device is refused saying
// why; tasks from a CUDA run and CPU kernel choices on a GPU are refused before any device is asked
// for (the profile itself runs on the device: kernels_cuda_screen_gpu_test, label gpu).
TEST_F(KernelsCli, ProfileOnACudaDeviceIsRefusedClearlyWhereItCannotRun) {
  auto sh = [](const std::string& args) {
    auto r = run_capture({"/bin/sh", "-c", "exec \"$0\" kernels " + args + " 2>&1", PLUMB_BINARY});
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : RunOutput{};
  };
  auto tasks = sh("tasks --device cuda --out " + temp_dir("cuda-tasks"));
  EXPECT_NE(tasks.exit.exit_code, 0);
  EXPECT_NE(tasks.out.find("tasks captured from a CUDA run"), std::string::npos) << tasks.out;
  auto kernels = sh("profile --device cuda --kernels reference");
  EXPECT_NE(kernels.exit.exit_code, 0);
  EXPECT_NE(kernels.out.find("leave --kernels at auto"), std::string::npos) << kernels.out;
  auto bad = sh("profile --device tpu");
  EXPECT_NE(bad.exit.exit_code, 0);
  EXPECT_NE(bad.out.find("cpu, cuda, cuda:N"), std::string::npos) << bad.out;
  auto profile = sh("profile --device cuda --requests 1");
  if (profile.exit.exit_code == 0) GTEST_SKIP() << "a GPU is visible here: the gpu-labelled test covers it";
  const bool said_why = profile.out.find("built without CUDA") != std::string::npos ||
                        profile.out.find("does not exist") != std::string::npos;
  EXPECT_TRUE(said_why) << profile.out;
}

TEST_F(KernelsCli, ProfileTasksScreenSearch) {
  const std::string dir = temp_dir("cli");
  auto prof = run({"kernels", "profile", "--workload", "B", "--requests", "2", "--model", model_, "--json"});
  ASSERT_EQ(prof.exit.exit_code, 0) << prof.out;
  auto j = json::parse(prof.out);
  ASSERT_TRUE(j.ok()) << prof.out;
  const auto& o = j->as_object();
  EXPECT_EQ(o.at("schema_version").as_int64(), 1);
  EXPECT_GT(o.at("e2e_ms").as_double(), 0);
  double wsum = o.at("weights").as_object().at("prefill").as_double() +
                o.at("weights").as_object().at("decode").as_double();
  EXPECT_NEAR(wsum, 1.0, 1e-9);
  std::set<std::string> modules;
  double s_sum = 0;
  for (const auto& h : o.at("hotspots").as_array()) {
    modules.insert(std::string(h.as_object().at("module").as_string()));
    s_sum += h.as_object().at("s").as_double();
  }
  // Every module boundary of the forward pass is observed, sampling included.
  for (const char* m : {"embedding", "input_norm", "q_proj", "k_proj", "v_proj", "rope_q", "rope_k",
                        "attention", "o_proj", "post_attention_norm", "gate_proj", "up_proj", "swiglu",
                        "down_proj", "final_norm", "lm_head", "sampling"}) {
    EXPECT_TRUE(modules.count(m)) << m;
  }
  EXPECT_GT(s_sum, 0.5);  // kernels explain most of the phase time
  EXPECT_LE(s_sum, 1.0 + 1e-9);

  auto tasks = run({"kernels", "tasks", "--workload", "B", "--requests", "2", "--model", model_, "--out",
                    dir + "/tasks", "--top", "40", "--min-share", "0"});
  ASSERT_EQ(tasks.exit.exit_code, 0) << tasks.out;
  const std::string norm = dir + "/tasks/post_attention_norm.decode";
  auto t = load_task(norm);
  ASSERT_TRUE(t.ok()) << t.status().to_string() << "\n" << tasks.out;
  EXPECT_EQ(t->op, engine::Op::kRmsNorm);
  EXPECT_EQ(t->m_min, 1);
  EXPECT_EQ(t->k, 256);
  EXPECT_FALSE(t->cases.empty());
  // Sampling rows are captured with their parameters (scenario B samples at temperature 0.7).
  auto st = load_task(dir + "/tasks/sampling.decode");
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->op, engine::Op::kSample);
  EXPECT_EQ(st->n, 4096);
  ASSERT_FALSE(st->cases.empty());
  EXPECT_FLOAT_EQ(st->cases[0].sample.temperature, 0.7f);
  EXPECT_EQ(st->cases[0].x.size(), 4096u);
  auto mm = load_task(dir + "/tasks/gate_proj.prefill");
  ASSERT_TRUE(mm.ok()) << mm.status().to_string();
  EXPECT_EQ(mm->dtype, engine::DType::kBF16);
  EXPECT_GT(mm->m_max, 1);

  ASSERT_TRUE(
      write_file_atomic(dir + "/crash.cpp", rmsnorm_source("crash", "*(volatile int*)(uintptr_t)16 = 1;"))
          .ok());
  auto crash = run({"kernels", "screen", "--task", norm, "--source", dir + "/crash.cpp", "--no-timing"});
  EXPECT_EQ(crash.exit.exit_code, 1) << crash.out;
  EXPECT_NE(crash.out.find("crash (signal:SIGSEGV)"), std::string::npos) << crash.out;

  auto search = run({"kernels", "search", "--task", norm, "--out", dir + "/s", "--episodes", "1",
                     "--candidates", "2", "--no-timing"});
  ASSERT_EQ(search.exit.exit_code, 0) << search.out;
  auto sj = json::parse_file(dir + "/s/search.json");
  ASSERT_TRUE(sj.ok());
  EXPECT_EQ(sj->as_object().at("candidates").as_array().size(), 2u);

  // A heap overflow inside the candidate's own allocation: guard pages cannot see it, ASan can.
  auto asan_lib = run_capture({"g++", "-print-file-name=libasan.so"});
  if (asan_lib.ok() && asan_lib->out.find('/') != std::string::npos) {
    ASSERT_TRUE(write_file_atomic(dir + "/heap_oob.cpp", rmsnorm_source("heap_oob", R"(
      { float* tmp = new float[d - 1]; volatile float v = tmp[d - 1]; (void)v; delete[] tmp; })"))
                    .ok());
    auto plain = run({"kernels", "screen", "--task", norm, "--source", dir + "/heap_oob.cpp", "--no-timing"});
    EXPECT_EQ(plain.exit.exit_code, 0) << plain.out;
    auto asan = run({"kernels", "screen", "--task", norm, "--source", dir + "/heap_oob.cpp", "--asan",
                     "--out", dir + "/asan"});
    EXPECT_EQ(asan.exit.exit_code, 1) << asan.out;
    EXPECT_NE(asan.out.find("unsafe (asan)"), std::string::npos) << asan.out;
  }

  auto bad = run({"kernels", "profile", "--workload", "Z"});
  EXPECT_EQ(bad.exit.exit_code, 2);
}

}  // namespace
}  // namespace plumb::kernels
