#include "engine/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <boost/math/special_functions/erf.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/random.h"
#include "engine/cpu/huge_pages.h"
#include "engine/cpu/packed.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine {

Result<WeightDType> parse_weight_dtype(const std::string& s) {
  if (s == "auto" || s == "as-stored" || s == "as_stored") return WeightDType::kAsStored;
  if (s == "f32" || s == "float32") return WeightDType::kF32;
  if (s == "bf16" || s == "bfloat16") return WeightDType::kBF16;
  return invalid_argument("unknown weight dtype '" + s + "' (use as-stored, f32 or bf16)");
}

namespace {
// Drops this process's resident pages wholly inside [p, p + bytes) of a read-only file mapping (they
// read back from the file if touched again). Best effort: an error leaves them resident.
void release_pages(const void* p, size_t bytes) {
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}
}  // namespace

struct ModelWeights::Buffer {
  void* p = nullptr;  // malloc'd unless `huge` holds it
  HugeBuffer huge;
  ~Buffer();
};

ModelWeights::ModelWeights() = default;
ModelWeights::~ModelWeights() = default;
ModelWeights::ModelWeights(ModelWeights&&) noexcept = default;
ModelWeights& ModelWeights::operator=(ModelWeights&&) noexcept = default;

ModelWeights::Buffer::~Buffer() {
  if (!huge.data()) std::free(p);
}

void* ModelWeights::own(size_t bytes) {
  constexpr size_t kHugeMin = size_t(4) << 20;  // smaller buffers stay in the malloc heap
  auto b = std::make_unique<Buffer>();
  if (bytes >= kHugeMin) {
    b->huge = HugeBuffer(bytes);
    b->p = b->huge.data();
  }
  if (!b->p) b->p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  void* p = b->p;
  owned_.push_back(std::move(b));
  return p;
}

bool ModelWeights::owns(const void* p) const {
  for (const auto& b : owned_) {
    if (b->p == p) return true;
  }
  return false;
}

void ModelWeights::set_layout(WeightLayout layout, ThreadPool* pool) {
  auto convert = [&](WeightMatrix& m) {
    if (m.layout == layout || !can_pack16(m)) return;
    const size_t bytes = size_t(m.rows * m.cols) * 2;
    const auto* src = static_cast<const uint16_t*>(m.data);
    // Owned: in place. A view into the map (only ever row-major): into a new owned buffer.
    const bool in_place = owns(m.data);
    auto* dst = in_place ? const_cast<uint16_t*>(src) : static_cast<uint16_t*>(own(bytes));
    if (layout == WeightLayout::kPacked16) {
      pack16(src, m.rows, m.cols, dst, pool);
    } else {
      unpack16(src, m.rows, m.cols, dst, pool);
    }
    if (!in_place) release_pages(src, bytes);
    m.data = dst;
    m.layout = layout;
  };
  const bool tied = lm_head.data == embed.data;
  convert(embed);
  if (tied) {
    lm_head = embed;
  } else {
    convert(lm_head);
  }
  for (auto& l : layers) {
    for (WeightMatrix* w :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      convert(*w);
    }
  }
}

namespace {
int64_t matrix_bytes(const WeightMatrix& w) {
  if (w.quant != QuantScheme::kNone) return quant_matrix_bytes(w);
  return w.rows * w.cols * int64_t(dtype_size(w.dtype));
}
}  // namespace

int64_t ModelWeights::linear_bytes() const {
  int64_t total = 0;
  for (const auto& l : layers) {
    for (const WeightMatrix* w :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      total += matrix_bytes(*w);
    }
  }
  return total;
}

int64_t ModelWeights::bytes() const {
  int64_t total = matrix_bytes(embed) + linear_bytes();
  if (lm_head.data != embed.data) total += matrix_bytes(lm_head);
  return total;
}

Result<WeightMatrix> ModelWeights::quantize(const WeightMatrix& src, const std::string& name,
                                            ThreadPool* pool) {
  WeightMatrix q;
  q.rows = src.rows;
  q.cols = src.cols;
  q.dtype = src.dtype;  // unused once quantized; kept as the source's for provenance
  q.quant = quant_.scheme;
  q.group_size = quant_.scheme == QuantScheme::kInt4 ? quant_.group_size : 0;
  const int64_t row_bytes = quant_row_bytes(q.quant, q.cols);
  const int64_t groups = quant_groups_per_row(q.quant, q.cols, q.group_size);
  void* codes = own(size_t(q.rows * row_bytes));
  auto* scales = static_cast<float*>(own(size_t(q.rows * groups) * sizeof(float)));
  float* mins = q.quant == QuantScheme::kInt4
                    ? static_cast<float*>(own(size_t(q.rows * groups) * sizeof(float)))
                    : nullptr;
  std::atomic<int64_t> bad_row{-1};
  const size_t esz = dtype_size(src.dtype);
  const auto* in = static_cast<const unsigned char*>(src.data);
  auto rows = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(q.cols));  // [cols] the source row in f32
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < q.cols; ++c) {
        const unsigned char* e = in + size_t(r * q.cols + c) * esz;
        if (src.dtype == DType::kF32) {
          std::memcpy(&row[size_t(c)], e, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, e, 2);
          row[size_t(c)] = src.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
        if (!std::isfinite(row[size_t(c)])) {
          int64_t none = -1;
          bad_row.compare_exchange_strong(none, r);
        }
      }
      quantize_row(q.quant, q.group_size, row.data(), q.cols, static_cast<char*>(codes) + r * row_bytes,
                   scales + r * groups, mins ? mins + r * groups : nullptr);
    }
  };
  if (pool) {
    pool->parallel_for(q.rows, rows);
  } else {
    rows(0, q.rows);
  }
  if (bad_row.load() >= 0) {
    return invalid_argument(
        "tensor '" + name + "' has a non-finite value in row " + std::to_string(bad_row.load()) +
        "; it cannot be quantized (serve it with --quantization none, or fix the checkpoint)");
  }
  q.data = codes;
  q.scales = scales;
  q.mins = mins;
  return q;
}

namespace {

void parallel(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool) {
    pool->parallel_for(n, fn);
  } else {
    fn(0, n);
  }
}

float element_f32(const unsigned char* data, TensorDType dt, int64_t i) {
  switch (dt) {
    case TensorDType::kF32: {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
    case TensorDType::kBF16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case TensorDType::kF16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return f16_to_f32(h);
    }
    default:
      return 0.0f;
  }
}

bool is_float(TensorDType dt) {
  return dt == TensorDType::kF32 || dt == TensorDType::kF16 || dt == TensorDType::kBF16;
}

DType to_dtype(TensorDType dt) {
  return dt == TensorDType::kF32 ? DType::kF32 : dt == TensorDType::kF16 ? DType::kF16 : DType::kBF16;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Looks up `name` and checks its shape against `want` (and that it is a float tensor).
Result<TensorView> get_checked(const ModelTensors& t, const std::string& name,
                               const std::vector<int64_t>& want, const char* meaning) {
  auto v = t.get(name);
  if (!v.ok()) return v.status();
  if (!is_float(v->dtype)) {
    return invalid_argument("tensor '" + name + "' has dtype " + tensor_dtype_name(v->dtype) +
                            "; weights must be F32, F16 or BF16");
  }
  if (v->shape != want) {
    return invalid_argument("tensor '" + name + "' in '" + v->file + "' has shape " + shape_str(v->shape) +
                            " but the config implies " + shape_str(want) + " (" + meaning + ")");
  }
  return v;
}

// The stored matrix v (rows x cols) into dst in dtype target: a copy, or a per-element conversion
// spread over the pool by rows.
void copy_converted(const TensorView& v, DType target, int64_t rows, int64_t cols, void* dst,
                    ThreadPool* pool) {
  const DType stored = to_dtype(v.dtype);
  if (target == stored) {
    std::memcpy(dst, v.data, v.nbytes);
  } else {
    parallel(pool, rows, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * cols; i < r1 * cols; ++i) {
        float f = element_f32(v.data, v.dtype, i);
        if (target == DType::kF32) {
          static_cast<float*>(dst)[i] = f;
        } else if (target == DType::kBF16) {
          static_cast<uint16_t*>(dst)[i] = f32_to_bf16(f);
        } else {
          static_cast<uint16_t*>(dst)[i] = f32_to_f16(f);
        }
      }
    });
  }
}

// One decoder layer's tensors under prefix p ("model.layers.<i>."), through from_tensors' loaders:
// matrix(name, rows, cols, meaning, linear) and vec(name, n, meaning).
template <typename Matrix, typename Vec>
Result<LayerWeights> load_layer(const ModelConfig& c, const std::string& p, Matrix& matrix, Vec& vec) {
  const int64_t d = c.hidden_size, hd = c.head_dim, q_out = c.num_attention_heads * hd,
                kv_out = c.num_key_value_heads * hd, ff = c.intermediate_size;
  LayerWeights l;
  PLUMB_ASSIGN_OR_RETURN(l.input_norm, vec(p + "input_layernorm.weight", d, "hidden_size"));
  PLUMB_ASSIGN_OR_RETURN(l.q_proj, matrix(p + "self_attn.q_proj.weight", q_out, d,
                                          "num_attention_heads*head_dim x hidden_size", true));
  PLUMB_ASSIGN_OR_RETURN(l.k_proj, matrix(p + "self_attn.k_proj.weight", kv_out, d,
                                          "num_key_value_heads*head_dim x hidden_size", true));
  PLUMB_ASSIGN_OR_RETURN(l.v_proj, matrix(p + "self_attn.v_proj.weight", kv_out, d,
                                          "num_key_value_heads*head_dim x hidden_size", true));
  PLUMB_ASSIGN_OR_RETURN(l.o_proj, matrix(p + "self_attn.o_proj.weight", d, q_out,
                                          "hidden_size x num_attention_heads*head_dim", true));
  if (c.attention_bias) {
    PLUMB_ASSIGN_OR_RETURN(l.q_bias, vec(p + "self_attn.q_proj.bias", q_out, "num_attention_heads*head_dim"));
    PLUMB_ASSIGN_OR_RETURN(l.k_bias,
                           vec(p + "self_attn.k_proj.bias", kv_out, "num_key_value_heads*head_dim"));
    PLUMB_ASSIGN_OR_RETURN(l.v_bias,
                           vec(p + "self_attn.v_proj.bias", kv_out, "num_key_value_heads*head_dim"));
  }
  if (c.qk_norm) {
    PLUMB_ASSIGN_OR_RETURN(l.q_norm, vec(p + "self_attn.q_norm.weight", hd, "head_dim"));
    PLUMB_ASSIGN_OR_RETURN(l.k_norm, vec(p + "self_attn.k_norm.weight", hd, "head_dim"));
  }
  PLUMB_ASSIGN_OR_RETURN(l.post_attention_norm, vec(p + "post_attention_layernorm.weight", d, "hidden_size"));
  PLUMB_ASSIGN_OR_RETURN(l.gate_proj,
                         matrix(p + "mlp.gate_proj.weight", ff, d, "intermediate_size x hidden_size", true));
  PLUMB_ASSIGN_OR_RETURN(l.up_proj,
                         matrix(p + "mlp.up_proj.weight", ff, d, "intermediate_size x hidden_size", true));
  PLUMB_ASSIGN_OR_RETURN(l.down_proj,
                         matrix(p + "mlp.down_proj.weight", d, ff, "hidden_size x intermediate_size", true));
  return l;
}

}  // namespace

Result<ModelWeights> ModelWeights::from_tensors(const ModelConfig& c,
                                                std::shared_ptr<const ModelTensors> tensors,
                                                WeightDType dtype, ThreadPool* pool, Quantization quant) {
  ModelWeights w;
  const ModelTensors& t = *tensors;  // kept alive by w.tensors_
  w.tensors_ = std::move(tensors);
  w.quant_ = quant;
  const int64_t d = c.hidden_size, vocab = c.vocab_size;

  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, const char* meaning,
                    bool linear = false) -> Result<WeightMatrix> {
    PLUMB_ASSIGN_OR_RETURN(TensorView v, get_checked(t, name, {rows, cols}, meaning));
    WeightMatrix m;
    m.rows = rows;
    m.cols = cols;
    DType stored = to_dtype(v.dtype);
    if (linear && quant.scheme != QuantScheme::kNone) {  // straight from the stored values
      m.data = v.data;
      m.dtype = stored;
      return w.quantize(m, name, pool);
    }
    DType target = dtype == WeightDType::kF32    ? DType::kF32
                   : dtype == WeightDType::kBF16 ? DType::kBF16
                                                 : stored;
    const bool aligned = reinterpret_cast<uintptr_t>(v.data) % dtype_size(stored) == 0;
    if (target == stored && aligned) {
      m.data = v.data;  // zero copy: a view into the memory map
      m.dtype = stored;
      return m;
    }
    const int64_t n = rows * cols;
    void* dst = w.own(size_t(n) * dtype_size(target));
    copy_converted(v, target, rows, cols, dst, pool);
    m.data = dst;
    m.dtype = target;
    return m;
  };
  auto vec = [&](const std::string& name, int64_t n, const char* meaning) -> Result<std::vector<float>> {
    PLUMB_ASSIGN_OR_RETURN(TensorView v, get_checked(t, name, {n}, meaning));
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = element_f32(v.data, v.dtype, i);
    return out;
  };

  PLUMB_ASSIGN_OR_RETURN(w.embed, matrix("model.embed_tokens.weight", vocab, d, "vocab_size x hidden_size"));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    if (!t.contains("lm_head.weight")) {
      return not_found("tensor 'lm_head.weight' not found, and tie_word_embeddings is false in config.json");
    }
    PLUMB_ASSIGN_OR_RETURN(w.lm_head, matrix("lm_head.weight", vocab, d, "vocab_size x hidden_size"));
  }
  PLUMB_ASSIGN_OR_RETURN(w.final_norm, vec("model.norm.weight", d, "hidden_size"));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    PLUMB_ASSIGN_OR_RETURN(LayerWeights l, load_layer(c, p, matrix, vec));
    w.layers.push_back(std::move(l));
  }
  return w;
}

namespace {

// normal(0, std) by inverse-CDF lookup: a 16-bit uniform u picks std * Φ⁻¹((u + 0.5) / 65536), so
// each 64-bit draw gives four values and generation is a table lookup per weight (Qwen2.5-0.5B's
// 494M weights in a few seconds on two cores). The quantized distribution has the normal's shape
// to ±4.3σ.
template <typename T>
std::vector<T> normal_table(float std_dev) {
  std::vector<T> t(65536);
  for (int i = 0; i < 65536; ++i) {
    const double p = (double(i) + 0.5) / 65536.0;
    const float x = float(std_dev * std::sqrt(2.0) * boost::math::erf_inv(2.0 * p - 1.0));
    if constexpr (std::is_same_v<T, float>) {
      t[size_t(i)] = x;
    } else {
      t[size_t(i)] = f32_to_bf16(x);
    }
  }
  return t;
}

}  // namespace

namespace {

// dst[0, n) of dtype dt (f32 or bf16) from the seeded normal tables, 65536 values per chunk. Each
// chunk has its own stream, so the values do not depend on how chunks meet threads.
void fill_normal(void* dst, int64_t n, DType dt, uint64_t tseed, const std::vector<float>& table_f32,
                 const std::vector<uint16_t>& table_bf16, ThreadPool* pool) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel(pool, chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      Rng rng(Rng(tseed ^ (uint64_t(ch) * 0xD1B54A32D192ED03ULL)).next_u64());
      const int64_t b = ch * kChunk, e = std::min(n, b + kChunk);
      for (int64_t i = b; i < e; i += 4) {
        uint64_t r = rng.next_u64();
        for (int64_t j = i; j < std::min(e, i + 4); ++j, r >>= 16) {
          if (dt == DType::kF32) {
            static_cast<float*>(dst)[j] = table_f32[r & 0xffff];
          } else {
            static_cast<uint16_t*>(dst)[j] = table_bf16[r & 0xffff];
          }
        }
      }
    }
  });
}

}  // namespace

Result<ModelWeights> ModelWeights::dummy(const ModelConfig& c, uint64_t seed, WeightDType dtype,
                                         ThreadPool* pool, Quantization quant) {
  ModelWeights w;
  w.quant_ = quant;
  const DType dt = dtype == WeightDType::kF32 ? DType::kF32 : DType::kBF16;
  const int64_t d = c.hidden_size, hd = c.head_dim, q_out = c.num_attention_heads * hd,
                kv_out = c.num_key_value_heads * hd, ff = c.intermediate_size, vocab = c.vocab_size;
  constexpr float kStd = 0.02f;
  const std::vector<float> table_f32 = normal_table<float>(kStd);
  const std::vector<uint16_t> table_bf16 = normal_table<uint16_t>(kStd);

  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols,
                    bool linear = false) -> WeightMatrix {
    WeightMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.dtype = dt;
    const int64_t n = rows * cols;
    // A linear to be quantized is generated into a temporary, quantized, and the temporary dropped.
    const bool quantized = linear && quant.scheme != QuantScheme::kNone;
    std::vector<unsigned char> tmp(quantized ? size_t(n) * dtype_size(dt) : 0);
    void* dst = quantized ? tmp.data() : w.own(size_t(n) * dtype_size(dt));
    fill_normal(dst, n, dt, derive_seed(seed, name), table_f32, table_bf16, pool);
    m.data = dst;
    if (quantized) return w.quantize(m, name, pool).value();  // seeded normals are finite
    return m;
  };
  auto bias = [&](const std::string& name, int64_t n) {
    std::vector<float> b(static_cast<size_t>(n));
    Rng rng(derive_seed(seed, name));
    for (auto& x : b) x = table_f32[rng.next_u64() & 0xffff];
    return b;
  };
  auto ones = [](int64_t n) { return std::vector<float>(size_t(n), 1.0f); };

  w.embed = matrix("model.embed_tokens.weight", vocab, d);
  w.lm_head = c.tie_word_embeddings ? w.embed : matrix("lm_head.weight", vocab, d);
  w.final_norm = ones(d);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.input_norm = ones(d);
    l.q_proj = matrix(p + "self_attn.q_proj.weight", q_out, d, true);
    l.k_proj = matrix(p + "self_attn.k_proj.weight", kv_out, d, true);
    l.v_proj = matrix(p + "self_attn.v_proj.weight", kv_out, d, true);
    l.o_proj = matrix(p + "self_attn.o_proj.weight", d, q_out, true);
    if (c.attention_bias) {
      l.q_bias = bias(p + "self_attn.q_proj.bias", q_out);
      l.k_bias = bias(p + "self_attn.k_proj.bias", kv_out);
      l.v_bias = bias(p + "self_attn.v_proj.bias", kv_out);
    }
    if (c.qk_norm) {
      l.q_norm = ones(hd);
      l.k_norm = ones(hd);
    }
    l.post_attention_norm = ones(d);
    l.gate_proj = matrix(p + "mlp.gate_proj.weight", ff, d, true);
    l.up_proj = matrix(p + "mlp.up_proj.weight", ff, d, true);
    l.down_proj = matrix(p + "mlp.down_proj.weight", d, ff, true);
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace plumb::engine
