// The readable reference variant of every kernel op ("reference" in the registry). Exposed so that
// tests and fast variants can compare against it directly. Signatures and contracts are those of the
// matching *Fn types in kernels.h. The reference matmul accumulates in double and splits output
// features over ctx.pool; the others run on the calling thread.
#pragma once

#include "engine/cpu/kernels.h"

namespace plumb::engine::ref {

void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y);
void rmsnorm(const KernelContext& ctx, const float* x, const float* weight, int64_t rows, int64_t dim,
             float eps, float* y);
void rope(const KernelContext& ctx, float* x, int64_t tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* positions, const float* inv_freq);
void swiglu(const KernelContext& ctx, const float* gate, const float* up, int64_t rows, int64_t dim,
            float* out);
void embedding(const KernelContext& ctx, const int32_t* ids, int64_t tokens, const void* table, DType dtype,
               int64_t dim, float* out);
void attention(const KernelContext& ctx, const float* q, const KvLayerView& kv,
               std::span<const AttentionSeq> seqs, int32_t n_heads, float scale, float* out);

// Element i of a weight row stored in `dtype` (the one place the reference reads weights).
float load_weight(const void* data, DType dtype, int64_t index);

}  // namespace plumb::engine::ref

namespace plumb::engine::detail {
// Each variant file registers its kernels; KernelRegistry::instance() calls these in preference
// order (later = preferred by "auto" unless a variant's rank says otherwise). Calling them
// explicitly (not through static initializers) keeps the linker from dropping variant files.
void register_reference_kernels(KernelRegistry& r);
void register_avx2_kernels(KernelRegistry& r);
void register_avx512_kernels(KernelRegistry& r);
void register_amx_kernels(KernelRegistry& r);       // matmul_amx.cpp
void register_avx512_attention(KernelRegistry& r);  // attention_avx512.cpp
void register_onednn_kernels(KernelRegistry& r);
void register_onednn_bf16_kernels(KernelRegistry& r);
}  // namespace plumb::engine::detail
