#include "engine/scheduler/model_runner.h"

#include <optional>

#include "engine/kv_cache.h"
#include "engine/model.h"
#ifdef PLUMB_HAVE_CUDA
#include "engine/cuda/cuda_runner.h"
#endif

namespace plumb::scheduler {
namespace {

class EngineModelRunner final : public ModelRunner {
 public:
  // `owned` may be null: then `model` is borrowed and must outlive the runner.
  EngineModelRunner(engine::Model* model, std::unique_ptr<engine::Model> owned, std::string description)
      : owned_(std::move(owned)), model_(model), description_(std::move(description)) {}

  int32_t vocab_size() const override { return int32_t(model_->config().vocab_size); }
  int64_t max_context() const override { return model_->config().max_context(); }
  int64_t kv_bytes_per_token() const override { return model_->kv_config(1, 1).bytes(); }
  std::string describe() const override { return description_; }
  engine::SampleFn sample_kernel() const override {
    return model_->kernel_sets()[size_t(engine::Phase::kDecode)].sample;
  }

  Status init_kv(int32_t num_blocks, int32_t block_size) override {
    PLUMB_ASSIGN_OR_RETURN(engine::KvCache cache,
                           engine::KvCache::create(model_->kv_config(num_blocks, block_size)));
    cache_.emplace(std::move(cache));
    return Status::Ok();
  }

  Status forward(std::span<const StepSeq> batch, std::vector<float>& logits) override {
    logits.clear();
    if (!cache_) return failed_precondition("init_kv() was not called");
    inputs_.clear();
    for (const StepSeq& s : batch) {
      engine::SequenceInput in;
      in.tokens = s.tokens;
      in.start_pos = s.start_pos;
      in.block_table = s.block_table;
      in.all_logits = s.logits == StepSeq::Logits::kAll;
      inputs_.push_back(in);
    }
    PLUMB_RETURN_IF_ERROR(model_->forward(inputs_, *cache_, &out_));
    // The model always returns at least the last row; keep only the rows the engine asked for.
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].logits == StepSeq::Logits::kNone) continue;
      int64_t first = out_.first_row[i];
      int64_t n = batch[i].logits == StepSeq::Logits::kAll ? out_.n_rows[i] : 1;
      if (batch[i].logits == StepSeq::Logits::kLast) first = first + out_.n_rows[i] - 1;
      const float* p = out_.logits.data() + first * out_.vocab;
      logits.insert(logits.end(), p, p + n * out_.vocab);
    }
    return Status::Ok();
  }

 private:
  std::unique_ptr<engine::Model> owned_;
  engine::Model* model_;
  std::string description_;
  std::optional<engine::KvCache> cache_;
  std::vector<engine::SequenceInput> inputs_;
  engine::ForwardOutput out_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_model_runner(std::unique_ptr<engine::Model> model,
                                               std::string description) {
  engine::Model* raw = model.get();
  return std::make_unique<EngineModelRunner>(raw, std::move(model), std::move(description));
}

std::unique_ptr<ModelRunner> make_model_runner(engine::Model& model, std::string description) {
  return std::make_unique<EngineModelRunner>(&model, nullptr, std::move(description));
}

std::string Device::name() const { return kind == Kind::kCpu ? "cpu" : "cuda:" + std::to_string(index); }

Result<Device> parse_device(const std::string& s) {
  Device d;
  if (s == "cpu") return d;
  d.kind = Device::Kind::kCuda;
  if (s == "cuda") return d;
  const std::string prefix = "cuda:";
  if (s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0 && s.size() - prefix.size() <= 4 &&
      s.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
    d.index = std::stoi(s.substr(prefix.size()));
    return d;
  }
  return invalid_argument("device '" + s + "' is not one of: cpu, cuda, cuda:N (N a device ordinal)");
}

bool cuda_built() {
#ifdef PLUMB_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<ModelRunner>> make_runner(const Device& device, std::unique_ptr<engine::Model> model,
                                                 std::string description) {
  return make_runner(device, std::move(model), std::move(description), RunnerOptions{});
}

Result<std::unique_ptr<ModelRunner>> make_runner(const Device& device, std::unique_ptr<engine::Model> model,
                                                 std::string description, const RunnerOptions& opts) {
  if (device.kind == Device::Kind::kCpu) {
    if (opts.tensor_parallel_size != 1) {
      return invalid_argument("--tensor-parallel-size " + std::to_string(opts.tensor_parallel_size) +
                              " splits a model over CUDA devices; the CPU engine runs it whole: use "
                              "--device cuda or leave it at 1");
    }
    if (!opts.cuda_candidates_prefill.empty() || !opts.cuda_candidates_decode.empty()) {
      return invalid_argument(
          "the kernel configuration names CUDA candidate kernels (its \"cuda\" entries); "
          "they replace the CUDA runner's kernels: serve with --device cuda, or use a "
          "kernel configuration without them");
    }
    return make_model_runner(std::move(model), std::move(description));
  }
#ifdef PLUMB_HAVE_CUDA
  cuda::CudaRunnerOptions co;
  co.cuda_graphs = opts.cuda_graphs;
  co.reference_kernels = opts.reference_kernels;
  co.tensor_parallel_size = opts.tensor_parallel_size;
  co.candidates_prefill = opts.cuda_candidates_prefill;
  co.candidates_decode = opts.cuda_candidates_decode;
  co.upload_progress = opts.upload_progress;
  return cuda::make_cuda_runner(std::move(model), device.index, std::move(description), co);
#else
  (void)opts;
  return failed_precondition("device " + device.name() +
                             ": plumb was built without CUDA; rebuild on a machine with the CUDA toolkit "
                             "(nvcc in /usr/local/cuda/bin or CMAKE_CUDA_COMPILER) with -DPLUMB_CUDA=on "
                             "(docs/cuda.md)");
#endif
}

}  // namespace plumb::scheduler
