#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/file.h"
#include "engine/cpu/observer.h"
#include "engine/cpu/packed.h"
#include "engine/sampling.h"

namespace plumb::engine {

Result<std::unique_ptr<Model>> Model::from_weights(const ModelConfig& config, ModelWeights weights,
                                                   const ModelOptions& opts) {
  std::unique_ptr<Model> m(new Model());
  m->config_ = config;
  m->weights_ = std::move(weights);
  int threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  m->pool_ = std::make_unique<ThreadPool>(threads);
  m->upload_only_ = opts.upload_only;
  PLUMB_RETURN_IF_ERROR(m->set_kernels(opts.kernels));
  m->inv_freq_ = rope_inv_freq(config);
  return m;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const ModelOptions& opts) {
  PLUMB_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir + "/config.json"));
  auto tensors = ModelTensors::open_folder(dir);
  if (!tensors.ok()) return tensors.status();
  auto shared = std::make_shared<const ModelTensors>(std::move(tensors).value());
  // Convert (if asked) on a temporary pool; the model's own pool is created with the model.
  int threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  auto w = ModelWeights::from_tensors(config, shared, opts.dtype, &pool, opts.quantization);
  if (!w.ok()) return w.status().with_context("loading " + dir);
  return from_weights(config, std::move(w).value(), opts);
}

Result<std::unique_ptr<Model>> Model::dummy(const ModelConfig& config, const ModelOptions& opts) {
  int threads = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);
  PLUMB_ASSIGN_OR_RETURN(ModelWeights w,
                         ModelWeights::dummy(config, opts.seed, opts.dtype, &pool, opts.quantization));
  return from_weights(config, std::move(w), opts);
}

Status Model::set_kernels(const KernelSelection& sel) {
  PLUMB_ASSIGN_OR_RETURN(kernels_, resolve_kernels(sel));
  // Every matmul gets the weight layout it reads (packed where both phases' variant reads it), unless
  // the weights are only carried to a device (ModelOptions::upload_only).
  if (upload_only_) kernels_[0].packed16 = kernels_[1].packed16 = false;
  weights_.set_layout(kernels_[0].packed16 ? WeightLayout::kPacked16 : WeightLayout::kRowMajor, pool_.get());
  return Status::Ok();
}

KvCacheConfig Model::kv_config(int32_t num_blocks, int32_t block_size) const {
  KvCacheConfig c;
  c.n_layers = int32_t(config_.num_hidden_layers);
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.n_kv_heads = int32_t(config_.num_key_value_heads);
  c.head_dim = int32_t(config_.head_dim);
  return c;
}

void Model::reserve_workspace(int64_t tokens) {
  if (tokens <= ws_.tokens) return;
  const ModelConfig& c = config_;
  const size_t t = size_t(tokens);
  ws_.tokens = tokens;
  ws_.x.resize(t * size_t(c.hidden_size));
  ws_.h.resize(t * size_t(c.hidden_size));
  ws_.q.resize(t * size_t(c.num_attention_heads * c.head_dim));
  ws_.k.resize(t * size_t(c.num_key_value_heads * c.head_dim));
  ws_.v.resize(t * size_t(c.num_key_value_heads * c.head_dim));
  ws_.attn.resize(t * size_t(c.num_attention_heads * c.head_dim));
  ws_.o.resize(t * size_t(c.hidden_size));
  ws_.gate.resize(t * size_t(c.intermediate_size));
  ws_.up.resize(t * size_t(c.intermediate_size));
  ws_.pos.resize(t);
  ws_.ids.resize(t);
}

namespace {

Status check_batch(const ModelConfig& c, std::span<const SequenceInput> batch, const KvCache& cache) {
  const KvCacheConfig& kc = cache.config();
  if (kc.n_layers != c.num_hidden_layers || kc.n_kv_heads != c.num_key_value_heads ||
      kc.head_dim != c.head_dim) {
    return invalid_argument(
        "forward: the KV cache's geometry (layers, kv heads, head_dim) does not match the model");
  }
  if (batch.empty()) return invalid_argument("forward: empty batch");
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceInput& in = batch[s];
    const std::string who = "forward: sequence " + std::to_string(s) + ": ";
    if (in.tokens.empty()) return invalid_argument(who + "no new tokens");
    if (in.start_pos < 0) return invalid_argument(who + "negative start_pos");
    const int64_t end = int64_t(in.start_pos) + int64_t(in.tokens.size());
    if (end > c.max_context()) {
      return invalid_argument(who + std::to_string(end) + " tokens exceed the model's context of " +
                              std::to_string(c.max_context()) + " tokens");
    }
    if (end > int64_t(in.block_table.size()) * kc.block_size) {
      return invalid_argument(who + "its block table covers " +
                              std::to_string(int64_t(in.block_table.size()) * kc.block_size) +
                              " tokens, it needs " + std::to_string(end));
    }
    for (int32_t b : in.block_table) {
      if (b < 0 || b >= kc.num_blocks) {
        return invalid_argument(who + "block id " + std::to_string(b) + " is outside the cache's " +
                                std::to_string(kc.num_blocks) + " blocks");
      }
    }
    for (int32_t id : in.tokens) {
      if (id < 0 || id >= c.vocab_size) {
        return invalid_argument(who + "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(c.vocab_size) + ")");
      }
    }
  }
  return Status::Ok();
}

// The matmul of a linear layer: Op::kMatmulQuant's variant for quantized weights, else Op::kMatmul's.
MatmulFn linear_fn(const KernelSet& ks, const WeightMatrix& w) {
  return w.quant != QuantScheme::kNone ? ks.matmul_quant : ks.matmul;
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

Status Model::forward(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out) {
  PLUMB_RETURN_IF_ERROR(check_batch(config_, batch, cache));
  // Profiling (engine/cpu/observer.h): null unless `plumb kernels profile` installed one.
  KernelObserver* const obs = kernel_observer();
  if (obs) {
    int64_t rows = 0;
    bool pre = false;
    for (const auto& in : batch) rows += int64_t(in.tokens.size()), pre |= in.tokens.size() > 1;
    Status st;
    observed_call(obs,
                  KernelCall{Op::kCount, pre ? Phase::kPrefill : Phase::kDecode, "forward", -1, rows,
                             int64_t(batch.size()), 0, nullptr},
                  [&] { st = forward_impl(batch, cache, out, obs); });
    return st;
  }
  return forward_impl(batch, cache, out, nullptr);
}

// One function on purpose: the reference forward pass reads top to bottom as the model's equations
// (embedding, per layer norm / attention / MLP, final norm, logits), so it stays unsplit.
// NOLINTNEXTLINE(readability-function-size)
Status Model::forward_impl(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out,
                           KernelObserver* obs) {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim,
                ff = c.intermediate_size, V = c.vocab_size;
  const int32_t bs = cache.config().block_size;

  // Lay the batch out as T rows; decide the phase of the shared ops (see model.h).
  int64_t T = 0;
  bool any_prefill = false;
  for (const auto& in : batch) {
    T += int64_t(in.tokens.size());
    any_prefill |= in.tokens.size() > 1;
  }
  reserve_workspace(T);
  std::vector<AttentionSeq> prefill_seqs, decode_seqs;
  {
    int64_t row = 0;
    for (const auto& in : batch) {
      AttentionSeq a{int32_t(row), int32_t(in.tokens.size()), in.start_pos, in.block_table.data()};
      (in.tokens.size() > 1 ? prefill_seqs : decode_seqs).push_back(a);
      for (size_t j = 0; j < in.tokens.size(); ++j, ++row) {
        ws_.ids[size_t(row)] = in.tokens[j];
        ws_.pos[size_t(row)] = in.start_pos + int32_t(j);
      }
    }
  }
  const KernelSet& ks = kernels_[size_t(any_prefill ? Phase::kPrefill : Phase::kDecode)];
  const KernelContext ctx{pool_.get(), any_prefill ? Phase::kPrefill : Phase::kDecode};
  const KernelContext pctx{pool_.get(), Phase::kPrefill}, dctx{pool_.get(), Phase::kDecode};
  const float scale = 1.0f / std::sqrt(float(hd));
  const float eps = float(c.rms_norm_eps);

  float* x = ws_.x.data();        // [T, d]
  float* h = ws_.h.data();        // [T, d]
  float* q = ws_.q.data();        // [T, nh, hd]
  float* k = ws_.k.data();        // [T, nkv, hd]
  float* v = ws_.v.data();        // [T, nkv, hd]
  float* attn = ws_.attn.data();  // [T, nh, hd]
  float* o = ws_.o.data();        // [T, d]
  float* gate = ws_.gate.data();  // [T, ff]
  float* up = ws_.up.data();      // [T, ff]
  const int32_t* pos = ws_.pos.data();

  // x = embed[ids]
  const Phase ph = ctx.phase;
  // Linear layers with quantized weights go to Op::kMatmulQuant (engine/cpu/quant.h).
  const Op lin_op = weights_.quantization().scheme != QuantScheme::kNone ? Op::kMatmulQuant : Op::kMatmul;
  // A packed (tied) table, engine/cpu/packed.h: the registered lookups read row-major tables.
  const bool packed_embed = weights_.embed.layout != WeightLayout::kRowMajor;
  PLUMB_OBSERVED_CALL(
      obs, (KernelCall{Op::kEmbedding, ph, "embedding", -1, T, d, 0, nullptr}),
      packed_embed ? embedding_bf16_any_layout(ws_.ids.data(), T, weights_.embed, x)
                   : ks.embedding(ctx, ws_.ids.data(), T, weights_.embed.data, weights_.embed.dtype, d, x));

  for (int64_t li = 0; li < c.num_hidden_layers; ++li) {
    const LayerWeights& L = weights_.layers[size_t(li)];
    const KvLayerView kv = cache.layer(int32_t(li));

    // --- attention block: x += o_proj(attention(rope(q), rope(k), v)) over rmsnorm(x)
    const int32_t lj = int32_t(li);
    const RmsNormCallArgs in_norm_args{x, L.input_norm.data(), eps};
    PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kRmsNorm, ph, "input_norm", lj, T, d, d, &in_norm_args}),
                        ks.rmsnorm(ctx, x, L.input_norm.data(), T, d, eps, h));
    const float* q_bias = L.q_bias.empty() ? nullptr : L.q_bias.data();
    const float* k_bias = L.k_bias.empty() ? nullptr : L.k_bias.data();
    const float* v_bias = L.v_bias.empty() ? nullptr : L.v_bias.data();
    const MatmulCallArgs q_args{h, &L.q_proj, q_bias}, k_args{h, &L.k_proj, k_bias},
        v_args{h, &L.v_proj, v_bias};
    PLUMB_OBSERVED_CALL(obs, (KernelCall{lin_op, ph, "q_proj", lj, T, nh * hd, d, &q_args}),
                        linear_fn(ks, L.q_proj)(ctx, h, T, L.q_proj, q_bias, q));  // [T, nh*hd]
    PLUMB_OBSERVED_CALL(obs, (KernelCall{lin_op, ph, "k_proj", lj, T, nkv * hd, d, &k_args}),
                        linear_fn(ks, L.k_proj)(ctx, h, T, L.k_proj, k_bias, k));  // [T, nkv*hd]
    PLUMB_OBSERVED_CALL(obs, (KernelCall{lin_op, ph, "v_proj", lj, T, nkv * hd, d, &v_args}),
                        linear_fn(ks, L.v_proj)(ctx, h, T, L.v_proj, v_bias, v));  // [T, nkv*hd]
    if (c.qk_norm) {  // Qwen3: RMSNorm over each head's hd values, before RoPE
      const RmsNormCallArgs qn{q, L.q_norm.data(), eps}, kn{k, L.k_norm.data(), eps};
      PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kRmsNorm, ph, "q_norm", lj, T * nh, hd, hd, &qn}),
                          ks.rmsnorm(ctx, q, L.q_norm.data(), T * nh, hd, eps, q));
      PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kRmsNorm, ph, "k_norm", lj, T * nkv, hd, hd, &kn}),
                          ks.rmsnorm(ctx, k, L.k_norm.data(), T * nkv, hd, eps, k));
    }
    const RopeCallArgs rq{q, pos, inv_freq_.data()}, rk{k, pos, inv_freq_.data()};
    PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kRope, ph, "rope_q", lj, T, nh, hd, &rq}),
                        ks.rope(ctx, q, T, nh, hd, pos, inv_freq_.data()));
    PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kRope, ph, "rope_k", lj, T, nkv, hd, &rk}),
                        ks.rope(ctx, k, T, nkv, hd, pos, inv_freq_.data()));
    // Append the new K/V rows to the paged cache: position p lives in block table[p / bs], slot p % bs.
    {
      int64_t row = 0;
      const size_t kv_row = size_t(nkv * hd) * sizeof(float);
      for (const auto& in : batch) {
        for (size_t j = 0; j < in.tokens.size(); ++j, ++row) {
          const int32_t p = in.start_pos + int32_t(j);
          const int32_t blk = in.block_table[size_t(p / bs)], slot = p % bs;
          std::memcpy(cache.k_at(int32_t(li), blk, slot), k + row * nkv * hd, kv_row);
          std::memcpy(cache.v_at(int32_t(li), blk, slot), v + row * nkv * hd, kv_row);
        }
      }
    }
    // Attention per phase: each sequence's rows of attn are written by exactly one call.
    if (!prefill_seqs.empty()) {
      const AttentionCallArgs aa{q, &kv, prefill_seqs, int32_t(nh), scale};
      PLUMB_OBSERVED_CALL(obs,
                          (KernelCall{Op::kAttention, Phase::kPrefill, "attention", lj,
                                      int64_t(prefill_seqs.size()), nh, hd, &aa}),
                          kernels_[0].attention(pctx, q, kv, prefill_seqs, int32_t(nh), scale, attn));
    }
    if (!decode_seqs.empty()) {
      const AttentionCallArgs aa{q, &kv, decode_seqs, int32_t(nh), scale};
      PLUMB_OBSERVED_CALL(obs,
                          (KernelCall{Op::kAttention, Phase::kDecode, "attention", lj,
                                      int64_t(decode_seqs.size()), nh, hd, &aa}),
                          kernels_[1].attention(dctx, q, kv, decode_seqs, int32_t(nh), scale, attn));
    }
    const MatmulCallArgs o_args{attn, &L.o_proj, nullptr};
    PLUMB_OBSERVED_CALL(obs, (KernelCall{lin_op, ph, "o_proj", lj, T, d, nh * hd, &o_args}),
                        linear_fn(ks, L.o_proj)(ctx, attn, T, L.o_proj, nullptr, o));  // [T, d]
    add_inplace(x, o, T * d);

    // --- MLP block: x += down(silu(gate(h)) * up(h)) over h = rmsnorm(x)
    const RmsNormCallArgs post_norm_args{x, L.post_attention_norm.data(), eps};
    PLUMB_OBSERVED_CALL(obs,
                        (KernelCall{Op::kRmsNorm, ph, "post_attention_norm", lj, T, d, d, &post_norm_args}),
                        ks.rmsnorm(ctx, x, L.post_attention_norm.data(), T, d, eps, h));
    const MatmulCallArgs g_args{h, &L.gate_proj, nullptr}, u_args{h, &L.up_proj, nullptr};
    PLUMB_OBSERVED_CALL(obs, (KernelCall{lin_op, ph, "gate_proj", lj, T, ff, d, &g_args}),
                        linear_fn(ks, L.gate_proj)(ctx, h, T, L.gate_proj, nullptr, gate));  // [T, ff]
    PLUMB_OBSERVED_CALL(obs, (KernelCall{lin_op, ph, "up_proj", lj, T, ff, d, &u_args}),
                        linear_fn(ks, L.up_proj)(ctx, h, T, L.up_proj, nullptr, up));  // [T, ff]
    const SwigluCallArgs sw_args{gate, up};
    PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kSwiglu, ph, "swiglu", lj, T, ff, ff, &sw_args}),
                        ks.swiglu(ctx, gate, up, T, ff, gate));  // [T, ff]
    const MatmulCallArgs dn_args{gate, &L.down_proj, nullptr};
    PLUMB_OBSERVED_CALL(obs, (KernelCall{lin_op, ph, "down_proj", lj, T, d, ff, &dn_args}),
                        linear_fn(ks, L.down_proj)(ctx, gate, T, L.down_proj, nullptr, o));  // [T, d]
    add_inplace(x, o, T * d);
  }

  // Gather the rows that want logits into h: [R, d], then final norm and lm_head.
  out->first_row.assign(batch.size(), 0);
  out->n_rows.assign(batch.size(), 0);
  int64_t R = 0, row = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t n = int64_t(batch[s].tokens.size());
    const int64_t first = batch[s].all_logits ? row : row + n - 1;
    const int64_t cnt = batch[s].no_logits ? 0 : batch[s].all_logits ? n : 1;
    out->first_row[s] = int32_t(R);
    out->n_rows[s] = int32_t(cnt);
    std::memmove(h + R * d, x + first * d, size_t(cnt * d) * sizeof(float));
    R += cnt;
    row += n;
  }
  // lm_head is decode-shaped (one row per sequence) unless a sequence asked for all its rows: a
  // prefill-tuned GEMM would convert the whole [V, d] table for a handful of rows.
  out->vocab = V;
  out->logits.resize(size_t(R * V));
  if (R == 0) return Status::Ok();
  const bool lm_prefill = R > int64_t(batch.size());
  const KernelSet& ls = kernels_[size_t(lm_prefill ? Phase::kPrefill : Phase::kDecode)];
  const KernelContext lctx{pool_.get(), lm_prefill ? Phase::kPrefill : Phase::kDecode};
  const Phase lph = lctx.phase;
  const RmsNormCallArgs fn_args{h, weights_.final_norm.data(), eps};
  PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kRmsNorm, lph, "final_norm", -1, R, d, d, &fn_args}),
                      ls.rmsnorm(lctx, h, weights_.final_norm.data(), R, d, eps, h));
  const MatmulCallArgs lm_args{h, &weights_.lm_head, nullptr};
  PLUMB_OBSERVED_CALL(obs, (KernelCall{Op::kMatmul, lph, "lm_head", -1, R, V, d, &lm_args}),
                      ls.matmul(lctx, h, R, weights_.lm_head, nullptr, out->logits.data()));  // [R, V]
  return Status::Ok();
}

}  // namespace plumb::engine
