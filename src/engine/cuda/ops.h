// The CUDA runner's kernels, one .cu file per op. Each launcher enqueues its kernel on `stream` and
// returns cudaGetLastError() (check it with PLUMB_CUDA_LAUNCH, engine/cuda/check.h). bf16 values
// travel as uint16_t (the bit pattern of __nv_bfloat16) so that host code needs no CUDA headers
// beyond the runtime's. Shapes are row-major; T is the step's token rows.
//
// Precision follows the CPU model (engine/model.cpp): the residual stream, the GEMM outputs, RoPE,
// norms and softmax are float32; GEMM inputs (normed activations, attention output, SwiGLU output)
// and the paged KV cache are bf16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace plumb::cuda {

// Whether the decode path's kernels are launched with programmatic dependent launch (engine/cuda/pdl.cuh):
// each may start while the one before it finishes. Process-wide (the runner sets it from
// CudaRunnerOptions::pdl); on by default.
void set_pdl_enabled(bool on);
bool pdl_enabled();

// embedding.cu: x[t, :] = float(table[ids[t], :]). table: bf16 [vocab, d]; x: f32 [T, d].
cudaError_t launch_embedding(const int32_t* ids, int64_t T, const uint16_t* table, int64_t d, float* x,
                             cudaStream_t stream);

// rmsnorm.cu: y[r, :] = bf16(x[src_r, :] / sqrt(mean(x[src_r, :]^2) + eps) * w[:]) for r in [0, rows),
// src_r = rows_idx ? rows_idx[r] : r. x: f32 [*, d]; w: f32 [d]; y: bf16 [rows, d].
cudaError_t launch_rmsnorm(const float* x, const int32_t* rows_idx, int64_t rows, int64_t d, const float* w,
                           float eps, uint16_t* y, cudaStream_t stream);

// Per-step geometry shared by the qkv and attention kernels.
struct AttnGeometry {
  int32_t n_heads = 0;     // query heads
  int32_t n_kv_heads = 0;  // KV heads (GQA: n_heads % n_kv_heads == 0)
  int32_t head_dim = 0;    // 64, 128 or 256
  int32_t block_size = 0;  // KV block size in tokens
};

// rope.cu: finishes the fused QKV projection in place and fills the cache. qkv: f32 [T, nh + 2 nkv,
// hd] (q heads, then k heads, then v heads). Per row t: adds `bias` ([(nh + 2 nkv) hd] or null);
// with q_norm/k_norm ([hd] each, or null) RMS-normalizes each q and k head; rotates q and k by
// RoPE (rotate-half; angle = float(pos[t]) * inv_freq[i], as the CPU model); leaves q in qkv and
// writes k, v as bf16 to the cache slot slots[t] (k_cache, v_cache: [num_blocks * block_size, nkv, hd]).
cudaError_t launch_qkv_rope(float* qkv, int64_t T, const int32_t* pos, const int32_t* slots,
                            const float* bias, const float* q_norm, const float* k_norm, float eps,
                            const float* inv_freq, const AttnGeometry& g, uint16_t* k_cache,
                            uint16_t* v_cache, cudaStream_t stream);

// The sequences of one step as the attention kernels read them (device pointers).
struct AttnBatch {
  const int32_t* pos = nullptr;           // [T] position of each row (its context is pos + 1)
  const int32_t* row_seq = nullptr;       // [T] sequence index of each row
  const int32_t* seq_bt_off = nullptr;    // [S] offset of each sequence's block table in block_tables
  const int32_t* block_tables = nullptr;  // concatenated block tables
};

// attention.cu, the reference (and prefill) kernel: one warp per (row, head), online softmax over
// the row's causal context read from the paged cache. rows: [n_rows] the rows to compute. q: f32
// rows of stride q_stride floats (head h at h * hd); out: bf16 [T, nh, hd].
cudaError_t launch_attention_rows(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows,
                                  const AttnBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                                  const AttnGeometry& g, float scale, uint16_t* out, cudaStream_t stream);

// attention.cu, decode: one block per (decode row, KV head, split); the block serves every query
// head of the KV head's GQA group and reads each K/V row once. The context is cut into n_split
// parts whose partial results (m, l, acc) go to `partial`; the last block of a (row, KV head) to
// finish merges them. partial: f32 scratch of decode_partial_floats(n_rows, g, n_split) floats;
// counters: decode_counters(n_rows, g) zeroed uint32 (zeroed once when allocated: each call leaves
// them zeroed; a row's counters sit at the same place for every n_split). Neither is used when
// n_split is 1: the blocks then write `out` themselves.
// n_split is 1 to kMaxDecodeSplit (a larger one is refused with cudaErrorInvalidValue).
constexpr int32_t kMaxDecodeSplit = 64;
int64_t decode_partial_floats(int64_t n_rows, const AttnGeometry& g, int32_t n_split);
int64_t decode_counters(int64_t n_rows, const AttnGeometry& g);
cudaError_t launch_attention_decode(const float* q, int64_t q_stride, const int32_t* rows, int64_t n_rows,
                                    const AttnBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                                    const AttnGeometry& g, float scale, int32_t n_split, float* partial,
                                    uint32_t* counters, uint16_t* out, cudaStream_t stream);

// attention_prefill.cu: the tensor-core prefill kernel. tiles: [n_tiles, 2] (first row, rows) of
// up to prefill_tile_rows() consecutive rows of one sequence each; q, out as above.
int32_t prefill_tile_rows();
cudaError_t launch_attention_prefill(const float* q, int64_t q_stride, const int32_t* tiles, int64_t n_tiles,
                                     const AttnBatch& b, const uint16_t* k_cache, const uint16_t* v_cache,
                                     const AttnGeometry& g, float scale, uint16_t* out, cudaStream_t stream);

// gemv.cu: y[t, :] = x[t, :] · W[n, k]ᵀ + beta · y[t, :] for decode-sized T. x: bf16 [T, k]; W: bf16
// [n, k]; y: f32 [T, n] (not read when beta == 0). gemv_supports: T in [1, 2] (where it beats cuBLAS) and k %
// 8 == 0.
bool gemv_supports(int64_t T, int64_t k);
cudaError_t launch_gemv(const uint16_t* w, const uint16_t* x, float* y, int64_t T, int64_t n, int64_t k,
                        float beta, cudaStream_t stream);

// gemv.cu, the MLP's first half in one pass: out[t, i] = bf16(silu(g) * u) with g, u the rows i and
// ff + i of W [2 ff, k] (gate then up) applied to x[t, :] (bf16 [T, k]); as launch_gemv then
// launch_swiglu. out: bf16 [T, ff]. T and k as gemv_supports.
cudaError_t launch_gemv_swiglu(const uint16_t* w, const uint16_t* x, uint16_t* out, int64_t T, int64_t ff,
                               int64_t k, cudaStream_t stream);

// swiglu.cu: out[t, i] = bf16(silu(gu[t, i]) * gu[t, ff + i]). gu: f32 [T, 2 ff] (gate then up);
// out: bf16 [T, ff].
cudaError_t launch_swiglu(const float* gu, int64_t T, int64_t ff, uint16_t* out, cudaStream_t stream);

// sample.cu: ids[r] = the argmax of logits[r, :] (f32 [rows, V]), the lowest id on ties; a row with a
// NaN or an infinity gets -1 - (its first non-finite id) instead. workspace: argmax_workspace_bytes(
// workspace_rows) of device memory for up to workspace_rows >= rows rows, zeroed once when allocated
// (each call leaves its counters zeroed again; their place depends on workspace_rows only, so calls
// of any row count may share it); calls that share a workspace must not run at the same time.
int64_t argmax_workspace_bytes(int64_t workspace_rows);
cudaError_t launch_argmax(const float* logits, int64_t rows, int64_t V, int32_t* ids, void* workspace,
                          int64_t workspace_rows, cudaStream_t stream);
// sample.cu, after launch_argmax on the same rows and stream: rows whose temperature is > 0 get the
// plain draw instead of the argmax (scheduler::ModelRunner::sample_plain's rule; the double sum runs
// in another order, so an id may differ where u lies within rounding of a boundary). params: int32
// [rows, 3]: the temperature's float bits, then the low and high words of u's double bits. A row
// with temperature 0, or one the argmax reported non-finite, keeps the argmax's id.
cudaError_t launch_draw(const float* logits, int64_t rows, int64_t V, const int32_t* params, int32_t* ids,
                        cudaStream_t stream);

}  // namespace plumb::cuda
