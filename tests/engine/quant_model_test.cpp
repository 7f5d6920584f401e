// Quantization in the model (engine/weights.h, engine/model.h): which matrices are quantized at
// load, that the stored codes are the format's quantization of the model's own weights (within the
// computed per-element bound), byte accounting, the forward pass through Op::kMatmulQuant (fast
// variants against the reference, prefill and decode), and the refusal of non-finite weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "core/file.h"
#include "core/json.h"
#include "engine/cpu/packed.h"
#include "engine/cpu/quant.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/safetensors.h"

namespace plumb::engine {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(PLUMB_SOURCE_DIR) + "/models/plumb-tiny";

ModelConfig small_config() {
  auto c = load_model_config(std::string(PLUMB_SOURCE_DIR) + "/models/configs/qwen2.5-0.5b/config.json");
  EXPECT_TRUE(c.ok());
  c->num_hidden_layers = 2;  // keep it fast; Qwen2 has q/k/v biases, and d = 896 is 28 int4 blocks
  c->vocab_size = 1024;
  return *c;
}

std::unique_ptr<Model> dummy(const ModelConfig& c, const std::string& quant, int threads = 2) {
  ModelOptions o;
  o.threads = threads;
  o.quantization = *parse_quantization(quant);
  auto m = Model::dummy(c, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

const WeightMatrix* linears(const LayerWeights& l, int i) {
  const WeightMatrix* all[] = {&l.q_proj,    &l.k_proj,  &l.v_proj,   &l.o_proj,
                               &l.gate_proj, &l.up_proj, &l.down_proj};
  return all[i];
}

TEST(QuantModel, LinearsQuantizedFromTheModelsOwnWeightsEmbeddingsKept) {
  const ModelConfig c = small_config();
  auto base = dummy(c, "none");
  ASSERT_NE(base, nullptr);
  for (const char* q : {"int8", "int4", "int4-g64"}) {
    auto m = dummy(c, q);
    ASSERT_NE(m, nullptr);
    const ModelWeights& w = m->weights();
    EXPECT_EQ(w.quantization().name(), q);
    EXPECT_EQ(w.embed.quant, QuantScheme::kNone);
    EXPECT_EQ(w.lm_head.quant, QuantScheme::kNone);
    EXPECT_EQ(std::memcmp(w.embed.data, base->weights().embed.data, size_t(c.vocab_size * c.hidden_size) * 2),
              0);
    int64_t linear = 0;
    for (size_t li = 0; li < w.layers.size(); ++li) {
      for (int i = 0; i < 7; ++i) {
        const WeightMatrix& qm = *linears(w.layers[li], i);
        const WeightMatrix& fm = *linears(base->weights().layers[li], i);
        ASSERT_NE(qm.quant, QuantScheme::kNone) << q << " layer " << li << " matrix " << i;
        ASSERT_EQ(qm.rows, fm.rows);
        ASSERT_EQ(qm.cols, fm.cols);
        linear += quant_matrix_bytes(qm);
        // Every 7th element of every matrix: the code dequantizes to within the bound of the bf16 value.
        const auto* f = static_cast<const uint16_t*>(fm.data);
        for (int64_t e = 0; e < fm.rows * fm.cols; e += 7) {
          const int64_t r = e / fm.cols, col = e % fm.cols;
          // The unquantized model's bf16 matrices may be packed (engine/cpu/packed.h).
          const int64_t at = fm.layout == WeightLayout::kPacked16 ? packed16_index(r, col, fm.cols) : e;
          ASSERT_LE(std::fabs(dequant_weight(qm, r, col) - bf16_to_f32(f[at])), quant_error_bound(qm, r, col))
              << q << " layer " << li << " matrix " << i << " (" << r << ", " << col << ")";
        }
      }
    }
    EXPECT_EQ(w.linear_bytes(), linear);
    EXPECT_EQ(w.bytes(), linear + c.vocab_size * c.hidden_size * 2);  // tied bf16 embedding, once
    // Smaller than bf16 by the format's ratio (2 bytes vs 1 + 4/cols, or 0.5 + 8/group).
    const double ratio = double(base->weights().linear_bytes()) / double(linear);
    EXPECT_GT(ratio, std::string(q) == "int8" ? 1.9 : 2.6) << q;
  }
  // Quantizing is deterministic whatever the thread count.
  auto a = dummy(c, "int4", 1), b = dummy(c, "int4", 3);
  const WeightMatrix &qa = a->weights().layers[1].down_proj, &qb = b->weights().layers[1].down_proj;
  EXPECT_EQ(std::memcmp(qa.data, qb.data, size_t(qa.rows * quant_row_bytes(qa.quant, qa.cols))), 0);
  EXPECT_EQ(
      std::memcmp(qa.scales, qb.scales, size_t(qa.rows * quant_groups_per_row(qa.quant, qa.cols, 32)) * 4),
      0);
}

struct Logits {
  std::vector<float> prefill;  // [T, V] all logits of the prompt
  std::vector<float> decode;   // [V] one decode step after it
};

Logits run(Model& m, const std::vector<int32_t>& ids) {
  const int32_t bs = 16;
  const int64_t max_tokens = int64_t(ids.size()) + 1;
  const int32_t num_blocks = int32_t((max_tokens + bs - 1) / bs);
  std::vector<int32_t> table(size_t(num_blocks), 0);
  for (int32_t b = 0; b < num_blocks; ++b) table[size_t(b)] = b;  // one sequence: blocks in order
  auto cache = KvCache::create(m.kv_config(num_blocks, bs));
  EXPECT_TRUE(cache.ok());
  Logits r;
  SequenceInput in{ids, 0, table, true};
  ForwardOutput out;
  Status s = m.forward(std::span(&in, 1), *cache, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  r.prefill = out.logits;
  const int32_t next = 7;
  SequenceInput dec{std::span(&next, 1), int32_t(ids.size()), table, false};
  s = m.forward(std::span(&dec, 1), *cache, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  r.decode = out.logits;
  return r;
}

float max_abs(const std::vector<float>& a) {
  float m = 0;
  for (float x : a) m = std::max(m, std::fabs(x));
  return m;
}
float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::unique_ptr<Model> load_tiny(const std::string& quant, const KernelSelection& sel, WeightDType dt) {
  ModelOptions o;
  o.threads = 2;
  o.kernels = sel;
  o.dtype = dt;
  o.quantization = *parse_quantization(quant);
  auto m = Model::load(kTiny, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// The shipped model's prompt of its golden test, twice (48 tokens: the prefill takes the hybrid
// dequantize-and-sgemm path from 32 rows; the decode step the avx2 tiles).
std::vector<int32_t> tiny_prompt() {
  std::vector<int32_t> ids;
  auto t = ModelTensors::open_file(kTiny + "/reference.safetensors");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return ids;
  auto v = t->get("input_ids");
  for (int64_t i = 0; i < v->numel(); ++i) {
    int64_t x;
    std::memcpy(&x, v->data + 8 * i, 8);
    ids.push_back(int32_t(x));
  }
  const size_t n = ids.size();
  for (size_t i = 0; i < n; ++i) ids.push_back(ids[i]);  // twice: past the 32-row hybrid threshold
  return ids;
}

// Fast matmul_quant variants in the model vs the reference variant: the same quantized weights,
// only float accumulation order differs, through 8 layers: bound 1e-4 of the largest logit (the
// golden test's f32 bound for the same reason).
TEST(QuantModel, ForwardWithFastKernelsMatchesReferenceKernels) {
  const auto ids = tiny_prompt();
  ASSERT_GE(ids.size(), 32u);
  KernelSelection ref_q;  // everything auto except the quantized matmul
  ref_q.prefill[Op::kMatmulQuant] = "reference";
  ref_q.decode[Op::kMatmulQuant] = "reference";
  for (const char* q : {"int8", "int4"}) {
    auto fast = load_tiny(q, {}, WeightDType::kAsStored);
    auto slow = load_tiny(q, ref_q, WeightDType::kAsStored);
    ASSERT_TRUE(fast && slow);
    Logits a = run(*fast, ids), b = run(*slow, ids);
    EXPECT_LE(max_abs_diff(a.prefill, b.prefill), 1e-4f * max_abs(b.prefill)) << q;
    EXPECT_LE(max_abs_diff(a.decode, b.decode), 1e-4f * max_abs(b.decode)) << q;
  }
}

// Against the unquantized model: the logit error grows as bits shrink (int8 < int4-g32 <
// int4-g64), and each quantized model is still near the unquantized one (the relationship the gate
// test measures end to end; here the cheap, deterministic part).
TEST(QuantModel, LogitErrorOrdersByPrecision) {
  const auto ids = tiny_prompt();
  auto none = load_tiny("none", {}, WeightDType::kF32);
  ASSERT_NE(none, nullptr);
  const Logits base = run(*none, ids);
  const float scale = max_abs(base.prefill);
  std::map<std::string, float> err;
  for (const char* q : {"int8", "int4", "int4-g64"}) {
    auto m = load_tiny(q, {}, WeightDType::kF32);
    ASSERT_NE(m, nullptr);
    err[q] = max_abs_diff(run(*m, ids).prefill, base.prefill) / scale;
    std::printf("plumb-tiny %s: max |logit - unquantized| / max |logit| = %.4f\n", q, err[q]);
  }
  EXPECT_GT(err["int8"], 0.0f);
  EXPECT_LT(err["int8"], err["int4"]);
  EXPECT_LT(err["int4"], err["int4-g64"]);
}

// Quantizing at load from each stored dtype (the fixtures: F32, F16 sharded, BF16): every element
// of every linear dequantizes to within its bound of the stored value, and auto vs reference
// matmul_quant agree through a forward pass (bound as above).
TEST(QuantModel, QuantizesFromF32F16AndBf16Checkpoints) {
  const std::string fixtures = std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/models/";
  std::vector<int32_t> ids = {1, 5, 9, 2, 7, 3, 11, 4};
  for (const char* name : {"qwen2", "qwen2_f16_sharded", "llama3_bf16"}) {
    ModelOptions o;
    o.threads = 2;
    o.dtype = WeightDType::kF32;  // float copies of the stored values, for comparison
    auto base = Model::load(fixtures + name, o);
    ASSERT_TRUE(base.ok()) << name << ": " << base.status().to_string();
    for (const char* q : {"int8", "int4"}) {
      o.dtype = WeightDType::kAsStored;
      o.quantization = *parse_quantization(q);
      o.kernels = {};
      // The unquantized lm_head in the f32 class in both models (auto's avx512_bf16 would round
      // its input to bf16, where the tiny differences measured here can flip a rounding).
      o.kernels.prefill[Op::kMatmul] = o.kernels.decode[Op::kMatmul] = "reference";
      auto m = Model::load(fixtures + name, o);
      ASSERT_TRUE(m.ok()) << name << " " << q << ": " << m.status().to_string();
      for (size_t li = 0; li < (*m)->weights().layers.size(); ++li) {
        for (int i = 0; i < 7; ++i) {
          const WeightMatrix& qm = *linears((*m)->weights().layers[li], i);
          const WeightMatrix& fm = *linears((*base)->weights().layers[li], i);
          ASSERT_EQ(fm.dtype, DType::kF32);
          const auto* f = static_cast<const float*>(fm.data);
          for (int64_t e = 0; e < fm.rows * fm.cols; ++e) {
            const int64_t r = e / fm.cols, c = e % fm.cols;
            ASSERT_LE(std::fabs(dequant_weight(qm, r, c) - f[e]), quant_error_bound(qm, r, c))
                << name << " " << q << " layer " << li << " matrix " << i << " (" << r << ", " << c << ")";
          }
        }
      }
      o.kernels.prefill[Op::kMatmulQuant] = "reference";
      o.kernels.decode[Op::kMatmulQuant] = "reference";
      auto slow = Model::load(fixtures + name, o);
      ASSERT_TRUE(slow.ok());
      Logits a = run(**m, ids), b = run(**slow, ids);
      EXPECT_LE(max_abs_diff(a.prefill, b.prefill), 1e-4f * max_abs(b.prefill)) << name << " " << q;
      EXPECT_LE(max_abs_diff(a.decode, b.decode), 1e-4f * max_abs(b.decode)) << name << " " << q;
    }
  }
}

// Widths that are not multiples of the int4 block or group (hidden 100 = 3 blocks + 4 columns,
// intermediate 200) through the whole model, dummy weights: auto vs reference matmul_quant.
TEST(QuantModel, OddWidthsThroughTheModel) {
  ModelConfig c = small_config();
  c.hidden_size = 100;
  c.intermediate_size = 200;
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 37 % 1000);
  for (const char* q : {"int8", "int4", "int4-g64"}) {
    ModelOptions o;
    o.threads = 3;
    o.quantization = *parse_quantization(q);
    o.kernels.prefill[Op::kMatmul] = o.kernels.decode[Op::kMatmul] = "reference";  // lm_head: as above
    auto fast = Model::dummy(c, o);
    o.kernels.prefill[Op::kMatmulQuant] = "reference";
    o.kernels.decode[Op::kMatmulQuant] = "reference";
    auto slow = Model::dummy(c, o);
    ASSERT_TRUE(fast.ok() && slow.ok()) << q;
    Logits a = run(**fast, ids), b = run(**slow, ids);
    EXPECT_LE(max_abs_diff(a.prefill, b.prefill), 1e-4f * max_abs(b.prefill)) << q;
    EXPECT_LE(max_abs_diff(a.decode, b.decode), 1e-4f * max_abs(b.decode)) << q;
  }
}

// A linear weight that is not finite cannot be quantized: the load names the tensor and the row,
// and says how to proceed. Unquantized, the same checkpoint loads (the check is the quantizer's).
TEST(QuantModel, NonFiniteWeightIsRefusedWithTheTensorNamed) {
  const fs::path dir = fs::temp_directory_path() / ("plumb-quant-nan-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(kTiny + "/" + f, dir / f, fs::copy_options::overwrite_existing);
  }
  // Locate row 3 of layer 1's up_proj in the file and write +inf (bf16 0x7f80) into it.
  auto bytes = read_file((dir / "model.safetensors").string());
  ASSERT_TRUE(bytes.ok());
  uint64_t n = 0;
  std::memcpy(&n, bytes->data(), 8);
  auto header = json::parse_object(std::string_view(*bytes).substr(8, n));
  ASSERT_TRUE(header.ok());
  const auto& t = header->at("model.layers.1.mlp.up_proj.weight").as_object();
  ASSERT_EQ(t.at("dtype").as_string(), "BF16");
  const int64_t cols = int64_t(t.at("shape").as_array()[1].to_number<int64_t>());
  const int64_t off =
      8 + int64_t(n) + int64_t(t.at("data_offsets").as_array()[0].to_number<int64_t>()) + (3 * cols + 5) * 2;
  std::string patched = *bytes;
  patched[size_t(off)] = char(0x80);
  patched[size_t(off + 1)] = char(0x7f);
  ASSERT_TRUE(write_file_atomic((dir / "model.safetensors").string(), patched).ok());

  ModelOptions o;
  o.threads = 2;
  o.quantization = *parse_quantization("int8");
  auto m = Model::load(dir.string(), o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  const std::string msg = m.status().to_string();
  EXPECT_NE(msg.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--quantization none"), std::string::npos) << msg;
  o.quantization = {};
  EXPECT_TRUE(Model::load(dir.string(), o).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace plumb::engine
