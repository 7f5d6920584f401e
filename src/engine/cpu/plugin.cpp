// Plugin loading, certificates and the trampolines that put a plugin behind a registry variant.
#include "engine/cpu/plugin.h"

#include <dlfcn.h>

#include <array>
#include <cctype>
#include <map>
#include <mutex>
#include <utility>

#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "engine/cpu/reference.h"
#include "engine/cpu/thread_pool.h"

namespace plumb::engine {

namespace {

void pool_parallel_for(void* pool, int64_t n, int64_t align, plumb_range_fn fn, void* ctx) {
  if (n <= 0) return;
  if (!pool) {
    fn(ctx, 0, n);
    return;
  }
  static_cast<ThreadPool*>(pool)->parallel_for(
      n, [&](int64_t b, int64_t e) { fn(ctx, b, e); }, align < 1 ? 1 : align);
}

// Slot table indexed by the op's value (the ABI's op values are the engine's): matmul, rmsnorm,
// rope, swiglu (v1) and sample (v2); embedding and attention are not plugin ops.
constexpr int kPluginOps = PLUMB_OP_SAMPLE + 1;
bool plugin_op(int32_t op, uint32_t abi_version) {
  return (op >= PLUMB_OP_MATMUL && op <= PLUMB_OP_SWIGLU) || (op == PLUMB_OP_SAMPLE && abi_version >= 2);
}
std::array<std::array<const plumb_kernel_plugin*, kMaxPluginsPerOp>, kPluginOps> g_slots{};
std::array<int, kPluginOps> g_used{};
std::mutex g_mu;
std::map<std::string, PluginInfo> g_loaded;  // by path

template <int S>
void matmul_thunk(const KernelContext& ctx, const float* x, int64_t m, const WeightMatrix& w,
                  const float* bias, float* y) {
  const plumb_kernel_plugin* p = g_slots[PLUMB_OP_MATMUL][S];
  if (p->supports && !p->supports(int32_t(ctx.phase), int32_t(w.dtype))) {
    ref::matmul(ctx, x, m, w, bias, y);
    return;
  }
  plumb_exec ex = plugin_exec(ctx);
  plumb_matmul_args a{x, m, w.cols, w.data, int32_t(w.dtype), w.rows, bias, y};
  p->run(&ex, &a);
}
template <int S>
void rmsnorm_thunk(const KernelContext& ctx, const float* x, const float* weight, int64_t rows, int64_t dim,
                   float eps, float* y) {
  plumb_exec ex = plugin_exec(ctx);
  plumb_rmsnorm_args a{x, weight, rows, dim, eps, y};
  g_slots[PLUMB_OP_RMSNORM][S]->run(&ex, &a);
}
template <int S>
void rope_thunk(const KernelContext& ctx, float* x, int64_t tokens, int64_t n_heads, int64_t head_dim,
                const int32_t* positions, const float* inv_freq) {
  plumb_exec ex = plugin_exec(ctx);
  plumb_rope_args a{x, tokens, n_heads, head_dim, positions, inv_freq};
  g_slots[PLUMB_OP_ROPE][S]->run(&ex, &a);
}
template <int S>
void swiglu_thunk(const KernelContext& ctx, const float* gate, const float* up, int64_t rows, int64_t dim,
                  float* out) {
  plumb_exec ex = plugin_exec(ctx);
  plumb_swiglu_args a{gate, up, rows, dim, out};
  g_slots[PLUMB_OP_SWIGLU][S]->run(&ex, &a);
}

template <int S>
int32_t sample_thunk(const KernelContext& ctx, const SampleArgs& a, SampleScratch* scratch) {
  // The scratch the ABI promises (16 bytes per vocabulary entry, 16-byte aligned), from the
  // caller's reusable buffer: no allocation once it has grown.
  static_assert(sizeof(scratch->prob[0]) == 8);
  scratch->prob.resize(size_t(a.vocab) * 2);
  plumb_exec ex = plugin_exec(ctx);
  int32_t id = 0;
  plumb_sample_args pa{a.logits, a.vocab, a.temperature,        a.top_k,
                       a.top_p,  a.u,     scratch->prob.data(), int64_t(scratch->prob.size() * 8),
                       &id};
  g_slots[PLUMB_OP_SAMPLE][S]->run(&ex, &pa);
  return id;
}

template <size_t... S>
KernelFn thunk_for(int op, int slot, std::index_sequence<S...>) {
  static const std::array<MatmulFn, sizeof...(S)> mm{&matmul_thunk<int(S)>...};
  static const std::array<RmsNormFn, sizeof...(S)> rn{&rmsnorm_thunk<int(S)>...};
  static const std::array<RopeFn, sizeof...(S)> rp{&rope_thunk<int(S)>...};
  static const std::array<SwigluFn, sizeof...(S)> sw{&swiglu_thunk<int(S)>...};
  static const std::array<SampleFn, sizeof...(S)> sa{&sample_thunk<int(S)>...};
  switch (op) {
    case PLUMB_OP_SAMPLE:
      return sa[size_t(slot)];
    case PLUMB_OP_MATMUL:
      return mm[size_t(slot)];
    case PLUMB_OP_RMSNORM:
      return rn[size_t(slot)];
    case PLUMB_OP_ROPE:
      return rp[size_t(slot)];
    default:
      return sw[size_t(slot)];
  }
}

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return true;
}

}  // namespace

plumb_exec plugin_exec(const KernelContext& ctx) {
  plumb_exec ex;
  ex.pool = ctx.pool;
  ex.threads = ctx.pool ? ctx.pool->size() : 1;
  ex.phase = int32_t(ctx.phase);
  ex.parallel_for = &pool_parallel_for;
  return ex;
}

std::string certificate_path(const std::string& so_path) { return so_path + ".screened.json"; }

Status write_certificate(const std::string& so_path, const PluginCertificate& c) {
  json::object o;
  o["schema_version"] = 1;
  o["sha256"] = c.sha256;
  o["verdict"] = c.verdict;
  o["op"] = c.op;
  o["name"] = c.name;
  o["task"] = c.task;
  o["utility"] = c.utility;
  o["detail"] = c.detail;
  o["abi_version"] = PLUMB_KERNEL_ABI_VERSION;
  return write_file_atomic(certificate_path(so_path), json::dump_pretty(o) + "\n");
}

Result<PluginCertificate> check_certificate(const std::string& so_path) {
  const std::string cp = certificate_path(so_path);
  auto text = read_file(cp);
  if (!text.ok()) {
    return not_found("kernel plugin " + so_path + " has no screening certificate (" + cp +
                     "): plumb loads only screened plugins; screen it with `plumb kernels search` first");
  }
  PLUMB_ASSIGN_OR_RETURN(json::object o, json::parse_object(*text));
  PluginCertificate c;
  auto str = [&](const char* k) -> std::string {
    auto it = o.find(k);
    return it != o.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
  };
  c.sha256 = str("sha256");
  c.verdict = str("verdict");
  c.op = str("op");
  c.name = str("name");
  c.task = str("task");
  c.detail = str("detail");
  if (auto it = o.find("utility"); it != o.end() && it->value().is_number())
    c.utility = it->value().to_number<double>();
  if (c.verdict != "pass") {
    return failed_precondition("kernel plugin " + so_path + " failed screening (" + c.detail +
                               "): it cannot be loaded");
  }
  PLUMB_ASSIGN_OR_RETURN(std::string sha, sha256_file(so_path));
  if (sha != c.sha256) {
    return failed_precondition(
        "kernel plugin " + so_path +
        " changed since it was screened (SHA-256 differs from its certificate): screen it "
        "again");
  }
  return c;
}

Result<PluginInfo> open_plugin_unscreened(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return invalid_argument("cannot load kernel plugin " + path + ": " + (e ? e : "dlopen failed"));
  }
  auto entry = reinterpret_cast<plumb_kernel_plugin_entry_fn>(dlsym(h, PLUMB_KERNEL_ENTRY_SYMBOL));
  if (!entry) {
    dlclose(h);
    return invalid_argument("kernel plugin " + path +
                            " does not export " PLUMB_KERNEL_ENTRY_SYMBOL
                            " (declare it PLUMB_KERNEL_EXPORT, see engine/cpu/plugin_abi.h)");
  }
  const plumb_kernel_plugin* d = entry();
  if (!d) return invalid_argument("kernel plugin " + path + ": " PLUMB_KERNEL_ENTRY_SYMBOL " returned null");
  if (d->abi_version < PLUMB_KERNEL_ABI_MIN_VERSION || d->abi_version > PLUMB_KERNEL_ABI_VERSION) {
    return failed_precondition("kernel plugin " + path + " was built against kernel ABI v" +
                               std::to_string(d->abi_version) + ", this plumb speaks v" +
                               std::to_string(PLUMB_KERNEL_ABI_MIN_VERSION) + " to v" +
                               std::to_string(PLUMB_KERNEL_ABI_VERSION) +
                               ": rebuild it against this plumb's engine/cpu/plugin_abi.h");
  }
  if (d->struct_size != sizeof(plumb_kernel_plugin)) {
    return failed_precondition("kernel plugin " + path + " has a descriptor of " +
                               std::to_string(d->struct_size) + " bytes, expected " +
                               std::to_string(sizeof(plumb_kernel_plugin)) +
                               ": rebuild it against this plumb's plugin_abi.h");
  }
  if (!plugin_op(d->op, d->abi_version)) {
    return invalid_argument("kernel plugin " + path + ": op " + std::to_string(d->op) +
                            " is not a plugin op of ABI v" + std::to_string(d->abi_version) +
                            " (matmul 0, rmsnorm 1, rope 2, swiglu 3; sample 6 from v2)");
  }
  if (!d->name || !valid_name(d->name)) {
    return invalid_argument("kernel plugin " + path + ": name must be 1-64 characters of [A-Za-z0-9_.-]");
  }
  if (!d->run) return invalid_argument("kernel plugin " + path + ": run is null");
  PluginInfo info;
  info.path = path;
  info.name = d->name;
  info.description = d->description ? d->description : "";
  info.op = Op(d->op);
  info.abi_version = d->abi_version;
  info.desc = d;
  return info;  // the handle is intentionally never closed: code of a registered kernel stays mapped
}

Result<PluginInfo> load_screened_plugin(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto it = g_loaded.find(path); it != g_loaded.end()) return it->second;
  PLUMB_RETURN_IF_ERROR(check_certificate(path).status());
  PLUMB_ASSIGN_OR_RETURN(PluginInfo info, open_plugin_unscreened(path));
  KernelRegistry& reg = KernelRegistry::instance();
  for (const KernelVariant* v : reg.list(info.op)) {
    if (v->name == info.name) {
      return invalid_argument("kernel plugin " + path + ": variant name '" + info.name +
                              "' is already taken for " + op_name(info.op) +
                              ": give the plugin another name");
    }
  }
  const int op = int(info.op);
  if (g_used[size_t(op)] >= kMaxPluginsPerOp) {
    return resource_exhausted("at most " + std::to_string(kMaxPluginsPerOp) +
                              " plugins per op can be loaded");
  }
  const int slot = g_used[size_t(op)]++;
  g_slots[size_t(op)][size_t(slot)] = info.desc;
  KernelVariant v;
  v.name = info.name;
  v.description = "plugin " + path + (info.description.empty() ? "" : ": " + info.description);
  v.fn = thunk_for(op, slot, std::make_index_sequence<kMaxPluginsPerOp>{});
  v.rank = {-1, -1};  // never chosen by "auto": only by name
  PLUMB_RETURN_IF_ERROR(reg.add(info.op, std::move(v)));
  g_loaded[path] = info;
  return info;
}

}  // namespace plumb::engine
