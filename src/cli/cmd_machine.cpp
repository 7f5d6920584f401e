// `plumb machine`: this machine's fingerprint (what results are compared within) and its measured
// ceilings (memory read bandwidth, peak matmul rates), stored in the ledger for reports and the
// roofline plausibility check.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/json.h"
#include "engine/cpu/ceilings.h"
#include "ledger/ledger.h"
#include "protocol/provenance.h"

namespace plumb::cli {
namespace {

struct MachineArgs {
  std::string ledger_path = ledger::kDefaultPath;
  bool no_store = false;
  bool no_ceilings = false;
  int threads = 0;
  bool as_json = false;
};

int run_machine(const MachineArgs& a) {
  auto m = protocol::capture_machine();
  if (!m.ok()) {
    std::cerr << "plumb machine: " << m.status().to_string() << "\n";
    return kExitError;
  }
  std::string hash = m->hash();
  json::object out{{"fingerprint_hash", hash},  {"cpu_model", m->cpu_model},
                   {"cores", m->cores},         {"memory_bytes", m->memory_bytes},
                   {"gpu_model", m->gpu_model}, {"gpu_driver", m->gpu_driver},
                   {"kernel", m->kernel}};
  if (!a.as_json) {
    std::printf("machine fingerprint %s\n", hash.c_str());
    std::printf(
        "  cpu_model     %s\n  cores         %lld\n  memory        %.1f GiB\n  gpu           %s (driver %s)\n"
        "  kernel        %s\n",
        m->cpu_model.c_str(), (long long)m->cores, double(m->memory_bytes) / (1024.0 * 1024 * 1024),
        m->gpu_model.c_str(), m->gpu_driver.c_str(), m->kernel.c_str());
  }
  // Ceilings: rates the CPU backend reaches here (see engine/cpu/ceilings.h for definitions).
  struct Ceiling {
    const char* name;
    double value;
    const char* unit;
  };
  std::vector<Ceiling> ceilings;
  if (!a.no_ceilings) {
    int threads = a.threads > 0 ? a.threads : int(m->cores);
    if (!a.as_json)
      std::printf("measuring ceilings on %d threads (a few seconds; keep the machine otherwise idle)\n",
                  threads);
    engine::MachineCeilings c = engine::measure_ceilings(threads);
    ceilings = {{"mem_read_bw", c.read_bandwidth_gbs, "GB/s"},
                {"matmul_peak_bf16", c.peak_gflops_bf16, "GFLOP/s"},
                {"matmul_peak_f32", c.peak_gflops_f32, "GFLOP/s"},
                {"onednn_sgemm", c.onednn_sgemm_gflops, "GFLOP/s"},
                {"fma_peak", c.fma_gflops, "GFLOP/s"}};
    json::object co{{"threads", c.threads}, {"matmul_variant", c.matmul_variant}};
    for (const auto& x : ceilings) co[x.name] = x.value;
    out["ceilings"] = co;
    if (!a.as_json) {
      std::printf("ceilings (%d threads, decode matmul variant '%s')\n", c.threads, c.matmul_variant);
      for (const auto& x : ceilings) std::printf("  %-18s %10.2f %s\n", x.name, x.value, x.unit);
    }
  } else if (!a.as_json) {
    std::printf("ceilings not measured (--no-ceilings)\n");
  }

  if (!a.no_store) {
    auto l = ledger::Ledger::open(a.ledger_path);
    if (!l.ok()) {
      std::cerr << "plumb machine: " << l.status().to_string() << "\n";
      return kExitError;
    }
    auto id = (*l)->insert_machine(
        {hash, m->cpu_model, m->cores, m->memory_bytes, m->gpu_model, m->gpu_driver, m->kernel});
    if (!id.ok()) {
      std::cerr << "plumb machine: " << id.status().to_string() << "\n";
      return kExitError;
    }
    for (const auto& x : ceilings) {
      if (!(x.value > 0)) continue;  // 0 = not measurable here (e.g. no AVX2 for the FMA loop)
      auto r = (*l)->insert_ceiling({*id, x.name, x.value, x.unit, ""});
      if (!r.ok()) {
        std::cerr << "plumb machine: " << r.status().to_string() << "\n";
        return kExitError;
      }
    }
    out["ledger"] = a.ledger_path;
    out["machine_id"] = *id;
    if (!a.as_json)
      std::printf("stored in %s as machine %lld\n", ledger::redact_url(a.ledger_path).c_str(),
                  (long long)*id);
  }
  if (a.as_json) std::printf("%s\n", json::dump_pretty(out).c_str());
  return kExitOk;
}

void setup(CLI::App& root) {
  auto a = std::make_shared<MachineArgs>();
  auto* cmd =
      root.add_subcommand("machine", "Print this machine's fingerprint, measure its ceilings, store both");
  cmd->add_option("--ledger", a->ledger_path, "ledger database file")->capture_default_str();
  cmd->add_flag("--no-store", a->no_store, "do not write to the ledger");
  cmd->add_flag("--no-ceilings", a->no_ceilings, "only the fingerprint; skip the measurements");
  cmd->add_option("--threads", a->threads, "threads for the measurements (default: all cores)");
  cmd->add_flag("--json", a->as_json, "print JSON");
  cmd->callback([a] { set_exit_code(run_machine(*a)); });
}

PLUMB_COMMAND(70, setup);

}  // namespace
}  // namespace plumb::cli
