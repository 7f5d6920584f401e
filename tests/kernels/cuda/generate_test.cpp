// The built-in generator: every variant of every op compiles with NVRTC for sm_90a, declares the
// configuration it was generated with, and `plumb kernels generate --device cuda` writes them all.
#include "kernels/cuda/generate.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "kernels/cuda/compile.h"

namespace plumb::kernels::cuda {
namespace {

void expect_all_compile(CudaOp op) {
  const auto variants = generate_variants(op);
  ASSERT_EQ(variants.size(), 36u);
  std::set<std::string> names;
  for (const Variant& v : variants) {
    names.insert(v.name);
    CompileResult r = compile_source(v.source, CompileOptions{}, nullptr);
    ASSERT_EQ(r.verdict, CompileVerdict::kOk) << v.name << ": " << r.message << "\n" << r.log;
    EXPECT_EQ(r.arch, "sm_90a");
    const CudaOp want = op;
    EXPECT_TRUE(check_launch(r.launch, &want).ok()) << v.name;
    EXPECT_EQ(r.launch.block_threads, v.block_threads) << v.name;
    if (op == CudaOp::kRmsNormResidual) {
      EXPECT_EQ(r.launch.rows_per_block, v.rows_per_block) << v.name;
    } else {
      EXPECT_EQ(r.launch.items_per_thread, v.items_per_thread * v.vector_width) << v.name;
      EXPECT_EQ(r.launch.max_blocks, v.max_blocks) << v.name;
    }
  }
  EXPECT_EQ(names.size(), variants.size()) << "variant names must be unique";
}

TEST(CudaGenerate, EveryRmsNormResidualVariantCompiles) { expect_all_compile(CudaOp::kRmsNormResidual); }

TEST(CudaGenerate, EverySwigluVariantCompiles) { expect_all_compile(CudaOp::kSwiglu); }

TEST(CudaGenerate, VariantsDifferInWhatTheirNamesSay) {
  const auto v = generate_variants(CudaOp::kRmsNormResidual);
  std::set<std::string> sources;
  for (const auto& x : v) sources.insert(x.source);
  EXPECT_EQ(sources.size(), v.size());
  EXPECT_NE(v.front().source.find("#define BLOCK 128"), std::string::npos);
  EXPECT_NE(v.front().source.find("#define FUSED 1"), std::string::npos);
  EXPECT_NE(v[1].source.find("#define FUSED 0"), std::string::npos);
}

TEST(CudaGenerate, CliWritesEverySourceAndAnIndex) {
  const auto dir = std::filesystem::temp_directory_path() / ("plumb_kcuda_gen_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto r = run_capture(
      {PLUMB_BINARY, "kernels", "generate", "--device", "cuda", "--op", "swiglu", "--out", dir.string()});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->exit.exit_code, 0) << r->out;
  auto index = json::parse_file((dir / "variants.json").string());
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  const auto& arr = index->as_object().at("variants").as_array();
  ASSERT_EQ(arr.size(), 36u);
  for (const auto& e : arr) {
    const std::string file(e.as_object().at("source").as_string());
    auto text = read_file((dir / file).string());
    ASSERT_TRUE(text.ok()) << file;
    EXPECT_NE(text->find("plumb_candidate"), std::string::npos);
  }
  auto bad = run_capture(
      {PLUMB_BINARY, "kernels", "generate", "--device", "cuda", "--op", "attention", "--out", dir.string()});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->exit.exit_code, 2);
}

}  // namespace
}  // namespace plumb::kernels::cuda
