// The CUDA model runner: scheduler::ModelRunner (engine/scheduler/model_runner.h) on one NVIDIA GPU.
//
// Weights are uploaded once as bf16 from the host model (engine/model.h) and the host copy is
// dropped; q/k/v and gate/up are fused into one matrix each. The paged KV cache is bf16 in device
// memory, [n_layers][num_blocks * block_size][n_kv_heads][head_dim] for K and for V. Each forward()
// builds the step's metadata (token ids, positions, cache slots, block tables, the rows that want
// logits) on the host once and copies it in one transfer, runs the layers on one stream (cuBLAS
// GEMMs, bf16 in and float32 accumulate; the kernels of engine/cuda/ops.h), and copies the float32
// logits back. Made only through scheduler::make_runner with a "cuda[:N]" device.
//
// Threading: as ModelRunner, one caller thread; the runner makes its device current on each call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/model.h"
#include "engine/scheduler/model_runner.h"

namespace plumb::cuda {

// CUDA devices this process sees; 0 when there is no driver or no device, and then *why (if
// given) says what the runtime reported.
int device_count(std::string* why = nullptr);

// Device memory the runner needs for a model's weights on one card (bf16, tied embeddings once,
// norms and biases in float32): the whole model, or rank `rank`'s part of a model split over
// `tp_size` cards (engine/tensor_parallel.h).
int64_t weight_bytes(const engine::ModelConfig& c, int32_t tp_size = 1, int32_t rank = 0);

// Whether `device` exists, the model splits over tp_size cards, and the weights of `c` (rank
// `rank`'s part) fit in its free memory with room for a working set. InvalidArgument naming the
// devices there are or the sizes that split the model, or ResourceExhausted naming both sizes.
Status check_fits(const engine::ModelConfig& c, int device, int32_t tp_size = 1, int32_t rank = 0);

struct CudaRunnerOptions {
  // The plain kernels only: cuBLAS for every GEMM (no decode GEMV) and the one-warp-per-row
  // attention kernel for prefill (no tensor-core kernel). What the fast kernels are tested against.
  bool reference_kernels = false;
  // Decode steps (one token per sequence, up to 256 sequences) padded to a batch-size bucket (1, 2,
  // 4, 8, then multiples of 8) and replayed as one CUDA graph per bucket and split-KV count,
  // captured at the bucket's first step. Off: every kernel is launched one by one. If a capture
  // fails, the runner turns graphs off and says why in describe().
  bool cuda_graphs = true;
  // Decode steps of one or two rows fold SwiGLU into the gate/up GEMV (gemv.cu). Off: the plain
  // GEMV and a separate SwiGLU pass (bench/cuda_runner_bench --fused-gemv 0 measures both).
  bool fused_gemv = true;
  // GEMMs through cuBLASLt, and before a decode graph is captured its GEMM shapes are tuned: the
  // heuristic's candidate algorithms timed on this device, the fastest kept (engine/cuda/lt_gemm.h).
  // Other steps use the heuristic's first choice. Off: cublasGemmEx (cuBLAS's own choice). The
  // reference kernels always use cublasGemmEx.
  bool gemm_tuning = true;
  // The decode path's own kernels (embedding, RMSNorm, the GEMVs, RoPE, decode attention, argmax)
  // are launched with programmatic dependent launch (engine/cuda/pdl.cuh): each may start while the
  // kernel before it finishes. Process-wide: the last runner made sets it for every runner of the
  // process.
  bool pdl = true;
  // Tensor parallelism (--tensor-parallel-size, engine/tensor_parallel.h): the model split over
  // this many cards, `device` and the ones after it, one thread per card, NCCL all-reduces after
  // o_proj and down_proj (captured into the decode graphs with the rest). 1: one card, and the same
  // code with every split the whole matrix and no collective.
  int32_t tensor_parallel_size = 1;
  // Screened candidate kernels of the CUDA candidate ABI (engine/cuda/candidate.h), cubin paths by
  // the ABI's op name and phase (a step with prefill rows is a prefill step), launched in place of
  // the runner's own kernels (`plumb kernels accept --device cuda`). Each is loaded when the runner
  // is made; a cubin that does not load, declares another op or another ABI version is refused
  // then, naming the file. Where they run:
  //  - "swiglu": the SwiGLU pass of steps that do not fold it into the decode GEMV (one- and two-row
  //    steps do unless fused_gemv is off, so a decode candidate runs only in batched decode);
  //  - "rmsnorm_residual": the post-attention norm and every input norm after the first layer's, with
  //    the residual add taken out of the o_proj and down_proj GEMMs (they write a scratch buffer) and
  //    done by the candidate, which writes the new residual stream to a second buffer (the ABI's
  //    inputs are const, so it never updates the stream in place). The first input norm, the final
  //    norm and the last layer's down_proj stay as they are.
  // One card only (Unimplemented with tensor parallelism).
  std::map<std::string, std::string> candidates_prefill, candidates_decode;
  // Called after each layer's weights are on the card (rank 0 only with tensor parallelism): layers
  // done, layers in all. For a progress bar; null: none.
  std::function<void(size_t, size_t)> upload_progress;
};

// Uploads `model` to `device` (after check_fits), or its parts to devices [device, device +
// tensor_parallel_size), and returns the runner; the host model is freed. Unimplemented for
// quantized weights (int8/int4 are CPU-only), a head_dim other than 64, 128, 256, or tensor
// parallelism in a build without NCCL; InvalidArgument for a size that does not split the model.
Result<std::unique_ptr<scheduler::ModelRunner>> make_cuda_runner(std::unique_ptr<engine::Model> model,
                                                                 int device, std::string description,
                                                                 const CudaRunnerOptions& opts = {});

}  // namespace plumb::cuda
