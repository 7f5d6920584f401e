#include "compare/preflight.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "compare/measure.h"
#include "core/log.h"
#include "protocol/protocol.h"
#include "stats/stats.h"

namespace plumb::compare {

std::string_view noise_name(Noise n) {
  switch (n) {
    case Noise::kQuiet:
      return "quiet";
    case Noise::kNoisy:
      return "noisy";
    case Noise::kTooNoisy:
      return "too_noisy";
  }
  return "?";
}

double cv_upper_bound(double cv, size_t runs, double confidence) {
  if (runs < 2 || !std::isfinite(cv) || cv < 0) return stats::kNaN;
  const double df = double(runs - 1);
  return cv * std::sqrt(df / stats::chi_squared_quantile(1 - confidence, df));
}

int suggested_pairs(double cv, double min_effect, int min_pairs, int max_pairs) {
  if (!std::isfinite(cv) || cv < 0 || min_effect <= 0) return max_pairs;
  for (int n = min_pairs; n <= max_pairs; ++n) {
    double half =
        stats::student_t_quantile(0.975, double(n - 1)) * std::sqrt(2.0) * cv / std::sqrt(double(n));
    if (half <= min_effect) return n;
  }
  return max_pairs;
}

namespace {

// Quiet, noisy or too noisy from the runs' CV and invalid runs, with the advice for the last two.
void judge_noise(const NoiseCheckOptions& o, NoiseCheck& out) {
  const double cv_pct = 100 * out.cv, cap_pct = 100 * out.cap;
  char buf[400];
  if (out.invalid_runs > 0 || !std::isfinite(out.cv) || out.cv > o.stop_factor * out.cap) {
    out.noise = Noise::kTooNoisy;
    if (out.invalid_runs > 0)
      std::snprintf(buf, sizeof buf,
                    "%lld of %d runs were invalid (a run broke a validity rule of docs/protocol.md §3): a "
                    "comparison's pairs would be lost the same way. See the runs' failures above.",
                    (long long)out.invalid_runs, o.runs);
    else
      std::snprintf(
          buf, sizeof buf,
          "the cross-run CV is %.1f%%, more than %.0fx the %.0f%% cap: a comparison on this machine "
          "now would read `noisy` (no verdict). Quiet the machine (stop builds and other jobs; "
          "check `uptime`), keep placement on, and run again; more pairs cannot fix this, since "
          "they do not lower an arm's CV.",
          cv_pct, o.stop_factor, cap_pct);
    out.advice = buf;
  } else if (out.cv > out.cap) {
    out.noise = Noise::kNoisy;
    std::snprintf(buf, sizeof buf,
                  "the cross-run CV is %.1f%%, over the %.0f%% cap: a comparison may read `noisy`. A quieter "
                  "machine is the fix; the estimate from %zu runs is itself rough, so the job goes on.",
                  cv_pct, cap_pct, out.objectives.size());
    out.advice = buf;
  }
}

}  // namespace

Result<NoiseCheck> noise_check(const NoiseCheckOptions& o) {
  if (o.runs < 3) return invalid_argument("noise check: runs must be >= 3");
  if (o.min_pairs < protocol::kMinPairs || o.max_pairs < o.min_pairs)
    return invalid_argument("noise check: need 5 <= min_pairs <= max_pairs");
  PLUMB_ASSIGN_OR_RETURN(auto config, launch::load_engine_config(o.config));
  PLUMB_ASSIGN_OR_RETURN(auto size, protocol::parse_size_class(o.size));
  PLUMB_ASSIGN_OR_RETURN(auto sc, protocol::find_scenario(o.scenario, size));
  PLUMB_ASSIGN_OR_RETURN(auto counter, make_token_counter(o.run.tokenizer));
  auto progress = [&](const std::string& m) {
    if (o.run.progress)
      o.run.progress(m);
    else
      log::info("{}", m);
  };
  MeasureOptions mo;
  mo.plumb_binary = o.run.plumb_binary;
  mo.work_dir = o.run.work_dir;
  mo.request_timeout = o.run.request_timeout;
  mo.placement = o.run.placement;
  mo.progress = [](const std::string&) {};  // launch lines: the check prints one line per run
  NoiseCheck out;
  out.cap = protocol::kCvCap;
  double total_s = 0;
  auto seeds = pair_seeds(o.seed, o.runs);
  for (int i = 0; i < o.runs; ++i) {
    PLUMB_ASSIGN_OR_RETURN(Workload w, make_workload(sc, uint64_t(seeds[size_t(i)]), counter));
    auto t0 = std::chrono::steady_clock::now();
    PLUMB_ASSIGN_OR_RETURN(auto m, measure(config, sc, w, mo));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_s += s;
    if (!m.started) return m.start_error.with_context("noise check run " + std::to_string(i + 1));
    out.placement = m.placement;
    char buf[200];
    std::snprintf(buf, sizeof buf, "pre-flight run %d/%d: objective %.6g, %s, %.1f s", i + 1, o.runs,
                  m.objective, m.valid ? "valid" : ("INVALID: " + m.failure).c_str(), s);
    progress(buf);
    if (m.valid)
      out.objectives.push_back(m.objective);
    else
      ++out.invalid_runs;
  }
  out.mean_run_s = total_s / o.runs;
  out.cv = out.objectives.size() >= 2 ? stats::cv(out.objectives) : stats::kNaN;
  judge_noise(o, out);
  out.cv_upper = cv_upper_bound(out.cv, out.objectives.size());
  out.suggested_pairs = suggested_pairs(out.cv_upper, o.min_effect, o.min_pairs, o.max_pairs);
  return out;
}

std::string format_noise_check(const NoiseCheck& n, const NoiseCheckOptions& o) {
  char buf[300];
  std::snprintf(
      buf, sizeof buf,
      "pre-flight noise check: %d runs of %s on scenario %s (%s): cross-run CV %.2f%% (cap %.0f%%; 90%% "
      "upper bound %.2f%%) -> %s; pairs for a +-%.0f%% CI: %d; %.1f s per run\n",
      o.runs, o.config.c_str(), o.scenario.c_str(), o.size.c_str(), 100 * n.cv, 100 * n.cap, 100 * n.cv_upper,
      std::string(noise_name(n.noise)).c_str(), 100 * o.min_effect, n.suggested_pairs, n.mean_run_s);
  std::string s = buf;
  s += "  placement: " + n.placement.describe() + "\n";
  if (!n.advice.empty()) s += "  " + n.advice + "\n";
  return s;
}

}  // namespace plumb::compare
