// What the built-in variants compute, checked without a GPU: every variant of both ops is compiled
// as host C++ against a CPU emulator of the CUDA features they use (emulator/cuda_emulator.h), run
// with the grid its PLUMB_LAUNCH declares, and its outputs compared with the screening reference
// under the screening bound, on small shapes that take the vector paths, the scalar fallback (odd
// widths), padded strides and partial row groups. This is not a GPU run: no memory model, no timing.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/file.h"
#include "core/subprocess.h"
#include "kernels/cuda/checks.h"
#include "kernels/cuda/generate.h"

namespace plumb::kernels::cuda {
namespace {

// One translation unit with every variant, each in its own namespace under its own entry name.
std::string emulated_tu(const std::vector<Variant>& vs) {
  std::string tu = "#include \"cuda_emulator.h\"\n#include \"plumb_cuda_abi.h\"\n";
  for (size_t i = 0; i < vs.size(); ++i) {
    const std::string n = std::to_string(i);
    tu += "namespace v" + n +
          " {\n#undef BLOCK\n#undef RPB\n#undef VEC\n#undef FUSED\n#undef GROUP\n#undef GROUP_WARPS\n";
    tu += "#undef ITEMS\n#undef MAXB\n#define plumb_candidate plumb_candidate_" + n +
          "\n#define plumb_launch plumb_launch_" + n + "\n" + vs[i].source +
          "\n#undef plumb_candidate\n#undef plumb_launch\n}\n";
  }
  tu += "extern \"C\" void emu_run(int v, long grid, int block, void* args) {\n  switch (v) {\n";
  for (size_t i = 0; i < vs.size(); ++i) {
    const std::string n = std::to_string(i);
    const char* args = vs[i].op == CudaOp::kSwiglu ? "plumb_swiglu_args" : "plumb_rmsnorm_residual_args";
    tu += "    case " + n + ": emu_launch(&v" + n + "::plumb_candidate_" + n +
          ", grid, block, *static_cast<" + args + "*>(args)); break;\n";
  }
  return tu + "  }\n}\n";
}

using EmuRun = void (*)(int, long, int, void*);

// Builds the emulated variants into a shared object and opens it.
void* build(const std::vector<Variant>& vs, const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("plumb_kcuda_emu_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_file_atomic((dir / "plumb_cuda_abi.h").string(), std::string(abi_header_text())).ok());
  EXPECT_TRUE(write_file_atomic((dir / "emu.cpp").string(), emulated_tu(vs)).ok());
  const std::string so = (dir / "emu.so").string();
  auto r = run_capture({"/bin/sh", "-c",
                        "g++ -std=c++20 -O1 -w -shared -fPIC -pthread -I'" + dir.string() + "' -I'" +
                            std::string(PLUMB_SOURCE_DIR) + "/tests/kernels/cuda/emulator' '" +
                            (dir / "emu.cpp").string() + "' -o '" + so + "' 2>&1"});
  EXPECT_TRUE(r.ok() && r->exit.exited && r->exit.exit_code == 0)
      << (r.ok() ? r->out : r.status().to_string());
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << ::dlerror();
  return h;
}

LaunchConfig declared(void* h, size_t i) {
  const auto* c = static_cast<const LaunchConfig*>(::dlsym(h, ("plumb_launch_" + std::to_string(i)).c_str()));
  EXPECT_NE(c, nullptr);
  return c != nullptr ? *c : LaunchConfig{};
}

// Runs variant i on one fresh case and checks it like the screening child does.
void check_case(EmuRun run, size_t i, const Variant& v, const LaunchConfig& cfg, const Shape& s,
                int magnitude) {
  HostCase c = random_case(v.op, s, 100 + i, magnitude);
  reference(v.op, &c);
  const auto in = c.in, in2 = c.in2;
  std::vector<uint16_t> y(c.ref_y.size(), 0xffff);
  std::vector<float> h(c.in.size(), std::nanf(""));
  if (v.op == CudaOp::kSwiglu) {
    plumb_swiglu_args a{c.in.data(), y.data(), s.rows, s.cols, s.in_stride, s.out_stride};
    run(int(i), long(grid_blocks(cfg, s.rows * s.cols)), cfg.block_threads, &a);
  } else {
    plumb_rmsnorm_residual_args a{c.in.data(), c.in2.data(), c.w.data(),  h.data(),     y.data(),
                                  s.rows,      s.cols,       s.in_stride, s.out_stride, c.eps};
    run(int(i), long(grid_blocks(cfg, s.rows)), cfg.block_threads, &a);
    Mismatch mh = compare_f32(h, c.ref_h, s.rows, s.cols, s.in_stride);
    EXPECT_TRUE(mh.ok) << v.name << " " << s.to_string() << ": h_out " << mh.message;
  }
  Mismatch my = compare_bf16(y, c.ref_y, s.rows, s.cols, s.out_stride);
  EXPECT_TRUE(my.ok) << v.name << " " << s.to_string() << " magnitude " << magnitude << ": " << my.message;
  EXPECT_TRUE(std::memcmp(in.data(), c.in.data(), in.size() * 4) == 0) << v.name << " wrote an input";
}

void check_all(CudaOp op, const std::vector<Shape>& shapes) {
  const auto vs = generate_variants(op);
  void* h = build(vs, std::string(op_name(op)));
  ASSERT_NE(h, nullptr);
  auto run = reinterpret_cast<EmuRun>(::dlsym(h, "emu_run"));
  ASSERT_NE(run, nullptr);
  for (size_t i = 0; i < vs.size(); ++i) {
    const LaunchConfig cfg = declared(h, i);
    ASSERT_TRUE(check_launch(cfg, &op).ok()) << vs[i].name;
    for (const Shape& s : shapes)
      for (int m : {0, 1}) check_case(run, i, vs[i], cfg, s, m);
  }
}

// screening's correctness sequence (run_correctness: the draws, the magnitudes, the repeated draw,
// the poisoned outputs, judge) with each call run on the emulator.
Verdict screen_emulated(void* h, size_t i, CudaOp op, int64_t rows_max, int64_t cols) {
  auto run = reinterpret_cast<EmuRun>(::dlsym(h, "emu_run"));
  const LaunchConfig cfg = declared(h, i);
  auto shapes = shape_range(op, rows_max, cols);
  EXPECT_TRUE(shapes.ok());
  return run_correctness(op, *shapes, 3, 7, [&](const HostCase& c, size_t) -> Result<Readback> {
    const Shape& s = c.shape;
    Readback rb;
    rb.in = c.in;  // the candidate runs on copies, read back afterwards
    rb.in2 = c.in2;
    rb.y.assign(c.ref_y.size(), 0xffff);
    if (op == CudaOp::kSwiglu) {
      plumb_swiglu_args a{rb.in.data(), rb.y.data(), s.rows, s.cols, s.in_stride, s.out_stride};
      run(int(i), long(grid_blocks(cfg, s.rows * s.cols)), cfg.block_threads, &a);
      return rb;
    }
    rb.h.assign(c.in.size(), std::nanf(""));
    std::vector<float> w = c.w;
    plumb_rmsnorm_residual_args a{rb.in.data(), rb.in2.data(), w.data(),    rb.h.data(),  rb.y.data(),
                                  s.rows,       s.cols,        s.in_stride, s.out_stride, c.eps};
    run(int(i), long(grid_blocks(cfg, s.rows)), cfg.block_threads, &a);
    return rb;
  });
}

Variant cheat(const std::string& file, CudaOp op) {
  auto src = read_file(std::string(PLUMB_SOURCE_DIR) + "/tests/kernels/cuda/cheats/" + file);
  EXPECT_TRUE(src.ok()) << file;
  Variant v;
  v.name = file;
  v.op = op;
  v.source = src.ok() ? *src : std::string();
  return v;
}

// The cheats whose trick runs on a CPU, screened by the real correctness sequence on the emulator,
// each refused with the verdict the GPU test expects; an honest variant of each op passes the same
// sequence. (The table, out-of-bounds, crash and hang cheats need the device: screen_gpu_test.cpp.)
TEST(CudaEmulated, ScreeningRefusesTheCheatsThatRunOnTheEmulator) {
  struct Expect {
    Variant v;
    int64_t rows_max;
    ScreenVerdict verdict;
    std::string must_say;  // where it must be caught
  };
  const auto rms = generate_variants(CudaOp::kRmsNormResidual);
  const auto sw = generate_variants(CudaOp::kSwiglu);
  std::vector<Expect> cases = {
      {rms[14], 8, ScreenVerdict::kPass, ""},
      {sw[20], 8, ScreenVerdict::kPass, ""},
      {cheat("cached_output.cu", CudaOp::kSwiglu), 8, ScreenVerdict::kWrongOutput, "the first draw repeated"},
      {cheat("partial_work.cu", CudaOp::kRmsNormResidual), 128, ScreenVerdict::kWrongOutput, "shape 128x64"},
      {cheat("low_precision.cu", CudaOp::kRmsNormResidual), 8, ScreenVerdict::kWrongOutput, "h_out"},
      {cheat("zeros_when_small.cu", CudaOp::kRmsNormResidual), 8, ScreenVerdict::kWrongOutput, "magnitude 1"},
      {cheat("reuse_ref_output.cu", CudaOp::kSwiglu), 8, ScreenVerdict::kWrongOutput, "draw 0"},
      {cheat("mutates_inputs.cu", CudaOp::kRmsNormResidual), 8, ScreenVerdict::kMutatedInput, "input"},
  };
  std::vector<Variant> vs;
  vs.reserve(cases.size());
  for (const auto& c : cases) vs.push_back(c.v);
  void* h = build(vs, "cheats");
  ASSERT_NE(h, nullptr);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Verdict v = screen_emulated(h, i, cases[i].v.op, cases[i].rows_max, 64);
    EXPECT_EQ(verdict_name(v.verdict), verdict_name(cases[i].verdict)) << cases[i].v.name << ": " << v.reason;
    EXPECT_NE(v.reason.find(cases[i].must_say), std::string::npos) << cases[i].v.name << ": " << v.reason;
  }
}

TEST(CudaEmulated, EveryRmsNormResidualVariantComputesTheOp) {
  // Vector path (64), scalar fallback (67), padded strides, rows not a multiple of rows per block.
  check_all(CudaOp::kRmsNormResidual, {{1, 64, 64, 64}, {3, 67, 67, 67}, {5, 64, 72, 72}});
}

TEST(CudaEmulated, EverySwigluVariantComputesTheOp) {
  check_all(CudaOp::kSwiglu, {{1, 64, 128, 64}, {3, 67, 134, 67}, {2, 64, 136, 72}, {9, 130, 260, 130}});
}

}  // namespace
}  // namespace plumb::kernels::cuda
