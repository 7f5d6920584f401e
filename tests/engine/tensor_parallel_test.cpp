// The tensor-parallel split (engine/tensor_parallel.h) on the host: which sizes split a model, that
// the ranks' slices tile every matrix once and keep GQA's query heads with their KV head, that the
// ranks' partial sums add up to the whole layer's output, and what each card holds.
#include "engine/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

namespace plumb::engine {
namespace {

// Llama-3-70B's shapes (issue 29's figure model).
ModelConfig llama70b() {
  ModelConfig c;
  c.vocab_size = 128256, c.hidden_size = 8192, c.intermediate_size = 28672, c.num_hidden_layers = 80;
  c.num_attention_heads = 64, c.num_key_value_heads = 8, c.head_dim = 128;
  return c;
}

ModelConfig small(int64_t nh, int64_t nkv, int64_t hd, int64_t ff, int64_t d) {
  ModelConfig c;
  c.vocab_size = 50, c.hidden_size = d, c.intermediate_size = ff, c.num_hidden_layers = 2;
  c.num_attention_heads = nh, c.num_key_value_heads = nkv, c.head_dim = hd;
  return c;
}

TEST(TensorParallel, SizesThatDoNotSplitTheModelAreRefusedNamingThoseThatDo) {
  const ModelConfig c = llama70b();
  for (int32_t n : {1, 2, 4, 8}) EXPECT_TRUE(check_tensor_parallel(c, n).ok()) << n;
  const Status three = check_tensor_parallel(c, 3);
  EXPECT_EQ(three.code(), Code::kInvalidArgument);
  EXPECT_NE(three.message().find("8 KV heads"), std::string::npos) << three.message();
  EXPECT_NE(three.message().find("1, 2, 4, 8)"), std::string::npos) << three.message();
  EXPECT_FALSE(check_tensor_parallel(c, 16).ok());  // KV heads are not replicated
  EXPECT_FALSE(check_tensor_parallel(c, 0).ok());
  const Status ff = check_tensor_parallel(small(8, 4, 4, 30, 32), 4);
  EXPECT_EQ(ff.code(), Code::kInvalidArgument);
  EXPECT_NE(ff.message().find("intermediate_size 30"), std::string::npos) << ff.message();
  EXPECT_NE(ff.message().find("1, 2)"), std::string::npos) << ff.message();
}

// The ranks' ranges, one after the other, cover [0, total) exactly.
void expect_tiles(const std::vector<std::pair<int64_t, int64_t>>& ranges, int64_t total, const char* what) {
  int64_t at = 0;
  for (const auto& [b, e] : ranges) {
    EXPECT_EQ(b, at) << what;
    EXPECT_GT(e, b) << what;
    at = e;
  }
  EXPECT_EQ(at, total) << what;
}

TEST(TensorParallel, TheRanksSlicesTileEveryMatrixOnce) {
  for (const ModelConfig& c : {llama70b(), small(14, 2, 64, 4864, 896), small(8, 4, 4, 24, 32)}) {
    const int64_t hd = c.head_dim, d = c.hidden_size;
    for (int32_t n : {1, 2}) {
      ASSERT_TRUE(check_tensor_parallel(c, n).ok());
      std::vector<std::pair<int64_t, int64_t>> q, kv, o, fin, down;
      for (int32_t r = 0; r < n; ++r) {
        const TensorShard s = tensor_shard(c, r, n);
        const MatrixSlice qs = q_proj_slice(c, s), ks = kv_proj_slice(c, s), os = o_proj_slice(c, s),
                          fs = ffn_in_slice(c, s), ds = down_proj_slice(c, s);
        q.emplace_back(qs.r0, qs.r1);
        kv.emplace_back(ks.r0, ks.r1);
        o.emplace_back(os.c0, os.c1);
        fin.emplace_back(fs.r0, fs.r1);
        down.emplace_back(ds.c0, ds.c1);
        // Column-parallel matrices keep every input column; row-parallel ones every output row.
        for (const MatrixSlice& col : {qs, ks, fs}) {
          EXPECT_EQ(col.c0, 0);
          EXPECT_EQ(col.c1, d);
        }
        for (const MatrixSlice& row : {os, ds}) {
          EXPECT_EQ(row.r0, 0);
          EXPECT_EQ(row.r1, d);
        }
        // o_proj's columns are the rank's heads, as q_proj's rows are; down's its SwiGLU columns.
        EXPECT_EQ(std::make_pair(os.c0, os.c1), std::make_pair(qs.r0, qs.r1));
        EXPECT_EQ(std::make_pair(ds.c0, ds.c1), std::make_pair(fs.r0, fs.r1));
      }
      expect_tiles(q, c.num_attention_heads * hd, "q_proj rows");
      expect_tiles(kv, c.num_key_value_heads * hd, "k/v_proj rows");
      expect_tiles(o, c.num_attention_heads * hd, "o_proj columns");
      expect_tiles(fin, c.intermediate_size, "gate/up_proj rows");
      expect_tiles(down, c.intermediate_size, "down_proj columns");
    }
  }
  // Size 8 of the 70B model: one KV head and eight query heads per card.
  const TensorShard s = tensor_shard(llama70b(), 7, 8);
  EXPECT_EQ(s.kv_heads, 1);
  EXPECT_EQ(s.kv_head0, 7);
  EXPECT_EQ(s.heads, 8);
  EXPECT_EQ(s.q_head0, 56);
  EXPECT_EQ(s.ffn, 3584);
}

TEST(TensorParallel, EveryQueryHeadHasItsKvHeadOnItsOwnCard) {
  for (const ModelConfig& c : {llama70b(), small(28, 4, 128, 18944, 3584), small(32, 8, 128, 14336, 4096)}) {
    const int64_t group = c.num_attention_heads / c.num_key_value_heads;
    for (int32_t n = 1; n <= 8; n *= 2) {
      if (!check_tensor_parallel(c, n).ok()) continue;
      for (int32_t r = 0; r < n; ++r) {
        const TensorShard s = tensor_shard(c, r, n);
        EXPECT_EQ(s.heads / s.kv_heads, group);  // the rank's attention keeps the model's GQA ratio
        for (int64_t h = s.q_head0; h < s.q_head0 + s.heads; ++h) {
          EXPECT_GE(h / group, s.kv_head0) << "size " << n << " rank " << r << " head " << h;
          EXPECT_LT(h / group, s.kv_head0 + s.kv_heads) << "size " << n << " rank " << r << " head " << h;
        }
      }
    }
  }
}

std::vector<float> random_vec(size_t n, std::mt19937& g) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(g);
  return v;
}

// y[r] = Σ_c W[r, c] x[c] over the slice's rows and columns (W row-major with `cols` columns).
std::vector<float> matvec(const std::vector<float>& w, int64_t cols, const MatrixSlice& s, const float* x) {
  std::vector<float> y(size_t(s.rows()), 0.0f);
  for (int64_t r = s.r0; r < s.r1; ++r)
    for (int64_t c = s.c0; c < s.c1; ++c) y[size_t(r - s.r0)] += w[size_t(r * cols + c)] * x[c - s.c0];
  return y;
}

// What the runner's all-reduces rely on: o_proj and the MLP computed per rank from the rank's
// slices give partial sums whose total is the whole layer's output.
TEST(TensorParallel, TheRanksPartialSumsAddUpToTheWholeLayer) {
  const ModelConfig c = small(8, 4, 4, 24, 16);
  const int64_t d = c.hidden_size, hd = c.head_dim, ff = c.intermediate_size, nh = c.num_attention_heads;
  std::mt19937 g(7);
  const std::vector<float> wo = random_vec(size_t(d * nh * hd), g), attn = random_vec(size_t(nh * hd), g);
  const std::vector<float> wg = random_vec(size_t(ff * d), g), wu = random_vec(size_t(ff * d), g),
                           wd = random_vec(size_t(d * ff), g), x = random_vec(size_t(d), g);
  auto mlp = [&](const TensorShard& s) {
    const MatrixSlice in = ffn_in_slice(c, s), down = down_proj_slice(c, s);
    const std::vector<float> gate = matvec(wg, d, in, x.data()), up = matvec(wu, d, in, x.data());
    std::vector<float> act(gate.size());
    for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
    return matvec(wd, ff, down, act.data());
  };
  const TensorShard whole = tensor_shard(c, 0, 1);
  const std::vector<float> o_full = matvec(wo, nh * hd, o_proj_slice(c, whole), attn.data());
  const std::vector<float> mlp_full = mlp(whole);
  for (int32_t n : {2, 4}) {
    ASSERT_TRUE(check_tensor_parallel(c, n).ok());
    std::vector<float> o_sum(size_t(d), 0.0f), mlp_sum(size_t(d), 0.0f);
    for (int32_t r = 0; r < n; ++r) {
      const TensorShard s = tensor_shard(c, r, n);
      const MatrixSlice os = o_proj_slice(c, s);
      const std::vector<float> o_part =
          matvec(wo, nh * hd, os, attn.data() + os.c0);  // the rank's heads only
      const std::vector<float> m_part = mlp(s);
      for (int64_t i = 0; i < d; ++i)
        o_sum[size_t(i)] += o_part[size_t(i)], mlp_sum[size_t(i)] += m_part[size_t(i)];
    }
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(o_sum[size_t(i)], o_full[size_t(i)], 1e-4f) << "size " << n << " row " << i;
      EXPECT_NEAR(mlp_sum[size_t(i)], mlp_full[size_t(i)], 1e-3f) << "size " << n << " row " << i;
    }
  }
}

TEST(TensorParallel, EachCardHoldsItsSlicesAndTheSharedPartsOnce) {
  ModelConfig c = llama70b();
  const int64_t d = c.hidden_size, hd = c.head_dim, L = c.num_hidden_layers;
  const int64_t whole = shard_weight_bytes(c, tensor_shard(c, 0, 1));
  // On every card: the embedding, each layer's two norms and q/k norms, the final norm.
  const int64_t shared = c.vocab_size * d * 2 + L * (2 * d + 2 * hd) * 4 + d * 4;
  for (int32_t n : {2, 4, 8}) {
    int64_t sum = 0;
    for (int32_t r = 0; r < n; ++r) sum += shard_weight_bytes(c, tensor_shard(c, r, n));
    EXPECT_EQ(sum, whole + (n - 1) * shared) << n;
  }
  // The untied lm_head is rank 0's alone: 2 GB more on card 0 than on card 1 at 70B.
  EXPECT_EQ(shard_weight_bytes(c, tensor_shard(c, 0, 8)) - shard_weight_bytes(c, tensor_shard(c, 1, 8)),
            c.vocab_size * d * 2);
  // 70B in bf16 is ~141 GB: past one 80 GB card, within each of 4.
  EXPECT_GT(whole, int64_t(78) << 30);
  EXPECT_LT(shard_weight_bytes(c, tensor_shard(c, 0, 4)), int64_t(40) << 30);
  c.tie_word_embeddings = true;
  EXPECT_EQ(shard_weight_bytes(c, tensor_shard(c, 0, 8)), shard_weight_bytes(c, tensor_shard(c, 1, 8)));
}

}  // namespace
}  // namespace plumb::engine
