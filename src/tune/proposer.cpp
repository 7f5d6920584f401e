#include "tune/proposer.h"

#include <cmath>
#include <cstring>

#include "core/subprocess.h"

namespace plumb::tune {
namespace {

std::string argv_text(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

class ExternalStrategy final : public Strategy {
 public:
  ExternalStrategy(SearchSpace sp, StrategyOptions o) : sp_(std::move(sp)), o_(std::move(o)) {}
  std::string name() const override { return "external"; }
  Result<std::optional<Proposal>> propose(const std::vector<Observation>& h,
                                          const BudgetLeft& left) override {
    std::string input = json::dump(proposer_context(sp_, h, left, o_.context_extra));
    auto out = run_with_stdin(o_.proposer_argv, input, o_.proposer_timeout);
    if (!out.ok()) {
      const std::string hint = out.status().code() == Code::kTimeout ? " (--proposer-timeout)" : "";
      return out.status().with_context("external proposer '" + argv_text(o_.proposer_argv) + "'" + hint);
    }
    auto p = parse_proposal(sp_, *out);
    if (!p.ok())
      return p.status().with_context("external proposer '" + argv_text(o_.proposer_argv) +
                                     "' printed an unusable proposal");
    return p;
  }

 private:
  SearchSpace sp_;
  StrategyOptions o_;
};

}  // namespace

json::object proposer_context(const SearchSpace& sp, const std::vector<Observation>& h,
                              const BudgetLeft& left, const json::object& extra) {
  json::array hist, notes;
  for (const auto& o : h) {
    json::object e{{"index", o.index},
                   {"stage", o.stage},
                   {"config", config_to_json(o.config)},
                   {"feasible", o.feasible},
                   {"objective", o.objective && std::isfinite(*o.objective) ? json::value(*o.objective)
                                                                            : json::value(nullptr)},
                   {"status", o.status},
                   {"failure", o.failure},
                   {"metrics", o.metrics}};
    hist.push_back(std::move(e));
    if (!o.notes.empty()) notes.emplace_back(o.notes);
  }
  json::object ctx{{"schema_version", kProposerSchemaVersion},
                   {"space", space_to_json(sp)},
                   {"history", hist},
                   {"budget_left", json::object{{"trials", left.trials}, {"seconds", left.seconds}}},
                   {"notes", notes}};
  for (const auto& [k, v] : extra) ctx[k] = v;
  return ctx;
}

Result<std::optional<Proposal>> parse_proposal(const SearchSpace& sp, const std::string& text) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.empty())
    return invalid_argument(
        "stdout is empty; print one JSON object {\"config\": {...}, \"rationale\": \"...\"}");
  auto o = json::parse_object(t);
  if (!o.ok())
    return invalid_argument("stdout is not one JSON object (" + o.status().message() +
                            "); it began: " + t.substr(0, 120));
  std::string rationale;
  if (auto* r = o->if_contains("rationale")) {
    if (!r->is_string()) return invalid_argument("\"rationale\" must be a string");
    rationale = std::string(r->as_string());
  }
  if (auto* s = o->if_contains("stop"); s && s->is_bool() && s->as_bool()) return std::optional<Proposal>();
  auto* c = o->if_contains("config");
  if (!c || !c->is_object())
    return invalid_argument("the proposal has no \"config\" object (or {\"stop\": true} to end the search)");
  Proposal p;
  auto cfg = config_from_json(sp, c->as_object());
  if (!cfg.ok()) return invalid_argument(cfg.status().message());
  p.config = std::move(cfg).value();
  p.rationale = rationale.empty() ? "(no rationale given)" : rationale;
  if (auto* n = o->if_contains("notes")) {
    if (!n->is_string()) return invalid_argument("\"notes\" must be a string");
    p.notes = std::string(n->as_string());
  }
  if (auto* st = o->if_contains("stage")) {
    if (!st->is_string() || (st->as_string() != "full" && st->as_string() != "screen"))
      return invalid_argument("\"stage\" must be \"full\" or \"screen\"");
    p.stage = std::string(st->as_string());
  }
  return std::optional<Proposal>(std::move(p));
}

Result<std::unique_ptr<Strategy>> make_external_strategy(const SearchSpace& sp, const StrategyOptions& o) {
  if (o.proposer_argv.empty() || o.proposer_argv[0].empty())
    return invalid_argument("the external strategy needs a program: --proposer 'python3 my_agent.py'");
  if (o.proposer_timeout.count() <= 0) return invalid_argument("--proposer-timeout must be > 0");
  return std::unique_ptr<Strategy>(std::make_unique<ExternalStrategy>(sp, o));
}

}  // namespace plumb::tune
