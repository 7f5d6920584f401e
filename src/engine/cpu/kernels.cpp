// Registry, kernel selection, and element conversions.
#include "engine/cpu/kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/json.h"
#include "engine/cpu/plugin.h"
#include "engine/cpu/quant.h"
#include "engine/cpu/reference.h"

namespace plumb::engine {

namespace detail {
void register_sample_kernels(KernelRegistry& r);  // engine/cpu/sample.cpp
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }

const char* quant_scheme_name(QuantScheme q) {
  return q == QuantScheme::kInt8 ? "int8" : q == QuantScheme::kInt4 ? "int4" : "none";
}

const char* phase_name(Phase p) { return p == Phase::kPrefill ? "prefill" : "decode"; }

const char* op_name(Op op) {
  switch (op) {
    case Op::kMatmul:
      return "matmul";
    case Op::kRmsNorm:
      return "rmsnorm";
    case Op::kRope:
      return "rope";
    case Op::kSwiglu:
      return "swiglu";
    case Op::kEmbedding:
      return "embedding";
    case Op::kAttention:
      return "attention";
    case Op::kMatmulQuant:
      return "matmul_quant";
    case Op::kSample:
      return "sampling";
    case Op::kCount:
      break;
  }
  return "?";
}

Result<Op> op_from_name(std::string_view name) {
  std::string known;
  for (int i = 0; i < int(Op::kCount); ++i) {
    Op op = Op(i);
    if (name == op_name(op)) return op;
    known += (i ? ", " : "") + std::string(op_name(op));
  }
  return invalid_argument("unknown kernel op '" + std::string(name) + "' (known: " + known + ")");
}

// ---- conversions -------------------------------------------------------------------------------

namespace {
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

float bf16_to_f32(uint16_t v) { return float_of(uint32_t(v) << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest, ties to even
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return float_of(sign);
    return float_of(sign | bits_of(float(mant) * 5.9604644775390625e-8f));  // mant * 2^-24, exact
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float f) {
  // After F. Giesen's float_to_half_fast3_rtne (public domain).
  uint32_t u = bits_of(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u)
    return uint16_t(sign | 0x7c00u | (u > 0x7f800000u ? 0x200u | ((u >> 13) & 0x3ffu) : 0u));
  if (u >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (u < 0x38800000u) {
    // Below the smallest normal half: adding 0.5 aligns the half's subnormal unit (2^-24) with the
    // float's last mantissa bit, so the FPU does the round-to-nearest-even for us.
    float g = float_of(u) + 0.5f;
    return uint16_t(sign | (bits_of(g) - bits_of(0.5f)));
  }
  uint32_t mant_odd = (u >> 13) & 1u;
  u += (uint32_t(15 - 127) << 23) + 0xfffu + mant_odd;
  return uint16_t(sign | (u >> 13));
}

// ---- registry ----------------------------------------------------------------------------------

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry* r = [] {
    auto* reg = new KernelRegistry();
    detail::register_reference_kernels(*reg);
    detail::register_avx2_kernels(*reg);
    detail::register_avx512_kernels(*reg);
    detail::register_amx_kernels(*reg);
    detail::register_avx512_attention(*reg);
    detail::register_onednn_kernels(*reg);
    detail::register_onednn_bf16_kernels(*reg);
    detail::register_quant_kernels(*reg);
    detail::register_sample_kernels(*reg);
    return reg;
  }();
  return *r;
}

const char* kernel_device_name(KernelDevice d) { return d == KernelDevice::kCpu ? "cpu" : "cuda"; }

KernelDevice KernelVariant::device() const {
  const DeviceKernel* k = std::get_if<DeviceKernel>(&fn);
  return k ? k->device : KernelDevice::kCpu;
}

void* KernelVariant::host_address() const {
  // Every CPU alternative is a function pointer; visit turns the one held into an address.
  return std::visit(
      [](const auto& f) -> void* {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_pointer_v<F>) {
          return reinterpret_cast<void*>(f);
        } else {
          return nullptr;
        }
      },
      fn);
}

bool kernel_fn_fits(KernelDevice device, Op op, const KernelFn& fn) {
  if (device != KernelDevice::kCpu) {
    const DeviceKernel* k = std::get_if<DeviceKernel>(&fn);
    return k && k->device == device && k->entry;
  }
  switch (op) {
    case Op::kMatmul:
    case Op::kMatmulQuant:
      return std::get_if<MatmulFn>(&fn) && std::get<MatmulFn>(fn);
    case Op::kRmsNorm:
      return std::get_if<RmsNormFn>(&fn) && std::get<RmsNormFn>(fn);
    case Op::kRope:
      return std::get_if<RopeFn>(&fn) && std::get<RopeFn>(fn);
    case Op::kSwiglu:
      return std::get_if<SwigluFn>(&fn) && std::get<SwigluFn>(fn);
    case Op::kEmbedding:
      return std::get_if<EmbeddingFn>(&fn) && std::get<EmbeddingFn>(fn);
    case Op::kAttention:
      return std::get_if<AttentionFn>(&fn) && std::get<AttentionFn>(fn);
    case Op::kSample:
      return std::get_if<SampleFn>(&fn) && std::get<SampleFn>(fn);
    case Op::kCount:
      break;
  }
  return false;
}

Status KernelRegistry::add(Op op, KernelVariant v) {
  const KernelDevice device = v.device();
  if (!kernel_fn_fits(device, op, v.fn)) {
    return invalid_argument(std::string("kernel registry: variant '") + v.name + "' does not hold a " +
                            kernel_device_name(device) + " " + op_name(op) + " kernel");
  }
  variants_[{device, op}].push_back(std::move(v));
  return Status::Ok();
}

Result<const KernelVariant*> KernelRegistry::find(Op op, const std::string& name) const {
  return find(KernelDevice::kCpu, op, name);
}

Result<const KernelVariant*> KernelRegistry::find(KernelDevice device, Op op, const std::string& name) const {
  auto it = variants_.find({device, op});
  std::string known;
  if (it != variants_.end()) {
    for (const KernelVariant& v : it->second) {
      if (v.name == name) {
        if (v.supported && !v.supported()) {
          return failed_precondition(std::string(op_name(op)) + " variant '" + name +
                                     "' is not supported on this " +
                                     (device == KernelDevice::kCpu ? "CPU" : "device"));
        }
        return &v;
      }
      known += (known.empty() ? "" : ", ") + v.name;
    }
  }
  return not_found("unknown " + std::string(op_name(op)) + " variant '" + name + "' (known: auto, " + known +
                   ")");
}

std::vector<const KernelVariant*> KernelRegistry::list(Op op) const { return list(KernelDevice::kCpu, op); }

std::vector<const KernelVariant*> KernelRegistry::list(KernelDevice device, Op op) const {
  std::vector<const KernelVariant*> out;
  auto it = variants_.find({device, op});
  if (it != variants_.end()) {
    for (const KernelVariant& v : it->second) out.push_back(&v);
  }
  return out;
}

const KernelVariant* KernelRegistry::best(Op op) const { return best(op, Phase::kDecode); }

const KernelVariant* KernelRegistry::best(Op op, Phase phase) const {
  return best(KernelDevice::kCpu, op, phase);
}

const KernelVariant* KernelRegistry::best(KernelDevice device, Op op, Phase phase) const {
  const KernelVariant* best = nullptr;
  auto it = variants_.find({device, op});
  if (it == variants_.end()) return nullptr;
  for (const KernelVariant& v : it->second) {
    if (v.supported && !v.supported()) continue;
    if (!best || v.rank[size_t(phase)] >= best->rank[size_t(phase)]) best = &v;
  }
  return best;
}

// ---- selection ---------------------------------------------------------------------------------

KernelSelection KernelSelection::all_reference() {
  KernelSelection s;
  for (int i = 0; i < int(Op::kCount); ++i) {
    s.prefill[Op(i)] = "reference";
    s.decode[Op(i)] = "reference";
  }
  return s;
}

namespace {

// A cubin path of the "cuda" entry: absolute, as the arms of a comparison are started elsewhere.
Status check_cubin_path(const json::value& v, const std::string& field) {
  if (!v.is_string() || v.as_string().empty() || v.as_string()[0] != '/')
    return invalid_argument(field + " must be an absolute path to a candidate's .cubin");
  return Status::Ok();
}

// "cuda": {"<op>": "/abs.cubin" | {"prefill": "/abs.cubin", "decode": "/abs.cubin"}}. The op names are
// the CUDA candidate ABI's, checked by the CUDA runner that loads them.
Status parse_cuda_candidates(const json::value& val, KernelSelection& sel) {
  if (!val.is_object())
    return invalid_argument("kernel selection: 'cuda' must be an object of op -> .cubin path");
  for (const auto& [op, v] : val.as_object()) {
    const std::string field = "kernel selection: cuda." + std::string(op);
    if (op.empty()) return invalid_argument("kernel selection: 'cuda' has an empty op name");
    if (v.is_string()) {
      PLUMB_RETURN_IF_ERROR(check_cubin_path(v, field));
      sel.cuda_prefill[std::string(op)] = sel.cuda_decode[std::string(op)] = std::string(v.as_string());
      continue;
    }
    if (!v.is_object())
      return invalid_argument(field + " must be a .cubin path or {\"prefill\": ..., \"decode\": ...}");
    for (const auto& [phase, path] : v.as_object()) {
      if (phase != "prefill" && phase != "decode") {
        return invalid_argument(field + ": unknown key '" + std::string(phase) +
                                "' (expected \"prefill\" and/or \"decode\")");
      }
      PLUMB_RETURN_IF_ERROR(check_cubin_path(path, field + "." + std::string(phase)));
      (phase == "prefill" ? sel.cuda_prefill : sel.cuda_decode)[std::string(op)] =
          std::string(path.as_string());
    }
  }
  return Status::Ok();
}

}  // namespace

Result<KernelSelection> KernelSelection::parse_json(std::string_view text) {
  PLUMB_ASSIGN_OR_RETURN(json::object obj, json::parse_object(text));
  KernelSelection sel;
  for (const auto& [key, val] : obj) {
    if (key == "plugins") {
      if (!val.is_array())
        return invalid_argument("kernel selection: 'plugins' must be an array of .so paths");
      for (const auto& p : val.as_array()) {
        if (!p.is_string() || p.as_string().empty() || p.as_string()[0] != '/') {
          return invalid_argument("kernel selection: every 'plugins' entry must be an absolute .so path");
        }
        sel.plugins.emplace_back(p.as_string());
      }
      continue;
    }
    if (key == "cuda") {
      PLUMB_RETURN_IF_ERROR(parse_cuda_candidates(val, sel));
      continue;
    }
    auto op = op_from_name(key);
    if (!op.ok()) return op.status().with_context("kernel selection");
    std::string field = "kernel selection: field '" + std::string(key) + "'";
    if (val.is_string()) {
      std::string name(val.as_string());
      if (name.empty()) return invalid_argument(field + " must name a variant");
      sel.prefill[*op] = name;
      sel.decode[*op] = name;
    } else if (val.is_object()) {
      for (const auto& [phase, name] : val.as_object()) {
        if (phase != "prefill" && phase != "decode") {
          return invalid_argument(field + ": unknown key '" + std::string(phase) +
                                  "' (expected \"prefill\" and/or \"decode\")");
        }
        if (!name.is_string() || name.as_string().empty()) {
          return invalid_argument(field + "." + std::string(phase) + " must be a variant name (string)");
        }
        (phase == "prefill" ? sel.prefill : sel.decode)[*op] = std::string(name.as_string());
      }
    } else {
      return invalid_argument(field + " must be a variant name or {\"prefill\": ..., \"decode\": ...}");
    }
  }
  return sel;
}

std::string KernelSelection::to_json() const {
  json::object obj;
  for (int i = 0; i < int(Op::kCount); ++i) {
    Op op = Op(i);
    auto p = prefill.find(op);
    auto d = decode.find(op);
    std::string pn = p == prefill.end() ? "auto" : p->second;
    std::string dn = d == decode.end() ? "auto" : d->second;
    if (p == prefill.end() && d == decode.end()) continue;
    if (pn == dn) {
      obj[op_name(op)] = pn;
    } else {
      json::object phases;
      phases["prefill"] = pn;
      phases["decode"] = dn;
      obj[op_name(op)] = std::move(phases);
    }
  }
  if (!plugins.empty()) {
    json::array arr;
    for (const auto& p : plugins) arr.emplace_back(p);
    obj["plugins"] = std::move(arr);
  }
  // "cuda": a path where both phases have the same cubin, else {"prefill": ..., "decode": ...}.
  json::object cuda;
  for (const auto& [op, path] : cuda_prefill) cuda[op] = json::object{{"prefill", path}};
  for (const auto& [op, path] : cuda_decode) {
    auto p = cuda_prefill.find(op);
    if (p != cuda_prefill.end() && p->second == path) {
      cuda[op] = path;
    } else {
      if (!cuda.contains(op)) cuda[op] = json::object{};
      cuda[op].as_object()["decode"] = path;
    }
  }
  if (!cuda.empty()) obj["cuda"] = std::move(cuda);
  return json::canonical(obj);
}

Result<std::array<KernelSet, 2>> resolve_kernels(const KernelSelection& sel) {
  for (const auto& path : sel.plugins) PLUMB_RETURN_IF_ERROR(load_screened_plugin(path).status());
  const KernelRegistry& reg = KernelRegistry::instance();
  std::array<KernelSet, 2> sets;
  bool packed16 = true;  // both phases' matmul reads kPacked16
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    const auto& chosen = phase == Phase::kPrefill ? sel.prefill : sel.decode;
    KernelSet& set = sets[size_t(phase)];
    for (int i = 0; i < int(Op::kCount); ++i) {
      Op op = Op(i);
      auto it = chosen.find(op);
      std::string name = it == chosen.end() ? "auto" : it->second;
      const KernelVariant* v = nullptr;
      if (name == "auto") {
        v = reg.best(op, phase);
        if (!v) return internal_error(std::string("no kernel registered for ") + op_name(op));
      } else {
        auto found = reg.find(op, name);
        if (!found.ok()) {
          return found.status().with_context(std::string("kernel selection, ") + phase_name(phase) + " " +
                                             op_name(op));
        }
        v = *found;
      }
      if (v->device() != KernelDevice::kCpu) {  // the registry's key rules it out; checked all the same
        return internal_error(std::string("kernel selection: ") + op_name(op) + " variant '" + v->name +
                              "' is not a CPU kernel");
      }
      set.names[op] = v->name;
      switch (op) {
        case Op::kMatmul:
          set.matmul = v->cpu<MatmulFn>();
          packed16 = packed16 && v->reads_packed16;
          break;
        case Op::kRmsNorm:
          set.rmsnorm = v->cpu<RmsNormFn>();
          break;
        case Op::kRope:
          set.rope = v->cpu<RopeFn>();
          break;
        case Op::kSwiglu:
          set.swiglu = v->cpu<SwigluFn>();
          break;
        case Op::kEmbedding:
          set.embedding = v->cpu<EmbeddingFn>();
          break;
        case Op::kAttention:
          set.attention = v->cpu<AttentionFn>();
          break;
        case Op::kMatmulQuant:
          set.matmul_quant = v->cpu<MatmulFn>();
          break;
        case Op::kSample:
          set.sample = v->cpu<SampleFn>();
          break;
        case Op::kCount:
          break;
      }
    }
  }
  for (KernelSet& set : sets) set.packed16 = packed16;
  return sets;
}

const int32_t* attention_row_owners(std::span<const AttentionSeq> seqs, int64_t* rows) {
  int64_t n = 0;
  for (const AttentionSeq& s : seqs) n = std::max<int64_t>(n, int64_t(s.q_row) + s.n_q);
  thread_local std::vector<int32_t> owner;
  owner.assign(size_t(n), -1);
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int32_t j = 0; j < seqs[i].n_q; ++j) owner[size_t(seqs[i].q_row) + size_t(j)] = int32_t(i);
  }
  *rows = n;
  return owner.data();
}

}  // namespace plumb::engine
