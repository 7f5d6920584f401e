// The CUDA candidate ABI and NVRTC compilation, for real and without a GPU: the ABI checks, the cubin
// reader on NVRTC's output and on garbage, and `plumb kernels compile --device cuda` end to end (a
// good candidate, a syntax error, another ABI version, no launch configuration, a compiler hang
// killed at the time limit, a compiler out of memory).
#include "kernels/cuda/compile.h"

#include <elf.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "core/subprocess.h"
#include "kernels/cuda/abi.h"
#include "kernels/cuda/cubin.h"

namespace plumb::kernels::cuda {
namespace {

std::string candidate(const std::string& name) {
  return std::string(PLUMB_SOURCE_DIR) + "/tests/kernels/cuda/candidates/" + name;
}

std::string source_of(const std::string& name) {
  auto s = read_file(candidate(name));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : std::string();
}

std::string temp_dir(const std::string& name) {
  auto p =
      std::filesystem::temp_directory_path() / ("plumb_kcuda_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

LaunchConfig launch(int abi, int op, int block) { return {abi, op, block, 1, 1, 0, 0, 0}; }

TEST(CudaAbi, HeaderIsShippedWithItsVersion) {
  const std::string_view h = abi_header_text();
  EXPECT_NE(h.find("#define PLUMB_CUDA_ABI_VERSION 1"), std::string_view::npos);
  EXPECT_NE(h.find("struct plumb_rmsnorm_residual_args"), std::string_view::npos);
  EXPECT_NE(h.find("struct plumb_swiglu_args"), std::string_view::npos);
}

TEST(CudaAbi, LaunchChecksRefuseWithTheReason) {
  EXPECT_TRUE(check_launch(launch(1, PLUMB_OP_SWIGLU, 256)).ok());
  Status v2 = check_launch(launch(2, PLUMB_OP_SWIGLU, 256));
  EXPECT_EQ(v2.code(), Code::kFailedPrecondition);
  EXPECT_NE(v2.message().find("version 2 but this plumb speaks version 1"), std::string::npos)
      << v2.message();
  EXPECT_NE(check_launch(launch(1, 9, 256)).message().find("op 9"), std::string::npos);
  EXPECT_NE(check_launch(launch(1, PLUMB_OP_SWIGLU, 100)).message().find("multiple of 32"),
            std::string::npos);
  EXPECT_NE(check_launch(launch(1, PLUMB_OP_SWIGLU, 2048)).message().find("multiple of 32"),
            std::string::npos);
  LaunchConfig rows0 = launch(1, PLUMB_OP_RMSNORM_RESIDUAL, 128);
  rows0.rows_per_block = 0;
  EXPECT_FALSE(check_launch(rows0).ok());
  LaunchConfig smem = launch(1, PLUMB_OP_SWIGLU, 128);
  smem.dynamic_smem_bytes = 300 * 1024;
  EXPECT_NE(check_launch(smem).message().find("dynamic_smem_bytes"), std::string::npos);
  const CudaOp want = CudaOp::kRmsNormResidual;
  EXPECT_NE(check_launch(launch(1, PLUMB_OP_SWIGLU, 256), &want).message().find("task is rmsnorm_residual"),
            std::string::npos);
  EXPECT_FALSE(parse_op("attention").ok());
  EXPECT_EQ(*parse_op("swiglu"), CudaOp::kSwiglu);
}

TEST(CudaAbi, GridFollowsTheDeclaredRules) {
  LaunchConfig rows = launch(1, PLUMB_OP_RMSNORM_RESIDUAL, 128);
  rows.rows_per_block = 4;
  EXPECT_EQ(grid_blocks(rows, 1), 1);
  EXPECT_EQ(grid_blocks(rows, 9), 3);
  LaunchConfig ew = launch(1, PLUMB_OP_SWIGLU, 256);
  ew.items_per_thread = 4;
  EXPECT_EQ(grid_blocks(ew, 1024 * 10 + 1), 11);
  ew.max_blocks = 5;
  EXPECT_EQ(grid_blocks(ew, 1024 * 10 + 1), 5);
  EXPECT_EQ(grid_blocks(ew, 0), 1);
}

TEST(CudaCompile, GoodCandidateGivesAnSm90aCubin) {
  std::string cubin;
  CompileResult r = compile_source(source_of("swiglu_good.cu"), CompileOptions{}, &cubin);
  ASSERT_EQ(r.verdict, CompileVerdict::kOk) << r.message << "\n" << r.log;
  // The ELF header itself, read here without the reader under test.
  ASSERT_GE(cubin.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh{};
  std::memcpy(&eh, cubin.data(), sizeof(eh));
  EXPECT_EQ(std::memcmp(eh.e_ident, ELFMAG, SELFMAG), 0);
  EXPECT_EQ(eh.e_machine, 190);  // EM_CUDA
  EXPECT_EQ((eh.e_flags >> 8) & 0xffu, 90u);
  EXPECT_NE(cubin.find("-arch sm_90a"), std::string::npos);
  EXPECT_EQ(r.arch, "sm_90a");
  EXPECT_EQ(r.sm, 90);
  EXPECT_EQ(r.cubin_sha256, sha256_hex(cubin));
  EXPECT_EQ(r.source_sha256, sha256_hex(source_of("swiglu_good.cu")));
  EXPECT_EQ(r.launch.abi_version, 1);
  EXPECT_EQ(r.launch.op, PLUMB_OP_SWIGLU);
  EXPECT_EQ(r.launch.block_threads, 256);
  EXPECT_FALSE(r.nvrtc_version.empty());
  EXPECT_GT(r.compile_ms, 0);
}

TEST(CudaCompile, ArchIsTheOneAskedFor) {
  CompileOptions o;
  o.arch = "sm_100a";
  CompileResult r = compile_source(source_of("swiglu_good.cu"), o, nullptr);
  ASSERT_EQ(r.verdict, CompileVerdict::kOk) << r.message << "\n" << r.log;
  EXPECT_EQ(r.sm, 100);
  EXPECT_EQ(r.arch, "sm_100a");
  EXPECT_FALSE(check_arch("sm90").ok());
  EXPECT_FALSE(check_arch("compute_90").ok());
  EXPECT_TRUE(check_arch("sm_90a").ok());
}

TEST(CudaCompile, CubinReaderRefusesWhatIsNotACubin) {
  EXPECT_EQ(read_cubin("").status().code(), Code::kCorrupt);
  EXPECT_EQ(read_cubin("//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0").status().code(),
            Code::kCorrupt);
  auto self = read_file("/proc/self/exe");  // an x86-64 ELF
  ASSERT_TRUE(self.ok());
  auto host = read_cubin(*self);
  EXPECT_EQ(host.status().code(), Code::kCorrupt);
  EXPECT_NE(host.status().message().find("not NVIDIA CUDA"), std::string::npos);
  std::string cubin;
  ASSERT_EQ(compile_source(source_of("swiglu_good.cu"), CompileOptions{}, &cubin).verdict,
            CompileVerdict::kOk);
  for (size_t cut : {size_t(10), size_t(64), cubin.size() / 2}) {
    auto r = read_cubin(std::string_view(cubin).substr(0, cut));
    EXPECT_FALSE(r.ok() && r->launch.has_value()) << "cut at " << cut;
  }
}

// `plumb kernels compile --device cuda` end to end: the child, its record and its verdicts.
class CompileCli : public ::testing::Test {
 protected:
  struct Run {
    int exit = -1;
    std::string out;
    boost::json::object record;
  };
  Run compile(const std::string& name, std::vector<std::string> extra = {}) {
    Run run;
    const std::string dir = temp_dir("cli_" + name);
    std::vector<std::string> argv = {PLUMB_BINARY, "kernels",       "compile", "--device", "cuda",
                                     "--source",   candidate(name), "--out",   dir};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = run_capture(argv);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return run;
    run.exit = r->exit.exited ? r->exit.exit_code : -1;
    run.out = r->out;
    auto j = json::parse_file(dir + "/compile.json");
    if (j.ok() && j->is_object()) run.record = j->as_object();
    return run;
  }
  static std::string str(const boost::json::object& o, const char* k) {
    auto v = json::string_at(o, k);
    return v ? *v : std::string();
  }
};

TEST_F(CompileCli, GoodCandidateRecordsHashesVersionAndOptions) {
  Run r = compile("swiglu_good.cu");
  ASSERT_EQ(r.exit, 0) << r.out;
  EXPECT_EQ(str(r.record, "verdict"), "ok");
  const std::string cubin_path = str(r.record, "cubin");
  auto cubin = read_file(cubin_path);
  ASSERT_TRUE(cubin.ok()) << cubin_path;
  EXPECT_EQ(str(r.record, "cubin_sha256"), sha256_hex(*cubin));
  EXPECT_EQ(str(r.record, "source_sha256"), sha256_hex(source_of("swiglu_good.cu")));
  EXPECT_EQ(str(r.record, "arch"), "sm_90a");
  EXPECT_FALSE(str(r.record, "nvrtc_version").empty());
  EXPECT_EQ(r.record.at("options").as_array().at(0).as_string(), "--gpu-architecture=sm_90a");
  EXPECT_GT(json::number_at(r.record, "compile_ms").value_or(0), 0);
}

TEST_F(CompileCli, SyntaxErrorIsACompileVerdictWithTheLog) {
  Run r = compile("syntax_error.cu");
  EXPECT_EQ(r.exit, 1) << r.out;
  EXPECT_EQ(str(r.record, "verdict"), "compile_error");
  EXPECT_NE(str(r.record, "log").find("candidate.cu(7): error"), std::string::npos) << str(r.record, "log");
  EXPECT_NE(r.out.find("candidate.cu(7): error"), std::string::npos) << r.out;
  EXPECT_TRUE(str(r.record, "cubin").empty());
}

TEST_F(CompileCli, AnotherAbiVersionIsRefused) {
  Run r = compile("abi_v2.cu");
  EXPECT_EQ(r.exit, 1) << r.out;
  EXPECT_EQ(str(r.record, "verdict"), "abi_refused");
  EXPECT_NE(str(r.record, "message").find("ABI version 2 but this plumb speaks version 1"), std::string::npos)
      << str(r.record, "message");
  EXPECT_TRUE(str(r.record, "cubin").empty());
}

TEST_F(CompileCli, NoLaunchConfigurationIsRefused) {
  Run r = compile("no_launch.cu");
  EXPECT_EQ(r.exit, 1) << r.out;
  EXPECT_EQ(str(r.record, "verdict"), "abi_refused");
  EXPECT_NE(str(r.record, "message").find("PLUMB_LAUNCH"), std::string::npos);
}

TEST_F(CompileCli, HangingCompilerIsKilledAtTheTimeLimit) {
  const auto t0 = std::chrono::steady_clock::now();
  Run r = compile("compiler_hang.cu", {"--timeout", "3", "--memory-limit-mb", "8192"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit, 1) << r.out;
  EXPECT_EQ(str(r.record, "verdict"), "timed_out") << r.out;
  EXPECT_NE(str(r.record, "message").find("3 s limit"), std::string::npos);
  EXPECT_LT(s, 30) << "the child was not killed at the limit";
  EXPECT_FALSE(str(r.record, "source_sha256").empty());
}

TEST_F(CompileCli, CompilerOutOfMemoryIsAVerdictNotAnOutage) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "sanitizer builds run the compiler without the address-space limit (compile.cpp)";
#endif
  Run r = compile("compiler_hang.cu", {"--timeout", "120", "--memory-limit-mb", "400"});
  EXPECT_EQ(r.exit, 1) << r.out;
  const std::string v = str(r.record, "verdict");
  EXPECT_TRUE(v == "crashed" || v == "compile_error") << v << "\n" << r.out;
}

TEST_F(CompileCli, BadFlagsSayWhatToDo) {
  auto cpu = run_capture(
      {PLUMB_BINARY, "kernels", "compile", "--device", "cpu", "--source", candidate("swiglu_good.cu")});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->exit.exit_code, 2);
  auto arch = run_capture({"/bin/sh", "-c",
                           std::string("'") + PLUMB_BINARY +
                               "' kernels compile --device cuda --arch sm90 --source '" +
                               candidate("swiglu_good.cu") + "' --out " + temp_dir("arch") + " 2>&1"});
  ASSERT_TRUE(arch.ok());
  EXPECT_EQ(arch->exit.exit_code, 2);
  EXPECT_NE(arch->out.find("e.g. sm_90a"), std::string::npos) << arch->out;
}

}  // namespace
}  // namespace plumb::kernels::cuda
