// Reference kernels: plain loops, one output element at a time, written to be read. Every fast
// variant is tested against these.
#include "engine/cpu/reference.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cpu/thread_pool.h"

namespace plumb::engine::ref {

float load_weight(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[index];
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(data)[index]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(data)[index]);
  }
  return 0.0f;
}

void matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w, const float* bias,
            float* y) {
  // x: [m, k]; W: [n, k] (w.dtype); bias: [n] or null; y: [m, n].
  const int64_t n = w.rows, k = w.cols;
  auto columns = [&](int64_t n_begin, int64_t n_end) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = n_begin; j < n_end; ++j) {
        double acc = bias ? double(bias[j]) : 0.0;
        for (int64_t p = 0; p < k; ++p)
          acc += double(x[i * k + p]) * double(load_weight(w.data, w.dtype, j * k + p));
        y[i * n + j] = float(acc);
      }
    }
  };
  if (ctx.pool) {
    ctx.pool->parallel_for(n, columns);
  } else {
    columns(0, n);
  }
}

void rmsnorm(const KernelContext&, const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
             float* y) {
  // x, y: [rows, dim]; weight: [dim]. y may alias x: each row is read fully before it is written.
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += double(xr[i]) * double(xr[i]);
    double inv_rms = 1.0 / std::sqrt(sum_sq / double(dim) + double(eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = float(double(xr[i]) * inv_rms * double(weight[i]));
  }
}

void rope(const KernelContext&, float* x, int64_t tokens, int64_t n_heads, int64_t head_dim,
          const int32_t* positions, const float* inv_freq) {
  // x: [tokens, n_heads, head_dim]; positions: [tokens]; inv_freq: [head_dim / 2].
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // The angle is formed in float, as Hugging Face does (positions * inv_freq in float32).
        float angle = float(positions[t]) * inv_freq[i];
        double c = std::cos(double(angle)), s = std::sin(double(angle));
        double a = v[i], b = v[i + half];
        v[i] = float(a * c - b * s);
        v[i + half] = float(b * c + a * s);
      }
    }
  }
}

void swiglu(const KernelContext&, const float* gate, const float* up, int64_t rows, int64_t dim, float* out) {
  // gate, up, out: [rows, dim]; out may alias gate (element-wise).
  for (int64_t i = 0; i < rows * dim; ++i) {
    double g = gate[i];
    double silu = g / (1.0 + std::exp(-g));
    out[i] = float(silu * double(up[i]));
  }
}

void embedding(const KernelContext&, const int32_t* ids, int64_t tokens, const void* table, DType dtype,
               int64_t dim, float* out) {
  // ids: [tokens]; table: [vocab, dim] (dtype); out: [tokens, dim]. ids are trusted (the caller
  // validated them against the vocabulary).
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = load_weight(table, dtype, int64_t(ids[t]) * dim + i);
  }
}

void attention(const KernelContext&, const float* q, const KvLayerView& kv,
               std::span<const AttentionSeq> seqs, int32_t n_heads, float scale, float* out) {
  // q, out: [tokens, n_heads, head_dim]; kv.k, kv.v: [num_blocks, block_size, n_kv_heads, head_dim].
  const int64_t hd = kv.head_dim, n_kv = kv.n_kv_heads, bs = kv.block_size;
  const int64_t group = n_heads / n_kv;  // query heads per KV head
  std::vector<double> scores;            // [context] for one (token, head)
  for (const AttentionSeq& s : seqs) {
    for (int64_t j = 0; j < s.n_q; ++j) {
      const int64_t row = s.q_row + j;
      const int64_t context = int64_t(s.start_pos) + j + 1;  // causal: positions [0, start_pos + j]
      scores.assign(size_t(context), 0.0);
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t kvh = h / group;
        const float* qv = q + (row * n_heads + h) * hd;
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t p = 0; p < context; ++p) {
          const int64_t slot = int64_t(s.block_table[p / bs]) * bs + p % bs;  // physical token slot
          const float* kp = kv.k + (slot * n_kv + kvh) * hd;
          double dot = 0.0;
          for (int64_t i = 0; i < hd; ++i) dot += double(qv[i]) * double(kp[i]);
          scores[size_t(p)] = dot * double(scale);
          max_score = std::max(max_score, scores[size_t(p)]);
        }
        double denom = 0.0;
        for (int64_t p = 0; p < context; ++p) {
          scores[size_t(p)] = std::exp(scores[size_t(p)] - max_score);
          denom += scores[size_t(p)];
        }
        float* o = out + (row * n_heads + h) * hd;
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0.0;
          for (int64_t p = 0; p < context; ++p) {
            const int64_t slot = int64_t(s.block_table[p / bs]) * bs + p % bs;
            acc += scores[size_t(p)] * double(kv.v[(slot * n_kv + kvh) * hd + i]);
          }
          o[i] = float(acc / denom);
        }
      }
    }
  }
}

}  // namespace plumb::engine::ref

namespace plumb::engine::detail {

void register_reference_kernels(KernelRegistry& r) {
  const char* d = "readable loops, double accumulation; the oracle every fast variant is tested against";
  r.add(Op::kMatmul, {"reference", d, nullptr, &ref::matmul});
  r.add(Op::kRmsNorm, {"reference", d, nullptr, &ref::rmsnorm});
  r.add(Op::kRope, {"reference", d, nullptr, &ref::rope});
  r.add(Op::kSwiglu, {"reference", d, nullptr, &ref::swiglu});
  r.add(Op::kEmbedding, {"reference", d, nullptr, &ref::embedding});
  r.add(Op::kAttention, {"reference", d, nullptr, &ref::attention});
}

}  // namespace plumb::engine::detail
