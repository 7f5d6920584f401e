// The CUDA runner against the CPU runner (label gpu; every test skips, saying why, where no CUDA
// device is visible). Both runners get the same weights and the same steps; the CPU runner's
// float32 logits are the reference.
//
// Tolerance. The CUDA runner rounds GEMM inputs (normed activations, attention and SwiGLU outputs)
// and the KV cache to bf16, where the CPU model keeps float32 activations over the same bf16
// weights. Its logits are held to max |cuda - cpu| <= 5e-2 * max |cpu| over every row compared
// (kRelTol); a dropped bias or norm weight or a wrong rotation moves them by far more (the tests
// scale biases and q/k norm weights up so that each matters at that size). The measured error of
// each case is printed. Batch invariance: a sequence's logits with batch-mates stay within
// kBatchTol of its logits alone (cuBLAS picks kernels by shape, so the bits may differ).
#include "engine/cuda/cuda_runner.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/random.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cuda/compile.h"
#include "kernels/cuda/generate.h"

namespace plumb::cuda {
namespace {

using engine::Model;
using engine::ModelConfig;
using scheduler::ModelRunner;
using scheduler::StepSeq;

constexpr double kRelTol = 5e-2;
constexpr double kBatchTol = 1e-2;

#define SKIP_WITHOUT_GPU()                                                          \
  do {                                                                              \
    std::string why;                                                                \
    if (device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why; \
  } while (0)

std::string tiny_dir() { return std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny"; }

// Small configs of each code path: GQA with head_dim 128 and llama3 rope scaling (untied lm_head),
// Qwen3's q/k norm with head_dim != hidden / heads, Qwen2's q/k/v bias with head_dim 64, and
// head_dim 256 (the decode kernel's 4-head groups).
const char* kLlama3Gqa =
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 3, "num_attention_heads": 8,
  "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 2048, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": false, "attention_bias": false,
  "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 256, "rope_type": "llama3"}})";
const char* kQwen3 = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
  "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
  "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 1024, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "attention_bias": false,
  "use_sliding_window": false})";
const char* kQwen2 = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
  "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
  "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "use_sliding_window": false})";
const char* kHd256 = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 1024, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true, "attention_bias": false})";

// Dummy weights with biases and q/k norm weights scaled up so that each moves the logits well past
// the tolerance if a kernel ignored it.
std::unique_ptr<Model> dummy_model(const char* json) {
  auto c = engine::parse_model_config(json);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  engine::ModelOptions o;
  o.seed = 7;
  engine::ThreadPool pool(4);
  auto w = engine::ModelWeights::dummy(*c, o.seed, engine::WeightDType::kAsStored, &pool);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  Rng rng(11);
  for (auto& L : w->layers) {
    for (auto* b : {&L.q_bias, &L.k_bias, &L.v_bias})
      for (float& x : *b) x *= 25.0f;
    for (auto* n : {&L.q_norm, &L.k_norm})
      for (float& x : *n) x = 0.5f + float(rng.next_u64() % 1000) / 1000.0f;
  }
  auto m = Model::from_weights(*c, std::move(w).value(), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(m).value();
}

std::unique_ptr<Model> tiny_model() {
  auto m = Model::load(tiny_dir(), {});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(m).value();
}

using Loader = std::function<std::unique_ptr<Model>()>;

struct Runners {
  std::unique_ptr<ModelRunner> cpu, gpu;
};

Runners make_runners(const Loader& load, int32_t num_blocks, int32_t block_size) {
  Runners r;
  r.cpu = scheduler::make_model_runner(load(), "cpu");
  auto g = make_cuda_runner(load(), 0, "gpu");
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return r;
  r.gpu = std::move(g).value();
  EXPECT_TRUE(r.cpu->init_kv(num_blocks, block_size).ok());
  EXPECT_TRUE(r.gpu->init_kv(num_blocks, block_size).ok());
  return r;
}

// One sequence's share of a step, owning its spans' storage.
struct Seq {
  std::vector<int32_t> tokens;
  int32_t start_pos = 0;
  std::vector<int32_t> block_table;
  StepSeq::Logits logits = StepSeq::Logits::kLast;
};

std::vector<float> run(ModelRunner& r, const std::vector<Seq>& seqs) {
  std::vector<StepSeq> batch;
  for (const Seq& s : seqs) batch.push_back({s.tokens, s.start_pos, s.block_table, s.logits});
  std::vector<float> out;
  const Status st = r.forward(batch, out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

struct Diff {
  double max_abs = 0, max_ref = 0;
  int64_t rows = 0, argmax_same = 0;
  void add(const std::vector<float>& ref, const std::vector<float>& got, int64_t V) {
    ASSERT_EQ(ref.size(), got.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
      max_abs = std::max(max_abs, double(std::fabs(ref[i] - got[i])));
      max_ref = std::max(max_ref, double(std::fabs(ref[i])));
    }
    for (size_t r = 0; r < ref.size() / size_t(V); ++r, ++rows) {
      auto a = std::max_element(ref.begin() + r * V, ref.begin() + (r + 1) * V) - ref.begin();
      auto b = std::max_element(got.begin() + r * V, got.begin() + (r + 1) * V) - got.begin();
      argmax_same += a == b;
    }
  }
  double rel() const { return max_ref > 0 ? max_abs / max_ref : 0; }
};

int32_t argmax_last(const std::vector<float>& logits, int64_t V) {
  return int32_t(std::max_element(logits.end() - V, logits.end()) - (logits.end() - V));
}

// A prompt in two prefill chunks (the second over a cached prefix), then decode steps fed the CPU's
// greedy token. Blocks are handed out in reverse so that the block table is not the identity.
Diff prefill_then_decode(const Loader& load, int32_t prompt_len, int32_t vocab_limit, int decode_steps) {
  const int32_t bs = 16, nb = 96;
  Runners r = make_runners(load, nb, bs);
  Diff diff;
  if (!r.gpu) return diff;
  const int64_t V = r.cpu->vocab_size();
  Rng rng(3);
  Seq s;
  for (int i = 0; i < prompt_len; ++i) s.tokens.push_back(int32_t(rng.next_u64() % uint64_t(vocab_limit)));
  const int32_t total = prompt_len + decode_steps;
  for (int32_t b = 0; b * bs < total; ++b) s.block_table.push_back(nb - 1 - b);
  const std::vector<int32_t> prompt = s.tokens;
  const int32_t first = prompt_len * 2 / 3;
  s.tokens.assign(prompt.begin(), prompt.begin() + first);
  s.logits = StepSeq::Logits::kAll;
  diff.add(run(*r.cpu, {s}), run(*r.gpu, {s}), V);
  s.tokens.assign(prompt.begin() + first, prompt.end());
  s.start_pos = first;
  s.logits = StepSeq::Logits::kLast;
  auto ref = run(*r.cpu, {s});
  diff.add(ref, run(*r.gpu, {s}), V);
  for (int i = 0; i < decode_steps; ++i) {
    s.start_pos += int32_t(s.tokens.size());
    s.tokens = {argmax_last(ref, V)};
    ref = run(*r.cpu, {s});
    diff.add(ref, run(*r.gpu, {s}), V);
  }
  return diff;
}

void report(const char* name, const Diff& d) {
  std::printf(
      "[ measured ] %s: max|cuda - cpu| = %.4g, max|cpu| = %.4g, relative %.4g; argmax agrees on %lld of "
      "%lld rows\n",
      name, d.max_abs, d.max_ref, d.rel(), (long long)d.argmax_same, (long long)d.rows);
}

TEST(CudaRunner, ShippedModelMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Diff d = prefill_then_decode(tiny_model, 120, 1207, 16);
  report("plumb-tiny", d);
  EXPECT_LE(d.rel(), kRelTol);
  EXPECT_GE(double(d.argmax_same), 0.95 * double(d.rows));
}

TEST(CudaRunner, GqaLlama3RopeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Diff d = prefill_then_decode([] { return dummy_model(kLlama3Gqa); }, 600, 2048, 8);
  report("llama3-gqa hd128 (dummy)", d);
  EXPECT_LE(d.rel(), kRelTol);
}

TEST(CudaRunner, Qwen3QkNormMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Diff d = prefill_then_decode([] { return dummy_model(kQwen3); }, 200, 1024, 8);
  report("qwen3 q/k norm (dummy)", d);
  EXPECT_LE(d.rel(), kRelTol);
}

TEST(CudaRunner, Qwen2BiasMatchesCpu) {
  SKIP_WITHOUT_GPU();
  Diff d = prefill_then_decode([] { return dummy_model(kQwen2); }, 200, 1024, 8);
  report("qwen2 qkv bias hd64 (dummy)", d);
  EXPECT_LE(d.rel(), kRelTol);
}

TEST(CudaRunner, HeadDim256MatchesCpu) {
  SKIP_WITHOUT_GPU();
  Diff d = prefill_then_decode([] { return dummy_model(kHd256); }, 300, 1024, 8);
  report("hd256 (dummy)", d);
  EXPECT_LE(d.rel(), kRelTol);
}

// Greedy generation on the shipped model, each runner choosing its own tokens.
TEST(CudaRunner, ShippedModelGreedyTokensMatchCpu) {
  SKIP_WITHOUT_GPU();
  auto tok = engine::Tokenizer::load(tiny_dir());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  Runners r = make_runners(tiny_model, 64, 16);
  ASSERT_TRUE(r.gpu);
  const int64_t V = r.cpu->vocab_size();
  const int n_new = 32;
  int64_t same = 0, total = 0;
  for (const char* text : {"Once upon a time", "Q: What is 2 + 3? A:", "The capital of", "Alice has a pet"}) {
    std::vector<int32_t> ids = (*tok)->encode(text);
    std::vector<int32_t> out[2];
    ModelRunner* runners[2] = {r.cpu.get(), r.gpu.get()};
    for (int k = 0; k < 2; ++k) {
      Seq s{ids, 0, {0, 1, 2, 3, 4, 5}, StepSeq::Logits::kLast};
      for (int i = 0; i < n_new; ++i) {
        const int32_t t = argmax_last(run(*runners[k], {s}), V);
        out[k].push_back(t);
        s.start_pos += int32_t(s.tokens.size());
        s.tokens = {t};
      }
    }
    int prefix = 0;
    while (prefix < n_new && out[0][size_t(prefix)] == out[1][size_t(prefix)]) ++prefix;
    std::printf("[ measured ] greedy '%s': the first %d of %d tokens agree\n", text, prefix, n_new);
    same += prefix;
    total += n_new;
  }
  EXPECT_GE(double(same), 0.75 * double(total));
}

// A sequence's logits do not depend on what else is in the batch (prefills and decodes mixed).
TEST(CudaRunner, BatchInvariance) {
  SKIP_WITHOUT_GPU();
  Runners r = make_runners([] { return dummy_model(kLlama3Gqa); }, 64, 16);
  ASSERT_TRUE(r.gpu);
  ModelRunner& g = *r.gpu;
  const int64_t V = g.vocab_size();
  Rng rng(5);
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(int32_t(rng.next_u64() % 2048));
    return t;
  };
  Seq a{tokens(70), 0, {0, 1, 2, 3, 4, 5}, StepSeq::Logits::kAll};
  Seq b{tokens(45), 0, {10, 11, 12, 13}, StepSeq::Logits::kLast};
  Seq c{tokens(130), 0, {20, 21, 22, 23, 24, 25, 26, 27, 28, 29}, StepSeq::Logits::kLast};
  std::vector<std::vector<float>> alone, mixed;
  Seq s = a;
  for (int step = 0; step < 4; ++step) {
    alone.push_back(run(g, {s}));
    s.start_pos += int32_t(s.tokens.size());
    s.tokens = {int32_t(step * 7 + 1)};
    s.logits = StepSeq::Logits::kLast;
  }
  s = a;
  for (int step = 0; step < 4; ++step) {
    std::vector<float> out = run(g, {b, s, c});
    // b's and c's rows come first and last: one row each.
    mixed.emplace_back(out.begin() + V, out.end() - V);
    for (Seq* o : {&b, &c}) {
      o->start_pos += int32_t(o->tokens.size());
      o->tokens = {int32_t(step + 3)};
    }
    s.start_pos += int32_t(s.tokens.size());
    s.tokens = {int32_t(step * 7 + 1)};
    s.logits = StepSeq::Logits::kLast;
  }
  Diff d;
  for (size_t i = 0; i < alone.size(); ++i) d.add(alone[i], mixed[i], V);
  report("batch invariance (alone vs with two batch-mates)", d);
  EXPECT_LE(d.rel(), kBatchTol);
}

// The fast kernels (tensor-core prefill attention, decode GEMV with SwiGLU fused in, CUDA graphs,
// programmatic dependent launch) against the plain ones (the one-warp-per-row attention, a separate
// SwiGLU pass, cuBLAS for every GEMM, launched one by one) on the same weights and steps: prompts of
// several 64-row tiles in two chunks, then decode steps of one to three sequences.
TEST(CudaRunner, FastKernelsMatchReferenceKernels) {
  SKIP_WITHOUT_GPU();
  auto fast = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "fast");
  CudaRunnerOptions ro;
  ro.reference_kernels = true;
  ro.cuda_graphs = false;
  auto ref = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "reference", ro);
  ASSERT_TRUE(fast.ok() && ref.ok());
  ASSERT_TRUE((*fast)->init_kv(64, 16).ok() && (*ref)->init_kv(64, 16).ok());
  const int64_t V = (*fast)->vocab_size();
  Rng rng(9);
  std::vector<Seq> seqs(3);
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int t = 0; t < 150 + 40 * int(i); ++t) seqs[i].tokens.push_back(int32_t(rng.next_u64() % 2048));
    for (int b = 0; b < 16; ++b) seqs[i].block_table.push_back(int32_t(i) * 16 + 15 - b);
    seqs[i].logits = StepSeq::Logits::kAll;
  }
  Diff d;
  // Prefill: the first 100 tokens of each, then the rest over the cached prefix.
  std::vector<Seq> part = seqs;
  for (auto& s : part) s.tokens.resize(100);
  d.add(run(**ref, part), run(**fast, part), V);
  for (size_t i = 0; i < seqs.size(); ++i) {
    part[i].start_pos = 100;
    part[i].tokens.assign(seqs[i].tokens.begin() + 100, seqs[i].tokens.end());
  }
  auto last = run(**ref, part);
  d.add(last, run(**fast, part), V);
  // Decode steps of one, two and three rows (the GEMV serves one and two, cuBLAS three).
  for (int step = 0; step < 6; ++step) {
    std::vector<Seq> batch;
    for (size_t i = 0; i <= size_t(step % 3); ++i) {
      Seq& s = part[i];
      s.start_pos += int32_t(s.tokens.size());
      s.tokens = {int32_t(rng.next_u64() % 2048)};
      s.logits = StepSeq::Logits::kLast;
      batch.push_back(s);
    }
    d.add(run(**ref, batch), run(**fast, batch), V);
  }
  report("fast vs reference kernels (llama3-gqa dummy)", d);
  EXPECT_LE(d.rel(), kBatchTol);
}

// Decode steps replayed from CUDA graphs against the same steps launched one by one: batches of
// 1, 2, 3 (padded to 4), 5 (padded to 8) and 9 (padded to 16) sequences, with and without logits,
// over contexts that cross block boundaries and change the split-KV count (a graph per shape,
// replayed with new positions and block tables), interleaved with a prefill (not a graph step).
TEST(CudaRunner, CudaGraphsMatchEagerLaunches) {
  SKIP_WITHOUT_GPU();
  CudaRunnerOptions eager_opts;
  eager_opts.cuda_graphs = false;
  auto graphs = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "graphs");
  auto eager = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "eager", eager_opts);
  ASSERT_TRUE(graphs.ok() && eager.ok());
  ASSERT_TRUE((*graphs)->init_kv(200, 16).ok() && (*eager)->init_kv(200, 16).ok());
  const int64_t V = (*graphs)->vocab_size();
  Rng rng(21);
  std::vector<Seq> seqs(9);
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int t = 0; t < 20 + 30 * int(i); ++t) seqs[i].tokens.push_back(int32_t(rng.next_u64() % 2048));
    for (int b = 0; b < 20; ++b) seqs[i].block_table.push_back(int32_t(i) * 20 + 19 - b);
  }
  Diff d;
  d.add(run(**eager, seqs), run(**graphs, seqs), V);
  const int sizes[] = {1, 2, 3, 5, 9, 1, 3, 9, 5, 2};
  for (int step = 0; step < 40; ++step) {
    const auto n = size_t(sizes[step % 10]);
    std::vector<Seq> batch;
    for (size_t i = 0; i < n; ++i) {
      Seq& s = seqs[(i + size_t(step)) % seqs.size()];
      s.start_pos += int32_t(s.tokens.size());
      s.tokens = {int32_t(rng.next_u64() % 2048)};
      s.logits = step % 7 == 3 ? StepSeq::Logits::kNone : StepSeq::Logits::kLast;
      batch.push_back(s);
    }
    auto want = run(**eager, batch);
    auto got = run(**graphs, batch);
    ASSERT_EQ(want.size(), step % 7 == 3 ? size_t(0) : n * size_t(V)) << "step " << step;
    d.add(want, got, V);
    if (step == 20) {  // a prefill step in between: launched eagerly by both
      Seq extra{{5, 6, 7, 8, 9, 10, 11}, 0, {199}, StepSeq::Logits::kLast};
      d.add(run(**eager, {extra}), run(**graphs, {extra}), V);
    }
  }
  report("CUDA graphs vs eager launches (llama3-gqa dummy)", d);
  EXPECT_LE(d.rel(), kBatchTol);
}

// `source` (a candidate of the CUDA candidate ABI) compiled by NVRTC for sm_90a into a file of this
// test's own; its path, "" after a failure.
std::string candidate_cubin(const std::string& source, const std::string& name) {
  std::string cubin;
  const auto r = kernels::cuda::compile_source(source, {}, &cubin);
  EXPECT_EQ(r.verdict, kernels::cuda::CompileVerdict::kOk) << r.message << "\n" << r.log;
  if (r.verdict != kernels::cuda::CompileVerdict::kOk) return "";
  const auto path = std::filesystem::temp_directory_path() /
                    ("plumb_cuda_runner_" + std::to_string(::getpid()) + "_" + name + ".cubin");
  EXPECT_TRUE(write_file_atomic(path.string(), cubin).ok());
  return path.string();
}

// The first built-in variant of `op` (kernels/cuda/generate.h) whose name contains `tag`.
std::string variant_source(kernels::cuda::CudaOp op, const std::string& tag) {
  for (const auto& v : kernels::cuda::generate_variants(op))
    if (v.name.find(tag) != std::string::npos) return v.source;
  ADD_FAILURE() << "no variant " << tag;
  return "";
}

// Prefill in two chunks, then decode steps of one to five rows (one and two rows fold SwiGLU into
// the GEMV; three and more run the SwiGLU pass), through runners `a` and `b` alike.
Diff prefill_and_batched_decode(ModelRunner& a, ModelRunner& b) {
  const int64_t V = a.vocab_size();
  Rng rng(17);
  std::vector<Seq> seqs(5);
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int t = 0; t < 90 + 20 * int(i); ++t) seqs[i].tokens.push_back(int32_t(rng.next_u64() % 2048));
    for (int blk = 0; blk < 12; ++blk) seqs[i].block_table.push_back(int32_t(i) * 12 + 11 - blk);
    seqs[i].logits = StepSeq::Logits::kAll;
  }
  Diff d;
  std::vector<Seq> part = seqs;
  for (auto& s : part) s.tokens.resize(60);
  d.add(run(a, part), run(b, part), V);
  for (size_t i = 0; i < seqs.size(); ++i) {
    part[i].start_pos = 60;
    part[i].tokens.assign(seqs[i].tokens.begin() + 60, seqs[i].tokens.end());
    part[i].logits = StepSeq::Logits::kLast;
  }
  d.add(run(a, part), run(b, part), V);
  for (int step = 0; step < 15; ++step) {
    std::vector<Seq> batch;
    for (size_t i = 0; i <= size_t(step % 5); ++i) {
      Seq& s = part[i];
      s.start_pos += int32_t(s.tokens.size());
      s.tokens = {int32_t(rng.next_u64() % 2048)};
      batch.push_back(s);
    }
    d.add(run(a, batch), run(b, batch), V);
  }
  return d;
}

// Candidate kernels in place of the runner's own (CudaRunnerOptions::candidates_*, what `plumb
// kernels accept --device cuda` measures): a built-in SwiGLU variant and a built-in
// rmsnorm_residual variant (which takes the residual add out of the GEMMs), compiled for the card,
// over prefill and batched decode steps replayed as graphs, against the runner without them. The
// sums run in another order, so the logits agree within kBatchTol, not bit for bit. A SwiGLU
// candidate that doubles its output moves them far past it in both phases, so the candidates do run
// where they are put. A cubin put in place of the other op is refused when the runner is made.
TEST(CudaRunner, CandidateKernelsRunInPlaceOfTheRunnersOwn) {
  SKIP_WITHOUT_GPU();
  using kernels::cuda::CudaOp;
  const std::string swiglu = candidate_cubin(variant_source(CudaOp::kSwiglu, ".b256.v4"), "swiglu");
  const std::string norm =
      candidate_cubin(variant_source(CudaOp::kRmsNormResidual, ".b256.r1.v4.fused"), "norm");
  std::string doubled = variant_source(CudaOp::kSwiglu, ".b256.v4");
  const std::string silu = "return g / (1.0f + expf(-g)) * u;";
  const auto at = doubled.find(silu);
  ASSERT_NE(at, std::string::npos) << doubled;
  doubled.replace(at, silu.size(), "return 2.0f * g / (1.0f + expf(-g)) * u;");
  const std::string wrong = candidate_cubin(doubled, "doubled");
  ASSERT_FALSE(swiglu.empty() || norm.empty() || wrong.empty());

  CudaRunnerOptions with;
  for (auto* m : {&with.candidates_prefill, &with.candidates_decode}) {
    (*m)["swiglu"] = swiglu;
    (*m)["rmsnorm_residual"] = norm;
  }
  auto own = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "own");
  auto cand = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "candidates", with);
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  ASSERT_TRUE(cand.ok()) << cand.status().to_string();
  EXPECT_NE((*cand)->describe().find("candidate kernels: "), std::string::npos) << (*cand)->describe();
  ASSERT_TRUE((*own)->init_kv(64, 16).ok() && (*cand)->init_kv(64, 16).ok());
  Diff d = prefill_and_batched_decode(**own, **cand);
  report("candidate kernels vs the runner's own (llama3-gqa dummy)", d);
  EXPECT_LE(d.rel(), kBatchTol);

  CudaRunnerOptions bad;
  bad.candidates_prefill["swiglu"] = wrong;
  bad.candidates_decode["swiglu"] = wrong;
  auto broken = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "doubled", bad);
  ASSERT_TRUE(broken.ok()) << broken.status().to_string();
  auto own2 = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "own");
  ASSERT_TRUE(own2.ok() && (*broken)->init_kv(64, 16).ok() && (*own2)->init_kv(64, 16).ok());
  Diff w = prefill_and_batched_decode(**own2, **broken);
  report("a SwiGLU candidate that doubles its output", w);
  EXPECT_GT(w.rel(), 10 * kBatchTol);

  CudaRunnerOptions swapped;
  swapped.candidates_decode["rmsnorm_residual"] = swiglu;
  auto refused = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "swapped", swapped);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("declares op swiglu"), std::string::npos)
      << refused.status().to_string();
  for (const auto& f : {swiglu, norm, wrong}) std::filesystem::remove(f);
}

// Tokens picked on the device (forward_greedy): each greedy row's id equals the argmax of the row
// forward() returns for the same step (the same kernels over the same inputs, so exactly), and each
// row drawn with a temperature equals ModelRunner::sample_plain on that row with the same uniform
// (the device sums in another order: a mismatch needs u within ~1e-16 of a boundary); the other
// rows come back as logits in batch order; over a prefill step mixing greedy, drawn, kAll and plain
// rows, and over decode steps replayed as graphs. Each step runs twice over two copies of the
// sequences (their own blocks).
TEST(CudaRunner, DeviceGreedyEqualsTheArgmaxOfTheLogits) {
  SKIP_WITHOUT_GPU();
  auto r = make_cuda_runner(dummy_model(kLlama3Gqa), 0, "gpu");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ModelRunner& g = **r;
  ASSERT_TRUE(g.greedy_on_device());
  ASSERT_TRUE(g.init_kv(200, 16).ok());
  const auto V = size_t(g.vocab_size());
  Rng rng(5);
  std::vector<Seq> seqs[2];
  for (size_t i = 0; i < 6; ++i) {
    Seq s;
    for (int t = 0; t < 9 + 17 * int(i); ++t) s.tokens.push_back(int32_t(rng.next_u64() % 2048));
    for (size_t copy = 0; copy < 2; ++copy) {
      s.block_table.clear();
      for (int b = 0; b < 16; ++b) s.block_table.push_back(int32_t((copy * 6 + i) * 16 + size_t(b)));
      seqs[copy].push_back(s);
    }
  }
  int64_t checked = 0, drawn = 0;
  for (int step = 0; step < 12; ++step) {
    std::vector<StepSeq> batch[2];
    std::vector<bool> greedy;
    std::vector<float> temp;  // > 0: a plain draw with u[i]
    std::vector<double> u;
    for (size_t copy = 0; copy < 2; ++copy) {
      for (size_t i = 0; i < seqs[copy].size(); ++i) {
        Seq& s = seqs[copy][i];
        s.logits = step == 0 && i == 1 ? StepSeq::Logits::kAll : StepSeq::Logits::kLast;
        const bool gr = step > 0 || i % 2 == 0;  // the prefill step mixes greedy and plain rows
        if (copy == 0) {
          greedy.push_back(gr);
          // Every third sequence draws with a temperature instead of taking the argmax.
          temp.push_back(gr && i % 3 == 1 ? 0.5f + 0.25f * float(step % 4) : 0.0f);
          u.push_back(rng.uniform());
        }
        batch[copy].push_back({s.tokens, s.start_pos, s.block_table, s.logits, copy == 1 && gr});
        if (copy == 1) batch[copy].back().temperature = temp[i], batch[copy].back().u = u[i];
      }
    }
    std::vector<float> want, rest;
    std::vector<int32_t> ids;
    ASSERT_TRUE(g.forward(batch[0], want).ok());
    ASSERT_TRUE(g.forward_greedy(batch[1], rest, ids).ok());
    size_t row = 0, k = 0, kept = 0;
    for (size_t i = 0; i < seqs[0].size(); ++i) {
      const size_t n = seqs[0][i].logits == StepSeq::Logits::kAll ? seqs[0][i].tokens.size() : 1;
      if (greedy[i]) {
        ASSERT_LT(k, ids.size());
        const auto first = want.begin() + long(row * V);
        if (temp[i] > 0.0f) {
          EXPECT_EQ(ids[k++], ModelRunner::sample_plain(std::span<const float>(&*first, V), temp[i], u[i]))
              << "step " << step << " seq " << i << " (a draw at temperature " << temp[i] << ")";
          ++drawn;
        } else {
          EXPECT_EQ(ids[k++], int32_t(std::max_element(first, first + long(V)) - first))
              << "step " << step << " seq " << i;
        }
        ++checked;
      } else {
        ASSERT_LE((kept + n) * V, rest.size());
        EXPECT_TRUE(std::equal(rest.begin() + long(kept * V), rest.begin() + long((kept + n) * V),
                               want.begin() + long(row * V)));
        kept += n;
      }
      row += n;
    }
    EXPECT_EQ(k, ids.size());
    EXPECT_EQ(kept * V, rest.size());
    for (size_t i = 0; i < seqs[0].size(); ++i) {  // the next token, the same for both copies
      for (auto& copy : seqs) {
        copy[i].start_pos += int32_t(copy[i].tokens.size());
        copy[i].tokens = {int32_t((step * 131 + int(i) * 17) % 2048)};
      }
    }
  }
  std::printf(
      "[ measured ] %lld rows picked on the device (%lld of them drawn with a temperature) equal to the "
      "host's rule on their logits\n",
      static_cast<long long>(checked), static_cast<long long>(drawn));
}

// A row of logits that is not finite is reported, not sampled: NaN final-norm weights make every
// logit NaN, and forward_greedy returns -1 - 0 (the first non-finite id is 0) for it.
TEST(CudaRunner, DeviceGreedyReportsANonFiniteRow) {
  SKIP_WITHOUT_GPU();
  auto c = engine::parse_model_config(kQwen2);
  ASSERT_TRUE(c.ok());
  auto w = engine::ModelWeights::dummy(*c, 3, engine::WeightDType::kAsStored, nullptr);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  w->final_norm[0] = std::nanf("");
  auto m = Model::from_weights(*c, std::move(w).value(), {});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto r = make_cuda_runner(std::move(m).value(), 0, "gpu");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE((*r)->init_kv(8, 16).ok());
  const std::vector<int32_t> toks{1, 2, 3}, table{0};
  std::vector<StepSeq> batch{{toks, 0, table, StepSeq::Logits::kLast, true}};
  std::vector<float> rest;
  std::vector<int32_t> ids;
  ASSERT_TRUE((*r)->forward_greedy(batch, rest, ids).ok());
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0], -1);
  EXPECT_TRUE(rest.empty());
}

TEST(CudaRunner, GpuMemoryUtilizationSizesTheKvCache) {
  SKIP_WITHOUT_GPU();
  auto g = make_cuda_runner(dummy_model(kQwen2), 0, "x");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  size_t free_b = 0, total_b = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  const double in_use = double(total_b - free_b) / double(total_b);
  auto tokens = (*g)->kv_tokens_for_memory_fraction(std::min(0.95, in_use + 0.1), 2048);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_GT(*tokens, 0);
  // The tokens it names fit: the cache is allocated, and a step runs over it.
  const int32_t bs = 16;
  const auto blocks = int32_t(std::min<int64_t>(*tokens / bs, 1 << 20));
  ASSERT_TRUE((*g)->init_kv(blocks, bs).ok());
  Seq s{{1, 2, 3}, 0, {blocks - 1}, StepSeq::Logits::kLast};
  EXPECT_EQ(run(**g, {s}).size(), size_t((*g)->vocab_size()));
  // Less than what is already in use leaves no room: refused with the sizes.
  auto none = (*g)->kv_tokens_for_memory_fraction(in_use / 2, 2048);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kResourceExhausted);
  EXPECT_NE(none.status().message().find("in use"), std::string::npos) << none.status().to_string();
  EXPECT_EQ((*g)->kv_tokens_for_memory_fraction(1.5, 2048).status().code(), Code::kInvalidArgument);
}

TEST(CudaRunner, DeviceThatDoesNotExistIsRefused) {
  SKIP_WITHOUT_GPU();
  auto r = scheduler::make_runner({scheduler::Device::Kind::kCuda, 99}, dummy_model(kQwen2), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cuda:99 does not exist"), std::string::npos) << r.status().to_string();
}

TEST(CudaRunner, ModelThatDoesNotFitIsRefusedNamingSizes) {
  SKIP_WITHOUT_GPU();
  // About 1.2 TB of bf16 weights: more than any single GPU holds. Checked from the config alone.
  auto c = engine::parse_model_config(kLlama3Gqa);
  ASSERT_TRUE(c.ok());
  c->hidden_size = 16384;
  c->intermediate_size = 53248;
  c->num_attention_heads = 128;
  c->num_key_value_heads = 8;
  c->num_hidden_layers = 400;
  const Status st = check_fits(*c, 0);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kResourceExhausted);
  EXPECT_NE(st.message().find("GiB of device memory"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("free of"), std::string::npos) << st.to_string();
}

TEST(CudaRunner, KvCacheThatDoesNotFitIsRefused) {
  SKIP_WITHOUT_GPU();
  auto g = make_cuda_runner(dummy_model(kQwen2), 0, "x");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const Status st = (*g)->init_kv(1 << 30, 1024);
  EXPECT_EQ(st.code(), Code::kResourceExhausted) << st.to_string();
  EXPECT_NE(st.message().find("lower --kv-cache-tokens"), std::string::npos) << st.to_string();
}

// Tensor parallelism (engine/tensor_parallel.h): a size that does not split the model is refused
// before any device is touched (so this runs without a GPU too).
TEST(CudaRunnerTensorParallel, ASizeThatDoesNotSplitTheModelIsRefusedFirst) {
  CudaRunnerOptions o;
  o.tensor_parallel_size = 3;  // kQwen3 has 4 KV heads
  auto r = make_cuda_runner(dummy_model(kQwen3), 0, "x", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("4 KV heads"), std::string::npos) << r.status().to_string();
  scheduler::RunnerOptions ro;
  ro.tensor_parallel_size = 2;
  auto cpu = scheduler::make_runner({}, dummy_model(kQwen3), "x", ro);
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("--device cuda"), std::string::npos) << cpu.status().to_string();
}

// The model split over n cards against the same model on one: prefill chunks, then decode steps
// replayed as CUDA graphs (with the all-reduces captured), fed one card's greedy token. The ranks'
// partial sums are added in another order than one card's GEMM adds them, so the logits agree
// within the batch tolerance, not bit for bit; the greedy tokens must be the same.
void expect_split_matches_one_card(const Loader& load, int32_t n, const char* name) {
  std::string why;
  const int have = device_count(&why);
  if (have < n) GTEST_SKIP() << "needs " << n << " CUDA devices, this machine has " << have << " " << why;
  CudaRunnerOptions split;
  split.tensor_parallel_size = n;
  auto one = make_cuda_runner(load(), 0, "one card");
  auto many = make_cuda_runner(load(), 0, "split", split);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_TRUE(many.ok()) << many.status().to_string();
  EXPECT_NE((*many)->describe().find("tensor-parallel over " + std::to_string(n)), std::string::npos)
      << (*many)->describe();
  const int32_t bs = 16, nb = 64;
  ASSERT_TRUE((*one)->init_kv(nb, bs).ok());
  ASSERT_TRUE((*many)->init_kv(nb, bs).ok());
  const int64_t V = (*one)->vocab_size();
  Rng rng(5);
  std::vector<Seq> seqs(3);
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int t = 0; t < 37 + 20 * int(i); ++t)
      seqs[i].tokens.push_back(int32_t(rng.next_u64() % uint64_t(V)));
    for (int b = 0; b < 16; ++b) seqs[i].block_table.push_back(int32_t(i) * 16 + 15 - b);
  }
  Diff d;
  std::vector<float> ref = run(**one, seqs);
  d.add(ref, run(**many, seqs), V);
  int64_t tokens_same = 0, tokens = 0;
  for (int step = 0; step < 24; ++step) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      s.start_pos += int32_t(s.tokens.size());
      const auto row = ref.begin() + int64_t(i) * V;
      s.tokens = {int32_t(std::max_element(row, row + V) - row)};
    }
    ref = run(**one, seqs);
    const std::vector<float> got = run(**many, seqs);
    d.add(ref, got, V);
    for (size_t i = 0; i < seqs.size(); ++i, ++tokens) {
      const auto a = ref.cbegin() + int64_t(i) * V, b = got.cbegin() + int64_t(i) * V;
      tokens_same += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
    }
  }
  report(name, d);
  EXPECT_LE(d.rel(), kBatchTol);
  EXPECT_EQ(tokens_same, tokens);
}

TEST(CudaRunnerTensorParallel, TwoCardsMatchOne) {
  expect_split_matches_one_card([] { return dummy_model(kQwen3); }, 2, "qwen3 dummy, 2 cards vs 1");
}

TEST(CudaRunnerTensorParallel, FourCardsMatchOne) {
  expect_split_matches_one_card([] { return dummy_model(kQwen3); }, 4, "qwen3 dummy, 4 cards vs 1");
}

TEST(CudaRunnerTensorParallel, TheShippedModelOnTwoCardsMatchesOne) {
  expect_split_matches_one_card(tiny_model, 2, "plumb-tiny, 2 cards vs 1");
}

TEST(CudaRunner, BadInputIsRefusedBeforeTheDevice) {
  SKIP_WITHOUT_GPU();
  auto g = make_cuda_runner(dummy_model(kQwen2), 0, "x");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::vector<float> out;
  Seq s{{1, 2, 3}, 0, {0}, StepSeq::Logits::kLast};
  std::vector<StepSeq> batch{{s.tokens, 0, s.block_table, s.logits}};
  EXPECT_EQ((*g)->forward(batch, out).code(), Code::kFailedPrecondition);  // init_kv not called
  ASSERT_TRUE((*g)->init_kv(4, 16).ok());
  s.tokens = {1, 5000};
  batch = {{s.tokens, 0, s.block_table, s.logits}};
  EXPECT_EQ((*g)->forward(batch, out).code(), Code::kInvalidArgument);  // token outside the vocabulary
  s.tokens = {1, 2};
  s.block_table = {9};
  batch = {{s.tokens, 0, s.block_table, s.logits}};
  EXPECT_EQ((*g)->forward(batch, out).code(), Code::kInvalidArgument);  // block outside the cache
}

}  // namespace
}  // namespace plumb::cuda
