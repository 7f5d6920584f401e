#include "tune/strategy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/random.h"
#include "tune/proposer.h"

namespace plumb::tune {
namespace {

using launch::ParamValue;

std::set<std::string> seen_keys(const std::vector<Observation>& h, const std::string& stage) {
  std::set<std::string> s;
  for (const auto& o : h)
    if (stage.empty() || o.stage == stage) s.insert(config_key(o.config));
  return s;
}

Rng rng_for(uint64_t seed, const std::string& what, size_t n) {
  return Rng(derive_seed(seed, what + "/" + std::to_string(n)));
}

// A uniform configuration not in `seen` when the space is finite (nullopt when every point is
// seen); any uniform draw otherwise.
std::optional<Config> fresh_uniform(const SearchSpace& sp, Rng& rng, const std::set<std::string>& seen) {
  if (!is_finite(sp)) return sample_uniform(sp, rng);
  for (int i = 0; i < 200; ++i) {
    Config c = sample_uniform(sp, rng);
    if (!seen.count(config_key(c))) return c;
  }
  auto all = enumerate_grid(sp, 200000);
  if (!all.ok()) return sample_uniform(sp, rng);
  std::vector<Config> left;
  for (auto& c : *all)
    if (!seen.count(config_key(c))) left.push_back(std::move(c));
  if (left.empty()) return std::nullopt;
  return left[size_t(rng.uniform_int(0, int64_t(left.size()) - 1))];
}

class GridStrategy final : public Strategy {
 public:
  explicit GridStrategy(SearchSpace sp) : sp_(std::move(sp)) {}
  std::string name() const override { return "grid"; }
  Result<std::optional<Proposal>> propose(const std::vector<Observation>& h, const BudgetLeft&) override {
    if (!grid_) {
      PLUMB_ASSIGN_OR_RETURN(grid_, enumerate_grid(sp_));
    }
    auto seen = seen_keys(h, "");
    for (size_t i = 0; i < grid_->size(); ++i) {
      if (seen.count(config_key((*grid_)[i]))) continue;
      Proposal p;
      p.config = (*grid_)[i];
      p.rationale = "grid point " + std::to_string(i + 1) + " of " + std::to_string(grid_->size());
      return std::optional<Proposal>(std::move(p));
    }
    return std::optional<Proposal>();
  }

 private:
  SearchSpace sp_;
  std::optional<std::vector<Config>> grid_;
};

class RandomStrategy final : public Strategy {
 public:
  RandomStrategy(SearchSpace sp, uint64_t seed) : sp_(std::move(sp)), seed_(seed) {}
  std::string name() const override { return "random"; }
  Result<std::optional<Proposal>> propose(const std::vector<Observation>& h, const BudgetLeft&) override {
    Rng rng = rng_for(seed_, "random", h.size());
    auto c = fresh_uniform(sp_, rng, seen_keys(h, ""));
    if (!c) return std::optional<Proposal>();
    Proposal p;
    p.config = std::move(*c);
    p.rationale = "uniform random draw " + std::to_string(h.size() + 1);
    return std::optional<Proposal>(std::move(p));
  }

 private:
  SearchSpace sp_;
  uint64_t seed_;
};

// ---- TPE -----------------------------------------------------------------------------------------

double unit_of(const ParamSpec& p, double x) {
  if (p.high == p.low) return 0.5;
  if (p.log) return (std::log(x) - std::log(p.low)) / (std::log(p.high) - std::log(p.low));
  return (x - p.low) / (p.high - p.low);
}

double number_of(const ParamValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  return 0;
}

int index_of(const ParamSpec& p, const ParamValue& v) {
  for (size_t i = 0; i < p.values.size(); ++i) {
    if (p.values[i] == v) return int(i);
    bool num = (std::holds_alternative<int64_t>(v) || std::holds_alternative<double>(v));
    if (num && number_of(p.values[i]) == number_of(v) &&
        (std::holds_alternative<int64_t>(p.values[i]) || std::holds_alternative<double>(p.values[i])))
      return int(i);
  }
  return -1;
}

bool ordinal(const ParamSpec& p) { return p.kind == ParamKind::kInt || p.kind == ParamKind::kFloat; }

double range_sigma(size_t m) { return std::max(0.05, 0.25 * std::pow(double(m + 1), -0.2)); }
constexpr double kIndexBandwidth = 1.0;

// Parzen density of one parameter's value in a group (a prior component of weight 1 plus one
// kernel per observation where the parameter was active).
double density(const ParamSpec& p, const ParamValue& v, const std::vector<const Config*>& group) {
  std::vector<const ParamValue*> obs;
  for (const Config* c : group)
    if (auto it = c->find(p.name); it != c->end()) obs.push_back(&it->second);
  double m = double(obs.size());
  if (!p.values.empty()) {
    double n = double(p.values.size());
    int i = index_of(p, v);
    if (i < 0) return 1e-12;
    if (!ordinal(p)) {
      double count = 0;
      for (const auto* o : obs) count += index_of(p, *o) == i ? 1 : 0;
      return (1.0 + count) / (n + m);
    }
    double sum = 1.0 / n;  // prior: uniform over the indices
    for (const auto* o : obs) {
      int j = index_of(p, *o);
      if (j < 0) continue;
      double z = 0, w = 0;
      for (int k = 0; k < int(n); ++k) {
        double e = std::exp(-0.5 * std::pow((k - j) / kIndexBandwidth, 2));
        z += e;
        if (k == i) w = e;
      }
      sum += w / z;
    }
    return sum / (1.0 + m);
  }
  double u = unit_of(p, number_of(v));
  double s = range_sigma(obs.size());
  double sum = 1.0;  // uniform prior density on [0, 1]
  for (const auto* o : obs) {
    double uj = unit_of(p, number_of(*o));
    sum += std::exp(-0.5 * std::pow((u - uj) / s, 2)) / (s * std::sqrt(2 * M_PI));
  }
  return sum / (1.0 + m);
}

class TpeStrategy final : public Strategy {
 public:
  TpeStrategy(SearchSpace sp, StrategyOptions o) : sp_(std::move(sp)), o_(std::move(o)) {}
  std::string name() const override { return "bayes"; }

  Result<std::optional<Proposal>> propose(const std::vector<Observation>& h, const BudgetLeft&) override {
    Rng rng = rng_for(o_.seed, "bayes", h.size());
    auto seen = seen_keys(h, "");
    std::vector<const Observation*> full;
    for (const auto& x : h)
      if (x.stage == "full") full.push_back(&x);
    if (full.empty() && h.empty()) {
      if (auto p = default_start()) return std::optional<Proposal>(std::move(*p));
    }
    if (int(full.size()) < o_.startup) {
      auto c = fresh_uniform(sp_, rng, seen);
      if (!c) return std::optional<Proposal>();
      Proposal p;
      p.config = std::move(*c);
      p.rationale =
          "start-up random draw " + std::to_string(full.size() + 1) + " of " + std::to_string(o_.startup);
      return std::optional<Proposal>(std::move(p));
    }
    Groups g = split_groups(full);
    std::vector<Config> cands;
    if (is_finite(sp_)) {
      auto all = enumerate_grid(sp_, 50000);
      if (all.ok()) {
        for (auto& c : *all)
          if (!seen.count(config_key(c))) cands.push_back(std::move(c));
        if (cands.empty()) return std::optional<Proposal>();
      }
    }
    if (cands.empty())
      for (int i = 0; i < o_.candidates; ++i) cands.push_back(sample_from(g.good, rng));
    double best = -1e300;
    size_t best_i = pick_candidate(cands, g, rng, &best);
    Proposal p;
    p.config = cands[best_i];
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "TPE: max l/g over %zu candidates (log ratio %.3f; %zu good, %zu bad incl. %zu infeasible)",
                  cands.size(), best, g.good.size(), g.bad.size(), g.infeasible.size());
    p.rationale = buf;
    return std::optional<Proposal>(std::move(p));
  }

 private:
  // Start from the engine's defaults when the space states them: a known-reasonable point, and the
  // search then never reports a best below the default on the dev seed. nullopt when it does not.
  std::optional<Proposal> default_start() const {
    Config d;
    for (const auto& p : sp_.params) {
      if (!is_active(p, d)) continue;
      if (!p.default_value) return std::nullopt;
      d[p.name] = *p.default_value;
    }
    if (!validate_config(sp_, d).ok()) return std::nullopt;
    Proposal p;
    p.config = std::move(d);
    p.rationale = "the space's default values (the engine's defaults) as the first start-up point";
    return p;
  }

  // The full trials split for TPE: good (the best gamma of the feasible), bad (the other feasible
  // and the infeasible), and feasible / infeasible for the feasibility posterior.
  struct Groups {
    std::vector<const Config*> good, bad, feasible, infeasible;
  };
  Groups split_groups(const std::vector<const Observation*>& full) const {
    std::vector<const Observation*> feas, infeas;
    for (const auto* x : full) (x->feasible && x->objective ? feas : infeas).push_back(x);
    std::stable_sort(feas.begin(), feas.end(), [](const Observation* a, const Observation* b) {
      return *a->objective > *b->objective;
    });
    size_t n_good = feas.empty() ? 0 : std::max<size_t>(1, size_t(std::ceil(o_.gamma * double(feas.size()))));
    Groups g;
    for (size_t i = 0; i < feas.size(); ++i) (i < n_good ? g.good : g.bad).push_back(&feas[i]->config);
    for (const auto* x : infeas) g.bad.push_back(&x->config);
    for (const auto* x : feas) g.feasible.push_back(&x->config);
    for (const auto* x : infeas) g.infeasible.push_back(&x->config);
    return g;
  }

  // The candidate maximizing log l(x)/g(x) plus log P(feasible | x); its score into *best.
  // Feasibility (as in constrained TPE): a naive-Bayes posterior P(feasible | x) from the densities
  // of the feasible and the infeasible trials, multiplied into the acquisition, so a region that
  // crashed is avoided even where its neighbours score well.
  size_t pick_candidate(const std::vector<Config>& cands, const Groups& g, Rng& rng, double* best) const {
    const auto& ok_group = g.feasible;
    const auto& fail_group = g.infeasible;
    double prior_ok = double(ok_group.size() + 1) / double(ok_group.size() + fail_group.size() + 2);
    size_t best_i = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      double s = 0, log_f = 0, log_i = 0;
      for (const auto& p : sp_.params) {
        auto it = cands[i].find(p.name);
        if (it == cands[i].end()) continue;
        s += std::log(density(p, it->second, g.good)) - std::log(density(p, it->second, g.bad));
        if (!fail_group.empty()) {
          log_f += std::log(density(p, it->second, ok_group));
          log_i += std::log(density(p, it->second, fail_group));
        }
      }
      if (!fail_group.empty()) {
        // log P(feasible | x) = -log(1 + (1 - prior) I(x) / (prior F(x))), computed stably.
        double z = std::log1p(-prior_ok) + log_i - std::log(prior_ok) - log_f;
        s -= z > 30 ? z : std::log1p(std::exp(z));
      }
      s += 1e-9 * rng.uniform();  // seeded tie-break
      if (s > *best) {
        *best = s;
        best_i = i;
      }
    }
    return best_i;
  }

  // A draw from l(x): per parameter, with probability 1/(m+1) the prior, else a perturbed good value.
  Config sample_from(const std::vector<const Config*>& good, Rng& rng) {
    Config c;
    for (const auto& p : sp_.params) {
      if (!is_active(p, c)) continue;
      std::vector<const ParamValue*> obs;
      for (const Config* g : good)
        if (auto it = g->find(p.name); it != g->end()) obs.push_back(&it->second);
      size_t k = size_t(rng.uniform_int(0, int64_t(obs.size())));
      if (k == obs.size()) {  // prior
        SearchSpace one;
        one.params.push_back(p);
        one.params.back().when.clear();
        Config d = sample_uniform(one, rng);
        c[p.name] = d[p.name];
        continue;
      }
      const ParamValue& base = *obs[k];
      if (!p.values.empty()) {
        if (!ordinal(p)) {
          c[p.name] = base;
          continue;
        }
        int j = index_of(p, base);
        double z =
            std::sqrt(-2 * std::log(std::max(rng.uniform(), 1e-300))) * std::cos(2 * M_PI * rng.uniform());
        int i = std::clamp(int(std::lround(j + z * kIndexBandwidth)), 0, int(p.values.size()) - 1);
        c[p.name] = p.values[size_t(i)];
        continue;
      }
      double z =
          std::sqrt(-2 * std::log(std::max(rng.uniform(), 1e-300))) * std::cos(2 * M_PI * rng.uniform());
      double u = std::clamp(unit_of(p, number_of(base)) + z * range_sigma(obs.size()), 0.0, 1.0);
      double x = p.log ? std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)))
                       : p.low + u * (p.high - p.low);
      if (p.kind == ParamKind::kInt)
        c[p.name] = std::clamp<int64_t>(std::llround(x), int64_t(p.low), int64_t(p.high));
      else
        c[p.name] = std::clamp(x, p.low, p.high);
    }
    return c;
  }

  SearchSpace sp_;
  StrategyOptions o_;
};

// ---- successive halving --------------------------------------------------------------------------

class HalvingStrategy final : public Strategy {
 public:
  HalvingStrategy(SearchSpace sp, StrategyOptions o) : sp_(std::move(sp)), o_(std::move(o)) {}
  std::string name() const override { return "halving"; }

  Result<std::optional<Proposal>> propose(const std::vector<Observation>& h, const BudgetLeft&) override {
    // Replays the brackets in the history: each is screen_configs screens, then its promotions.
    size_t n = size_t(o_.screen_configs);
    size_t keep = (n + size_t(o_.eta) - 1) / size_t(o_.eta);
    std::vector<const Observation*> bracket_screens;
    std::set<std::string> promoted;  // keys measured full in this bracket
    int bracket = 0;
    for (const auto& x : h) {
      if (x.stage == "screen") {
        if (bracket_screens.size() == n && !promoted.empty()) {  // a new bracket started
          bracket_screens.clear();
          promoted.clear();
          ++bracket;
        }
        bracket_screens.push_back(&x);
      } else {
        promoted.insert(config_key(x.config));
      }
    }
    // Promotions owed in the current bracket.
    if (bracket_screens.size() == n) {
      std::vector<const Observation*> feas;
      for (const auto* s : bracket_screens)
        if (s->feasible && s->objective) feas.push_back(s);
      std::stable_sort(feas.begin(), feas.end(), [](const Observation* a, const Observation* b) {
        return *a->objective > *b->objective;
      });
      size_t k = std::min(keep, feas.size());
      for (size_t i = 0; i < k; ++i) {
        if (promoted.count(config_key(feas[i]->config))) continue;
        Proposal p;
        p.config = feas[i]->config;
        p.stage = "full";
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "halving bracket %d: screen rank %zu of %zu feasible (screen objective %.4g) promoted",
                      bracket + 1, i + 1, feas.size(), *feas[i]->objective);
        p.rationale = buf;
        return std::optional<Proposal>(std::move(p));
      }
      // Bracket done: start the next one.
      bracket_screens.clear();
      ++bracket;
    }
    Rng rng = rng_for(o_.seed, "halving", h.size());
    auto c = fresh_uniform(sp_, rng, seen_keys(h, "screen"));
    if (!c) return std::optional<Proposal>();
    Proposal p;
    p.config = std::move(*c);
    p.stage = "screen";
    p.rationale = "halving bracket " + std::to_string(bracket + 1) + ": screen " +
                  std::to_string(bracket_screens.size() + 1) + " of " + std::to_string(n);
    return std::optional<Proposal>(std::move(p));
  }

 private:
  SearchSpace sp_;
  StrategyOptions o_;
};

}  // namespace

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> v{"grid", "random", "bayes", "halving", "external"};
  return v;
}

Result<std::unique_ptr<Strategy>> make_strategy(const SearchSpace& sp, const StrategyOptions& o) {
  if (o.name == "grid") return std::unique_ptr<Strategy>(std::make_unique<GridStrategy>(sp));
  if (o.name == "random") return std::unique_ptr<Strategy>(std::make_unique<RandomStrategy>(sp, o.seed));
  if (o.name == "bayes" || o.name == "tpe") {
    if (!(o.gamma > 0 && o.gamma < 1)) return invalid_argument("bayes: gamma must be in (0, 1)");
    if (o.startup < 1) return invalid_argument("bayes: startup must be >= 1");
    if (o.candidates < 1) return invalid_argument("bayes: candidates must be >= 1");
    return std::unique_ptr<Strategy>(std::make_unique<TpeStrategy>(sp, o));
  }
  if (o.name == "halving") {
    if (o.eta < 2) return invalid_argument("halving: eta must be >= 2");
    if (o.screen_configs < o.eta) return invalid_argument("halving: screen_configs must be >= eta");
    return std::unique_ptr<Strategy>(std::make_unique<HalvingStrategy>(sp, o));
  }
  if (o.name == "external") return make_external_strategy(sp, o);
  return invalid_argument("unknown strategy '" + o.name + "' (grid, random, bayes, halving, external)");
}

}  // namespace plumb::tune
