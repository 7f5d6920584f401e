// NVRTC compilation and its child process. The ABI header is handed to NVRTC as an in-memory
// header, so a candidate compiles against exactly the ABI this plumb speaks, wherever it runs.
#include "kernels/cuda/compile.h"

#include <fmt/format.h>
#include <nvrtc.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "core/subprocess.h"
#include "kernels/cuda/child_step.h"
#include "kernels/cuda/cubin.h"

namespace plumb::kernels::cuda {
namespace {

constexpr int kSchemaVersion = 1;
const std::string kResultFile = "compile.json";
const std::string kCubinFile = "candidate.cubin";
const std::string kChildLog = "compile-child.log";

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return fmt::format("{}.{}", major, minor);
}

std::string program_log(nvrtcProgram p) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(p, &n) != NVRTC_SUCCESS || n == 0) return {};
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// Checks the cubin NVRTC produced against the ABI and fills arch, sm, launch and the hash.
void inspect_cubin(const std::string& cubin, CompileResult* r) {
  auto info = read_cubin(cubin);
  if (!info.ok()) {
    r->verdict = CompileVerdict::kCompileError;
    r->message = "NVRTC produced an unreadable cubin: " + info.status().message();
    return;
  }
  r->arch = info->arch;
  r->sm = info->sm;
  r->cubin_sha256 = sha256_hex(cubin);
  if (!info->has_entry) {
    r->verdict = CompileVerdict::kAbiRefused;
    r->message = "the candidate has no entry `extern \"C\" __global__ void plumb_candidate(<op>_args a)`";
    return;
  }
  if (!info->launch) {
    r->verdict = CompileVerdict::kAbiRefused;
    r->message = "the candidate declares no launch configuration: add PLUMB_LAUNCH(...) (plumb_cuda_abi.h)";
    return;
  }
  r->launch = *info->launch;
  Status st = check_launch(r->launch);
  if (!st.ok()) {
    r->verdict = CompileVerdict::kAbiRefused;
    r->message = st.message();
    return;
  }
  r->verdict = CompileVerdict::kOk;
  r->message = fmt::format("compiled for {} in {:.0f} ms", r->arch.empty() ? "?" : r->arch, r->compile_ms);
}

// PTX of the source for the arch's virtual architecture (sm_90a -> compute_90a), for the policy scan.
std::string ptx_of(const std::string& source, const std::string& arch,
                   const std::vector<std::string>& extra) {
  const std::string header(abi_header_text()), header_name(kAbiHeaderName);
  const char* headers[] = {header.c_str()};
  const char* names[] = {header_name.c_str()};
  nvrtcProgram p = nullptr;
  if (nvrtcCreateProgram(&p, source.c_str(), "candidate.cu", 1, headers, names) != NVRTC_SUCCESS) return {};
  std::vector<std::string> opts = {"--gpu-architecture=compute_" + arch.substr(3), "-std=c++17"};
  opts.insert(opts.end(), extra.begin(), extra.end());
  std::vector<const char*> raw;
  raw.reserve(opts.size());
  for (const auto& s : opts) raw.push_back(s.c_str());
  std::string ptx;
  size_t n = 0;
  if (nvrtcCompileProgram(p, int(raw.size()), raw.data()) == NVRTC_SUCCESS &&
      nvrtcGetPTXSize(p, &n) == NVRTC_SUCCESS) {
    ptx.resize(n);
    nvrtcGetPTX(p, ptx.data());
  }
  nvrtcDestroyProgram(&p);
  return ptx;
}

// The L2 residency controls a candidate may not use: they keep its data in L2 across the harness's
// flush (an L2 persisting window set from the device side), so its timing would not be the
// engine's. Empty when the PTX has none.
std::string l2_policy_use(const std::string& ptx) {
  for (const char* k : {"createpolicy", "evict_last", "applypriority", "L2::cache_hint", "evict_unchanged"}) {
    if (ptx.find(k) != std::string::npos) return k;
  }
  return {};
}

// Under AddressSanitizer (its shadow memory is terabytes of address space) the limit would stop the
// child before it starts, so sanitizer builds run the compiler without it.
void set_memory_limit(int64_t mb) {
#if defined(__SANITIZE_ADDRESS__)
  mb = 0;
#endif
  if (mb <= 0) return;
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = rlim_t(mb) * 1024 * 1024;
  setrlimit(RLIMIT_AS, &lim);
  rlimit no_core{};
  setrlimit(RLIMIT_CORE, &no_core);
}

}  // namespace

std::string_view verdict_name(CompileVerdict v) {
  switch (v) {
    case CompileVerdict::kOk:
      return "ok";
    case CompileVerdict::kCompileError:
      return "compile_error";
    case CompileVerdict::kAbiRefused:
      return "abi_refused";
    case CompileVerdict::kPolicyRefused:
      return "refused";
    case CompileVerdict::kCrashed:
      return "crashed";
    case CompileVerdict::kTimedOut:
      return "timed_out";
  }
  return "crashed";
}

Status check_arch(const std::string& arch) {
  static const std::regex kArch("sm_[0-9]{2,3}[af]?");
  if (std::regex_match(arch, kArch)) return Status::Ok();
  return invalid_argument(
      fmt::format("--arch '{}' is not a real GPU architecture: give sm_XX with an optional "
                  "a or f suffix, e.g. sm_90a for H100/H200",
                  arch));
}

CompileResult compile_source(const std::string& source, const CompileOptions& o, std::string* cubin) {
  CompileResult r;
  r.source_sha256 = sha256_hex(source);
  r.nvrtc_version = nvrtc_version();
  r.options = {"--gpu-architecture=" + o.arch, "-std=c++17"};
  r.options.insert(r.options.end(), o.extra.begin(), o.extra.end());
  const std::string header(abi_header_text()), header_name(kAbiHeaderName);
  const char* headers[] = {header.c_str()};
  const char* names[] = {header_name.c_str()};
  nvrtcProgram p = nullptr;
  if (nvrtcCreateProgram(&p, source.c_str(), "candidate.cu", 1, headers, names) != NVRTC_SUCCESS) {
    r.verdict = CompileVerdict::kCompileError;
    r.message = "NVRTC could not create a program (out of memory?)";
    return r;
  }
  std::vector<const char*> opts;
  opts.reserve(r.options.size());
  for (const auto& s : r.options) opts.push_back(s.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  const nvrtcResult rc = nvrtcCompileProgram(p, int(opts.size()), opts.data());
  r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.log = program_log(p);
  if (rc != NVRTC_SUCCESS) {
    r.verdict = CompileVerdict::kCompileError;
    r.message = fmt::format("NVRTC: {} (the log says where)", nvrtcGetErrorString(rc));
  } else {
    size_t n = 0;
    std::string bin;
    if (nvrtcGetCUBINSize(p, &n) == NVRTC_SUCCESS && n > 0) {
      bin.resize(n);
      nvrtcGetCUBIN(p, bin.data());
    }
    inspect_cubin(bin, &r);
    const std::string used =
        r.verdict == CompileVerdict::kOk ? l2_policy_use(ptx_of(source, o.arch, o.extra)) : "";
    if (!used.empty()) {
      r.verdict = CompileVerdict::kPolicyRefused;
      r.message = fmt::format(
          "the candidate uses the L2 residency control `{}` (PTX): L2 persistence survives the "
          "harness's flush and is not what the engine's other kernels leave in L2; remove it",
          used);
    }
    if (r.verdict == CompileVerdict::kOk && cubin != nullptr) *cubin = std::move(bin);
  }
  nvrtcDestroyProgram(&p);
  return r;
}

boost::json::object to_json(const CompileResult& r) {
  boost::json::array opts;
  for (const auto& s : r.options) opts.emplace_back(s);
  const LaunchConfig& l = r.launch;
  return {{"schema_version", kSchemaVersion},
          {"verdict", verdict_name(r.verdict)},
          {"message", r.message},
          {"log", r.log},
          {"source_sha256", r.source_sha256},
          {"cubin_sha256", r.cubin_sha256},
          {"nvrtc_version", r.nvrtc_version},
          {"options", std::move(opts)},
          {"compile_ms", r.compile_ms},
          {"arch", r.arch},
          {"sm", r.sm},
          {"launch",
           {{"abi_version", l.abi_version},
            {"op", l.op},
            {"block_threads", l.block_threads},
            {"rows_per_block", l.rows_per_block},
            {"items_per_thread", l.items_per_thread},
            {"max_blocks", l.max_blocks},
            {"dynamic_smem_bytes", l.dynamic_smem_bytes}}},
          {"cubin", r.cubin_path}};
}

Result<CompileResult> compile_result_from_json(const boost::json::object& o) {
  try {
    if (o.at("schema_version").to_number<int>() != kSchemaVersion)
      return corrupt("compile.json has another schema_version: recompile the candidate");
    CompileResult r;
    const std::string v(o.at("verdict").as_string());
    for (auto c : {CompileVerdict::kOk, CompileVerdict::kCompileError, CompileVerdict::kAbiRefused,
                   CompileVerdict::kPolicyRefused, CompileVerdict::kCrashed, CompileVerdict::kTimedOut})
      if (verdict_name(c) == v) r.verdict = c;
    r.message = o.at("message").as_string();
    r.log = o.at("log").as_string();
    r.source_sha256 = o.at("source_sha256").as_string();
    r.cubin_sha256 = o.at("cubin_sha256").as_string();
    r.nvrtc_version = o.at("nvrtc_version").as_string();
    for (const auto& s : o.at("options").as_array()) r.options.emplace_back(s.as_string());
    r.compile_ms = o.at("compile_ms").to_number<double>();
    r.arch = o.at("arch").as_string();
    r.sm = o.at("sm").to_number<int>();
    const auto& l = o.at("launch").as_object();
    r.launch = {l.at("abi_version").to_number<int>(),        l.at("op").to_number<int>(),
                l.at("block_threads").to_number<int>(),      l.at("rows_per_block").to_number<int>(),
                l.at("items_per_thread").to_number<int>(),   l.at("max_blocks").to_number<int>(),
                l.at("dynamic_smem_bytes").to_number<int>(), 0};
    r.cubin_path = o.at("cubin").as_string();
    return r;
  } catch (const std::exception& e) {
    return corrupt(std::string("compile.json malformed: ") + e.what());
  }
}

int compile_child_main(const std::string& source_path, const std::string& out_dir, const CompileOptions& o) {
  set_memory_limit(o.memory_limit_mb);
  auto src = read_file(source_path);
  if (!src.ok()) {
    fmt::print(stderr, "compile-child: {}\n", src.status().to_string());
    return 2;
  }
  std::string cubin;
  CompileResult r = compile_source(*src, o, &cubin);
  if (r.verdict == CompileVerdict::kOk) {
    r.cubin_path = (std::filesystem::path(out_dir) / kCubinFile).string();
    if (Status st = write_file_atomic(r.cubin_path, cubin); !st.ok()) {
      fmt::print(stderr, "compile-child: {}\n", st.to_string());
      return 2;
    }
  }
  Status st = write_file_atomic((std::filesystem::path(out_dir) / kResultFile).string(),
                                json::dump_pretty(to_json(r)) + "\n");
  if (!st.ok()) {
    fmt::print(stderr, "compile-child: {}\n", st.to_string());
    return 2;
  }
  return r.verdict == CompileVerdict::kOk ? 0 : 1;
}

Result<CompileResult> compile_in_child(const std::string& plumb_exe, const std::string& source_path,
                                       const std::string& out_dir, const CompileOptions& o) {
  if (Status st = check_arch(o.arch); !st.ok()) return st;
  std::vector<std::string> argv = {plumb_exe,
                                   "kernels",
                                   "compile-child",
                                   "--source",
                                   source_path,
                                   "--out",
                                   out_dir,
                                   "--arch",
                                   o.arch,
                                   "--memory-limit-mb",
                                   std::to_string(o.memory_limit_mb)};
  for (const auto& e : o.extra) argv.push_back("--nvrtc-option=" + e);
  PLUMB_ASSIGN_OR_RETURN(ChildStep step, run_child_step(std::move(argv), out_dir, kResultFile, kChildLog,
                                                        o.timeout_s, "compile child"));
  if (step.result) return compile_result_from_json(*step.result);
  CompileResult r;
  if (step.timed_out) {
    r.verdict = CompileVerdict::kTimedOut;
    r.message = fmt::format(
        "the compiler ran past the {:.0f} s limit and was killed (a candidate that makes "
        "NVRTC hang; raise --timeout only if it is merely large)",
        o.timeout_s);
  } else {
    r.verdict = CompileVerdict::kCrashed;
    r.message = fmt::format("the compile child died ({}) without a result", step.died);
  }
  r.log = step.log_tail;
  auto src = read_file(source_path);
  if (src.ok()) r.source_sha256 = sha256_hex(*src);
  r.nvrtc_version = nvrtc_version();
  r.options = {"--gpu-architecture=" + o.arch, "-std=c++17"};
  r.options.insert(r.options.end(), o.extra.begin(), o.extra.end());
  Status st = write_file_atomic((std::filesystem::path(out_dir) / kResultFile).string(),
                                json::dump_pretty(to_json(r)) + "\n");
  if (!st.ok()) return st.with_context("writing the compile record");
  return r;
}

}  // namespace plumb::kernels::cuda
