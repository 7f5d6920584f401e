// The CUDA runner's step times on a model shape with dummy bf16 weights (bench/cuda_runs.sh runs it
// on the device beside the copy-bandwidth and GEMM-peak probes and computes the ratios).
//
//   cuda_runner_bench CONFIG_JSON [--prompt 1024] [--steps 32] [--batches 1,8,64] [--prefill 8192]
//                     [--graphs 1] [--short 1] [--profile 0] [--fused-gemv 1] [--gemm-tuning 1]
//                     [--pdl 1] [--tp 1]
//
// Prints one JSON object per measure on stdout: batch-B decode (B sequences of `prompt` tokens
// each, then `steps` timed steps of one token per sequence: median, min, max step time) and the
// prefill of `prefill` tokens as one sequence in one step (median of 3 after a warm-up). A step's
// time is forward() from call to return: it ends with the logits on the host (monotonic clock). Each
// decode measure times steps/2 steps each way: with the logits rows copied to the host, with no
// logits, and greedy (forward_greedy: the argmax on the device, only the ids copied back).
// --graphs 0 launches every kernel one by one (CudaRunnerOptions::cuda_graphs off); --short 0 skips
// the same batches at a 16-token prompt. --profile 1 brackets one timed step of each measure (the
// first decode step with logits of each batch, the second prefill) with cudaProfilerStart/Stop, so
// that `ncu --profile-from-start off` times the kernels of exactly those steps
// (bench/cuda_profile.py splits them per step and per op). --tp N splits the model over cards 0..N-1
// (CudaRunnerOptions::tensor_parallel_size); the setup line then gives the weight bytes of card 0,
// the largest share (it also holds an untied lm_head), for the roofline.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda/cuda_runner.h"
#include "engine/model.h"

using namespace plumb;
using scheduler::StepSeq;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Seq {
  std::vector<int32_t> tokens;
  int32_t start_pos = 0;
  std::vector<int32_t> table;
};

bool step(scheduler::ModelRunner& r, std::vector<Seq>& seqs, std::vector<float>& logits,
          StepSeq::Logits want = StepSeq::Logits::kLast, bool greedy = false) {
  std::vector<StepSeq> batch;
  for (Seq& s : seqs) batch.push_back({s.tokens, s.start_pos, s.table, want, greedy});
  std::vector<int32_t> ids;
  const Status st = greedy ? r.forward_greedy(batch, logits, ids) : r.forward(batch, logits);
  if (!st.ok()) {
    std::fprintf(stderr, "forward: %s\n", st.to_string().c_str());
    return false;
  }
  for (Seq& s : seqs) s.start_pos += int32_t(s.tokens.size());
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: cuda_runner_bench CONFIG_JSON [--prompt N] [--steps N] [--batches 1,8,64] [--prefill N]\n");
    return 2;
  }
  int prompt = 1024, steps = 32, prefill = 8192, graphs = 1, short_ctx = 1, profile = 0, fused_gemv = 1,
      pdl = 1, gemm_tuning = 1, tp = 1;
  std::vector<int> batches{1, 8, 64};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--prompt") prompt = std::stoi(v);
    if (k == "--steps") steps = std::stoi(v);
    if (k == "--prefill") prefill = std::stoi(v);
    if (k == "--graphs") graphs = std::stoi(v);
    if (k == "--short") short_ctx = std::stoi(v);
    if (k == "--profile") profile = std::stoi(v);
    if (k == "--fused-gemv") fused_gemv = std::stoi(v);
    if (k == "--pdl") pdl = std::stoi(v);
    if (k == "--gemm-tuning") gemm_tuning = std::stoi(v);
    if (k == "--tp") tp = std::stoi(v);
    if (k == "--batches") {
      batches.clear();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        batches.push_back(std::stoi(v.substr(p, q - p)));
        p = q + 1;
      }
    }
  }
  auto config = engine::load_model_config(argv[1]);
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().to_string().c_str()), 1;
  engine::ModelOptions opts;
  opts.upload_only = true;  // row-major host weights: no packing to undo
  const double t0 = now_ms();
  auto model = engine::Model::dummy(*config, opts);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  const double t1 = now_ms();
  cuda::CudaRunnerOptions ro;
  ro.cuda_graphs = graphs != 0;
  ro.fused_gemv = fused_gemv != 0;
  ro.pdl = pdl != 0;
  ro.gemm_tuning = gemm_tuning != 0;
  ro.tensor_parallel_size = tp;
  auto runner = cuda::make_cuda_runner(std::move(model).value(), 0, "bench", ro);
  if (!runner.ok()) return std::fprintf(stderr, "%s\n", runner.status().to_string().c_str()), 1;
  const double t2 = now_ms();
  scheduler::ModelRunner& r = **runner;
  const int bs = 16;
  const int max_b = *std::max_element(batches.begin(), batches.end());
  const int per_seq_blocks = (prompt + 2 * steps + 8 + bs - 1) / bs;
  const int prefill_blocks = (prefill + bs - 1) / bs;
  const int num_blocks = std::max(max_b * per_seq_blocks, prefill_blocks) + 1;
  if (Status st = r.init_kv(num_blocks, bs); !st.ok())
    return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
  const int64_t V = r.vocab_size();
  std::printf(
      "{\"measure\":\"setup\",\"describe\":\"%s\",\"dummy_weights_s\":%.2f,\"upload_s\":%.2f,\"kv_blocks\":%"
      "d,\"tp\":%d,\"weight_bytes_card0\":%lld}\n",
      r.describe().c_str(), (t1 - t0) / 1e3, (t2 - t1) / 1e3, num_blocks, tp,
      (long long)cuda::weight_bytes(*config, tp, 0));
  std::fflush(stdout);
  std::vector<float> logits;

  // Batch-B decode after B prompts of `len` tokens: step time with the logits copied back (as
  // serving does) and without logits (the device work and the step's launch overhead alone).
  auto decode = [&](int B, int len) {
    std::vector<Seq> seqs(static_cast<size_t>(B));
    for (int s = 0; s < B; ++s) {
      for (int i = 0; i < len; ++i) seqs[size_t(s)].tokens.push_back(int32_t((s * 7919 + i * 104729) % V));
      for (int b = 0; b < per_seq_blocks; ++b) seqs[size_t(s)].table.push_back(s * per_seq_blocks + b);
    }
    for (int s0 = 0; s0 < B; s0 += 4) {  // prefill a few sequences per step
      std::vector<Seq> part(seqs.begin() + s0, seqs.begin() + std::min(B, s0 + 4));
      if (!step(r, part, logits)) return false;
      std::copy(part.begin(), part.end(), seqs.begin() + s0);
    }
    for (Seq& s : seqs) s.tokens = {1};
    for (int w = 0; w < 3; ++w) {
      if (!step(r, seqs, logits)) return false;
    }
    std::vector<double> t[3];
    for (int pass = 0; pass < 3; ++pass) {  // logits to the host; no logits; greedy ids on the device
      for (int i = 0; i < steps / 2; ++i) {
        const bool prof = profile != 0 && pass == 0 && i == 0;
        if (prof) cudaProfilerStart();
        const double a = now_ms();
        if (!step(r, seqs, logits, pass == 1 ? StepSeq::Logits::kNone : StepSeq::Logits::kLast, pass == 2))
          return false;
        t[pass].push_back(now_ms() - a);
        if (prof) cudaProfilerStop();
        for (size_t s = 0; s < seqs.size(); ++s) seqs[s].tokens = {int32_t((i * 31 + int(s)) % V)};
      }
    }
    std::printf(
        "{\"measure\":\"decode\",\"tp\":%d,\"graphs\":%d,\"fused_gemv\":%d,\"gemm_tuning\":%d,\"pdl\":%d,"
        "\"batch\":%d,"
        "\"context\":"
        "%d,\"steps\":%d,\"median_ms\":%.4f,"
        "\"min_ms\":%.4f,"
        "\"max_ms\":%.4f,\"no_logits_median_ms\":%.4f,\"greedy_median_ms\":%.4f}\n",
        tp, graphs, fused_gemv, gemm_tuning, pdl, B, len + 3 + steps / 2, steps, median(t[0]),
        *std::min_element(t[0].begin(), t[0].end()), *std::max_element(t[0].begin(), t[0].end()),
        median(t[1]), median(t[2]));
    std::fflush(stdout);
    return true;
  };
  for (int B : batches) {
    if (!decode(B, prompt)) return 1;
  }
  for (int B : batches) {  // the same batches at a context of about 16 + steps tokens: attention ~ 0
    if (short_ctx && !decode(B, 16)) return 1;
  }

  if (prefill > 0) {
    std::vector<double> t;
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<Seq> one(1);
      for (int i = 0; i < prefill; ++i) one[0].tokens.push_back(int32_t((i * 104729 + rep) % V));
      for (int b = 0; b < prefill_blocks; ++b) one[0].table.push_back(b);
      if (profile != 0 && rep == 1) cudaProfilerStart();
      const double a = now_ms();
      if (!step(r, one, logits)) return 1;
      if (profile != 0 && rep == 1) cudaProfilerStop();
      if (rep > 0) t.push_back(now_ms() - a);  // the first is the warm-up
    }
    std::printf(
        "{\"measure\":\"prefill\",\"tokens\":%d,\"median_ms\":%.3f,\"min_ms\":%.3f,\"max_ms\":%.3f}\n",
        prefill, median(t), *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()));
  }
  return 0;
}
