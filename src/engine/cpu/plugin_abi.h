/* The kernel plugin ABI: what an external kernel candidate (a C or C++ source compiled by
 * `plumb kernels` into a shared library) exports, and what plumb hands it. Plain C, versioned.
 *
 * A plugin exports one symbol:
 *     const plumb_kernel_plugin* plumb_kernel_plugin_entry(void);
 * returning a pointer to a static descriptor whose abi_version is PLUMB_KERNEL_ABI_VERSION (or an
 * earlier version this plumb still speaks, see below) and whose struct_size is
 * sizeof(plumb_kernel_plugin) as the plugin saw it. plumb refuses a plugin of another version with
 * an error that says to rebuild it against this header.
 *
 * Ops a plugin can implement: matmul, rmsnorm, rope, swiglu (v1) and sample (v2). Their contracts
 * are those of the engine's built-in kernels (engine/cpu/kernels.h): activations float32
 * row-major, a weight matrix [n = out features, k = in features] row-major in its dtype, y may
 * alias x for rmsnorm. v2 only added the sample op and its argument struct; a v1 plugin loads
 * unchanged.
 * A kernel must not read or write outside the buffers described by its arguments (screening runs
 * it between guard pages), must not keep pointers after run() returns, must be correct for any
 * thread count, and must not allocate through anything but its own stack.
 *
 * Threads: run() gets a plumb_exec whose parallel_for splits [0, n) into chunks whose boundaries
 * are multiples of `align` and calls fn(ctx, begin, end) on each chunk, on plumb's threads (the
 * caller included), and returns when all are done. It is never null.
 *
 * Build (what `plumb kernels` runs; docs/kernels.md):
 *     g++ -std=c++20 -O3 -march=native -fPIC -shared -fvisibility=hidden \
 *         -I<plumb src dir> -o cand.so cand.cpp
 * Mark the entry point extern "C" and visible (PLUMB_KERNEL_EXPORT below).
 */
#ifndef PLUMB_ENGINE_KERNELS_PLUGIN_ABI_H_
#define PLUMB_ENGINE_KERNELS_PLUGIN_ABI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define PLUMB_KERNEL_EXPORT extern "C" __attribute__((visibility("default")))
#else
#define PLUMB_KERNEL_EXPORT __attribute__((visibility("default")))
#endif

#define PLUMB_KERNEL_ABI_VERSION 2u
#define PLUMB_KERNEL_ABI_MIN_VERSION 1u /* oldest version still loaded */

/* Values match engine::Op, engine::DType and engine::Phase. */
enum {
  PLUMB_OP_MATMUL = 0,
  PLUMB_OP_RMSNORM = 1,
  PLUMB_OP_ROPE = 2,
  PLUMB_OP_SWIGLU = 3,
  PLUMB_OP_SAMPLE = 6
};
enum { PLUMB_DTYPE_F32 = 0, PLUMB_DTYPE_F16 = 1, PLUMB_DTYPE_BF16 = 2 };
enum { PLUMB_PHASE_PREFILL = 0, PLUMB_PHASE_DECODE = 1 };

typedef void (*plumb_range_fn)(void* ctx, int64_t begin, int64_t end);

typedef struct plumb_exec {
  void* pool;      /* opaque; pass back to parallel_for */
  int32_t threads; /* threads parallel_for uses, caller included (>= 1) */
  int32_t phase;   /* PLUMB_PHASE_* of this call */
  void (*parallel_for)(void* pool, int64_t n, int64_t align, plumb_range_fn fn, void* ctx);
} plumb_exec;

/* y[i, j] = sum_p x[i, p] * w[j, p] + bias[j]   (i < m, j < n, p < k); bias may be null. */
typedef struct plumb_matmul_args {
  const float* x; /* [m, k] */
  int64_t m;
  int64_t k;
  const void* w; /* [n, k] in w_dtype */
  int32_t w_dtype;
  int64_t n;
  const float* bias; /* [n] or null */
  float* y;          /* [m, n] */
} plumb_matmul_args;

/* y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]; y may alias x. */
typedef struct plumb_rmsnorm_args {
  const float* x;      /* [rows, dim] */
  const float* weight; /* [dim] */
  int64_t rows;
  int64_t dim;
  float eps;
  float* y; /* [rows, dim] */
} plumb_rmsnorm_args;

/* In place, rotate-half convention: pairs (i, i + head_dim/2) of x[t, h, :] rotate by
 * positions[t] * inv_freq[i]. */
typedef struct plumb_rope_args {
  float* x; /* [tokens, n_heads, head_dim] */
  int64_t tokens;
  int64_t n_heads;
  int64_t head_dim;
  const int32_t* positions; /* [tokens] */
  const float* inv_freq;    /* [head_dim / 2] */
} plumb_rope_args;

/* out[r, i] = silu(gate[r, i]) * up[r, i]; out may alias gate. */
typedef struct plumb_swiglu_args {
  const float* gate; /* [rows, dim] */
  const float* up;   /* [rows, dim] */
  int64_t rows;
  int64_t dim;
  float* out; /* [rows, dim] */
} plumb_swiglu_args;

/* v2. The next token from one row of logits, the rule of engine/sampling.h:
 *  - temperature == 0: argmax, the lowest id on ties;
 *  - otherwise the candidates are all ids, or the top_k most likely when 0 < top_k < vocab, ordered
 *    by (logit desc, id asc) -- in id order when neither top_k nor top_p < 1 cuts them; weights
 *    exp((logit - max) / temperature); when top_p < 1 only the smallest prefix (in that order)
 *    whose mass reaches top_p of the total stays; the result is the candidate at which the running
 *    mass first exceeds u * (mass of the candidates kept).
 * Screening accepts an id the reference would return for some u' with |u' - u| <= 1e-5 (float
 * arithmetic moves the boundaries between ids by about that much) and nothing else.
 * The logits are the row after the request's logit processing (logit_bias, penalties; min_tokens
 * sets the stop ids to -inf), engine/sampling.h: a kernel sees the same contract either way.
 * scratch is caller-owned memory (16 * vocab bytes, 16-byte aligned) the kernel may use freely. */
typedef struct plumb_sample_args {
  const float* logits; /* [vocab] */
  int64_t vocab;
  float temperature; /* >= 0 */
  int32_t top_k;     /* 0 = no cut */
  float top_p;       /* (0, 1]; 1 = no cut */
  double u;          /* uniform draw in [0, 1); unused when temperature == 0 */
  void* scratch;
  int64_t scratch_bytes; /* >= 16 * vocab */
  int32_t* id;           /* out: the chosen token */
} plumb_sample_args;

typedef struct plumb_kernel_plugin {
  uint32_t abi_version; /* PLUMB_KERNEL_ABI_VERSION */
  uint32_t struct_size; /* sizeof(plumb_kernel_plugin) */
  int32_t op;           /* PLUMB_OP_* */
  const char* name;     /* variant name, [A-Za-z0-9_.-]+, unique in the process */
  const char* description;
  /* Whether the kernel handles this weight dtype (matmul) in this phase; null = everything. */
  int32_t (*supports)(int32_t phase, int32_t dtype);
  /* args points at the op's plumb_*_args struct. */
  void (*run)(const plumb_exec* ex, const void* args);
} plumb_kernel_plugin;

typedef const plumb_kernel_plugin* (*plumb_kernel_plugin_entry_fn)(void);
#define PLUMB_KERNEL_ENTRY_SYMBOL "plumb_kernel_plugin_entry"

#ifdef __cplusplus
}
#endif

#endif /* PLUMB_ENGINE_KERNELS_PLUGIN_ABI_H_ */
