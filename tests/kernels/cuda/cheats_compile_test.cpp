// The cheat candidates of tests/kernels/cuda/cheats/, compiled without a GPU: two are refused before
// anything runs (a device-side launch on another stream does not compile without relocatable device
// code; L2 residency controls are found in the PTX), every other one compiles, so that the GPU
// tests (screen_gpu_test.cpp) refuse it for what it does, not for a typo.
#include <gtest/gtest.h>

#include <string>

#include "core/file.h"
#include "kernels/cuda/compile.h"

namespace plumb::kernels::cuda {
namespace {

CompileResult compile_cheat(const std::string& name) {
  auto src = read_file(std::string(PLUMB_SOURCE_DIR) + "/tests/kernels/cuda/cheats/" + name);
  EXPECT_TRUE(src.ok()) << name;
  return compile_source(src.ok() ? *src : std::string(), CompileOptions{}, nullptr);
}

TEST(CudaCheats, AnotherStreamDoesNotCompile) {
  CompileResult r = compile_cheat("other_stream.cu");
  EXPECT_EQ(r.verdict, CompileVerdict::kCompileError) << r.message;
  EXPECT_FALSE(r.log.empty());
}

TEST(CudaCheats, L2PersistenceIsRefused) {
  CompileResult r = compile_cheat("l2_persist.cu");
  EXPECT_EQ(r.verdict, CompileVerdict::kPolicyRefused) << r.message << "\n" << r.log;
  EXPECT_NE(r.message.find("L2 residency"), std::string::npos) << r.message;
}

TEST(CudaCheats, TheOthersCompileAndAreLeftToTheDevice) {
  for (const char* name :
       {"cached_output.cu", "partial_work.cu", "precomputed_table.cu", "low_precision.cu",
        "oob_last_block.cu", "zeros_when_small.cu", "reuse_ref_output.cu", "mutates_inputs.cu",
        "oob_write.cu", "crash.cu", "hang.cu", "oob_read_unused.cu", "smem_race.cu"}) {
    CompileResult r = compile_cheat(name);
    EXPECT_EQ(r.verdict, CompileVerdict::kOk) << name << ": " << r.message << "\n" << r.log;
  }
}

}  // namespace
}  // namespace plumb::kernels::cuda
