// Kernel plugins: shared libraries built against engine/cpu/plugin_abi.h, loaded with dlopen
// and registered as variants of the built-in registry, so a kernel selection can name them per op
// and per phase like any built-in variant.
//
// Screening first. load_screened_plugin() dlopens a library only when a screening certificate
// "<path>.screened.json" sits next to it, says "pass", and names the SHA-256 of the very bytes on
// disk (so a library changed after screening is refused). Certificates are written by
// `plumb kernels search` (src/kernels/) after a candidate passed compile, correctness, guard-page
// safety and timing in a child process. open_plugin_unscreened() is the one exception: it is what
// that child process calls, and nothing else should.
//
// Calls: a plugin variant of matmul, rmsnorm, rope, swiglu or sampling is reached through a fixed
// table of trampolines (kMaxPluginsPerOp per op) that translate the engine's arguments into the
// ABI's argument structs (sampling's scratch comes from the caller's SampleScratch, grown once). A
// matmul plugin whose supports() refuses a (phase, dtype) falls back to the reference kernel for
// that call.
//
// Thread-safety: load plugins before the model serves (startup, resolve_kernels); loading mutates
// the registry, which is read without locks afterwards. Plugins stay loaded for the process' life.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "engine/cpu/kernels.h"
#include "engine/cpu/plugin_abi.h"

namespace plumb::engine {

inline constexpr int kMaxPluginsPerOp = 16;

struct PluginInfo {
  std::string path;  // the .so
  std::string name;  // variant name
  std::string description;
  Op op = Op::kMatmul;
  uint32_t abi_version = 0;
  const plumb_kernel_plugin* desc = nullptr;  // valid while the library stays loaded (forever)
};

// What screening certifies about one library.
struct PluginCertificate {
  std::string sha256;    // of the .so file
  std::string verdict;   // "pass" | "fail"
  std::string op;        // op name
  std::string name;      // variant name
  std::string task;      // the task folder it was screened on
  double utility = 0.0;  // u(c, τ) at screening
  std::string detail;    // one line: what was checked
};
std::string certificate_path(const std::string& so_path);
Status write_certificate(const std::string& so_path, const PluginCertificate& c);
// NotFound (no certificate: screen it first), FailedPrecondition (failed, or the file changed since).
Result<PluginCertificate> check_certificate(const std::string& so_path);

// dlopen + descriptor checks, WITHOUT a certificate: for screening's child process only.
// FailedPrecondition for an ABI version outside PLUMB_KERNEL_ABI_MIN_VERSION..PLUMB_KERNEL_ABI_VERSION
// ("built against ABI vN, this plumb speaks v1 to v2: rebuild"), InvalidArgument for a missing
// entry symbol, an op that is not a plugin op of the plugin's ABI version, or a bad name.
Result<PluginInfo> open_plugin_unscreened(const std::string& path);

// Certificate check, then open and register in KernelRegistry::instance() under the plugin's name.
// Idempotent per path. AlreadyExists-like InvalidArgument if the name is taken by another variant.
Result<PluginInfo> load_screened_plugin(const std::string& path);

// The exec block for a direct call (screening), over ctx.pool (null = run inline).
plumb_exec plugin_exec(const KernelContext& ctx);

}  // namespace plumb::engine
