// `plumb kernels abi|compile|generate --device cuda`: the CUDA candidate ABI, NVRTC compilation in a
// child process, the built-in variant generator. The logic lives in kernels/cuda/; this file parses
// flags and prints.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/kernels_cuda.h"
#include "core/file.h"
#include "core/json.h"
#ifdef PLUMB_HAVE_CUDA
#include "kernels/cuda/abi.h"
#include "kernels/cuda/compile.h"
#include "kernels/cuda/generate.h"
#include "kernels/cuda/screen.h"
#include "kernels/cuda/search.h"
#endif

namespace plumb::cli {
namespace {

struct CudaArgs {
  std::string device;
  std::string source;
  std::string out;
  std::string arch = "sm_90a";
  double timeout_s = 120;
  int64_t memory_limit_mb = 4096;
  std::vector<std::string> nvrtc_options;
  std::string op;
  bool json = false;
};

int fail(const char* what, const Status& s) {
  std::cerr << "plumb kernels " << what << ": " << s.to_string() << "\n";
  return exit_for(s);
}

// --device must be cuda: the CPU loop compiles its C++ candidates inside `plumb kernels screen`.
Status check_device(const std::string& device) {
  if (device != "cuda") {
    return invalid_argument(
        fmt::format("--device {}: only cuda has this command; CPU candidates are compiled "
                    "by `plumb kernels screen`/`search` (docs/kernels.md)",
                    device));
  }
#ifndef PLUMB_HAVE_CUDA
  return unimplemented(
      "this plumb was built without CUDA: install the CUDA toolkit (nvcc, NVRTC) and rebuild with "
      "-DPLUMB_CUDA=on (docs/cuda.md)");
#else
  return Status::Ok();
#endif
}

#ifdef PLUMB_HAVE_CUDA
std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("/proc/self/exe") : p.string();
}

kernels::cuda::CompileOptions compile_options(const CudaArgs& a) {
  kernels::cuda::CompileOptions o;
  o.arch = a.arch;
  o.timeout_s = a.timeout_s;
  o.memory_limit_mb = a.memory_limit_mb;
  o.extra = a.nvrtc_options;
  return o;
}

int run_compile(const CudaArgs& a) {
  if (Status st = check_device(a.device); !st.ok()) return fail("compile", st);
  if (a.timeout_s <= 0) return fail("compile", invalid_argument("--timeout must be > 0 seconds"));
  std::string out = a.out;
  if (out.empty()) out = std::filesystem::path(a.source).replace_extension("").string() + ".compile";
  auto r = kernels::cuda::compile_in_child(self_exe(), std::filesystem::absolute(a.source).string(), out,
                                           compile_options(a));
  if (!r.ok()) return fail("compile", r.status());
  if (a.json) {
    std::cout << json::dump_pretty(kernels::cuda::to_json(*r)) << "\n";
  } else {
    std::cout << fmt::format("{}: {}\n", kernels::cuda::verdict_name(r->verdict), r->message);
    if (!r->cubin_path.empty())
      std::cout << "cubin: " << r->cubin_path << " (sha256 " << r->cubin_sha256 << ")\n";
    std::cout << "source sha256 " << r->source_sha256 << ", NVRTC " << r->nvrtc_version << "; record in "
              << out << "/compile.json\n";
    if (r->verdict != kernels::cuda::CompileVerdict::kOk && !r->log.empty()) std::cout << r->log << "\n";
  }
  return r->verdict == kernels::cuda::CompileVerdict::kOk ? kExitOk : kExitFailed;
}

boost::json::object variant_json(const kernels::cuda::Variant& v, const std::string& file) {
  return {{"name", v.name},
          {"op", kernels::cuda::op_name(v.op)},
          {"source", file},
          {"block_threads", v.block_threads},
          {"rows_per_block", v.rows_per_block},
          {"vector_width", v.vector_width},
          {"items_per_thread", v.items_per_thread},
          {"max_blocks", v.max_blocks},
          {"fused", v.fused}};
}

int run_generate(const CudaArgs& a) {
  if (Status st = check_device(a.device); !st.ok()) return fail("generate", st);
  auto op = kernels::cuda::parse_op(a.op);
  if (!op.ok()) return fail("generate", op.status());
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  if (ec) return fail("generate", io_error("cannot create " + a.out + ": " + ec.message()));
  boost::json::array index;
  for (const auto& v : kernels::cuda::generate_variants(*op)) {
    const std::string file = v.name + ".cu";
    if (Status st = write_file_atomic((std::filesystem::path(a.out) / file).string(), v.source); !st.ok())
      return fail("generate", st);
    index.push_back(variant_json(v, file));
  }
  const size_t n = index.size();
  boost::json::object doc{{"schema_version", 1},
                          {"abi_version", kernels::cuda::kAbiVersion},
                          {"op", kernels::cuda::op_name(*op)},
                          {"variants", std::move(index)}};
  if (Status st = write_file_atomic((std::filesystem::path(a.out) / "variants.json").string(),
                                    json::dump_pretty(doc) + "\n");
      !st.ok())
    return fail("generate", st);
  std::cout << fmt::format(
      "{} {} variants in {} (variants.json lists them); compile one with plumb kernels "
      "compile --device cuda --source {}/<name>.cu\n",
      n, kernels::cuda::op_name(*op), a.out, a.out);
  return kExitOk;
}
#endif

void add_generate(CLI::App* c, const std::shared_ptr<CudaArgs>& a) {
  auto* ge = c->add_subcommand("generate",
                               "Write the built-in CUDA variants of one op (threads, vector width, rows per "
                               "block, fused or not) as candidate sources, with variants.json");
  ge->add_option("--device", a->device, "cuda")->required();
  ge->add_option("--op", a->op, "rmsnorm_residual | swiglu")->required();
  ge->add_option("--out", a->out, "folder for the sources")->required();
#ifdef PLUMB_HAVE_CUDA
  ge->callback([a] { set_exit_code(run_generate(*a)); });
#else
  ge->callback([a] { set_exit_code(fail("generate", check_device(a->device))); });
#endif
}

void add_compile(CLI::App* c, const std::shared_ptr<CudaArgs>& a) {
  auto* co =
      c->add_subcommand("compile",
                        "Compile one CUDA candidate (plumb_cuda_abi.h) with NVRTC to a cubin in a child "
                        "process; exit 0 iff it compiled and its ABI checks pass");
  co->add_option("--device", a->device, "cuda (the only device with compiled candidates)")->required();
  co->add_option("--source", a->source, "the candidate's CUDA C++ source")
      ->required()
      ->check(CLI::ExistingFile);
  co->add_option("--arch", a->arch, "target GPU architecture (sm_90a: H100/H200)")->capture_default_str();
  co->add_option("--out", a->out, "folder for compile.json and candidate.cubin (default <source>.compile)");
  co->add_option("--timeout", a->timeout_s, "seconds before the compiler is killed (a timed_out verdict)")
      ->capture_default_str();
  co->add_option("--memory-limit-mb", a->memory_limit_mb, "the compiler's address-space limit (0 = none)")
      ->capture_default_str();
  co->add_option("--nvrtc-option", a->nvrtc_options, "an extra NVRTC option (repeatable), e.g. -lineinfo");
  co->add_flag("--json", a->json, "print compile.json (schema_version 1)");
#ifdef PLUMB_HAVE_CUDA
  co->callback([a] { set_exit_code(run_compile(*a)); });
#else
  co->callback([a] { set_exit_code(fail("compile", check_device(a->device))); });
#endif

  auto* ch = c->add_subcommand("compile-child", "(internal) the NVRTC child of `plumb kernels compile`");
  ch->group("");
  ch->add_option("--source", a->source)->required();
  ch->add_option("--out", a->out)->required();
  ch->add_option("--arch", a->arch);
  ch->add_option("--memory-limit-mb", a->memory_limit_mb);
  ch->add_option("--nvrtc-option", a->nvrtc_options);
#ifdef PLUMB_HAVE_CUDA
  ch->callback(
      [a] { set_exit_code(kernels::cuda::compile_child_main(a->source, a->out, compile_options(*a))); });
#else
  ch->callback([a] { set_exit_code(fail("compile-child", check_device("cuda"))); });
#endif
}

void add_abi(CLI::App* c, const std::shared_ptr<CudaArgs>& a) {
  auto* ab =
      c->add_subcommand("abi", "Print the CUDA candidate ABI header (plumb_cuda_abi.h) candidates include");
  ab->add_option("--device", a->device, "cuda")->required();
  ab->callback([a] {
    Status st = check_device(a->device);
    if (!st.ok()) return set_exit_code(fail("abi", st));
#ifdef PLUMB_HAVE_CUDA
    std::cout << kernels::cuda::abi_header_text();
#endif
    set_exit_code(kExitOk);
  });
}

void add_screen_child(CLI::App* c) {
  auto* ch = c->add_subcommand("screen-cuda-child",
                               "(internal) the device child of `plumb kernels screen --device cuda`");
  ch->group("");
  auto cubin = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto op = std::make_shared<std::string>();
#ifdef PLUMB_HAVE_CUDA
  auto o = std::make_shared<kernels::cuda::ScreenOptions>();
  ch->add_option("--rows", o->rows_max);
  ch->add_option("--dim", o->cols);
  ch->add_option("--draws", o->draws);
  ch->add_option("--reps", o->reps);
  ch->add_option("--seed", o->seed);
  ch->add_flag("--no-timing", [o](int64_t) { o->timing = false; });
#endif
  ch->add_option("--cubin", *cubin)->required();
  ch->add_option("--out", *out)->required();
  ch->add_option("--op", *op)->required();
#ifdef PLUMB_HAVE_CUDA
  ch->callback([=] {
    auto parsed = kernels::cuda::parse_op(*op);
    if (!parsed.ok()) return set_exit_code(fail("screen-cuda-child", parsed.status()));
    o->op = *parsed;
    set_exit_code(kernels::cuda::screen_child_main(*cubin, *out, *o));
  });
#else
  ch->callback([] { set_exit_code(fail("screen-cuda-child", check_device("cuda"))); });
#endif
}

}  // namespace

struct CudaScreenArgs {
  std::string op;
  int64_t rows = 256;
  int64_t dim = 4096;
  int reps = 50;
  uint64_t seed = 1;
  CudaArgs compile;
  double screen_timeout_s = 300;
  std::string sanitizers = "memcheck,racecheck,initcheck";
  double sanitizer_timeout_s = 900;
};

std::shared_ptr<CudaScreenArgs> add_cuda_screen_flags(CLI::App* sc) {
  auto a = std::make_shared<CudaScreenArgs>();
  const char* g = "CUDA (--device cuda; docs/kernels.md, \"CUDA\")";
  sc->add_option("--op", a->op, "rmsnorm_residual | swiglu (the op the candidate implements)")->group(g);
  sc->add_option("--rows", a->rows, "largest rows (rmsnorm_residual) or T (swiglu) screened and timed")
      ->capture_default_str()
      ->group(g);
  sc->add_option("--dim", a->dim, "d (rmsnorm_residual) or ff (swiglu)")->capture_default_str()->group(g);
  sc->add_option("--reps", a->reps, "timed reps")->capture_default_str()->group(g);
  sc->add_option("--seed", a->seed, "seed of the random draws")->capture_default_str()->group(g);
  sc->add_option("--arch", a->compile.arch, "NVRTC target")->capture_default_str()->group(g);
  sc->add_option("--compile-timeout", a->compile.timeout_s, "seconds before the compiler is killed")
      ->capture_default_str()
      ->group(g);
  sc->add_option("--screen-timeout", a->screen_timeout_s, "seconds before the screening child is killed")
      ->capture_default_str()
      ->group(g);
  sc->add_option("--sanitizers", a->sanitizers,
                 "compute-sanitizer tools run over a candidate that passed (its correctness draws again, "
                 "one per shape): a list of memcheck, racecheck, initcheck, synccheck, or none")
      ->capture_default_str()
      ->group(g);
  sc->add_option("--sanitizer-timeout", a->sanitizer_timeout_s, "seconds per tool before it is killed")
      ->capture_default_str()
      ->group(g);
  return a;
}

#ifdef PLUMB_HAVE_CUDA
namespace {

// The screening settings of `kernels screen` and `kernels search` with --device cuda.
kernels::cuda::ScreenOptions screen_options(const CudaScreenArgs& a, kernels::cuda::CudaOp op, int draws,
                                            bool timing, std::vector<std::string> sanitizers) {
  kernels::cuda::ScreenOptions o;
  o.op = op;
  o.rows_max = a.rows;
  o.cols = a.dim;
  o.draws = draws;
  o.timing = timing;
  o.reps = a.reps;
  o.seed = a.seed;
  o.timeout_s = a.screen_timeout_s;
  o.sanitizers = std::move(sanitizers);
  o.sanitizer_timeout_s = a.sanitizer_timeout_s;
  return o;
}

}  // namespace
#endif

int run_cuda_screen(const CudaScreenArgs& a, const std::string& source, const std::string& out_arg, int draws,
                    bool timing, bool json) {
  if (Status st = check_device("cuda"); !st.ok()) return fail("screen", st);
#ifdef PLUMB_HAVE_CUDA
  auto sanitizers = kernels::cuda::parse_sanitizers(a.sanitizers);
  if (!sanitizers.ok()) return fail("screen", sanitizers.status());
  auto op = kernels::cuda::parse_op(a.op);
  if (!op.ok()) return fail("screen", op.status().with_context("--op"));
  if (!std::filesystem::is_regular_file(source))
    return fail("screen",
                not_found("--source " + source + ": no such file (a CUDA C++ candidate, plumb_cuda_abi.h)"));
  if (draws < 1 || a.reps < 2 || a.rows < 1 || a.dim < 2)
    return fail("screen",
                invalid_argument("--draws >= 1, --reps >= 2, --rows >= 1 and --dim >= 2 are needed"));
  const std::string out =
      out_arg.empty() ? std::filesystem::path(source).replace_extension("").string() + ".screen" : out_arg;
  auto c = kernels::cuda::compile_in_child(self_exe(), std::filesystem::absolute(source).string(),
                                           out + "/compile", compile_options(a.compile));
  if (!c.ok()) return fail("screen", c.status());
  if (c->verdict != kernels::cuda::CompileVerdict::kOk) {
    if (json)
      std::cout << json::dump_pretty(boost::json::object{{"compile", kernels::cuda::to_json(*c)}}) << "\n";
    if (!json)
      std::cout << fmt::format("{}: {}\n{}\n", kernels::cuda::verdict_name(c->verdict), c->message, c->log);
    return kExitFailed;
  }
  const kernels::cuda::ScreenOptions o = screen_options(a, *op, draws, timing, *sanitizers);
  auto r = kernels::cuda::screen_in_child(self_exe(), c->cubin_path, out + "/screen", o);
  if (!r.ok()) return fail("screen", r.status());
  if (json) {
    std::cout << json::dump_pretty(boost::json::object{{"compile", kernels::cuda::to_json(*c)},
                                                       {"screen", kernels::cuda::to_json(*r)}})
              << "\n";
  } else {
    std::cout << fmt::format("{}: {}\n", kernels::cuda::verdict_name(r->verdict), r->reason);
    if (r->time.reps > 0)
      std::cout << fmt::format(
          "{} on {}: median {:.2f} us [{:.2f}, {:.2f}] over {} reps; {:.0f} GB/s implied, copy "
          "{:.0f} GB/s\n",
          r->timed_shape, r->device, r->time.median_us, r->time.lo_us, r->time.hi_us, r->time.reps,
          r->implied_gb_s, r->copy_gb_s);
    for (const auto& s : r->sanitizers)
      std::cout << fmt::format(
          "compute-sanitizer {}: {}\n", s.tool,
          !s.completed ? "did not finish: " + s.first
          : s.errors > 0
              ? fmt::format("{} error(s); first: {}", s.errors, s.first)
              : fmt::format("0 errors{}",
                            s.warnings > 0 ? fmt::format(" ({} warnings)", s.warnings) : std::string()));
    if (r->sanitizers.empty()) std::cout << "compute-sanitizer: not run (--sanitizers none)\n";
  }
  if (r->verdict == kernels::cuda::ScreenVerdict::kNoDevice) return kExitError;
  return r->verdict == kernels::cuda::ScreenVerdict::kPass ? kExitOk : kExitFailed;
#else
  return kExitError;
#endif
}

int run_cuda_search(const CudaScreenArgs& a, const CudaSearchArgs& s) {
  if (Status st = check_device("cuda"); !st.ok()) return fail("search", st);
#ifdef PLUMB_HAVE_CUDA
  auto op = kernels::cuda::parse_op(a.op);
  if (!op.ok()) return fail("search", op.status().with_context("--op"));
  auto sanitizers = kernels::cuda::parse_sanitizers(a.sanitizers);
  if (!sanitizers.ok()) return fail("search", sanitizers.status());
  if (s.draws < 1 || a.reps < 2 || a.rows < 1 || a.dim < 2)
    return fail("search",
                invalid_argument("--draws >= 1, --reps >= 2, --rows >= 1 and --dim >= 2 are needed"));
  kernels::cuda::CudaSearchOptions o;
  o.plumb_exe = self_exe();
  o.out_dir = s.out.empty() ? std::string(kernels::cuda::op_name(*op)) + ".search" : s.out;
  o.episodes = s.episodes;
  o.candidates_per_episode = s.candidates;
  if (!s.proposer.empty()) o.proposer_argv = {"/bin/sh", "-c", s.proposer};
  o.proposals_per_episode = s.proposals;
  o.proposer_timeout = std::chrono::milliseconds(int64_t(s.proposer_timeout_s * 1000));
  o.compile = compile_options(a.compile);
  o.screen = screen_options(a, *op, s.draws, s.timing, *sanitizers);
  o.progress = [](const std::string& m) { std::cerr << m << "\n"; };
  auto r = kernels::cuda::run_cuda_search(o);
  if (!r.ok()) return fail("search", r.status());
  if (s.json) {
    std::cout << json::dump_pretty(kernels::cuda::cuda_search_json(o, *r)) << "\n";
  } else if (r->best >= 0) {
    const auto& b = r->tried[size_t(r->best)];
    std::cout << fmt::format(
        "best: {} ({}), u = {:.3f} of the copy bandwidth, median {:.2f} us; {}/search.json\n", b.name,
        b.origin, b.utility, b.screen.time.median_us, o.out_dir);
  } else {
    std::cout << fmt::format("no candidate passed; {}/search.json lists each verdict\n", o.out_dir);
  }
  return r->best >= 0 ? kExitOk : kExitFailed;
#else
  return kExitError;
#endif
}

void add_kernels_cuda_commands(CLI::App* kernels) {
  auto a = std::make_shared<CudaArgs>();
  add_abi(kernels, a);
  add_compile(kernels, a);
  add_generate(kernels, a);
  add_screen_child(kernels);
}

}  // namespace plumb::cli
