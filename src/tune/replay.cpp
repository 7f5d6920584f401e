// Replay (replay): a strategy re-run against a grid study's measured table, for convergence curves.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "stats/stats.h"
#include "tune/strategy.h"
#include "tune/study.h"

namespace plumb::tune {

Result<ReplayResult> replay(const StudyState& g, const StrategyOptions& so, int64_t trials) {
  std::map<std::string, const Observation*> table;
  ReplayResult out;
  out.grid_best = 0;
  for (const auto& t : g.trials) {
    if (t.obs.stage != "full") continue;
    table[config_key(t.obs.config)] = &t.obs;
    if (t.obs.feasible && t.obs.objective) out.grid_best = std::max(out.grid_best, *t.obs.objective);
  }
  out.grid_points = int64_t(table.size());
  if (out.grid_best <= 0)
    return failed_precondition("study " + std::to_string(g.row.id) + " has no feasible trial");
  PLUMB_ASSIGN_OR_RETURN(auto strategy, make_strategy(g.space, so));
  std::vector<Observation> hist;
  double best = stats::kNaN;
  for (int64_t i = 0; i < trials; ++i) {
    PLUMB_ASSIGN_OR_RETURN(auto p, strategy->propose(hist, BudgetLeft{trials - i, -1}));
    if (!p) break;
    auto it = table.find(config_key(p->config));
    if (it == table.end())
      return not_found(
          "replay: " + so.name + " proposed " + config_key(p->config) +
          ", which the grid study did not measure (replay needs a finite space measured by grid)");
    Observation o = *it->second;
    o.index = i;
    o.stage = "full";
    hist.push_back(o);
    if (o.feasible && o.objective && (!std::isfinite(best) || *o.objective > best)) best = *o.objective;
    out.best_so_far.push_back(best);
    if (out.trials_to_95 < 0 && std::isfinite(best) && best >= 0.95 * out.grid_best) out.trials_to_95 = i + 1;
  }
  return out;
}

}  // namespace plumb::tune
