#include "gates/gate.h"

#include <fmt/format.h>

#include <algorithm>

namespace plumb::gates {

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "fail";
    case Verdict::kNotEvaluated:
      return "not_evaluated";
  }
  return "fail";
}

Constraint check(std::string name, double value, std::string op, double bound, std::string fix,
                 std::string detail) {
  Constraint c;
  c.name = std::move(name);
  c.value = value;
  c.bound = bound;
  c.op = std::move(op);
  c.fix = std::move(fix);
  c.detail = std::move(detail);
  bool ok = false;
  if (!std::isnan(value)) {
    if (c.op == ">=")
      ok = value >= bound;
    else if (c.op == "<=")
      ok = value <= bound;
    else if (c.op == "==")
      ok = value == bound;
  }
  c.verdict = ok ? Verdict::kPass : Verdict::kFail;
  return c;
}

Constraint not_evaluated(std::string name, std::string why) {
  Constraint c;
  c.name = std::move(name);
  c.verdict = Verdict::kNotEvaluated;
  c.op = "";
  c.fix = std::move(why);
  return c;
}

bool GateResult::passed(bool strict) const {
  return std::all_of(constraints.begin(), constraints.end(), [&](const Constraint& c) {
    return c.verdict == Verdict::kPass || (!strict && c.verdict == Verdict::kNotEvaluated);
  });
}

bool GateResult::complete() const {
  return std::none_of(constraints.begin(), constraints.end(),
                      [](const Constraint& c) { return c.verdict == Verdict::kNotEvaluated; });
}

bool GateReport::passed(bool strict) const {
  return std::all_of(gates.begin(), gates.end(), [&](const GateResult& g) { return g.passed(strict); });
}

bool GateReport::complete() const {
  return std::all_of(gates.begin(), gates.end(), [](const GateResult& g) { return g.complete(); });
}

namespace {
std::string num(double v) {
  if (std::isnan(v)) return "-";
  if (v == std::floor(v) && std::fabs(v) < 1e12) return fmt::format("{:.0f}", v);
  return fmt::format("{:.4g}", v);
}
}  // namespace

std::string render_table(const GateReport& report, bool strict) {
  size_t wname = 10;
  for (const auto& g : report.gates)
    for (const auto& c : g.constraints) wname = std::max(wname, c.name.size());
  std::string out = fmt::format("{:<10} {:<{}} {:>12} {:>2} {:>12}  {}\n", "gate", "constraint", wname,
                                "value", "op", "bound", "verdict");
  for (const auto& g : report.gates) {
    for (const auto& c : g.constraints) {
      std::string verdict = c.verdict == Verdict::kPass   ? "PASS"
                            : c.verdict == Verdict::kFail ? "FAIL"
                                                          : "NOT EVALUATED";
      bool evaluated = c.verdict != Verdict::kNotEvaluated;
      out += fmt::format("{:<10} {:<{}} {:>12} {:>2} {:>12}  {}\n", g.gate, c.name, wname, num(c.value),
                         evaluated ? c.op : "", evaluated ? num(c.bound) : "-", verdict);
      if (!c.detail.empty()) out += fmt::format("{:<10} {:<{}} ({})\n", "", "", wname, c.detail);
      if (c.verdict != Verdict::kPass && !c.fix.empty())
        out += fmt::format("{:<10} {:<{}} fix: {}\n", "", "", wname, c.fix);
    }
  }
  out += fmt::format("verdict: {}{}\n", report.passed(strict) ? "PASS" : "FAIL",
                     report.complete() ? "" : " (some constraints were not evaluated)");
  return out;
}

json::object to_json(const GateReport& report, bool strict) {
  json::object o;
  o["passed"] = report.passed(strict);
  o["complete"] = report.complete();
  o["strict"] = strict;
  json::array gates;
  for (const auto& g : report.gates) {
    json::object go;
    go["gate"] = g.gate;
    go["passed"] = g.passed(strict);
    json::array cs;
    for (const auto& c : g.constraints) {
      json::object co;
      co["name"] = c.name;
      if (std::isnan(c.value))
        co["value"] = nullptr;
      else
        co["value"] = c.value;
      co["bound"] = c.bound;
      co["op"] = c.op;
      co["verdict"] = std::string(verdict_name(c.verdict));
      co["pass"] = c.verdict == Verdict::kPass;
      co["fix"] = c.fix;
      co["detail"] = c.detail;
      cs.push_back(std::move(co));
    }
    go["constraints"] = std::move(cs);
    gates.push_back(std::move(go));
  }
  o["gates"] = std::move(gates);
  return o;
}

}  // namespace plumb::gates
