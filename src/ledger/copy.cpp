// copy_ledger: reads `from` through dump() and the typed queries, writes `to` through the typed
// inserts. Nothing here knows either backend.
#include "ledger/copy.h"

#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace plumb::ledger {
namespace {

// A table's rows by column name.
class Rows {
 public:
  explicit Rows(Table t) : t_(std::move(t)) {
    for (size_t i = 0; i < t_.columns.size(); ++i) col_[t_.columns[i]] = i;
  }
  size_t size() const { return t_.rows.size(); }
  const Cell& at(size_t r, const std::string& c) const {
    static const Cell kNull;
    auto it = col_.find(c);
    return it == col_.end() ? kNull : t_.rows[r][it->second];
  }
  int64_t i(size_t r, const std::string& c) const {
    const Cell& x = at(r, c);
    return x.type == Cell::Type::kReal ? int64_t(x.d) : x.i;
  }
  double d(size_t r, const std::string& c) const {
    const Cell& x = at(r, c);
    return x.type == Cell::Type::kInt ? double(x.i) : x.d;
  }
  std::string s(size_t r, const std::string& c) const { return at(r, c).s; }
  bool null(size_t r, const std::string& c) const { return at(r, c).type == Cell::Type::kNull; }
  std::optional<double> od(size_t r, const std::string& c) const {
    return null(r, c) ? std::nullopt : std::optional<double>(d(r, c));
  }
  std::optional<int64_t> oi(size_t r, const std::string& c) const {
    return null(r, c) ? std::nullopt : std::optional<int64_t>(i(r, c));
  }

 private:
  Table t_;
  std::map<std::string, size_t> col_;
};

Result<Rows> rows(Ledger& l, const std::string& table, int64_t run_id = 0) {
  PLUMB_ASSIGN_OR_RETURN(Table t, l.dump(table, run_id));
  return Rows(std::move(t));
}

// Natural keys: what identifies a row apart from its ids, so that a row the destination already
// holds (an earlier copy of the same source, or of the source before it grew) is recognised.
std::string join_key(std::initializer_list<std::string> parts) {
  std::string k;
  for (const auto& p : parts) k += p + '\x1f';
  return k;
}

std::string registration_key(const Registration& g) {
  std::string seeds;
  for (int64_t x : g.seeds) seeds += std::to_string(x) + ",";
  return join_key({g.created_at, g.arm_a_config, g.arm_b_config, g.scenario, g.size_class, g.metric,
                   g.direction, g.rule, seeds});
}

std::string run_key(const Rows& t, size_t r) {
  return join_key({t.s(r, "started_at"), t.s(r, "ended_at"), t.s(r, "engine_config_hash"),
                   std::to_string(t.i(r, "seed")), t.s(r, "arm"),
                   t.null(r, "pair_index") ? "-" : std::to_string(t.i(r, "pair_index")), t.s(r, "scenario"),
                   t.s(r, "size_class"), t.s(r, "target_engine"), t.s(r, "model_identity"),
                   std::to_string(t.i(r, "valid")), t.s(r, "gate_status"),
                   t.null(r, "objective") ? "-" : std::to_string(t.d(r, "objective"))});
}

std::string study_key(const StudyRow& s) {
  return join_key({s.created_at, s.name, s.strategy, std::to_string(s.strategy_seed), s.scenario,
                   s.size_class, std::to_string(s.dev_seed), std::to_string(s.eval_seed)});
}

// A refusal is the destination's validator speaking; anything else stops the copy.
bool refused(const Status& s) {
  return s.code() == Code::kFailedPrecondition || s.code() == Code::kInvalidArgument;
}

class Copier {
 public:
  Copier(Ledger& from, Ledger& to) : from_(from), to_(to) {}

  Result<CopyReport> run() {
    PLUMB_RETURN_IF_ERROR(load_existing());
    PLUMB_RETURN_IF_ERROR(reference_rows());
    PLUMB_RETURN_IF_ERROR(registrations());
    PLUMB_ASSIGN_OR_RETURN(Rows runs, rows(from_, "runs"));
    PLUMB_RETURN_IF_ERROR(plain_runs(runs));
    PLUMB_RETURN_IF_ERROR(studies(runs));
    PLUMB_RETURN_IF_ERROR(scores());
    PLUMB_RETURN_IF_ERROR(readouts());
    return rep_;
  }

 private:
  // The destination's registrations, runs, studies and scores by natural key.
  Status load_existing() {
    // Reference rows are inserted idempotently (the existing row's id comes back): ids held before
    // tell a row found from a row written.
    for (const char* t : {"machines", "machine_ceilings", "builds", "protocols", "request_sets", "anchors"}) {
      PLUMB_ASSIGN_OR_RETURN(Rows held, rows(to_, t));
      for (size_t r = 0; r < held.size(); ++r) held_ids_[t].insert(held.i(r, "id"));
    }
    PLUMB_ASSIGN_OR_RETURN(std::vector<Registration> regs, to_.list_registrations());
    for (const auto& g : regs) have_registration_[registration_key(g)].push_back(g.id);
    // Plain runs only: a trial's run is found through its trial (studies()).
    PLUMB_ASSIGN_OR_RETURN(Rows trials, rows(to_, "trials"));
    std::set<int64_t> of_trials;
    for (size_t r = 0; r < trials.size(); ++r)
      if (!trials.null(r, "run_id")) of_trials.insert(trials.i(r, "run_id"));
    PLUMB_ASSIGN_OR_RETURN(Rows runs, rows(to_, "runs"));
    for (size_t r = 0; r < runs.size(); ++r)
      if (!of_trials.count(runs.i(r, "id"))) have_run_[run_key(runs, r)].push_back(runs.i(r, "id"));
    PLUMB_ASSIGN_OR_RETURN(std::vector<StudyRow> studies, to_.list_studies());
    for (const auto& s : studies) have_study_[study_key(s)].push_back(s.id);
    PLUMB_ASSIGN_OR_RETURN(Rows sc, rows(to_, "scores"));
    for (size_t r = 0; r < sc.size(); ++r)
      have_score_.insert(join_key({std::to_string(sc.i(r, "run_id")),
                                   std::to_string(sc.i(r, "baseline_run_id")), sc.s(r, "baseline_name")}));
    return Status::Ok();
  }

  // The destination's id of a row it already holds under `key` (counted as already there), if any.
  // Each held row answers for one source row: a source with two rows of one key (two runs started
  // in the same millisecond) finds both only where the destination holds both.
  std::optional<int64_t> already(std::map<std::string, std::vector<int64_t>>& have, const std::string& key,
                                 const std::string& table) {
    auto it = have.find(key);
    if (it == have.end() || it->second.empty()) return std::nullopt;
    int64_t id = it->second.front();
    it->second.erase(it->second.begin());
    ++rep_.already[table];
    return id;
  }

  // Runs outside studies, in id order (a comparison's pairs keep their order); a study's runs go
  // with its trials.
  Status plain_runs(const Rows& runs) {
    PLUMB_ASSIGN_OR_RETURN(Rows seals, rows(from_, "seals"));
    PLUMB_ASSIGN_OR_RETURN(Rows trials, rows(from_, "trials"));
    for (size_t r = 0; r < seals.size(); ++r) sealed_.insert(seals.i(r, "run_id"));
    std::set<int64_t> of_trials;
    for (size_t r = 0; r < trials.size(); ++r)
      if (!trials.null(r, "run_id")) of_trials.insert(trials.i(r, "run_id"));
    for (size_t r = 0; r < runs.size(); ++r) {
      int64_t id = runs.i(r, "id");
      if (of_trials.count(id)) continue;
      if (!sealed_.count(id)) {
        rep_.refused.push_back("run " + std::to_string(id) +
                               ": not sealed in the source (its rows do not back it); not copied");
        continue;
      }
      PLUMB_RETURN_IF_ERROR(copy_run(runs, r));
    }
    return Status::Ok();
  }

  Status copy_run(const Rows& runs, size_t r) {
    int64_t id = runs.i(r, "id");
    if (auto have = already(have_run_, run_key(runs, r), "runs")) {
      run_[id] = *have;
      return Status::Ok();
    }
    PLUMB_ASSIGN_OR_RETURN(std::optional<RunRow> run, run_row(runs, r));
    if (!run) return Status::Ok();
    PLUMB_ASSIGN_OR_RETURN(Rows reqs, rows(from_, "requests", id));
    std::vector<RequestRow> rq = request_rows(reqs);
    PLUMB_ASSIGN_OR_RETURN(std::vector<MetricRow> ms, from_.metrics_for(id));
    auto nid = to_.insert_run(*run, rq, ms);
    if (!nid.ok()) {
      if (!refused(nid.status())) return nid.status();
      rep_.refused.push_back("run " + std::to_string(id) + ": " + nid.status().message());
      return Status::Ok();
    }
    run_[id] = *nid;
    ++rep_.copied["runs"];
    return Status::Ok();
  }

  // A mapped id, or a refusal naming the missing row.
  std::optional<int64_t> mapped(const std::map<int64_t, int64_t>& m, int64_t id, const std::string& what,
                                const std::string& row) {
    auto it = m.find(id);
    if (it != m.end()) return it->second;
    rep_.refused.push_back(row + ": its " + what + " " + std::to_string(id) + " was not copied; skipped");
    return std::nullopt;
  }

  Status reference_rows() {
    PLUMB_RETURN_IF_ERROR(machines_and_builds());
    PLUMB_RETURN_IF_ERROR(protocols_and_sets());
    return ceilings_and_anchors();
  }

  Status machines_and_builds() {
    PLUMB_ASSIGN_OR_RETURN(Rows m, rows(from_, "machines"));
    for (size_t r = 0; r < m.size(); ++r) {
      MachineRow x{m.s(r, "fingerprint_hash"), m.s(r, "cpu_model"),  m.i(r, "cores"), m.i(r, "memory_bytes"),
                   m.s(r, "gpu_model"),        m.s(r, "gpu_driver"), m.s(r, "kernel")};
      PLUMB_RETURN_IF_ERROR(put(machine_, m.i(r, "id"), "machines", to_.insert_machine(x)));
    }
    PLUMB_ASSIGN_OR_RETURN(Rows b, rows(from_, "builds"));
    for (size_t r = 0; r < b.size(); ++r) {
      BuildRow x{b.s(r, "version"), b.s(r, "git_commit"), b.s(r, "build_type"), b.s(r, "compiler")};
      PLUMB_RETURN_IF_ERROR(put(build_, b.i(r, "id"), "builds", to_.insert_build(x)));
    }
    return Status::Ok();
  }

  Status protocols_and_sets() {
    PLUMB_ASSIGN_OR_RETURN(Rows p, rows(from_, "protocols"));
    for (size_t r = 0; r < p.size(); ++r) {
      ProtocolRow x{p.i(r, "version"), p.s(r, "hash"), p.s(r, "canonical_json")};
      PLUMB_RETURN_IF_ERROR(put(protocol_, p.i(r, "id"), "protocols", to_.insert_protocol(x)));
    }
    PLUMB_ASSIGN_OR_RETURN(Rows s, rows(from_, "request_sets"));
    for (size_t r = 0; r < s.size(); ++r) {
      RequestSetRow x{s.s(r, "set_hash"), s.s(r, "scenario"), s.s(r, "size_class"), s.i(r, "seed"),
                      s.i(r, "num_requests")};
      PLUMB_RETURN_IF_ERROR(put(set_, s.i(r, "id"), "request_sets", to_.insert_request_set(x)));
    }
    return Status::Ok();
  }

  Status ceilings_and_anchors() {
    PLUMB_ASSIGN_OR_RETURN(Rows c, rows(from_, "machine_ceilings"));
    for (size_t r = 0; r < c.size(); ++r) {
      std::string row = "machine_ceilings row " + std::to_string(c.i(r, "id"));
      auto m_id = mapped(machine_, c.i(r, "machine_id"), "machine", row);
      if (!m_id) continue;
      CeilingRow x{*m_id, c.s(r, "name"), c.d(r, "value"), c.s(r, "unit"), c.s(r, "measured_at")};
      std::map<int64_t, int64_t> ignore;
      PLUMB_RETURN_IF_ERROR(put(ignore, c.i(r, "id"), "machine_ceilings", to_.insert_ceiling(x)));
    }
    PLUMB_ASSIGN_OR_RETURN(Rows a, rows(from_, "anchors"));
    for (size_t r = 0; r < a.size(); ++r) {
      AnchorRow x{a.s(r, "source"),   a.s(r, "hardware"), a.s(r, "engine"), a.s(r, "model"),
                  a.s(r, "scenario"), a.s(r, "metric"),   a.d(r, "value"),  a.s(r, "unit"),
                  a.s(r, "status"),   a.s(r, "note")};
      std::map<int64_t, int64_t> ignore;
      PLUMB_RETURN_IF_ERROR(put(ignore, a.i(r, "id"), "anchors", to_.insert_anchor(x)));
    }
    return Status::Ok();
  }

  // Records a written row's new id, or its refusal.
  Status put(std::map<int64_t, int64_t>& m, int64_t old_id, const std::string& table,
             const Result<int64_t>& r) {
    if (r.ok()) {
      m[old_id] = *r;
      auto held = held_ids_.find(table);
      ++(held != held_ids_.end() && held->second.count(*r) ? rep_.already : rep_.copied)[table];
      return Status::Ok();
    }
    if (!refused(r.status())) return r.status();
    rep_.refused.push_back(table + " row " + std::to_string(old_id) + ": " + r.status().message());
    return Status::Ok();
  }

  Status registrations() {
    auto regs = from_.list_registrations();
    if (!regs.ok()) {
      if (regs.status().code() != Code::kCorrupt) return regs.status();
      rep_.refused.push_back("registrations: " + regs.status().message() + "; none copied");
      return Status::Ok();
    }
    for (Registration g : *regs) {
      int64_t old = g.id;
      auto p = mapped(protocol_, g.protocol_id, "protocol", "registration " + std::to_string(old));
      if (!p) continue;
      g.protocol_id = *p;  // its hash is recomputed over the destination's protocol id
      if (auto have = already(have_registration_, registration_key(g), "registrations")) {
        registration_[old] = *have;
        continue;
      }
      PLUMB_RETURN_IF_ERROR(put(registration_, old, "registrations", to_.register_comparison(g)));
    }
    return Status::Ok();
  }

  Result<std::optional<RunRow>> run_row(const Rows& t, size_t r) {
    std::string row = "run " + std::to_string(t.i(r, "id"));
    RunRow x;
    auto m = mapped(machine_, t.i(r, "machine_id"), "machine", row);
    auto b = m ? mapped(build_, t.i(r, "build_id"), "build", row) : std::nullopt;
    auto p = b ? mapped(protocol_, t.i(r, "protocol_id"), "protocol", row) : std::nullopt;
    auto s = p ? mapped(set_, t.i(r, "request_set_id"), "request set", row) : std::nullopt;
    if (!s) return std::optional<RunRow>();
    x.machine_id = *m;
    x.build_id = *b;
    x.protocol_id = *p;
    x.request_set_id = *s;
    if (!t.null(r, "registration_id")) {
      auto g = mapped(registration_, t.i(r, "registration_id"), "registration", row);
      if (!g) return std::optional<RunRow>();
      x.registration_id = *g;
    }
    x.arm = t.s(r, "arm");
    x.pair_index = t.oi(r, "pair_index");
    x.scenario = t.s(r, "scenario");
    x.size_class = t.s(r, "size_class");
    x.target_engine = t.s(r, "target_engine");
    x.engine_config = t.s(r, "engine_config");
    x.engine_config_hash = t.s(r, "engine_config_hash");
    x.model_identity = t.s(r, "model_identity");
    x.seed = t.i(r, "seed");
    x.effective_settings = t.s(r, "effective_settings");
    x.started_at = t.s(r, "started_at");
    x.ended_at = t.s(r, "ended_at");
    x.valid = t.i(r, "valid") != 0;
    x.validity_json = t.s(r, "validity_json");
    x.gate_status = t.s(r, "gate_status");
    x.objective = t.od(r, "objective");
    PLUMB_ASSIGN_OR_RETURN(x.subset, from_.subset_of(t.i(r, "id")));
    return std::optional<RunRow>(std::move(x));
  }

  static std::vector<RequestRow> request_rows(const Rows& q) {
    std::vector<RequestRow> out(q.size());
    for (size_t r = 0; r < q.size(); ++r) {
      RequestRow& x = out[r];
      x.idx = q.i(r, "idx");
      x.profile = q.i(r, "profile");
      x.request_hash = q.s(r, "request_hash");
      x.status = q.s(r, "status");
      x.input_tokens = q.i(r, "input_tokens");
      x.output_requested = q.i(r, "output_requested");
      x.output_server = q.i(r, "output_server");
      x.output_local = q.i(r, "output_local");
      x.scheduled_ns = q.i(r, "scheduled_ns");
      x.sent_ns = q.i(r, "sent_ns");
      x.first_token_ns = q.i(r, "first_token_ns");
      x.end_ns = q.i(r, "end_ns");
    }
    return out;
  }

  Status studies(const Rows& runs) {
    std::map<int64_t, size_t> run_at;
    for (size_t r = 0; r < runs.size(); ++r) run_at[runs.i(r, "id")] = r;
    PLUMB_ASSIGN_OR_RETURN(std::vector<StudyRow> studies, from_.list_studies());
    for (StudyRow s : studies) {
      int64_t old = s.id;
      std::string row = "study " + std::to_string(old);
      auto p = mapped(protocol_, s.protocol_id, "protocol", row);
      auto m = p ? mapped(machine_, s.machine_id, "machine", row) : std::nullopt;
      if (!m) continue;
      s.protocol_id = *p;
      s.machine_id = *m;
      std::map<int64_t, int64_t> study;
      if (auto have = already(have_study_, study_key(s), "studies"))
        study[old] = *have;
      else
        PLUMB_RETURN_IF_ERROR(put(study, old, "studies", to_.create_study(s)));
      if (!study.count(old)) continue;
      PLUMB_ASSIGN_OR_RETURN(std::vector<TrialRow> trials, from_.trials_for(old));
      PLUMB_ASSIGN_OR_RETURN(std::vector<TrialRow> held, to_.trials_for(study[old]));
      for (const TrialRow& t : trials) {
        if (size_t(t.idx) < held.size()) {  // copied before: trials are appended by index
          if (t.run_id && held[size_t(t.idx)].run_id) {
            run_[*t.run_id] = *held[size_t(t.idx)].run_id;
            ++rep_.already["runs"];
          }
          ++rep_.already["trials"];
          continue;
        }
        PLUMB_RETURN_IF_ERROR(copy_trial(t, old, study[old], runs, run_at));
      }
    }
    return Status::Ok();
  }

  // One trial of source study `old`, with its run if it has one, into destination study `now`.
  Status copy_trial(TrialRow t, int64_t old, int64_t now, const Rows& runs,
                    std::map<int64_t, size_t>& run_at) {
    std::string trow = "study " + std::to_string(old) + " trial " + std::to_string(t.idx);
    t.study_id = now;
    std::optional<RunRow> run;
    std::vector<RequestRow> rq;
    std::vector<MetricRow> ms;
    int64_t old_run = t.run_id.value_or(0);
    if (t.run_id) {
      PLUMB_ASSIGN_OR_RETURN(run, run_row(runs, run_at[old_run]));
      if (!run) return Status::Ok();
      PLUMB_ASSIGN_OR_RETURN(Rows reqs, rows(from_, "requests", old_run));
      rq = request_rows(reqs);
      PLUMB_ASSIGN_OR_RETURN(ms, from_.metrics_for(old_run));
      t.run_id.reset();
    }
    auto id = to_.insert_trial(t, run ? &*run : nullptr, rq, ms);
    if (!id.ok()) {
      if (!refused(id.status())) return id.status();
      rep_.refused.push_back(trow + ": " + id.status().message());
      return Status::Ok();
    }
    ++rep_.copied["trials"];
    if (!run) return Status::Ok();
    PLUMB_ASSIGN_OR_RETURN(std::vector<TrialRow> stored, to_.trials_for(now));
    for (const auto& n : stored)
      if (n.id == *id && n.run_id) run_[old_run] = *n.run_id;
    ++rep_.copied["runs"];
    return Status::Ok();
  }

  Status scores() {
    PLUMB_ASSIGN_OR_RETURN(Rows s, rows(from_, "scores"));
    for (size_t r = 0; r < s.size(); ++r) {
      std::string row = "scores row " + std::to_string(s.i(r, "id"));
      auto a = mapped(run_, s.i(r, "run_id"), "run", row);
      auto b = a ? mapped(run_, s.i(r, "baseline_run_id"), "run", row) : std::nullopt;
      if (!b) continue;
      if (have_score_.count(join_key({std::to_string(*a), std::to_string(*b), s.s(r, "baseline_name")}))) {
        ++rep_.already["scores"];
        continue;
      }
      std::map<int64_t, int64_t> ignore;
      PLUMB_RETURN_IF_ERROR(put(ignore, s.i(r, "id"), "scores",
                                to_.insert_score({*a, *b, s.s(r, "baseline_name"), s.d(r, "value")})));
    }
    return Status::Ok();
  }

  Status readouts() {
    for (const auto& [old, now] : registration_) {
      PLUMB_ASSIGN_OR_RETURN(std::vector<ReadoutRow> rs, from_.readouts_for(old));
      PLUMB_ASSIGN_OR_RETURN(Registration g, to_.get_registration(now));
      PLUMB_ASSIGN_OR_RETURN(std::vector<ReadoutRow> held, to_.readouts_for(now));
      std::set<std::string> have;
      for (const auto& h : held) have.insert(join_key({h.created_at, h.verdict, h.reason}));
      for (ReadoutRow x : rs) {
        if (have.count(join_key({x.created_at, x.verdict, x.reason}))) {
          ++rep_.already["readouts"];
          continue;
        }
        int64_t id = x.id;
        x.registration_id = now;
        x.registration_hash = g.registration_hash;
        std::map<int64_t, int64_t> ignore;
        PLUMB_RETURN_IF_ERROR(put(ignore, id, "readouts", to_.record_readout(x)));
      }
    }
    return Status::Ok();
  }

  Ledger& from_;
  Ledger& to_;
  CopyReport rep_;
  std::set<int64_t> sealed_;
  std::map<int64_t, int64_t> machine_, build_, protocol_, set_, registration_, run_;
  // The destination's rows by natural key, oldest first.
  std::map<std::string, std::vector<int64_t>> have_registration_, have_run_, have_study_;
  std::set<std::string> have_score_;
  std::map<std::string, std::set<int64_t>> held_ids_;  // reference tables' ids before the copy
};

}  // namespace

Result<CopyReport> copy_ledger(Ledger& from, Ledger& to) { return Copier(from, to).run(); }

}  // namespace plumb::ledger
