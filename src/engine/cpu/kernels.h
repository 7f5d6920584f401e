// The kernel interface of the reference engine: every module boundary of the forward pass is a
// function pointer of one of the types below, looked up by (device, operation, variant name) in the
// registry. Every operation has a readable "reference" variant; faster variants ("avx2",
// "onednn", ...) are tested against it. A KernelSelection picks a variant per operation and per
// phase (prefill/decode); this is the substrate `plumb kernels` works on.
//
// Conventions for every kernel:
//  - activations are float32, row-major, contiguous unless a stride is given;
//  - a weight matrix is [rows = out_features, cols = in_features] row-major in its stored dtype
//    (possibly a read-only memory map: kernels never write weights);
//  - kernels may use ctx.pool to parallelize; they must be correct for any thread count;
//  - kernels do not allocate per call on the hot path except through ctx.scratch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace plumb::engine {

enum class DType : uint8_t { kF32, kF16, kBF16 };
const char* dtype_name(DType t);
size_t dtype_size(DType t);

enum class Phase : uint8_t { kPrefill = 0, kDecode = 1 };
const char* phase_name(Phase p);

class ThreadPool;  // engine/cpu/thread_pool.h

struct KernelContext {
  ThreadPool* pool = nullptr;  // may be null: run on the calling thread
  Phase phase = Phase::kPrefill;
};

// Weight-only quantization of a linear layer's matrix (formats: engine/cpu/quant.h).
enum class QuantScheme : uint8_t { kNone, kInt8, kInt4 };
const char* quant_scheme_name(QuantScheme q);  // "none", "int8", "int4"

// What --quantization asks for (formats and kernels: engine/cpu/quant.h). group_size is only meaningful for
// int4 (32 or 64).
struct Quantization {
  QuantScheme scheme = QuantScheme::kNone;
  int32_t group_size = 0;
  // "none", "int8", "int4" (group 32), "int4-g64".
  std::string name() const;
};
// "none" | "int8" | "int4" (= int4 with groups of 32) | "int4-g32" | "int4-g64";
// InvalidArgument naming the accepted values otherwise.
Result<Quantization> parse_quantization(const std::string& s);

// How a bf16 weight matrix's elements are laid out in memory (engine/cpu/packed.h).
//  kRowMajor: W[r, c] at r * cols + c, the file's layout.
//  kPacked16: bf16 only, rows % 16 == 0, cols even; 16 output features side by side, two input
//             features per feature: W[r, c] at ((r / 16 * cols / 2 + c / 2) * 16 + r % 16) * 2 + c % 2.
//             Every 16-row group is one contiguous run (the same bytes as in kRowMajor), read front
//             to back by the kernels that take it: only variants with KernelVariant::reads_packed16.
enum class WeightLayout : uint8_t { kRowMajor, kPacked16 };

// A weight matrix W[rows, cols] (out_features x in_features), row-major (unless `layout` says
// kPacked16), stored dtype.
struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;  // out features
  int64_t cols = 0;  // in features
  // Weight-only quantization. kNone: data holds `dtype` elements (above). Otherwise `dtype` is
  // unused, data holds codes in the layout of engine/cpu/quant.h, and only Op::kMatmulQuant
  // variants read it: int8 W[r, c] ~ scales[r] * q; int4 W[r, c] ~ scales[r, g] * q + mins[r, g],
  // g = c / group_size.
  QuantScheme quant = QuantScheme::kNone;
  const float* scales = nullptr;                  // int8: [rows]; int4: [rows, groups]
  const float* mins = nullptr;                    // int4: [rows, groups]; null otherwise
  int32_t group_size = 0;                         // int4: 32 or 64; 0 otherwise
  WeightLayout layout = WeightLayout::kRowMajor;  // kPacked16: see WeightLayout (quant == kNone only)
};

// y[m, n] = x[m, k] · W[n, k]ᵀ + bias[n] (bias may be null). k == w.cols, n == w.rows.
// Op::kMatmul variants take w.quant == kNone; Op::kMatmulQuant variants take kInt8 / kInt4.
using MatmulFn = void (*)(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                          const float* bias, float* y);

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * weight[:], for r in [0, rows). y may alias x.
using RmsNormFn = void (*)(const KernelContext& ctx, const float* x, const float* weight, int64_t rows,
                           int64_t dim, float eps, float* y);

// Rotary embedding in place, rotate-half (GPT-NeoX / Hugging Face Llama) convention: for each
// token t and head h, pairs (i, i + head_dim/2) of x[t, h, :] rotate by angle
// positions[t] * inv_freq[i], i < head_dim/2. x is [tokens, n_heads, head_dim].
using RopeFn = void (*)(const KernelContext& ctx, float* x, int64_t tokens, int64_t n_heads, int64_t head_dim,
                        const int32_t* positions, const float* inv_freq);

// out[r, i] = silu(gate[r, i]) * up[r, i]. out may alias gate.
using SwigluFn = void (*)(const KernelContext& ctx, const float* gate, const float* up, int64_t rows,
                          int64_t dim, float* out);

// out[t, :] = float(table[ids[t], :]); table is [vocab, dim] in its stored dtype.
using EmbeddingFn = void (*)(const KernelContext& ctx, const int32_t* ids, int64_t tokens, const void* table,
                             DType dtype, int64_t dim, float* out);

// One layer's paged KV cache. k and v are [num_blocks, block_size, n_kv_heads, head_dim] float32.
struct KvLayerView {
  float* k = nullptr;
  float* v = nullptr;
  int32_t block_size = 16;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
};

// One sequence's slice of a batch, for attention and KV writes.
struct AttentionSeq {
  int32_t q_row = 0;      // first row of this sequence's tokens in q / out
  int32_t n_q = 0;        // number of new tokens (1 in decode)
  int32_t start_pos = 0;  // position of the first new token; the context is [0, start_pos + n_q)
  const int32_t* block_table = nullptr;  // logical block b -> physical block id
};

// For the attention variants: the index in `seqs` of the sequence owning each q row (-1 for a row
// no sequence covers), in a buffer of the calling thread valid until its next call; *rows is one
// past the last row covered.
const int32_t* attention_row_owners(std::span<const AttentionSeq> seqs, int64_t* rows);

// Causal attention over the paged cache (which already holds the new tokens' K/V):
// out[q_row + j, h, :] = softmax(q·Kᵀ * scale over positions [0, start_pos + j]) · V, with query
// head h reading KV head h / (n_heads / n_kv_heads). q and out are [tokens, n_heads, head_dim].
using AttentionFn = void (*)(const KernelContext& ctx, const float* q, const KvLayerView& kv,
                             std::span<const AttentionSeq> seqs, int32_t n_heads, float scale, float* out);

// Next-token choice from one row of logits (the rule of engine/sampling.h): temperature == 0 is
// argmax (lowest id on ties); otherwise softmax of logits / temperature over the top_k most likely
// (0 = all, ordered by (logit desc, id asc)), cut to the smallest prefix reaching top_p, and the
// token where the cumulative mass first exceeds u · total. Every variant returns the same id.
struct SampleArgs {
  const float* logits = nullptr;  // [vocab]
  int64_t vocab = 0;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  double u = 0.0;  // uniform draw in [0, 1); unused when greedy
};
// Caller-owned buffers a sampling kernel may resize and reuse across calls.
struct SampleScratch {
  std::vector<std::pair<float, int32_t>> cand;
  std::vector<double> prob;
};
using SampleFn = int32_t (*)(const KernelContext& ctx, const SampleArgs& a, SampleScratch* scratch);

// Operations that dispatch through the registry.
// kMatmulQuant ("matmul_quant") is the linear layers' matmul when their weights are quantized
// (a MatmulFn over a WeightMatrix with quant != kNone); lm_head and float layers use kMatmul.
enum class Op : uint8_t {
  kMatmul,
  kRmsNorm,
  kRope,
  kSwiglu,
  kEmbedding,
  kAttention,
  kSample,
  kMatmulQuant,
  kCount
};
const char* op_name(Op op);
// "matmul" -> Op::kMatmul, ...; InvalidArgument naming the known ops otherwise.
Result<Op> op_from_name(std::string_view name);

// Where a kernel variant runs. The registry is keyed by (device, op): a CUDA variant is never in a
// CPU list, so resolve_kernels (the CPU model's sets) can never be handed one.
enum class KernelDevice : uint8_t { kCpu, kCuda };
const char* kernel_device_name(KernelDevice d);  // "cpu", "cuda"

// A device kernel: an opaque entry that only its device's runner launches. It is not callable on
// the host and converts to none of the CPU function types, so no KernelSet slot accepts it.
struct DeviceKernel {
  KernelDevice device = KernelDevice::kCuda;  // never kCpu
  const void* entry = nullptr;                // the device runner's launch handle
};

// One variant's function: a typed CPU kernel (the *Fn type of its op: MatmulFn for kMatmul and
// kMatmulQuant, RmsNormFn for kRmsNorm, ...) or a DeviceKernel.
using KernelFn = std::variant<std::monostate, MatmulFn, RmsNormFn, RopeFn, SwigluFn, EmbeddingFn, AttentionFn,
                              SampleFn, DeviceKernel>;

struct KernelVariant {
  std::string name;               // "reference", "avx2", "onednn", ...
  std::string description;        // one line for `plumb kernels list`
  bool (*supported)() = nullptr;  // runtime check (CPU features); null = always
  KernelFn fn;                    // the op's CPU function type, or a DeviceKernel
  // Preference of "auto" per phase (index by Phase): the supported variant with the highest rank
  // wins, ties go to the later-registered one. The reference variants rank 0.
  std::array<int, 2> rank = {0, 0};
  // Op::kMatmul only: the variant reads bf16 weights in WeightLayout::kPacked16 as well as row-major,
  // and is faster with them. The model packs its bf16 matrices when both phases' matmul has this.
  bool reads_packed16 = false;
  // Op::kMatmul only: with bf16 weights the variant rounds x to bf16 before multiplying (the
  // bf16-activation numeric class: |y - y_ref| <= 2^-8 · Σ|x·w|, not the f32 class's 1e-5).
  bool bf16_activations = false;

  // kCuda (or another device) for a DeviceKernel, else kCpu.
  KernelDevice device() const;
  // The CPU kernel as type F, or null when fn holds another type (a device kernel, another op's).
  template <class F>
  F cpu() const {
    const F* f = std::get_if<F>(&fn);
    return f ? *f : nullptr;
  }
  // The CPU kernel's address without its type, for the screening harness (src/kernels), which
  // calls a variant through the op it captured; null for a device kernel.
  void* host_address() const;
};

// Whether `fn` is a valid function for `op` on `device`: a DeviceKernel of that device (not kCpu),
// or on the CPU the op's function type. The registry refuses anything else.
bool kernel_fn_fits(KernelDevice device, Op op, const KernelFn& fn);

// The registry of variants, keyed by (device, op, variant name); each variant ranks per phase.
// The overloads without a device are the CPU's. Thread-safe for reads after static initialization.
class KernelRegistry {
 public:
  static KernelRegistry& instance();
  // Registers `v` under (v.device(), op). InvalidArgument, and nothing registered, when v.fn does
  // not fit (kernel_fn_fits): e.g. an RmsNormFn under kMatmul, or no function at all.
  Status add(Op op, KernelVariant v);
  // NotFound naming the known variants if `name` is unknown; FailedPrecondition if unsupported here.
  Result<const KernelVariant*> find(Op op, const std::string& name) const;
  Result<const KernelVariant*> find(KernelDevice device, Op op, const std::string& name) const;
  std::vector<const KernelVariant*> list(Op op) const;
  std::vector<const KernelVariant*> list(KernelDevice device, Op op) const;
  // The variant "auto" resolves to: the fastest supported built-in for that op on this CPU.
  // best(op) is best(op, Phase::kDecode). Never null for a built-in op (reference always exists).
  const KernelVariant* best(Op op) const;
  const KernelVariant* best(Op op, Phase phase) const;
  const KernelVariant* best(KernelDevice device, Op op, Phase phase) const;

 private:
  std::map<std::pair<KernelDevice, Op>, std::vector<KernelVariant>> variants_;
};

// Which variant each op uses in each phase. "auto" = registry best(). Parsed from a kernel
// configuration file (JSON: {"matmul": "avx2", "attention": {"prefill": "reference", "decode": "avx2"}}).
struct KernelSelection {
  std::map<Op, std::string> prefill;  // missing op = "auto"
  std::map<Op, std::string> decode;
  // Screened kernel plugins (absolute .so paths, engine/cpu/plugin.h) that resolve_kernels loads
  // before looking names up; JSON key "plugins": [path, ...]. Each must carry a passing screening
  // certificate or resolution fails.
  std::vector<std::string> plugins;
  // CUDA candidate kernels: cubins of the CUDA candidate ABI (engine/cuda/candidate_abi.h; absolute
  // paths) by the ABI's op name ("swiglu", "rmsnorm_residual") and phase, which the CUDA runner
  // launches in place of its own kernels (`plumb kernels accept --device cuda`). JSON key "cuda":
  // {"swiglu": path | {"prefill": path, "decode": path}}. The CPU model has no such kernels: plumb
  // serve refuses them without --device cuda.
  std::map<std::string, std::string> cuda_prefill, cuda_decode;
  bool has_cuda() const { return !cuda_prefill.empty() || !cuda_decode.empty(); }
  static KernelSelection all_reference();
  // Accepts an object whose keys are op names and whose values are a variant name (both phases) or
  // {"prefill": name, "decode": name} (a missing phase = "auto"), plus "plugins" and "cuda" (above). Unknown
  // ops, unknown keys and non-string names are InvalidArgument naming the field. Variant names are checked by
  // resolve_kernels, not here. to_json() writes the same form (string when both phases agree).
  static Result<KernelSelection> parse_json(std::string_view text);
  std::string to_json() const;
};

// Resolved function pointers for one phase.
struct KernelSet {
  MatmulFn matmul = nullptr;
  RmsNormFn rmsnorm = nullptr;
  RopeFn rope = nullptr;
  SwigluFn swiglu = nullptr;
  EmbeddingFn embedding = nullptr;
  AttentionFn attention = nullptr;
  SampleFn sample = nullptr;
  MatmulFn matmul_quant = nullptr;  // for WeightMatrix::quant != kNone
  std::map<Op, std::string> names;  // the variant actually used, for provenance
  // Whether the bf16 weights should be WeightLayout::kPacked16: set (in both sets alike) when both
  // phases' matmul variant reads_packed16; every matmul then gets the layout it reads.
  bool packed16 = false;
};

// Resolves a selection into two KernelSets (index by Phase) of the CPU model: names are looked up
// among the CPU variants only, and every slot takes its typed CPU function. Errors name the op and
// variant.
Result<std::array<KernelSet, 2>> resolve_kernels(const KernelSelection& sel);

// Element conversions used by kernels and loaders (round-to-nearest-even, as PyTorch does).
float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float f);
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float f);

}  // namespace plumb::engine
