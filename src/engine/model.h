// The model: weights + config + kernels, and the forward pass over a batch of sequences that read
// and write a paged KV cache.
//
// Batching and phases. A batch is a list of sequences, each bringing its new tokens, the position
// of the first of them, and its block table. A sequence with more than one new token is a prefill
// (or a prefill chunk); one with exactly one is a decode. Prefills and decodes mix freely in one
// batch. Kernel choice by phase (the rule):
//   - the shared per-token ops (embedding, matmuls, RMSNorm, RoPE, SwiGLU) run once over all the
//     batch's tokens with the PREFILL KernelSet if any sequence in the batch is a prefill, else
//     with the DECODE KernelSet;
//   - attention is per sequence: prefill sequences go to the prefill set's attention kernel and
//     decode sequences to the decode set's, in (at most) two calls per layer;
//   - the final norm and lm_head run only on the rows that want logits: with the decode set when
//     that is one row per sequence, with the prefill set when a sequence asked for all its rows.
//
// Thread safety: a Model is used by one thread at a time (forward() reuses workspace buffers);
// its kernels parallelize internally over the Model's ThreadPool. The weights are immutable.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/weights.h"

namespace plumb::engine {

struct ModelOptions {
  WeightDType dtype = WeightDType::kAsStored;  // linear weights: as stored | f32 | bf16
  uint64_t seed = 0;                           // dummy weights' seed
  int threads = 0;                             // kernel threads including the caller; 0 = all cores
  KernelSelection kernels;                     // variant per op and phase; empty = "auto" everywhere
  Quantization quantization;                   // linear layers: none | int8 | int4 (engine/cpu/kernels.h)
  // The model only carries its weights to a device runner (engine/cuda/cuda_runner.h): they keep
  // the stored row-major layout (zero copy from the mapped checkpoint where the dtype is kept) and
  // are never packed for a CPU GEMM, which would cost a copy of every matrix on the host and an
  // unpacking pass before the upload. The CPU kernels still resolve (and read row-major weights).
  bool upload_only = false;
};

// One sequence's part of a batch. Spans are borrowed for the duration of forward().
struct SequenceInput {
  std::span<const int32_t> tokens;       // new token ids, >= 1
  int32_t start_pos = 0;                 // position of tokens[0]; KV for [0, start_pos) is in the cache
  std::span<const int32_t> block_table;  // logical block -> physical block; covers start_pos + tokens.size()
  bool all_logits = false;               // logits for every new token (prompt logprobs); else the last only
  bool no_logits = false;                // no logits at all (a prefill chunk short of the prompt's end)
};

// Logits of the rows that asked for them, in batch order.
struct ForwardOutput {
  std::vector<float> logits;       // [rows, vocab]
  std::vector<int32_t> first_row;  // per sequence: its first row in logits
  std::vector<int32_t> n_rows;     // per sequence: 1, tokens.size() when all_logits, 0 when no_logits
  int64_t vocab = 0;
  std::span<const float> row(int64_t r) const { return {logits.data() + r * vocab, size_t(vocab)}; }
  // The last row of sequence s (the next-token distribution). Requires n_rows[s] > 0.
  std::span<const float> last(size_t s) const { return row(first_row[s] + n_rows[s] - 1); }
};

class Model {
 public:
  // Loads a Hugging Face folder (config.json + *.safetensors). Errors name the file/tensor/field.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const ModelOptions& opts);
  // Seeded random weights for a config (--load-format dummy).
  static Result<std::unique_ptr<Model>> dummy(const ModelConfig& config, const ModelOptions& opts);
  // Assembles a model from parts (tests).
  static Result<std::unique_ptr<Model>> from_weights(const ModelConfig& config, ModelWeights weights,
                                                     const ModelOptions& opts);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  ThreadPool& pool() { return *pool_; }
  // The kernels actually used per phase (index by Phase), for provenance.
  const std::array<KernelSet, 2>& kernel_sets() const { return kernels_; }
  // Re-resolves kernels (e.g. `plumb kernels` swapping a variant). Errors name the op and variant.
  Status set_kernels(const KernelSelection& sel);

  // A KV cache geometry matching this model.
  KvCacheConfig kv_config(int32_t num_blocks, int32_t block_size) const;

  // Runs the batch: appends each sequence's new K/V to `cache` at positions [start_pos,
  // start_pos + n) through its block table, and writes the requested logits to `out`.
  // InvalidArgument (nothing computed, cache untouched) for: an empty batch or sequence, a token id
  // outside the vocabulary, a sequence past the context (max_context()), a block table that does
  // not cover the sequence or names a block outside the cache, a cache of another geometry.
  Status forward(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out);

 private:
  Model() = default;
  // Buffers sized for `tokens` rows, allocated once and reused while batches fit.
  struct Workspace {
    int64_t tokens = 0;        // capacity in rows
    std::vector<float> x;      // [T, d]         residual stream
    std::vector<float> h;      // [T, d]         normed input of a block
    std::vector<float> q;      // [T, nh*hd]
    std::vector<float> k;      // [T, nkv*hd]
    std::vector<float> v;      // [T, nkv*hd]
    std::vector<float> attn;   // [T, nh*hd]     attention output
    std::vector<float> o;      // [T, d]         block output before the residual add
    std::vector<float> gate;   // [T, ff]
    std::vector<float> up;     // [T, ff]
    std::vector<int32_t> pos;  // [T]            absolute position of each row
    std::vector<int32_t> ids;  // [T]            token id of each row
  };
  void reserve_workspace(int64_t tokens);
  // forward() after validation; obs: the profiling observer or null (engine/cpu/observer.h).
  Status forward_impl(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out,
                      class KernelObserver* obs);

  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<ThreadPool> pool_;
  bool upload_only_ = false;  // ModelOptions::upload_only: weights stay row-major
  std::array<KernelSet, 2> kernels_;
  std::vector<float> inv_freq_;  // [hd/2]
  Workspace ws_;
};

}  // namespace plumb::engine
