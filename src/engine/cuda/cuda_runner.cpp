#include "engine/cuda/cuda_runner.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#ifdef PLUMB_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "core/file.h"
#include "core/sha256.h"
#include "core/subprocess.h"
#include "engine/cpu/observer.h"
#include "engine/cpu/packed.h"
#include "engine/cuda/candidate.h"
#include "engine/cuda/check.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/lt_gemm.h"
#include "engine/cuda/ops.h"
#include "engine/tensor_parallel.h"

namespace plumb::cuda {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1LL << 30));
  return buf;
}

// Device memory kept free beside the weights for the KV cache's minimum and the step workspace.
constexpr int64_t kWorkingSetReserve = 512LL << 20;
// cuBLAS's workspace, set once so that its GEMMs can be captured into CUDA graphs.
constexpr size_t kCublasWorkspace = 32u << 20;
// Decode steps of up to this many sequences replay a CUDA graph; larger steps launch one by one.
constexpr int64_t kMaxGraphBatch = 256;

// The batch-size bucket a decode step of `s` sequences is padded to: 1, 2, 4, 8, then multiples of 8.
int64_t graph_bucket(int64_t s) {
  if (s <= 8) {
    int64_t b = 1;
    while (b < s) b *= 2;
    return b;
  }
  return (s + 7) / 8 * 8;
}

// The offsets of the step metadata's parts in meta_ (int32 elements) and the step's sizes.
struct StepPlan {
  int64_t T = 0, R = 0, n_pre = 0, n_dec = 0, n_tiles = 0;
  int64_t o_ids = 0, o_pos = 0, o_slot = 0, o_rowseq = 0, o_btoff = 0, o_lrows = 0, o_pre = 0, o_dec = 0,
          o_tiles = 0, o_draw = 0, o_bt = 0;
  int32_t n_split = 1;
};

struct DeviceLayer {
  // Shapes are this rank's (engine/tensor_parallel.h): nh, nkv and ff are its heads, KV heads and
  // SwiGLU inner columns; with one rank, the model's.
  DeviceBuffer qkv_w;                  // bf16 [(nh + 2 nkv) hd, d]: q_proj, k_proj, v_proj rows
  DeviceBuffer o_w;                    // bf16 [d, nh hd]
  DeviceBuffer gu_w;                   // bf16 [2 ff, d]: gate_proj rows, then up_proj rows
  DeviceBuffer down_w;                 // bf16 [d, ff]
  DeviceBuffer input_norm, post_norm;  // f32 [d]
  DeviceBuffer q_norm, k_norm;         // f32 [hd]; empty unless qk_norm
  DeviceBuffer qkv_bias;               // f32 [(nh + 2 nkv) hd]; empty without attention_bias
};

class CudaModelRunner final : public scheduler::ModelRunner {
 public:
  ~CudaModelRunner() override {
    cudaSetDevice(device_);  // with tensor parallelism the caller's current device may be another rank's
    for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Rank `shard` of the model on `device`, uploading its slices of `model`'s weights (the caller
  // frees the host model once every rank has them). `comm` is the ranks' NCCL communicator (an
  // ncclComm_t), null with one rank.
  static Result<std::unique_ptr<CudaModelRunner>> create(const engine::Model& model, int device,
                                                         const engine::TensorShard& shard, void* comm,
                                                         std::string description,
                                                         const CudaRunnerOptions& opts);

  int32_t vocab_size() const override { return int32_t(c_.vocab_size); }
  int64_t max_context() const override { return c_.max_context(); }
  int64_t kv_bytes_per_token() const override {
    return 2 * c_.num_hidden_layers * nkv_ * c_.head_dim * int64_t(sizeof(uint16_t));
  }
  std::string describe() const override { return description_; }
  Status init_kv(int32_t num_blocks, int32_t block_size) override;
  Status forward(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits) override {
    return run(batch, logits, nullptr);
  }
  bool greedy_on_device() const override { return true; }
  bool samples_on_device() const override { return true; }
  Status forward_greedy(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits,
                        std::vector<int32_t>& greedy_ids) override {
    return run(batch, logits, &greedy_ids);
  }
  Result<int64_t> kv_tokens_for_memory_fraction(double fraction, int64_t max_step_tokens) const override;

  // forward() (greedy_ids null) or forward_greedy(). A rank other than 0 computes no logits and
  // returns none: it only runs its part of the step (its collectives meet the other ranks').
  Status run(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits,
             std::vector<int32_t>* greedy_ids);

 private:
  CudaModelRunner() = default;
  // Copies the step's results to the host: every logits row (greedy_ids null), or the greedy rows'
  // ids and the other rows' logits.
  Status fetch(std::span<const scheduler::StepSeq> batch, int64_t R_real, std::vector<float>& logits,
               std::vector<int32_t>* greedy_ids);
  Status upload(const engine::Model& model);
  Status upload_layer(const engine::LayerWeights& L, DeviceLayer& D);
  // A decode step's batch padded to its graph bucket (in padded_), or the batch as given when the
  // step cannot run as a graph; `graph` says which.
  std::span<const scheduler::StepSeq> pad_for_graph(std::span<const scheduler::StepSeq> batch, bool& graph);
  // The step's row counts and metadata offsets; returns the metadata's length in ints.
  int64_t plan_step(std::span<const scheduler::StepSeq> batch, int64_t S_real, StepPlan& p,
                    int64_t& max_dec_ctx, int64_t& R_real) const;
  // The step's metadata (layout: plan_step's offsets) into meta_build_.
  void fill_meta(std::span<const scheduler::StepSeq> batch, const StepPlan& p, int64_t n_meta);
  // The split-KV factor of the decode rows.
  void choose_split(StepPlan& p, int64_t max_dec_ctx, bool graph) const;
  // Runs the planned step: as a graph where it can, else eagerly.
  Status launch_step(const StepPlan& p, bool graph);
  Status reserve(int64_t rows, int64_t logit_rows, int64_t meta_ints, int64_t partial_floats);
  Status reserve_rows(int64_t rows);  // the activations of `rows` token rows
  Status reserve_logits(int64_t logit_rows);
  Status validate(std::span<const scheduler::StepSeq> batch) const;
  // Enqueues the step's kernels on stream_ (no host synchronization: capturable into a graph).
  Status enqueue(const StepPlan& p);
  // Launches the graph of a padded decode step, capturing it first if there is none for the plan's
  // shape or the workspace moved since.
  Status launch_graph(const StepPlan& p);
  // y[T, n] = x[T, k] · W[n, k]ᵀ + beta · y (bf16 inputs, float32 accumulate and output).
  Status gemm(const DeviceBuffer& w, const uint16_t* x, float* y, int64_t T, int64_t n, int64_t k,
              float beta);
  // The residual stream's first T rows summed over the ranks, in place (a no-op with one rank).
  Status all_reduce_residual(int64_t T);
  // The runner's stream, its cuBLAS handle with a fixed workspace (capturable into graphs), and
  // cuBLASLt where GEMMs are tuned.
  Status init_stream_and_blas();
  // Loads CudaRunnerOptions::candidates_* into the phases' slots, one module per cubin file
  // (Unimplemented with tensor parallelism; nothing to do without candidates).
  Status load_candidates();

  // Per-op timing for an installed engine::KernelObserver (`plumb kernels profile --device cuda`):
  // while profiling_, enqueue() records a CUDA event on the stream before each op and one after the
  // last (a decode graph captures them as event nodes, so graph steps are timed as they run), and
  // run() hands the observer each op's time between its event and the next once the step is done.
  // Only rank 0 reports. With tensor parallelism, o_proj and down_proj include their all-reduce.
  struct Mark {
    const char* module;  // null: the end of the step
    engine::Op op;
    engine::Phase phase;
    int32_t layer;
    int64_t m, n, k;
  };
  Status mark(const char* module, engine::Op op, engine::Phase phase, int32_t layer, int64_t m, int64_t n,
              int64_t k);
  // Enough events for every mark of a step.
  Status reserve_events();
  // Each timed op of the step just run (marks[i] spans events_[i] to events_[i + 1]) to `obs`.
  Status report_ops(const std::vector<Mark>& marks, engine::KernelObserver& obs) const;
  bool profiling_ = false;
  std::vector<Mark> marks_;                        // as enqueue() recorded them last
  const std::vector<Mark>* step_marks_ = nullptr;  // the marks of the step just launched
  std::vector<cudaEvent_t> events_;                // created on first use, never destroyed before the runner

  engine::ModelConfig c_;
  engine::TensorShard shard_;
  int64_t nh_ = 0, nkv_ = 0, ff_ = 0;  // this rank's heads, KV heads and SwiGLU inner columns
  void* comm_ = nullptr;               // ncclComm_t of the ranks; null with one rank
  std::string description_;
  int device_ = 0;
  int sm_count_ = 0;
  CudaRunnerOptions opts_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer cublas_ws_;
  std::unique_ptr<LtGemm> lt_;  // gemm_tuning and not reference_kernels
  bool tune_now_ = false;       // set while launch_graph runs a step eagerly to tune its GEMMs

  DeviceBuffer embed_, lm_head_, final_norm_, inv_freq_;
  bool tied_ = false;
  std::vector<DeviceLayer> layers_;

  // Paged KV cache (bf16), one allocation each for K and V over all layers.
  DeviceBuffer k_cache_, v_cache_;
  int32_t num_blocks_ = 0, block_size_ = 0;
  // One block past num_blocks_ that padded rows of a graph step write to and read from.
  std::vector<int32_t> pad_table_, pad_token_{0};
  std::vector<scheduler::StepSeq> padded_;

  // Decode-step graphs by (rows, n_split, logits wanted); each remembers the workspace generation
  // it was captured against (reserve() bumps it whenever a buffer moves).
  // Graphs captured while profiling carry event nodes and are kept apart (the last key).
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    int64_t generation = -1;
    std::vector<Mark> marks;  // the ops the graph times, when captured while profiling
  };
  std::map<std::tuple<int64_t, int32_t, bool, bool>, Graph> graphs_;
  int64_t generation_ = 0;

  // Step workspace, grown to the largest step seen.
  int64_t cap_rows_ = 0, cap_logit_rows_ = 0, cap_meta_ = 0, cap_partial_ = 0;
  DeviceBuffer x_;              // f32 [T, d]       residual stream
  DeviceBuffer h_;              // bf16 [T, d]      normed input of a block (and of lm_head)
  DeviceBuffer qkv_;            // f32 [T, (nh + 2 nkv) hd]
  DeviceBuffer attn_;           // bf16 [T, nh hd]  attention output
  DeviceBuffer gu_;             // f32 [T, 2 ff]
  DeviceBuffer act_;            // bf16 [T, ff]     SwiGLU output
  DeviceBuffer logits_;         // f32 [R, V]
  DeviceBuffer ids_;            // int32 [R]        each logits row's argmax (launch_argmax)
  DeviceBuffer argmax_ws_;      // launch_argmax's workspace (zeroed when allocated)
  DeviceBuffer meta_;           // int32 step metadata (layout in plan_step())
  DeviceBuffer partial_;        // f32 split-KV partial results
  DeviceBuffer attn_counters_;  // uint32 per (decode row, KV head): the split-KV merge's counts (zeroed)
  PinnedBuffer meta_host_, logits_host_, ids_host_;
  std::vector<int32_t> meta_build_;

  // Candidate kernels (CudaRunnerOptions::candidates_*): the modules, and per phase (index
  // engine::Phase) the one that replaces SwiGLU and the one that replaces the norms; null where the
  // runner's own kernel runs.
  std::vector<std::unique_ptr<LoadedCandidate>> candidates_;
  std::array<const LoadedCandidate*, 2> swiglu_candidate_{}, norm_candidate_{};
  bool norm_candidates() const { return norm_candidate_[0] != nullptr || norm_candidate_[1] != nullptr; }
  // With an rmsnorm_residual candidate: the residual stream's second buffer (the candidate's output),
  // and o_proj's and down_proj's output before the candidate adds the residual; f32 [T, d] each.
  DeviceBuffer x_alt_, sum_;
};

Status upload_bytes(void* dst, const void* src, size_t bytes) {
  PLUMB_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  return Status::Ok();
}

Result<DeviceBuffer> upload_floats(const std::vector<float>& v, const char* what) {
  PLUMB_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(v.size() * sizeof(float), what));
  if (!v.empty()) PLUMB_RETURN_IF_ERROR(upload_bytes(b.get(), v.data(), v.size() * sizeof(float)));
  return b;
}

// A rank's part of one weight matrix (engine::MatrixSlice).
struct Slice {
  const engine::WeightMatrix* m;
  engine::MatrixSlice part;
};
Slice whole(const engine::WeightMatrix& m) { return {&m, {0, m.rows, 0, m.cols}}; }

// Copies the slices, one after the other (each row-major [rows, cols]), as bf16 into a new device
// buffer. A matrix in another dtype or layout is converted whole on the host first.
Result<DeviceBuffer> upload_matrices(std::initializer_list<Slice> slices, const char* what) {
  int64_t elems = 0;
  for (const auto& sl : slices) {
    if (sl.m->quant != engine::QuantScheme::kNone) {
      return unimplemented("the CUDA runner takes float weights: --quantization int8/int4 is CPU-only");
    }
    elems += sl.part.rows() * sl.part.cols();
  }
  PLUMB_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::allocate(size_t(elems) * 2, what));
  auto* dst = b.as<uint16_t>();
  std::vector<uint16_t> staging;
  for (const auto& [m, part] : slices) {
    const int64_t n = m->rows * m->cols;
    const uint16_t* src = nullptr;                       // the whole matrix, row-major bf16
    if (m->layout == engine::WeightLayout::kPacked16) {  // a CPU GEMM's layout (engine/cpu/packed.h)
      staging.resize(size_t(n));
      engine::unpack16(static_cast<const uint16_t*>(m->data), m->rows, m->cols, staging.data(), nullptr);
      src = staging.data();
    } else if (m->dtype == engine::DType::kBF16) {
      src = static_cast<const uint16_t*>(m->data);
    } else {
      staging.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        const float f = m->dtype == engine::DType::kF32
                            ? static_cast<const float*>(m->data)[i]
                            : engine::f16_to_f32(static_cast<const uint16_t*>(m->data)[i]);
        staging[size_t(i)] = engine::f32_to_bf16(f);
      }
      src = staging.data();
    }
    const auto width = size_t(part.cols()) * 2, pitch = size_t(m->cols) * 2;
    PLUMB_CUDA_RETURN_IF_ERROR(cudaMemcpy2D(dst, width, src + part.r0 * m->cols + part.c0, pitch, width,
                                            size_t(part.rows()), cudaMemcpyHostToDevice));
    dst += part.rows() * part.cols();
  }
  return b;
}

Result<std::unique_ptr<CudaModelRunner>> CudaModelRunner::create(const engine::Model& model, int device,
                                                                 const engine::TensorShard& shard, void* comm,
                                                                 std::string description,
                                                                 const CudaRunnerOptions& opts) {
  const engine::ModelConfig& c = model.config();
  PLUMB_RETURN_IF_ERROR(check_fits(c, device, shard.size, shard.rank));
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) {
    return unimplemented("the CUDA runner supports head_dim 64, 128 and 256; this model has " +
                         std::to_string(c.head_dim));
  }
  std::unique_ptr<CudaModelRunner> r(new CudaModelRunner());
  r->c_ = c;
  r->shard_ = shard;
  r->nh_ = shard.heads, r->nkv_ = shard.kv_heads, r->ff_ = shard.ffn;
  r->comm_ = comm;
  r->device_ = device;
  r->opts_ = opts;
  PLUMB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaDeviceProp prop{};
  PLUMB_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  r->sm_count_ = prop.multiProcessorCount;
  r->description_ =
      std::move(description) + " on cuda:" + std::to_string(device) + " (" + prop.name + ", bf16";
  if (shard.size > 1) {
    r->description_ +=
        ", tensor-parallel rank " + std::to_string(shard.rank) + " of " + std::to_string(shard.size);
  }
  r->description_ += ")";
  PLUMB_RETURN_IF_ERROR(r->init_stream_and_blas());
  PLUMB_RETURN_IF_ERROR(r->load_candidates());
  PLUMB_RETURN_IF_ERROR(r->upload(model));
  return r;
}

Status CudaModelRunner::init_stream_and_blas() {
  PLUMB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, stream_));
  PLUMB_ASSIGN_OR_RETURN(cublas_ws_, DeviceBuffer::allocate(kCublasWorkspace, "the cuBLAS workspace"));
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas_, cublas_ws_.get(), kCublasWorkspace));
  if (opts_.gemm_tuning && !opts_.reference_kernels) {
    PLUMB_ASSIGN_OR_RETURN(lt_, LtGemm::create(stream_, cublas_ws_.get(), kCublasWorkspace));
  }
  return Status::Ok();
}

Status CudaModelRunner::load_candidates() {
  if (opts_.candidates_prefill.empty() && opts_.candidates_decode.empty()) return Status::Ok();
  if (shard_.size > 1) {
    return unimplemented(
        "candidate kernels (the kernel configuration's \"cuda\" entries) run on one card: "
        "leave --tensor-parallel-size at 1 to measure them");
  }
  std::map<std::string, const LoadedCandidate*> by_path;
  std::string names;
  for (const engine::Phase ph : {engine::Phase::kPrefill, engine::Phase::kDecode}) {
    const auto& chosen = ph == engine::Phase::kPrefill ? opts_.candidates_prefill : opts_.candidates_decode;
    for (const auto& [name, path] : chosen) {
      auto op = parse_candidate_op(name);
      if (!op.ok()) return op.status().with_context("the kernel configuration's cuda entries");
      const LoadedCandidate*& k = by_path[path];
      if (k == nullptr) {
        auto cubin = read_file(path);
        if (!cubin.ok()) return cubin.status().with_context("candidate kernel for " + name);
        auto owned = std::make_unique<LoadedCandidate>();
        if (Status st = owned->load(*cubin); !st.ok()) return st.with_context("candidate kernel " + path);
        k = owned.get();
        candidates_.push_back(std::move(owned));
        names += std::string(names.empty() ? "" : ", ") + name + " " + path.substr(path.rfind('/') + 1) +
                 " (sha256 " + sha256_hex(*cubin).substr(0, 12) + ")";
      }
      if (k->config().op != int(*op)) {
        return invalid_argument(path + " declares op " +
                                std::string(candidate_op_name(CandidateOp(k->config().op))) +
                                " but the kernel configuration puts it in place of " + name +
                                ": a candidate replaces the op it was written for");
      }
      (*op == CandidateOp::kSwiglu ? swiglu_candidate_ : norm_candidate_)[size_t(ph)] = k;
    }
  }
  if (!names.empty()) description_ += ", candidate kernels: " + names;
  return Status::Ok();
}

Status CudaModelRunner::upload(const engine::Model& model) {
  const engine::ModelWeights& w = model.weights();
  PLUMB_ASSIGN_OR_RETURN(embed_, upload_matrices({whole(w.embed)}, "the embedding table"));
  tied_ = w.lm_head.data == w.embed.data;
  if (!tied_ && shard_.rank == 0) {  // logits are rank 0's
    PLUMB_ASSIGN_OR_RETURN(lm_head_, upload_matrices({whole(w.lm_head)}, "lm_head"));
  }
  PLUMB_ASSIGN_OR_RETURN(final_norm_, upload_floats(w.final_norm, "the final norm"));
  PLUMB_ASSIGN_OR_RETURN(inv_freq_, upload_floats(engine::rope_inv_freq(c_), "RoPE frequencies"));
  layers_.resize(w.layers.size());
  for (size_t i = 0; i < w.layers.size(); ++i) {
    PLUMB_RETURN_IF_ERROR(upload_layer(w.layers[i], layers_[i]));
    if (opts_.upload_progress && shard_.rank == 0) opts_.upload_progress(i + 1, w.layers.size());
  }
  return Status::Ok();
}

Status CudaModelRunner::upload_layer(const engine::LayerWeights& L, DeviceLayer& D) {
  const engine::MatrixSlice q = engine::q_proj_slice(c_, shard_), kv = engine::kv_proj_slice(c_, shard_),
                            ffn = engine::ffn_in_slice(c_, shard_);
  PLUMB_ASSIGN_OR_RETURN(D.qkv_w,
                         upload_matrices({{&L.q_proj, q}, {&L.k_proj, kv}, {&L.v_proj, kv}}, "q/k/v_proj"));
  PLUMB_ASSIGN_OR_RETURN(D.o_w, upload_matrices({{&L.o_proj, engine::o_proj_slice(c_, shard_)}}, "o_proj"));
  PLUMB_ASSIGN_OR_RETURN(D.gu_w, upload_matrices({{&L.gate_proj, ffn}, {&L.up_proj, ffn}}, "gate/up_proj"));
  PLUMB_ASSIGN_OR_RETURN(D.down_w,
                         upload_matrices({{&L.down_proj, engine::down_proj_slice(c_, shard_)}}, "down_proj"));
  PLUMB_ASSIGN_OR_RETURN(D.input_norm, upload_floats(L.input_norm, "input_norm"));
  PLUMB_ASSIGN_OR_RETURN(D.post_norm, upload_floats(L.post_attention_norm, "post_attention_norm"));
  if (c_.qk_norm) {
    PLUMB_ASSIGN_OR_RETURN(D.q_norm, upload_floats(L.q_norm, "q_norm"));
    PLUMB_ASSIGN_OR_RETURN(D.k_norm, upload_floats(L.k_norm, "k_norm"));
  }
  if (!L.q_bias.empty()) {
    std::vector<float> bias(L.q_bias.begin() + q.r0, L.q_bias.begin() + q.r1);
    for (const auto* kvb : {&L.k_bias, &L.v_bias}) {
      bias.insert(bias.end(), kvb->begin() + kv.r0, kvb->begin() + kv.r1);
    }
    PLUMB_ASSIGN_OR_RETURN(D.qkv_bias, upload_floats(bias, "q/k/v bias"));
  }
  return Status::Ok();
}

Status CudaModelRunner::init_kv(int32_t num_blocks, int32_t block_size) {
  PLUMB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // One block more than asked: the padding block of graph steps (never in a caller's block table).
  const int64_t per_cache = int64_t(num_blocks + 1) * block_size * c_.num_hidden_layers * nkv_ * c_.head_dim *
                            int64_t(sizeof(uint16_t));
  size_t free_b = 0, total_b = 0;
  PLUMB_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  if (2 * per_cache + kWorkingSetReserve > int64_t(free_b)) {
    return resource_exhausted("the KV cache of " + std::to_string(int64_t(num_blocks) * block_size) +
                              " tokens needs " + gib(2 * per_cache) + " of device memory (plus " +
                              gib(kWorkingSetReserve) +
                              " of working set) but cuda:" + std::to_string(device_) + " has " +
                              gib(int64_t(free_b)) + " free after the weights; lower --kv-cache-tokens");
  }
  PLUMB_ASSIGN_OR_RETURN(k_cache_, DeviceBuffer::allocate(size_t(per_cache), "the K cache"));
  PLUMB_ASSIGN_OR_RETURN(v_cache_, DeviceBuffer::allocate(size_t(per_cache), "the V cache"));
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  pad_table_ = {num_blocks};
  return Status::Ok();
}

Status CudaModelRunner::reserve(int64_t rows, int64_t logit_rows, int64_t meta_ints, int64_t partial_floats) {
  PLUMB_RETURN_IF_ERROR(reserve_rows(rows));
  PLUMB_RETURN_IF_ERROR(reserve_logits(logit_rows));
  if (meta_ints > cap_meta_) {
    const int64_t n = std::max<int64_t>(meta_ints, 2 * cap_meta_);
    PLUMB_ASSIGN_OR_RETURN(meta_, DeviceBuffer::allocate(size_t(n) * 4, "step metadata"));
    PLUMB_ASSIGN_OR_RETURN(meta_host_, PinnedBuffer::allocate(size_t(n) * 4, "step metadata"));
    cap_meta_ = n;
    ++generation_;
  }
  if (partial_floats > cap_partial_) {
    PLUMB_ASSIGN_OR_RETURN(partial_, DeviceBuffer::allocate(size_t(partial_floats) * 4, "split-KV partials"));
    cap_partial_ = partial_floats;
    ++generation_;
  }
  return Status::Ok();
}

Status CudaModelRunner::reserve_rows(int64_t rows) {
  if (rows <= cap_rows_) return Status::Ok();
  const int64_t d = c_.hidden_size, ff = ff_, hd = c_.head_dim;
  const int64_t qkv_w = (nh_ + 2 * nkv_) * hd;
  const auto n = size_t(rows);
  x_ = {}, h_ = {}, qkv_ = {}, attn_ = {}, gu_ = {}, act_ = {};  // free before allocating the larger set
  x_alt_ = {}, sum_ = {};
  PLUMB_ASSIGN_OR_RETURN(x_, DeviceBuffer::allocate(n * size_t(d) * 4, "the residual stream"));
  if (norm_candidates()) {
    PLUMB_ASSIGN_OR_RETURN(x_alt_,
                           DeviceBuffer::allocate(n * size_t(d) * 4, "the residual stream's second buffer"));
    PLUMB_ASSIGN_OR_RETURN(sum_, DeviceBuffer::allocate(n * size_t(d) * 4, "the projections' output"));
  }
  PLUMB_ASSIGN_OR_RETURN(h_, DeviceBuffer::allocate(n * size_t(d) * 2, "normed activations"));
  PLUMB_ASSIGN_OR_RETURN(qkv_, DeviceBuffer::allocate(n * size_t(qkv_w) * 4, "q/k/v"));
  PLUMB_ASSIGN_OR_RETURN(attn_, DeviceBuffer::allocate(n * size_t(nh_ * hd) * 2, "attention output"));
  PLUMB_ASSIGN_OR_RETURN(gu_, DeviceBuffer::allocate(n * size_t(2 * ff) * 4, "gate/up"));
  PLUMB_ASSIGN_OR_RETURN(act_, DeviceBuffer::allocate(n * size_t(ff) * 2, "SwiGLU output"));
  const AttnGeometry g{int32_t(nh_), int32_t(nkv_), int32_t(hd), block_size_};
  const size_t counter_bytes = size_t(decode_counters(int64_t(n), g)) * 4;
  PLUMB_ASSIGN_OR_RETURN(attn_counters_, DeviceBuffer::allocate(counter_bytes, "split-KV merge counters"));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaMemset(attn_counters_.get(), 0, counter_bytes));
  cap_rows_ = rows;
  ++generation_;
  return Status::Ok();
}

Status CudaModelRunner::reserve_logits(int64_t logit_rows) {
  if (logit_rows <= cap_logit_rows_) return Status::Ok();
  const size_t bytes = size_t(logit_rows) * size_t(c_.vocab_size) * 4;
  logits_ = {}, logits_host_ = {};
  PLUMB_ASSIGN_OR_RETURN(logits_, DeviceBuffer::allocate(bytes, "logits"));
  PLUMB_ASSIGN_OR_RETURN(logits_host_, PinnedBuffer::allocate(bytes, "logits"));
  PLUMB_ASSIGN_OR_RETURN(ids_, DeviceBuffer::allocate(size_t(logit_rows) * 4, "greedy ids"));
  PLUMB_ASSIGN_OR_RETURN(
      argmax_ws_, DeviceBuffer::allocate(size_t(argmax_workspace_bytes(logit_rows)), "argmax workspace"));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaMemset(argmax_ws_.get(), 0, size_t(argmax_workspace_bytes(logit_rows))));
  PLUMB_ASSIGN_OR_RETURN(ids_host_, PinnedBuffer::allocate(size_t(logit_rows) * 4, "greedy ids"));
  cap_logit_rows_ = logit_rows;
  ++generation_;
  return Status::Ok();
}

Status CudaModelRunner::validate(std::span<const scheduler::StepSeq> batch) const {
  if (num_blocks_ == 0) return failed_precondition("init_kv() was not called");
  if (batch.empty()) return invalid_argument("forward: empty batch");
  for (size_t s = 0; s < batch.size(); ++s) {
    const scheduler::StepSeq& in = batch[s];
    const std::string who = "forward: sequence " + std::to_string(s) + ": ";
    if (in.tokens.empty()) return invalid_argument(who + "no new tokens");
    if (in.start_pos < 0) return invalid_argument(who + "negative start_pos");
    const int64_t end = int64_t(in.start_pos) + int64_t(in.tokens.size());
    if (end > c_.max_context()) {
      return invalid_argument(who + std::to_string(end) + " tokens exceed the model's context of " +
                              std::to_string(c_.max_context()) + " tokens");
    }
    if (end > int64_t(in.block_table.size()) * block_size_) {
      return invalid_argument(who + "its block table covers " +
                              std::to_string(int64_t(in.block_table.size()) * block_size_) +
                              " tokens, it needs " + std::to_string(end));
    }
    for (int32_t b : in.block_table) {
      if (b < 0 || b >= num_blocks_) {
        return invalid_argument(who + "block id " + std::to_string(b) + " is outside the cache's " +
                                std::to_string(num_blocks_) + " blocks");
      }
    }
    for (int32_t id : in.tokens) {
      if (id < 0 || id >= c_.vocab_size) {
        return invalid_argument(who + "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(c_.vocab_size) + ")");
      }
    }
  }
  return Status::Ok();
}

Status CudaModelRunner::gemm(const DeviceBuffer& w, const uint16_t* x, float* y, int64_t T, int64_t n,
                             int64_t k, float beta) {
  if (!opts_.reference_kernels && gemv_supports(T, k)) {
    PLUMB_CUDA_LAUNCH(launch_gemv(w.as<uint16_t>(), x, y, T, n, k, beta, stream_));
    return Status::Ok();
  }
  if (lt_) {
    if (tune_now_) PLUMB_RETURN_IF_ERROR(lt_->tune(w.as<uint16_t>(), x, T, n, k, beta));
    return lt_->run(w.as<uint16_t>(), x, y, T, n, k, beta);
  }
  // Column-major view: yᵀ [n, T] = W [n, k] (row-major W read transposed) · xᵀ [k, T].
  const float alpha = 1.0f;
  PLUMB_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(T), int(k), &alpha,
                                            w.get(), CUDA_R_16BF, int(k), x, CUDA_R_16BF, int(k), &beta, y,
                                            CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return Status::Ok();
}

Status CudaModelRunner::run(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits,
                            std::vector<int32_t>* greedy_ids) {
  logits.clear();
  if (greedy_ids != nullptr) greedy_ids->clear();
  PLUMB_RETURN_IF_ERROR(validate(batch));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  engine::KernelObserver* obs = shard_.rank == 0 ? engine::kernel_observer() : nullptr;
  profiling_ = obs != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  if (profiling_) PLUMB_RETURN_IF_ERROR(reserve_events());
  const auto S_real = int64_t(batch.size());
  bool graph = false;
  batch = pad_for_graph(batch, graph);
  StepPlan p;
  int64_t max_dec_ctx = 0, R_real = 0;
  const int64_t n_meta = plan_step(batch, S_real, p, max_dec_ctx, R_real);
  fill_meta(batch, p, n_meta);
  choose_split(p, max_dec_ctx, graph);
  const AttnGeometry g{int32_t(nh_), int32_t(nkv_), int32_t(c_.head_dim), block_size_};
  PLUMB_RETURN_IF_ERROR(reserve(p.T, p.R, n_meta, decode_partial_floats(p.n_dec, g, p.n_split)));
  std::memcpy(meta_host_.get(), meta_build_.data(), size_t(n_meta) * 4);
  PLUMB_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(meta_.get(), meta_host_.get(), size_t(n_meta) * 4, cudaMemcpyHostToDevice, stream_));
  PLUMB_RETURN_IF_ERROR(launch_step(p, graph));
  PLUMB_RETURN_IF_ERROR(fetch(batch.first(size_t(S_real)), R_real, logits, greedy_ids));
  if (profiling_ && step_marks_ != nullptr) {
    PLUMB_RETURN_IF_ERROR(report_ops(*step_marks_, *obs));
    const engine::KernelCall forward{engine::Op::kCount,
                                     p.n_pre > 0 ? engine::Phase::kPrefill : engine::Phase::kDecode,
                                     "forward",
                                     -1,
                                     p.T,
                                     0,
                                     0,
                                     nullptr};
    obs->before(forward);
    obs->after(
        forward,
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
  return Status::Ok();
}

Status CudaModelRunner::reserve_events() {
  // At most 10 marks a layer (input_norm, qkv_proj, rope, prefill and decode attention, o_proj,
  // post_attention_norm, gate_up_proj, swiglu, down_proj) and 5 outside (embedding, final_norm,
  // lm_head, argmax, the end).
  const size_t need = size_t(10 * layers_.size() + 5);
  while (events_.size() < need) {
    cudaEvent_t e = nullptr;
    PLUMB_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return Status::Ok();
}

Status CudaModelRunner::mark(const char* module, engine::Op op, engine::Phase phase, int32_t layer, int64_t m,
                             int64_t n, int64_t k) {
  if (!profiling_) return Status::Ok();
  if (marks_.size() >= events_.size())
    return internal_error("profiling: a step has more ops than events reserved");
  // Under stream capture a plain cudaEventRecord becomes an ordering edge inside the graph and the
  // event is never recorded; the external flag makes it an event-record node that each replay fires.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PLUMB_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream_, &capture));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaEventRecordWithFlags(
      events_[marks_.size()], stream_,
      capture == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault));
  marks_.push_back({module, op, phase, layer, m, n, k});
  return Status::Ok();
}

Status CudaModelRunner::report_ops(const std::vector<Mark>& marks, engine::KernelObserver& obs) const {
  for (size_t i = 0; i + 1 < marks.size() && i + 1 < events_.size(); ++i) {
    const Mark& mk = marks[i];
    float ms = 0.0f;
    PLUMB_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    const engine::KernelCall call{mk.op, mk.phase, mk.module, mk.layer, mk.m, mk.n, mk.k, nullptr};
    obs.before(call);
    obs.after(call, int64_t(double(ms) * 1e6));
  }
  return Status::Ok();
}

Status CudaModelRunner::fetch(std::span<const scheduler::StepSeq> batch, int64_t R_real,
                              std::vector<float>& logits, std::vector<int32_t>* greedy_ids) {
  if (shard_.rank != 0) {  // no logits here: the step is done when the stream is
    PLUMB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }
  const int64_t V = c_.vocab_size;
  bool rows_wanted = greedy_ids == nullptr && R_real > 0;
  if (greedy_ids != nullptr) {
    for (const auto& in : batch)
      rows_wanted = rows_wanted || (in.logits != scheduler::StepSeq::Logits::kNone && !in.greedy);
    if (R_real > 0) {
      PLUMB_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(ids_host_.get(), ids_.get(), size_t(R_real) * 4, cudaMemcpyDeviceToHost, stream_));
    }
  }
  if (rows_wanted) {
    PLUMB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits_host_.get(), logits_.get(), size_t(R_real * V) * 4,
                                               cudaMemcpyDeviceToHost, stream_));
  }
  PLUMB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  const float* lh = logits_host_.as<float>();
  if (greedy_ids == nullptr) {
    logits.assign(lh, lh + R_real * V);
    return Status::Ok();
  }
  const int32_t* ids = ids_host_.as<int32_t>();
  int64_t row = 0;
  for (const auto& in : batch) {
    const auto n = int64_t(in.logit_rows());
    if (in.greedy && n == 1) {
      greedy_ids->push_back(ids[row]);
    } else {
      logits.insert(logits.end(), lh + row * V, lh + (row + n) * V);
    }
    row += n;
  }
  return Status::Ok();
}

// A decode step (one token per sequence, every sequence wanting its logits or none) is padded to
// its bucket's size with rows that write and read only the padding block, so that one graph per
// bucket serves every step of that size.
std::span<const scheduler::StepSeq> CudaModelRunner::pad_for_graph(std::span<const scheduler::StepSeq> batch,
                                                                   bool& graph) {
  const auto S_real = int64_t(batch.size());
  graph = opts_.cuda_graphs && S_real <= kMaxGraphBatch;
  for (const auto& in : batch) {
    graph = graph && in.tokens.size() == 1 && in.logits != scheduler::StepSeq::Logits::kAll &&
            in.logits == batch[0].logits;
  }
  if (!graph) return batch;
  padded_.assign(batch.begin(), batch.end());
  padded_.resize(size_t(graph_bucket(S_real)),
                 scheduler::StepSeq{pad_token_, 0, pad_table_, batch[0].logits});
  return padded_;
}

// The step's metadata, built once on the host: per row ids, pos, slot, row_seq; per sequence the
// offset of its block table; the rows that want logits; the prefill rows; the decode rows; the
// prefill tiles; the block tables. One copy to the device.
int64_t CudaModelRunner::plan_step(std::span<const scheduler::StepSeq> batch, int64_t S_real, StepPlan& p,
                                   int64_t& max_dec_ctx, int64_t& R_real) const {
  const int64_t tile = prefill_tile_rows();
  const auto S = int64_t(batch.size());
  int64_t n_bt = 0;
  for (int64_t s = 0; s < S; ++s) {
    const scheduler::StepSeq& in = batch[size_t(s)];
    const auto n = int64_t(in.tokens.size());
    p.T += n;
    if (n > 1) p.n_tiles += (n + tile - 1) / tile;
    const auto r = int64_t(in.logit_rows());
    p.R += r;
    if (s < S_real) R_real += r;
    (n > 1 ? p.n_pre : p.n_dec) += n > 1 ? n : 1;
    if (n == 1) max_dec_ctx = std::max<int64_t>(max_dec_ctx, in.start_pos + 1);
    n_bt += int64_t(in.block_table.size());
  }
  p.o_ids = 0, p.o_pos = p.T, p.o_slot = 2 * p.T, p.o_rowseq = 3 * p.T, p.o_btoff = 4 * p.T;
  p.o_lrows = p.o_btoff + S, p.o_pre = p.o_lrows + p.R, p.o_dec = p.o_pre + p.n_pre;
  p.o_tiles = p.o_dec + p.n_dec, p.o_draw = p.o_tiles + 2 * p.n_tiles, p.o_bt = p.o_draw + 3 * p.R;
  return p.o_bt + n_bt;
}

void CudaModelRunner::fill_meta(std::span<const scheduler::StepSeq> batch, const StepPlan& p,
                                int64_t n_meta) {
  const int64_t tile = prefill_tile_rows();
  const auto S = int64_t(batch.size());
  meta_build_.assign(size_t(n_meta), 0);
  int32_t* m = meta_build_.data();
  int64_t row = 0, lr = 0, pr = 0, dr = 0, bt = 0, ti = 0;
  for (int64_t s = 0; s < S; ++s) {
    const scheduler::StepSeq& in = batch[size_t(s)];
    const auto n = int64_t(in.tokens.size());
    m[p.o_btoff + s] = int32_t(bt);
    for (int64_t j = 0; n > 1 && j < n; j += tile, ++ti) {
      m[p.o_tiles + 2 * ti] = int32_t(row + j);
      m[p.o_tiles + 2 * ti + 1] = int32_t(std::min(tile, n - j));
    }
    for (int64_t j = 0; j < n; ++j, ++row) {
      const int32_t pos = in.start_pos + int32_t(j);
      m[p.o_ids + row] = in.tokens[size_t(j)];
      m[p.o_pos + row] = pos;
      m[p.o_slot + row] = in.block_table[size_t(pos / block_size_)] * block_size_ + pos % block_size_;
      m[p.o_rowseq + row] = int32_t(s);
      if (n > 1) m[p.o_pre + pr++] = int32_t(row);
      if (in.logits == scheduler::StepSeq::Logits::kAll ||
          (in.logits == scheduler::StepSeq::Logits::kLast && j == n - 1)) {
        // A drawn row's temperature and uniform (launch_draw); zeros leave the argmax.
        if (in.greedy && in.temperature > 0.0f && j == n - 1) {
          uint64_t ub = 0;
          std::memcpy(&ub, &in.u, sizeof ub);
          std::memcpy(&m[p.o_draw + 3 * lr], &in.temperature, sizeof(float));
          m[p.o_draw + 3 * lr + 1] = int32_t(uint32_t(ub));
          m[p.o_draw + 3 * lr + 2] = int32_t(uint32_t(ub >> 32));
        }
        m[p.o_lrows + lr++] = int32_t(row);
      }
    }
    if (n == 1) m[p.o_dec + dr++] = int32_t(row - 1);
    for (int32_t b : in.block_table) m[p.o_bt + bt++] = b;
  }
}

// Split the decode rows' contexts so that about four blocks per multiprocessor run, each split at
// least 32 positions (one pass of the block's warps). A graph step rounds the split count down to a
// power of two (the kernel reads each row's context from the metadata, so one graph serves every
// context of its split count); rounding up doubled the splits, and the merge's work, as a batch-1
// context passed 32 times a power of two.
void CudaModelRunner::choose_split(StepPlan& p, int64_t max_dec_ctx, bool graph) const {
  const int64_t nh = nh_, nkv = nkv_, hd = c_.head_dim;
  const int64_t maxg = hd == 256 ? 4 : 8, group = nh / nkv, chunks = (group + maxg - 1) / maxg;
  if (p.n_dec > 0) {
    const int64_t base = p.n_dec * nkv * chunks;
    const int64_t want = (4 * int64_t(sm_count_) + base - 1) / base;
    p.n_split = int32_t(std::clamp<int64_t>(std::min<int64_t>(want, max_dec_ctx / 32), 1, kMaxDecodeSplit));
    if (graph) {
      int32_t pow2 = 1;
      while (2 * pow2 <= p.n_split) pow2 *= 2;
      p.n_split = pow2;
    }
  }
}

Status CudaModelRunner::launch_step(const StepPlan& p, bool graph) {
  if (graph) {
    if (Status gs = launch_graph(p); !gs.ok()) {
      // With several ranks a rank cannot go eager alone: its steps would stop being padded to the
      // graph bucket, and its all-reduces would no longer match the others' in size. The failure
      // ends the tensor-parallel runner instead (TensorParallelRunner).
      if (shard_.size > 1) return gs;
      // A step that cannot be captured or replayed runs eagerly, and so do the later ones; the
      // reason stays in describe(). A device fault fails the eager launch as well.
      cudaGetLastError();
      opts_.cuda_graphs = false;
      description_ += " (CUDA graphs off: " + gs.message() + ")";
      PLUMB_RETURN_IF_ERROR(enqueue(p));
    }
  } else {
    PLUMB_RETURN_IF_ERROR(enqueue(p));
  }
  return Status::Ok();
}

Status CudaModelRunner::launch_graph(const StepPlan& p) {
  Graph& gr = graphs_[{p.T, p.n_split, p.R > 0, profiling_}];
  if (gr.exec == nullptr || gr.generation != generation_) {
    if (gr.exec != nullptr) {
      PLUMB_CUDA_RETURN_IF_ERROR(cudaGraphExecDestroy(gr.exec));
      gr.exec = nullptr;
    }
    if (lt_) {  // the step once eagerly, tuning its GEMM shapes (it writes what the replay rewrites)
      tune_now_ = true;
      const Status tuned = enqueue(p);
      tune_now_ = false;
      PLUMB_RETURN_IF_ERROR(tuned);
    }
    PLUMB_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status st;
    {
      CaptureScope scope;
      st = enqueue(p);
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (!st.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return st.with_context("capturing a decode step of " + std::to_string(p.T) + " rows");
    }
    PLUMB_CUDA_RETURN_IF_ERROR(end);
    const cudaError_t inst = cudaGraphInstantiate(&gr.exec, graph, 0);
    cudaGraphDestroy(graph);
    PLUMB_CUDA_RETURN_IF_ERROR(inst);
    gr.generation = generation_;
    gr.marks = marks_;
  }
  PLUMB_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(gr.exec, stream_));
  step_marks_ = &gr.marks;
  return Status::Ok();
}

// The forward pass stays one function, reading top to bottom as the model's equations (as the CPU
// engine's Model::forward_impl does).
Status CudaModelRunner::enqueue(const StepPlan& p) {  // NOLINT(readability-function-size)
  const int64_t d = c_.hidden_size, nh = nh_, nkv = nkv_, hd = c_.head_dim, ff = ff_, V = c_.vocab_size;
  const int64_t qkv_w = (nh + 2 * nkv) * hd, T = p.T;
  const AttnGeometry g{int32_t(nh), int32_t(nkv), int32_t(hd), block_size_};
  const int32_t* dm = meta_.as<int32_t>();
  const AttnBatch ab{dm + p.o_pos, dm + p.o_rowseq, dm + p.o_btoff, dm + p.o_bt};
  float* x = x_.as<float>();
  auto* h = h_.as<uint16_t>();
  float* qkv = qkv_.as<float>();
  auto* attn = attn_.as<uint16_t>();
  float* gu = gu_.as<float>();
  auto* act = act_.as<uint16_t>();
  const auto eps = float(c_.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(float(hd));
  const int64_t layer_kv = int64_t(num_blocks_ + 1) * block_size_ * nkv * hd;
  // Decode-sized steps fold SwiGLU into the gate/up GEMV.
  const bool fused = opts_.fused_gemv && !opts_.reference_kernels && gemv_supports(T, d);
  // With several ranks, o_proj and down_proj give each rank a partial sum of the layer's output:
  // rank 0 adds its part to the residual stream, the others write theirs over it, and the
  // all-reduce adds them up (every rank's residual stream was the same before).
  const float add = shard_.rank == 0 ? 1.0f : 0.0f;
  // Profiling marks (a no-op unless profiling_): a step with prefill rows is a prefill step, but its
  // decode attention is listed under decode, as the CPU profile counts them.
  using engine::Op;
  const engine::Phase ph = p.n_pre > 0 ? engine::Phase::kPrefill : engine::Phase::kDecode;
  auto at = [&](const char* module, Op op, size_t layer, int64_t m, int64_t n, int64_t k,
                engine::Phase phase) { return mark(module, op, phase, int32_t(layer), m, n, k); };
  const size_t none = size_t(-1);  // outside the layers (layer -1)
  marks_.clear();
  step_marks_ = &marks_;
  // Candidate kernels of this phase (CudaRunnerOptions::candidates_*). With an rmsnorm_residual
  // candidate, o_proj and down_proj write `sum` and the candidate writes sum + xr, the new residual
  // stream, to the other buffer; xr follows it (the swaps are the same at every step, so a graph
  // captures the same pointers it replays with).
  const LoadedCandidate* swiglu_k = swiglu_candidate_[size_t(ph)];
  const LoadedCandidate* norm_k = norm_candidate_[size_t(ph)];
  float* xr = x;
  float* xo = x_alt_.as<float>();
  float* sum = sum_.as<float>();
  auto norm_residual = [&](const DeviceBuffer& w) -> Status {
    plumb_rmsnorm_residual_args a{sum, xr, w.as<float>(), xo, h, T, d, d, d, eps};
    PLUMB_RETURN_IF_ERROR(norm_k->launch(&a, candidate_grid_blocks(norm_k->config(), T), stream_));
    std::swap(xr, xo);
    return Status::Ok();
  };

  PLUMB_RETURN_IF_ERROR(at("embedding", Op::kEmbedding, none, T, d, 0, ph));
  PLUMB_CUDA_LAUNCH(launch_embedding(dm + p.o_ids, T, embed_.as<uint16_t>(), d, x, stream_));
  for (size_t li = 0; li < layers_.size(); ++li) {
    const DeviceLayer& L = layers_[li];
    uint16_t* kc = k_cache_.as<uint16_t>() + int64_t(li) * layer_kv;
    uint16_t* vc = v_cache_.as<uint16_t>() + int64_t(li) * layer_kv;
    // x += o_proj(attention(rope(q), rope(k), v)) over h = rmsnorm(x)
    PLUMB_RETURN_IF_ERROR(at("input_norm", Op::kRmsNorm, li, T, d, d, ph));
    if (norm_k != nullptr && li > 0) {  // the previous layer's down_proj wrote `sum`
      PLUMB_RETURN_IF_ERROR(norm_residual(L.input_norm));
    } else {
      PLUMB_CUDA_LAUNCH(launch_rmsnorm(xr, nullptr, T, d, L.input_norm.as<float>(), eps, h, stream_));
    }
    PLUMB_RETURN_IF_ERROR(at("qkv_proj", Op::kMatmul, li, T, qkv_w, d, ph));
    PLUMB_RETURN_IF_ERROR(gemm(L.qkv_w, h, qkv, T, qkv_w, d, 0.0f));
    PLUMB_RETURN_IF_ERROR(
        at("rope", Op::kRope, li, T, nh + nkv, hd, ph));  // with q/k norm, bias, the KV write
    PLUMB_CUDA_LAUNCH(launch_qkv_rope(qkv, T, dm + p.o_pos, dm + p.o_slot, L.qkv_bias.as<float>(),
                                      L.q_norm.as<float>(), L.k_norm.as<float>(), eps, inv_freq_.as<float>(),
                                      g, kc, vc, stream_));
    if (p.n_pre > 0) PLUMB_RETURN_IF_ERROR(at("attention", Op::kAttention, li, p.n_pre, nh, hd, ph));
    if (opts_.reference_kernels) {
      PLUMB_CUDA_LAUNCH(
          launch_attention_rows(qkv, qkv_w, dm + p.o_pre, p.n_pre, ab, kc, vc, g, scale, attn, stream_));
    } else {
      PLUMB_CUDA_LAUNCH(launch_attention_prefill(qkv, qkv_w, dm + p.o_tiles, p.n_tiles, ab, kc, vc, g, scale,
                                                 attn, stream_));
    }
    if (p.n_dec > 0) {
      PLUMB_RETURN_IF_ERROR(at("attention", Op::kAttention, li, p.n_dec, nh, hd, engine::Phase::kDecode));
    }
    PLUMB_CUDA_LAUNCH(launch_attention_decode(qkv, qkv_w, dm + p.o_dec, p.n_dec, ab, kc, vc, g, scale,
                                              p.n_split, partial_.as<float>(), attn_counters_.as<uint32_t>(),
                                              attn, stream_));
    PLUMB_RETURN_IF_ERROR(at("o_proj", Op::kMatmul, li, T, d, nh * hd, ph));
    if (norm_k != nullptr) {  // one card (load_candidates): no all-reduce
      PLUMB_RETURN_IF_ERROR(gemm(L.o_w, attn, sum, T, d, nh * hd, 0.0f));
    } else {
      PLUMB_RETURN_IF_ERROR(gemm(L.o_w, attn, x, T, d, nh * hd, add));
      PLUMB_RETURN_IF_ERROR(all_reduce_residual(T));
    }
    // x += down(silu(gate(h)) * up(h)) over h = rmsnorm(x)
    PLUMB_RETURN_IF_ERROR(at("post_attention_norm", Op::kRmsNorm, li, T, d, d, ph));
    if (norm_k != nullptr) {
      PLUMB_RETURN_IF_ERROR(norm_residual(L.post_norm));
    } else {
      PLUMB_CUDA_LAUNCH(launch_rmsnorm(x, nullptr, T, d, L.post_norm.as<float>(), eps, h, stream_));
    }
    if (fused) {
      PLUMB_RETURN_IF_ERROR(at("gate_up_swiglu", Op::kMatmul, li, T, 2 * ff, d, ph));
      PLUMB_CUDA_LAUNCH(launch_gemv_swiglu(L.gu_w.as<uint16_t>(), h, act, T, ff, d, stream_));
    } else {
      PLUMB_RETURN_IF_ERROR(at("gate_up_proj", Op::kMatmul, li, T, 2 * ff, d, ph));
      PLUMB_RETURN_IF_ERROR(gemm(L.gu_w, h, gu, T, 2 * ff, d, 0.0f));
      PLUMB_RETURN_IF_ERROR(at("swiglu", Op::kSwiglu, li, T, ff, ff, ph));
      if (swiglu_k != nullptr) {
        plumb_swiglu_args a{gu, act, T, ff, 2 * ff, ff};
        PLUMB_RETURN_IF_ERROR(
            swiglu_k->launch(&a, candidate_grid_blocks(swiglu_k->config(), T * ff), stream_));
      } else {
        PLUMB_CUDA_LAUNCH(launch_swiglu(gu, T, ff, act, stream_));
      }
    }
    PLUMB_RETURN_IF_ERROR(at("down_proj", Op::kMatmul, li, T, d, ff, ph));
    if (norm_k != nullptr && li + 1 < layers_.size()) {  // the next input norm adds the residual
      PLUMB_RETURN_IF_ERROR(gemm(L.down_w, act, sum, T, d, ff, 0.0f));
    } else {
      PLUMB_RETURN_IF_ERROR(gemm(L.down_w, act, xr, T, d, ff, add));
      PLUMB_RETURN_IF_ERROR(all_reduce_residual(T));
    }
  }
  if (p.R > 0 && shard_.rank == 0) {
    PLUMB_RETURN_IF_ERROR(at("final_norm", Op::kRmsNorm, none, p.R, d, d, ph));
    PLUMB_CUDA_LAUNCH(launch_rmsnorm(xr, dm + p.o_lrows, p.R, d, final_norm_.as<float>(), eps, h, stream_));
    PLUMB_RETURN_IF_ERROR(at("lm_head", Op::kMatmul, none, p.R, V, d, ph));
    PLUMB_RETURN_IF_ERROR(gemm(tied_ ? embed_ : lm_head_, h, logits_.as<float>(), p.R, V, d, 0.0f));
    // The argmax of every row, then the plain draws of the rows with a temperature (one mark for both).
    PLUMB_RETURN_IF_ERROR(at("argmax", Op::kSample, none, p.R, V, 0, ph));
    PLUMB_CUDA_LAUNCH(launch_argmax(logits_.as<float>(), p.R, V, ids_.as<int32_t>(), argmax_ws_.get(),
                                    cap_logit_rows_, stream_));
    PLUMB_CUDA_LAUNCH(launch_draw(logits_.as<float>(), p.R, V, dm + p.o_draw, ids_.as<int32_t>(), stream_));
  }
  return at(nullptr, Op::kCount, none, 0, 0, 0, ph);  // the end of the last op
}

Status CudaModelRunner::all_reduce_residual(int64_t T) {
  if (shard_.size == 1) return Status::Ok();
#ifdef PLUMB_HAVE_NCCL
  const ncclResult_t r = ncclAllReduce(x_.get(), x_.get(), size_t(T * c_.hidden_size), ncclFloat32, ncclSum,
                                       static_cast<ncclComm_t>(comm_), stream_);
  if (r != ncclSuccess) {
    return internal_error("NCCL all-reduce of the residual stream on cuda:" + std::to_string(device_) + ": " +
                          ncclGetErrorString(r));
  }
  return Status::Ok();
#else
  (void)T;
  return unimplemented("tensor parallelism needs NCCL, which this build was made without");
#endif
}

Result<int64_t> CudaModelRunner::kv_tokens_for_memory_fraction(double fraction,
                                                               int64_t max_step_tokens) const {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1], not " + std::to_string(fraction));
  }
  PLUMB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  size_t free_b = 0, total_b = 0;
  PLUMB_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  // The step workspace of the largest step (activations of max_step_tokens rows, logits of up to
  // 256 rows) and the fixed reserve for cuBLAS, graphs and the split-KV partials.
  const int64_t d = c_.hidden_size, ff = ff_, hd = c_.head_dim;
  const int64_t qkv_w = (nh_ + 2 * nkv_) * hd;
  const int64_t per_row = d * 4 + d * 2 + qkv_w * 4 + nh_ * hd * 2 + 2 * ff * 4 + ff * 2;
  const int64_t workspace = std::max<int64_t>(max_step_tokens, 1) * per_row +
                            std::min<int64_t>(max_step_tokens, 256) * c_.vocab_size * 4 * 2 +
                            kWorkingSetReserve;
  const int64_t in_use = int64_t(total_b) - int64_t(free_b);  // the weights, this process's and others'
  const int64_t budget = int64_t(double(total_b) * fraction) - in_use - workspace;
  const int64_t tokens = budget / kv_bytes_per_token();
  if (tokens <= 0) {
    return resource_exhausted(
        "--gpu-memory-utilization " + std::to_string(fraction) + " of cuda:" + std::to_string(device_) +
        " (" + gib(int64_t(double(total_b) * fraction)) + ") leaves no room for a KV cache: " + gib(in_use) +
        " in use (weights), " + gib(workspace) + " of step workspace");
  }
  return tokens;
}

// A thread that runs the jobs posted to it, one at a time, in order.
class RankThread {
 public:
  RankThread() : thread_([this] { loop(); }) {}
  ~RankThread() {
    {
      const std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  RankThread(const RankThread&) = delete;
  RankThread& operator=(const RankThread&) = delete;
  void post(std::function<void()> job) {
    {
      const std::lock_guard<std::mutex> l(m_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(m_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      std::function<void()> job = std::move(jobs_.front());
      jobs_.erase(jobs_.begin());
      l.unlock();
      job();
      l.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: it starts once the fields above exist
};

// The ranks of a tensor-parallel model as one ModelRunner: every call runs on every rank at once,
// one thread per card (each rank's collectives wait for the others'), and answers with rank 0's
// logits. A rank that fails while the others wait in a collective would leave them waiting for
// good: the first failure aborts the NCCL communicators, which ends those waits with an error, and
// the runner refuses every later call (the server must be restarted).
class TensorParallelRunner final : public scheduler::ModelRunner {
 public:
  TensorParallelRunner(std::vector<std::unique_ptr<CudaModelRunner>> ranks, std::vector<void*> comms,
                       std::string description)
      : ranks_(std::move(ranks)), comms_(std::move(comms)), description_(std::move(description)) {
    for (size_t r = 0; r < ranks_.size(); ++r) threads_.push_back(std::make_unique<RankThread>());
    scratch_logits_.resize(ranks_.size());
    scratch_ids_.resize(ranks_.size());
  }
  ~TensorParallelRunner() override {
    threads_.clear();  // joins: no rank is running
    ranks_.clear();
#ifdef PLUMB_HAVE_NCCL
    for (void* c : comms_) ncclCommDestroy(static_cast<ncclComm_t>(c));
#endif
  }
  TensorParallelRunner(const TensorParallelRunner&) = delete;
  TensorParallelRunner& operator=(const TensorParallelRunner&) = delete;

  int32_t vocab_size() const override { return ranks_[0]->vocab_size(); }
  int64_t max_context() const override { return ranks_[0]->max_context(); }
  // Per card: each holds its KV heads' part of every token.
  int64_t kv_bytes_per_token() const override { return ranks_[0]->kv_bytes_per_token(); }
  std::string describe() const override { return description_; }
  Status init_kv(int32_t num_blocks, int32_t block_size) override {
    for (auto& r : ranks_) PLUMB_RETURN_IF_ERROR(r->init_kv(num_blocks, block_size));
    return Status::Ok();
  }
  Status forward(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits) override {
    return on_every_rank(batch, logits, nullptr);
  }
  bool greedy_on_device() const override { return true; }
  bool samples_on_device() const override { return true; }
  Status forward_greedy(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits,
                        std::vector<int32_t>& greedy_ids) override {
    return on_every_rank(batch, logits, &greedy_ids);
  }
  // The smallest of the ranks' (each sizes its own card's cache).
  Result<int64_t> kv_tokens_for_memory_fraction(double fraction, int64_t max_step_tokens) const override {
    int64_t tokens = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      PLUMB_ASSIGN_OR_RETURN(const int64_t t,
                             ranks_[r]->kv_tokens_for_memory_fraction(fraction, max_step_tokens));
      tokens = r == 0 ? t : std::min(tokens, t);
    }
    return tokens;
  }

 private:
  Status on_every_rank(std::span<const scheduler::StepSeq> batch, std::vector<float>& logits,
                       std::vector<int32_t>* greedy_ids) {
    if (!broken_.ok()) return broken_;
    std::unique_lock<std::mutex> l(m_);
    pending_ = int(ranks_.size());
    failure_ = Status::Ok();
    for (size_t r = 0; r < ranks_.size(); ++r) {
      threads_[r]->post([this, r, batch, &logits, greedy_ids] {
        std::vector<float>& lg = r == 0 ? logits : scratch_logits_[r];
        std::vector<int32_t>* ids = greedy_ids == nullptr ? nullptr : r == 0 ? greedy_ids : &scratch_ids_[r];
        const Status st = ranks_[r]->run(batch, lg, ids);
        const std::lock_guard<std::mutex> g(m_);
        if (!st.ok() && failure_.ok()) {
          failure_ = st.with_context("tensor-parallel rank " + std::to_string(r));
          abort_communicators();  // the other ranks' waits in a collective end with an error
        }
        --pending_;
        cv_.notify_all();
      });
    }
    cv_.wait(l, [&] { return pending_ == 0; });
    if (!failure_.ok()) {
      broken_ = failed_precondition("a tensor-parallel rank failed (" + failure_.message() +
                                    "); the ranks can no longer run together: restart the server");
      return failure_;
    }
    return Status::Ok();
  }
  void abort_communicators() {
#ifdef PLUMB_HAVE_NCCL
    for (void* c : comms_) ncclCommAbort(static_cast<ncclComm_t>(c));
    comms_.clear();
#endif
  }

  std::vector<std::unique_ptr<CudaModelRunner>> ranks_;
  std::vector<void*> comms_;
  std::string description_;
  std::vector<std::unique_ptr<RankThread>> threads_;
  std::vector<std::vector<float>> scratch_logits_;  // ranks other than 0: none come back
  std::vector<std::vector<int32_t>> scratch_ids_;
  std::mutex m_;
  std::condition_variable cv_;
  int pending_ = 0;
  Status failure_, broken_;
};

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime reports no device";
  return n;
}

int64_t weight_bytes(const engine::ModelConfig& c, int32_t tp_size, int32_t rank) {
  return engine::shard_weight_bytes(c, engine::tensor_shard(c, rank, tp_size));
}

Status check_fits(const engine::ModelConfig& c, int device, int32_t tp_size, int32_t rank) {
  std::string why;
  const int n = device_count(&why);
  if (device < 0 || device >= n) {
    return invalid_argument("device cuda:" + std::to_string(device) + " does not exist: this machine has " +
                            std::to_string(n) + " CUDA device(s)" + (why.empty() ? "" : " (" + why + ")"));
  }
  PLUMB_RETURN_IF_ERROR(engine::check_tensor_parallel(c, tp_size));
  PLUMB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  PLUMB_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  const int64_t need = weight_bytes(c, tp_size, rank);
  if (need + kWorkingSetReserve > int64_t(free_b)) {
    const std::string whose = tp_size > 1 ? "this card's part of the model's weights (rank " +
                                                std::to_string(rank) + " of " + std::to_string(tp_size) + ")"
                                          : "the model's weights";
    return resource_exhausted(
        whose + " need " + gib(need) + " of device memory in bf16 (plus " + gib(kWorkingSetReserve) +
        " of working set) but cuda:" + std::to_string(device) + " has " + gib(int64_t(free_b)) + " free of " +
        gib(int64_t(total_b)) + "; use a smaller model, a larger device or a larger --tensor-parallel-size");
  }
  return Status::Ok();
}

Result<std::unique_ptr<scheduler::ModelRunner>> make_cuda_runner(std::unique_ptr<engine::Model> model,
                                                                 int device, std::string description,
                                                                 const CudaRunnerOptions& opts) {
  set_pdl_enabled(opts.pdl && !opts.reference_kernels);
  const engine::ModelConfig& c = model->config();
  const int32_t n = opts.tensor_parallel_size;
  PLUMB_RETURN_IF_ERROR(engine::check_tensor_parallel(c, n));
  if (n == 1) {
    PLUMB_ASSIGN_OR_RETURN(auto r, CudaModelRunner::create(*model, device, engine::tensor_shard(c, 0, 1),
                                                           nullptr, std::move(description), opts));
    return std::unique_ptr<scheduler::ModelRunner>(std::move(r));
  }
#ifdef PLUMB_HAVE_NCCL
  // Every card is checked before any is touched, so that a model that cannot be placed says so at once.
  for (int32_t r = 0; r < n; ++r) PLUMB_RETURN_IF_ERROR(check_fits(c, device + r, n, r));
  std::vector<int> devices(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) devices[size_t(r)] = device + r;
  keep_multicast_off();  // NCCL_NVLS_ENABLE=0 before NCCL reads it (plumb's main() has set it already)
  std::vector<ncclComm_t> nccl(static_cast<size_t>(n), nullptr);
  if (const ncclResult_t e = ncclCommInitAll(nccl.data(), n, devices.data()); e != ncclSuccess) {
    return unavailable("NCCL could not connect cuda:" + std::to_string(device) +
                       " to cuda:" + std::to_string(device + n - 1) + ": " + ncclGetErrorString(e));
  }
  std::vector<void*> comms(nccl.begin(), nccl.end());
  std::vector<std::unique_ptr<CudaModelRunner>> ranks;
  for (int32_t r = 0; r < n; ++r) {
    auto rank = CudaModelRunner::create(*model, device + r, engine::tensor_shard(c, r, n), comms[size_t(r)],
                                        description, opts);
    if (!rank.ok()) {
      ranks.clear();
      for (void* cm : comms) ncclCommDestroy(static_cast<ncclComm_t>(cm));
      return rank.status().with_context("tensor-parallel rank " + std::to_string(r));
    }
    ranks.push_back(std::move(*rank));
  }
  model.reset();  // every rank has its part
  std::string what = ranks[0]->describe();
  what = what.substr(0, what.find(" on cuda:")) + " on cuda:" + std::to_string(device) + "-" +
         std::to_string(device + n - 1) + ", tensor-parallel over " + std::to_string(n) + " cards (bf16)";
  return std::unique_ptr<scheduler::ModelRunner>(
      std::make_unique<TensorParallelRunner>(std::move(ranks), std::move(comms), std::move(what)));
#else
  (void)device, (void)description;
  return unimplemented("--tensor-parallel-size " + std::to_string(n) +
                       ": this plumb was built without NCCL (looked for nccl.h and libnccl beside the CUDA "
                       "toolkit); install NCCL and rebuild (docs/cuda.md)");
#endif
}

}  // namespace plumb::cuda
