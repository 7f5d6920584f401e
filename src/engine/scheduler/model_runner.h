// What the LlmEngine needs from a model: one forward pass over a batch of sequences, each with its
// paged-KV block table, mixing prefill chunks and decode tokens. The engine owns the schedule and
// the block tables; the runner owns the weights and the KV storage.
//
// Threading: the engine calls a runner from its one engine thread only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/cpu/kernels.h"
#include "engine/sampling.h"

namespace plumb::engine {
class Model;
}

namespace plumb::scheduler {

// One sequence's share of a step.
struct StepSeq {
  std::span<const int32_t> tokens;       // the new tokens to run (>= 1)
  int32_t start_pos = 0;                 // position of tokens[0]; the KV of [0, start_pos) is cached
  std::span<const int32_t> block_table;  // logical block -> physical block; covers start_pos + tokens
  // Which logits the engine needs: every new token's row (prompt logprobs), only the last one's
  // (the step samples a token), or none (a prefill chunk that does not reach the prompt's end).
  enum class Logits : uint8_t { kNone, kLast, kAll } logits = Logits::kLast;
  // With kLast: the engine would take this row's token by a rule the runner can apply itself (no
  // top-k, no top-p, no logprobs, no logit processing), so forward_greedy() may return the id
  // instead of the row: the argmax when `temperature` is 0, else the plain draw (sample_plain()).
  bool greedy = false;
  float temperature = 0.0f;  // with greedy: > 0 draws from softmax(row / temperature) with u
  double u = 0.0;            // with greedy and temperature > 0: the Sampler's uniform draw in [0, 1)
  // The logits rows this sequence adds to forward()'s output.
  size_t logit_rows() const {
    return logits == Logits::kAll ? tokens.size() : logits == Logits::kLast ? 1 : 0;
  }
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int32_t vocab_size() const = 0;
  // Longest sequence (prompt + generated) the model accepts.
  virtual int64_t max_context() const = 0;
  // Allocates KV storage for num_blocks blocks of block_size token slots. Called once before
  // forward(). ResourceExhausted if it cannot.
  virtual Status init_kv(int32_t num_blocks, int32_t block_size) = 0;
  // Bytes of KV storage one token slot takes (all layers, K and V), to size the cache.
  virtual int64_t kv_bytes_per_token() const = 0;
  // Runs the batch: writes every new token's K/V into its block table's slots, then appends the
  // requested logits rows to `logits` ([rows, vocab_size] row-major, in batch order: kAll gives
  // tokens.size() rows, kLast 1, kNone 0). `logits` is cleared first.
  virtual Status forward(std::span<const StepSeq> batch, std::vector<float>& logits) = 0;
  // Whether forward_greedy() takes the argmax on the device (the CUDA runner): the engine then marks
  // the greedy rows of a step, and only the other rows' logits travel to the host.
  virtual bool greedy_on_device() const { return false; }
  // Whether forward_greedy() also draws rows with a temperature on the device (plain draws: no
  // top-k, top-p, logprobs or logit processing); the engine then marks those rows too, with the
  // Sampler's uniform draw, and their logits stay on the device.
  virtual bool samples_on_device() const { return false; }
  // As forward(), except that the last row of each sequence with `greedy` set is not in `logits`:
  // its token is appended to `greedy_ids` instead (one per such sequence, in batch order): the argmax
  // (the lowest id on ties, as engine::Sampler's greedy rule) when its temperature is 0, else
  // sample_plain(); -1 - (the first non-finite id) when the row holds a NaN or an infinity. Both
  // vectors are cleared first. The default runs forward() and picks the tokens on the host.
  // (Defined inline: the CUDA runner's library links no scheduler code.)
  virtual Status forward_greedy(std::span<const StepSeq> batch, std::vector<float>& logits,
                                std::vector<int32_t>& greedy_ids) {
    greedy_ids.clear();
    PLUMB_RETURN_IF_ERROR(forward(batch, logits));
    const auto V = size_t(vocab_size());
    size_t in = 0, out = 0;  // rows read, rows kept (compacted in place)
    for (const StepSeq& s : batch) {
      const size_t n = s.logit_rows();
      if (s.greedy && n == 1) {
        const auto row = std::span<const float>(logits).subspan(in * V, V);
        greedy_ids.push_back(s.temperature > 0.0f ? sample_plain(row, s.temperature, s.u) : host_argmax(row));
        ++in;
        continue;
      }
      if (in != out) std::copy_n(logits.begin() + long(in * V), n * V, logits.begin() + long(out * V));
      in += n, out += n;
    }
    logits.resize(out * V);
    return Status::Ok();
  }
  // The host's form of the device argmax: the lowest id of the maximum, or -1 - the first
  // non-finite id.
  static int32_t host_argmax(std::span<const float> row) {
    int32_t best = -1;
    for (size_t i = 0; i < row.size(); ++i) {
      if (!std::isfinite(row[i])) return -1 - int32_t(i);
      if (best < 0 || row[i] > row[size_t(best)]) best = int32_t(i);
    }
    return best;
  }
  // The plain draw of engine::Sampler: its sampling kernel with a temperature, no top-k and no
  // top-p (over x_i = row_i / temperature, p_i = exp(x_i - max x) in double, the first id whose
  // running sum of p exceeds u times the total); -1 - (the first non-finite id) for a row with a
  // NaN or an infinity, as the device reports it. A device implementation sums in another order,
  // so an id may differ where u falls within rounding of a boundary (~1e-16 relative).
  static int32_t sample_plain(std::span<const float> row, float temperature, double u) {
    if (const int64_t bad = engine::first_nonfinite(row); bad >= 0) return -1 - int32_t(bad);
    engine::SampleArgs a;
    a.logits = row.data();
    a.vocab = int64_t(row.size());
    a.temperature = temperature;
    a.u = u;
    engine::SampleScratch scratch;
    return engine::default_sample_kernel()(engine::KernelContext{nullptr, engine::Phase::kDecode}, a,
                                           &scratch);
  }
  // The sampling kernel the engine's Samplers use for this runner's logits (the model's decode-phase
  // kSample variant, engine/cpu/kernels.h); nullptr: the registry's best.
  virtual engine::SampleFn sample_kernel() const { return nullptr; }
  // KV token slots that fit when this process may use `fraction` of the device's memory in all
  // (weights, the workspace of steps of up to max_step_tokens tokens, and the cache): what
  // --gpu-memory-utilization sizes the cache with. Unimplemented where the runner has no device
  // memory (the CPU runner).
  virtual Result<int64_t> kv_tokens_for_memory_fraction(double fraction, int64_t max_step_tokens) const {
    (void)fraction, (void)max_step_tokens;
    return unimplemented("--gpu-memory-utilization needs a CUDA device");
  }
  // A one-line description for logs and /health ("plumb-tiny, 2 layers, kernels auto").
  virtual std::string describe() const = 0;
};

// The runner over the reference engine's Model (engine/model.h), with its own paged KvCache.
// `description` is what describe() returns (e.g. the model's name and kernels).
std::unique_ptr<ModelRunner> make_model_runner(std::unique_ptr<engine::Model> model, std::string description);
// The same runner over a borrowed model, which must outlive it (engine::generate() runs a caller's
// model this way). The runner's KV cache is its own.
std::unique_ptr<ModelRunner> make_model_runner(engine::Model& model, std::string description);

// Where a runner computes: the CPU, or CUDA device `index` (engine/cuda/, docs/cuda.md).
struct Device {
  enum class Kind : uint8_t { kCpu, kCuda } kind = Kind::kCpu;
  int32_t index = 0;  // CUDA device ordinal; 0 for the CPU
  // "cpu" or "cuda:N": the normalized name, as the effective settings carry it.
  std::string name() const;
};

// "cpu" | "cuda" (device 0) | "cuda:N". InvalidArgument naming the accepted forms otherwise.
Result<Device> parse_device(const std::string& s);

// Whether this build carries the CUDA runner (CMake found nvcc: PLUMB_CUDA=auto|on).
bool cuda_built();

// The runner factory every command uses (serve, generate, bench's launched server, the kernel
// loop): the CPU runner (make_model_runner) or the CUDA runner on device.index. Errors:
// FailedPrecondition for CUDA in a build without it (saying how to build with it); for CUDA,
// InvalidArgument for a device that does not exist, ResourceExhausted when the weights do not
// fit (naming both sizes), Unimplemented for what the CUDA runner does not support (quantized
// weights). The model is consumed either way.
Result<std::unique_ptr<ModelRunner>> make_runner(const Device& device, std::unique_ptr<engine::Model> model,
                                                 std::string description);

// Settings of the device runners; the CPU runner ignores them.
struct RunnerOptions {
  bool cuda_graphs = true;         // --cuda-graphs: replay decode steps as CUDA graphs
  bool reference_kernels = false;  // the plain kernels only (the naive preset)
  // --tensor-parallel-size: the model split over this many CUDA devices, device.index and the ones
  // after it (engine/tensor_parallel.h); 1 for one device. The CPU runner refuses more than 1.
  int32_t tensor_parallel_size = 1;
  // Candidate kernels of the CUDA candidate ABI (the kernel configuration's "cuda" entries,
  // engine::KernelSelection): cubin paths by op and phase, launched by the CUDA runner in place of
  // its own (engine/cuda/cuda_runner.h). The CPU runner has no such kernels and refuses them.
  std::map<std::string, std::string> cuda_candidates_prefill, cuda_candidates_decode;
  // The CUDA runner's upload, after each layer: layers done, layers in all (a progress bar).
  std::function<void(size_t, size_t)> upload_progress;
};
Result<std::unique_ptr<ModelRunner>> make_runner(const Device& device, std::unique_ptr<engine::Model> model,
                                                 std::string description, const RunnerOptions& opts);

}  // namespace plumb::scheduler
