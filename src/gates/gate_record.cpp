#include "gates/gate_record.h"

#include <fmt/format.h>

#include <cmath>

#include "core/json.h"
#include "core/sha256.h"
#include "protocol/protocol.h"
#include "protocol/provenance.h"

namespace plumb::gates {

std::string gate_set_hash(const GateRunInfo& info) {
  if (!info.dataset_sha256.empty()) return sha256_hex("plumb-gate/" + info.dataset_sha256);
  return sha256_hex(fmt::format("plumb-gate/seed/{}", info.seed));
}

namespace {
Result<int64_t> machine_id(ledger::Ledger& l) {
  auto m = protocol::capture_machine();
  if (!m.ok()) return m.status();
  return l.insert_machine(
      {m->hash(), m->cpu_model, m->cores, m->memory_bytes, m->gpu_model, m->gpu_driver, m->kernel});
}
}  // namespace

Result<int64_t> record_gate_run(ledger::Ledger& l, const GateReport& report, const GateRunInfo& info) {
  PLUMB_ASSIGN_OR_RETURN(int64_t mid, machine_id(l));
  auto b = protocol::build_info();
  PLUMB_ASSIGN_OR_RETURN(int64_t bid, l.insert_build({b.version, b.git_commit, b.build_type, b.compiler}));
  PLUMB_ASSIGN_OR_RETURN(int64_t pid, l.insert_protocol({protocol::kVersion, protocol::protocol_hash(),
                                                         protocol::canonical_json()}));
  std::string scenario = "gate";
  for (const auto& g : report.gates) scenario += ":" + g.gate;
  PLUMB_ASSIGN_OR_RETURN(int64_t sid, l.insert_request_set({gate_set_hash(info), scenario, "custom",
                                                            int64_t(info.seed & 0x7fffffffffffffffULL),
                                                            std::max<int64_t>(1, info.items)}));
  json::object cfg;
  cfg["target"] = info.target_url;
  cfg["reference"] = info.reference;
  cfg["dataset"] = info.dataset_path;
  std::string cfg_text = json::canonical(cfg);
  json::object settings;
  settings["strict"] = info.strict;
  settings["dataset_sha256"] = info.dataset_sha256;
  ledger::RunRow run;
  run.machine_id = mid;
  run.build_id = bid;
  run.protocol_id = pid;
  run.request_set_id = sid;
  run.scenario = scenario;
  run.size_class = "custom";
  run.target_engine = "openai-compatible";
  run.engine_config = cfg_text;
  run.engine_config_hash = sha256_hex(cfg_text);
  run.model_identity = info.target_model.empty() ? "unknown" : info.target_model;
  run.seed = int64_t(info.seed & 0x7fffffffffffffffULL);
  run.effective_settings = json::canonical(settings);
  run.started_at = info.started_at;
  run.ended_at = info.ended_at;
  run.valid = false;  // a gate run measures no performance objective
  run.validity_json = json::dump(to_json(report, info.strict));
  run.gate_status = report.passed(info.strict) ? "pass" : "fail";
  std::vector<ledger::MetricRow> metrics;
  for (const auto& g : report.gates)
    for (const auto& c : g.constraints)
      if (std::isfinite(c.value)) metrics.push_back({"gate." + g.gate + "." + c.name, c.value, "1"});
  if (info.reference_accuracy && std::isfinite(*info.reference_accuracy))
    metrics.push_back({"gate.quality.reference_accuracy", *info.reference_accuracy, "1"});
  return l.insert_run(run, {}, metrics);
}

Result<std::optional<double>> ledger_baseline_accuracy(ledger::Ledger& l, const std::string& dataset_sha256,
                                                       const std::string& model) {
  PLUMB_ASSIGN_OR_RETURN(int64_t mid, machine_id(l));
  GateRunInfo info;
  info.dataset_sha256 = dataset_sha256;
  return l.latest_metric(
      {gate_set_hash(info), model.empty() ? "unknown" : model, mid, "gate.quality.reference_accuracy"});
}

}  // namespace plumb::gates
