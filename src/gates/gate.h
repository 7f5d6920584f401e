// A gate is a list of named constraints, AND-ed: each has an observed value, a bound, the
// comparison that must hold, a verdict and what to do when it fails. Gates print as a console
// table and as JSON; `plumb gate` turns the overall verdict into its exit code.
//
// A constraint that could not be evaluated (e.g. no roofline data) is never passed silently: its
// verdict is kNotEvaluated, it is printed as such, and GateReport::complete() is false. Whether a
// not-evaluated constraint fails the gate is the caller's choice (`plumb gate --strict`).
// Plain values; no I/O; thread-compatible.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace plumb::gates {

enum class Verdict { kPass, kFail, kNotEvaluated };
std::string_view verdict_name(Verdict v);  // "pass" | "fail" | "not_evaluated"

// One named constraint (same shape as protocol::Constraint, plus the not-evaluated state).
struct Constraint {
  std::string name;                  // e.g. "accuracy", "fidelity_top1_agreement"
  double value = std::nan("");       // observed value (NaN when not measured)
  double bound = 0;                  // the bound value is compared with
  std::string op = ">=";             // ">=", "<=" or "==" (value op bound must hold)
  Verdict verdict = Verdict::kFail;  // the outcome
  std::string fix;                   // what to do when it fails (or why it was not evaluated)
  std::string detail;                // how the value was obtained (units, counts), may be empty
};

// Evaluates value op bound. A NaN value fails. op must be ">=", "<=" or "=="; anything else fails.
Constraint check(std::string name, double value, std::string op, double bound, std::string fix,
                 std::string detail = "");
// A constraint that could not be evaluated; `why` goes into fix.
Constraint not_evaluated(std::string name, std::string why);

// The constraints of one gate ("quality" or "integrity").
struct GateResult {
  std::string gate;                     // gate name
  std::vector<Constraint> constraints;  // in a fixed order
  // No evaluated constraint fails; with strict, every constraint is also evaluated.
  bool passed(bool strict = false) const;
  bool complete() const;  // every constraint was evaluated
};

// Several gates judged together (`plumb gate all`).
struct GateReport {
  std::vector<GateResult> gates;  // in run order
  bool passed(bool strict = false) const;
  bool complete() const;
};

// Console table: one row per constraint (gate, name, value, op, bound, verdict), and the fix under
// each failed or not-evaluated row; a last line with the overall verdict.
std::string render_table(const GateReport& report, bool strict = false);
// {"passed", "complete", "strict", "gates":[{"gate","passed","constraints":[{name,value,bound,op,
// verdict,pass,fix,detail}]}]}; a NaN value is null.
json::object to_json(const GateReport& report, bool strict = false);

}  // namespace plumb::gates
