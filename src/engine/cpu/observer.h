// The profiling hook of the forward pass (`plumb kernels profile` and `plumb kernels tasks`).
//
// The model (engine/model.cpp) and the sampler (engine/sampling.cpp) wrap every kernel call in
// PLUMB_OBSERVED_CALL: with no observer installed that is one load of a pointer and one predictable
// branch per call, nothing else (zero cost when off). With an observer, before() sees the call's
// arguments (inputs still unmodified: the place to capture them), then the kernel runs under a
// steady_clock timer, then after() gets the elapsed nanoseconds.
//
// Thread-safety: set_kernel_observer() is process-wide; install it before the engine runs and remove
// it after. Calls come from the engine's one forward thread (the pool's workers never call it).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "engine/cpu/kernels.h"

namespace plumb::engine {

// Arguments of one call, by op (what before() may read; pointers are valid only during before()).
struct MatmulCallArgs {
  const float* x;  // [m, k]
  const WeightMatrix* w;
  const float* bias;  // [n] or null
};
struct RmsNormCallArgs {
  const float* x;  // [rows, dim]
  const float* weight;
  float eps;
};
struct RopeCallArgs {
  const float* x;  // [tokens, n_heads, head_dim]
  const int32_t* positions;
  const float* inv_freq;
};
struct SwigluCallArgs {
  const float* gate;
  const float* up;
};
struct AttentionCallArgs {
  const float* q;
  const KvLayerView* kv;
  std::span<const AttentionSeq> seqs;
  int32_t n_heads;
  float scale;
};

struct KernelCall {
  Op op = Op::kCount;  // kCount marks the whole forward pass ("forward")
  Phase phase = Phase::kPrefill;
  const char* module = "";     // "q_proj", "input_norm", "attention", "lm_head", "sampling", "forward", ...
  int32_t layer = -1;          // transformer layer, -1 outside the layers
  int64_t m = 0;               // rows (tokens) of the call
  int64_t n = 0;               // output width (features, head count, vocab)
  int64_t k = 0;               // input width (in features, head_dim, ...)
  const void* args = nullptr;  // one of the *CallArgs above (null for embedding, sampling, forward)
};

class KernelObserver {
 public:
  virtual ~KernelObserver() = default;
  virtual void before(const KernelCall& call) = 0;
  virtual void after(const KernelCall& call, int64_t elapsed_ns) = 0;
};

// nullptr removes the observer. Returns the previous one.
KernelObserver* set_kernel_observer(KernelObserver* obs);
KernelObserver* kernel_observer();

template <typename F>
inline void observed_call(KernelObserver* obs, const KernelCall& call, F&& f) {
  obs->before(call);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const auto t1 = std::chrono::steady_clock::now();
  obs->after(call, std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

}  // namespace plumb::engine

// OBS: a KernelObserver* loaded once per forward pass; CALL: a parenthesized KernelCall expression,
// evaluated only when observed; the rest: the kernel call statement.
#define PLUMB_OBSERVED_CALL(OBS, CALL, ...)                              \
  do {                                                                   \
    if (!(OBS)) {                                                        \
      __VA_ARGS__;                                                       \
    } else {                                                             \
      ::plumb::engine::observed_call((OBS), CALL, [&] { __VA_ARGS__; }); \
    }                                                                    \
  } while (0)
