#include "compare/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <variant>

#include "core/file.h"
#include "core/log.h"
#include "core/random.h"
#include "launch/adapter.h"
#include "protocol/protocol.h"

namespace plumb::compare {
namespace {

// P(X <= k) for X ~ Binomial(n, p), summed in log space (n is a count of comparisons: small).
double binom_cdf(int64_t k, int64_t n, double p) {
  if (k < 0) return 0;
  if (k >= n) return 1;
  if (p <= 0) return 1;
  if (p >= 1) return 0;
  double sum = 0;
  for (int64_t i = 0; i <= k; ++i)
    sum += std::exp(std::lgamma(double(n + 1)) - std::lgamma(double(i + 1)) - std::lgamma(double(n - i + 1)) +
                    double(i) * std::log(p) + double(n - i) * std::log1p(-p));
  return std::min(1.0, sum);
}

// The p in [0, 1] where f (monotone) crosses `target`, by bisection (f decreasing in p when
// `decreasing`).
template <class F>
double solve(F f, double target, bool decreasing) {
  double lo = 0, hi = 1;
  for (int it = 0; it < 200; ++it) {
    double mid = (lo + hi) / 2;
    bool above = f(mid) > target;
    if (above == decreasing)
      lo = mid;
    else
      hi = mid;
  }
  return (lo + hi) / 2;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string toml_value(const launch::ParamValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return toml_string(*s);
  if (const auto* a = std::get_if<std::vector<std::string>>(&v)) {
    std::string out = "[";
    for (size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + toml_string((*a)[i]);
    return out + "]";
  }
  return launch::format_value(v);  // bool, int, float: TOML literals
}

// The config as TOML with `adapter` written so that it resolves from any directory.
std::string config_toml(const launch::EngineConfig& c, const std::string& config_path) {
  std::string adapter = c.adapter;
  auto names = launch::builtin_adapter_names();
  if (std::find(names.begin(), names.end(), adapter) == names.end())
    adapter = std::filesystem::absolute(std::filesystem::path(config_path).parent_path() / adapter)
                  .lexically_normal()
                  .string();
  std::string out = "# written by plumb compare calibrate from " + config_path +
                    "\nadapter = " + toml_string(adapter) + "\n\n[params]\n";
  for (const auto& [k, v] : c.params) out += k + " = " + toml_value(v) + "\n";
  return out;
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

}  // namespace

BinomialCi clopper_pearson(int64_t k, int64_t n, double level) {
  BinomialCi ci;
  ci.k = k;
  ci.n = n;
  if (n <= 0) return ci;
  k = std::clamp<int64_t>(k, 0, n);
  ci.share = double(k) / double(n);
  const double tail = (1 - level) / 2;
  // P(X >= k | p) = 1 - cdf(k - 1) grows with p; P(X <= k | p) falls with p.
  ci.lo = k == 0 ? 0 : solve([&](double p) { return 1 - binom_cdf(k - 1, n, p); }, tail, false);
  ci.hi = k == n ? 1 : solve([&](double p) { return binom_cdf(k, n, p); }, tail, true);
  return ci;
}

std::string format_binomial(const BinomialCi& ci) {
  return std::to_string(ci.k) + "/" + std::to_string(ci.n) + " = " + pct(ci.share) + " (95% CI " +
         pct(ci.lo) + "-" + pct(ci.hi) + ")";
}

namespace {

// The options checked and the base configuration loaded: a plumb one without a slowdown of its own.
Result<launch::EngineConfig> load_base_config(const CalibrateOptions& o) {
  if (!(o.slowdown > 0 && o.slowdown <= 100))
    return invalid_argument("calibrate: --slowdown must be in (0, 100]");
  if (o.comparisons < 1) return invalid_argument("calibrate: --comparisons must be >= 1");
  if (o.scenarios.empty()) return invalid_argument("calibrate: no scenario");
  PLUMB_ASSIGN_OR_RETURN(auto base, launch::load_engine_config(o.config));
  if (base.resolved.name != "plumb")
    return invalid_argument(
        "calibrate: the configuration must use the plumb adapter (the slow arm is made with "
        "plumb serve --debug-step-slowdown); " +
        o.config + " uses " + base.resolved.name);
  if (base.params.count("debug_step_slowdown"))
    return invalid_argument("calibrate: " + o.config + " already sets debug_step_slowdown");
  return base;
}

// The readout of comparison c (stored when the ledger accepts it) copied into c.
void read_verdict(ledger::Ledger& ledger, CalibrationComparison& c, CalibrationResult& out) {
  auto r = readout_comparison(ledger, c.registration_id, true);
  if (!r.ok() && r.status().code() == Code::kFailedPrecondition) {
    // The ledger refuses to store some readouts (a noisy arm): compute it unstored to count it.
    c.error = r.status().message();
    r = readout_comparison(ledger, c.registration_id, false);
  } else {
    c.stored = r.ok();
  }
  if (!r.ok()) {
    c.verdict = "error";
    c.error = r.status().message();
    return;
  }
  const auto& x = r->readout;
  c.verdict = std::string(protocol::verdict_name(x.verdict));
  c.ratio = x.ratio;
  c.lo = x.lo;
  c.hi = x.hi;
  c.cv_a = x.cv_a;
  c.cv_b = x.cv_b;
  if (out.placement.empty()) out.placement = r->placement;
}

// Comparison j of the calibration: even ones A against A, odd ones A against the slow arm, the
// scenarios taken in turn. Registered, run and read out.
Result<CalibrationComparison> run_calibration_comparison(ledger::Ledger& ledger, const CalibrateOptions& o,
                                                         const RunOptions& ro, int j,
                                                         CalibrationResult& out) {
  const bool same = j % 2 == 0;
  const int i = j / 2;
  CalibrationComparison c;
  c.kind = same ? "a_vs_a" : "a_vs_slow";
  c.scenario = o.scenarios[size_t(i) % o.scenarios.size()];
  RegisterOptions reg;
  reg.config_a = out.config_a;
  reg.config_b = same ? out.config_a : out.config_slow;
  reg.scenario = c.scenario;
  reg.size = o.size;
  reg.min_effect = o.min_effect;
  reg.delta = o.delta;
  reg.pairs = o.pairs;
  reg.max_pairs = o.max_pairs;
  reg.seed = derive_seed(o.seed, "calibrate/" + c.kind + "/" + std::to_string(i)) & 0x7fffffffULL;
  PLUMB_ASSIGN_OR_RETURN(c.registration_id, register_comparison(ledger, reg));
  ro.progress("calibrate " + std::to_string(j + 1) + "/" + std::to_string(2 * o.comparisons) + ": " + c.kind +
              " on scenario " + c.scenario + " (" + o.size + "), comparison " +
              std::to_string(c.registration_id));
  PLUMB_ASSIGN_OR_RETURN(auto sum, run_comparison(ledger, c.registration_id, ro));
  (void)sum;
  read_verdict(ledger, c, out);
  char buf[200];
  std::snprintf(buf, sizeof buf, "  -> %s: ratio %.4f [%.4f, %.4f], CV A %.1f%% B %.1f%%", c.verdict.c_str(),
                c.ratio, c.lo, c.hi, 100 * c.cv_a, 100 * c.cv_b);
  ro.progress(buf);
  return c;
}

}  // namespace

Result<CalibrationResult> calibrate(ledger::Ledger& ledger, const CalibrateOptions& o) {
  PLUMB_ASSIGN_OR_RETURN(launch::EngineConfig base, load_base_config(o));
  launch::EngineConfig slow = base;
  slow.params["debug_step_slowdown"] = o.slowdown;

  CalibrationResult out;
  std::filesystem::path dir =
      o.work_dir.empty() ? std::filesystem::current_path() : std::filesystem::path(o.work_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  out.config_a = (dir / "calibrate-a.toml").string();
  out.config_slow = (dir / "calibrate-slow.toml").string();
  PLUMB_RETURN_IF_ERROR(write_file_atomic(out.config_a, config_toml(base, o.config)));
  PLUMB_RETURN_IF_ERROR(write_file_atomic(out.config_slow, config_toml(slow, o.config)));

  RunOptions ro = o.run;
  ro.progress = [&o](const std::string& m) {
    if (o.run.progress)
      o.run.progress(m);
    else
      log::info("{}", m);
  };
  if (ro.work_dir.empty()) ro.work_dir = dir.string();
  int64_t fp = 0, aa = 0, detected = 0, slow_n = 0;
  for (int j = 0; j < 2 * o.comparisons; ++j) {
    PLUMB_ASSIGN_OR_RETURN(CalibrationComparison c, run_calibration_comparison(ledger, o, ro, j, out));
    if (c.verdict == "noisy") ++out.noisy;
    if (c.kind == "a_vs_a") {
      ++aa;
      if (c.verdict == "better" || c.verdict == "worse") ++fp;
    } else {
      ++slow_n;
      if (c.verdict == "worse") ++detected;
    }
    out.comparisons.push_back(std::move(c));
  }
  out.false_positives = clopper_pearson(fp, aa);
  out.power = clopper_pearson(detected, slow_n);
  return out;
}

std::string format_calibration(const CalibrationResult& r, const CalibrateOptions& o) {
  std::string s;
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "calibration: %d A-vs-A and %d A-vs-slow comparisons (slowdown %g: B/A = %.4f by construction), "
      "%d pairs each, size %s, rule min_effect %g delta %g\n",
      o.comparisons, o.comparisons, o.slowdown, 1 / (1 + o.slowdown), o.pairs, o.size.c_str(), o.min_effect,
      o.delta);
  s += buf;
  s += "  arms: " + r.config_a + " and " + r.config_slow + "\n";
  if (!r.placement.empty()) s += "  placement: " + r.placement + "\n";
  std::snprintf(buf, sizeof buf, "  %-4s %-10s %-4s %-13s %-8s %-19s %-7s %s\n", "#", "kind", "scn",
                "verdict", "ratio", "95% CI", "CV A", "CV B");
  s += buf;
  for (size_t i = 0; i < r.comparisons.size(); ++i) {
    const auto& c = r.comparisons[i];
    std::snprintf(buf, sizeof buf, "  %-4lld %-10s %-4s %-13s %-8.4f [%.4f, %.4f] %-7s %s\n",
                  (long long)c.registration_id, c.kind.c_str(), c.scenario.c_str(), c.verdict.c_str(),
                  c.ratio, c.lo, c.hi, pct(c.cv_a).c_str(), pct(c.cv_b).c_str());
    s += buf;
  }
  s += "  false positives (A-vs-A read better or worse): " + format_binomial(r.false_positives) + "\n";
  s += "  power (A-vs-slow read worse):                  " + format_binomial(r.power) + "\n";
  s += "  noisy comparisons (either kind): " + std::to_string(r.noisy) + " of " +
       std::to_string(r.comparisons.size()) + "\n";
  return s;
}

}  // namespace plumb::compare
