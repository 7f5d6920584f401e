// The CUDA runner's plain-draw kernel (src/engine/cuda/draw.cuh, launch_draw) run on the CPU
// emulator of emulator/cuda_emulator.h: over rows of several widths (wider and narrower than the
// block's 1,024 threads), temperatures and uniforms, its id is the one
// scheduler::ModelRunner::sample_plain gives (the host rule Sampler's draws are tested equal to); a
// greedy row (temperature 0) and a non-finite row keep what the argmax wrote. This checks the
// kernel's indexing, scan and walk, not the GPU's memory model or speed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/random.h"
#include "engine/scheduler/model_runner.h"

// The emulator defines CUDA's keywords as macros: after every other header, before the kernel.
#include "emulator/cuda_emulator.h"
#include "engine/cuda/draw.cuh"

namespace plumb::cuda {
namespace {

struct DrawArgs {
  const float* logits;
  int64_t V;
  const int32_t* params;
  int32_t* ids;
};

void draw_entry(DrawArgs a) { detail::draw_kernel(a.logits, a.V, a.params, a.ids); }

// params for one row: the temperature's bits, then u's low and high words.
void put(std::vector<int32_t>& params, float t, double u) {
  int32_t tb = 0;
  uint64_t ub = 0;
  std::memcpy(&tb, &t, 4);
  std::memcpy(&ub, &u, 8);
  params.insert(params.end(), {tb, int32_t(uint32_t(ub)), int32_t(uint32_t(ub >> 32))});
}

TEST(DrawKernelEmulated, EachRowIsTheHostRulesDraw) {
  Rng rng(11);
  for (const int64_t V : {100, 5003}) {
    const int rows = 8;
    std::vector<float> logits(size_t(rows * V));
    for (auto& x : logits) x = float(rng.uniform() * 12.0 - 6.0);
    std::vector<int32_t> params, ids;
    std::vector<float> temp;
    std::vector<double> us;
    for (int r = 0; r < rows; ++r) {
      const float t = r == 0 ? 0.0f : 0.25f + 0.35f * float(r);  // row 0: greedy
      const double u = r == rows - 1 ? 0.999999999 : rng.uniform();
      temp.push_back(t);
      us.push_back(u);
      put(params, t, u);
      ids.push_back(scheduler::ModelRunner::host_argmax({logits.data() + r * V, size_t(V)}));
    }
    const std::vector<int32_t> argmax = ids;
    emu_launch(&draw_entry, rows, detail::kDrawThreads,
               DrawArgs{logits.data(), V, params.data(), ids.data()});
    int moved = 0;
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(logits.data() + r * V, size_t(V));
      const int32_t want = temp[size_t(r)] > 0.0f
                               ? scheduler::ModelRunner::sample_plain(row, temp[size_t(r)], us[size_t(r)])
                               : argmax[size_t(r)];
      EXPECT_EQ(ids[size_t(r)], want) << "V " << V << " row " << r << " temperature " << temp[size_t(r)];
      moved += ids[size_t(r)] != argmax[size_t(r)] ? 1 : 0;
    }
    EXPECT_GE(moved, rows / 2) << "V " << V << ": the draws should mostly leave the argmax";
  }
}

TEST(DrawKernelEmulated, ANonFiniteRowKeepsTheArgmaxReport) {
  std::vector<float> logits(300, 1.0f);
  logits[42] = std::nanf("");
  std::vector<int32_t> params;
  put(params, 1.0f, 0.5);
  std::vector<int32_t> ids{scheduler::ModelRunner::host_argmax(logits)};
  ASSERT_EQ(ids[0], -43);
  emu_launch(&draw_entry, 1, detail::kDrawThreads, DrawArgs{logits.data(), 300, params.data(), ids.data()});
  EXPECT_EQ(ids[0], -43);
}

}  // namespace
}  // namespace plumb::cuda
