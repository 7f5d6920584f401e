// The ledger's schema and its migrations. Migration i (1-based) takes the file from schema
// version i-1 to i; a migration is never edited once released, a new one is appended.
//
// The validator of docs/protocol.md §7 lives here, so it holds for every writer: CHECK constraints
// for field-level rules, foreign keys, and BEFORE triggers that RAISE(ABORT, ...) with a message
// that says which rule was broken. BEFORE triggers run before NOT NULL/CHECK, so a missing field
// gets the trigger's clear message; the constraints stay as a backstop.
#include "ledger/schema.h"

#include <algorithm>
#include <string>

namespace plumb::ledger {
namespace {

// A UTC timestamp as written by core/clock.h utc_timestamp_now(): fixed width, so text order is
// time order.
#define TS_GLOB \
  "'[0-9][0-9][0-9][0-9]-[0-1][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9].[0-9][0-9][0-9]Z'"
#define HEX64(col) "(length(" col ") = 64 AND " col " NOT GLOB '*[^0-9a-f]*')"

// Refuses UPDATE and DELETE on a table, and INSERT OR REPLACE over an existing row (REPLACE
// deletes without firing DELETE triggers unless recursive_triggers is on).
std::string append_only(const std::string& t, const std::string& key_exists) {
  std::string msg = t + " is append-only: recorded rows cannot be changed or deleted";
  return "CREATE TRIGGER " + t + "_no_update BEFORE UPDATE ON " + t + " BEGIN SELECT RAISE(ABORT, '" + msg +
         "'); END;\n"
         "CREATE TRIGGER " +
         t + "_no_delete BEFORE DELETE ON " + t + " BEGIN SELECT RAISE(ABORT, '" + msg +
         "'); END;\n"
         "CREATE TRIGGER " +
         t + "_no_replace BEFORE INSERT ON " + t + " WHEN " + key_exists + " BEGIN SELECT RAISE(ABORT, '" +
         msg + "'); END;\n";
}

std::string migration_1() {
  std::string s = R"SQL(
CREATE TABLE machines (
  id INTEGER PRIMARY KEY,
  fingerprint_hash TEXT NOT NULL UNIQUE CHECK )SQL" HEX64("fingerprint_hash") R"SQL(,
  cpu_model TEXT NOT NULL CHECK (cpu_model <> ''),
  cores INTEGER NOT NULL CHECK (cores > 0),
  memory_bytes INTEGER NOT NULL CHECK (memory_bytes > 0),
  gpu_model TEXT NOT NULL CHECK (gpu_model <> ''),
  gpu_driver TEXT NOT NULL CHECK (gpu_driver <> ''),
  kernel TEXT NOT NULL CHECK (kernel <> '')
);
CREATE TABLE machine_ceilings (
  id INTEGER PRIMARY KEY,
  machine_id INTEGER NOT NULL REFERENCES machines(id),
  name TEXT NOT NULL CHECK (name <> ''),
  value REAL NOT NULL CHECK (value > 0),
  unit TEXT NOT NULL CHECK (unit <> ''),
  measured_at TEXT NOT NULL CHECK (measured_at GLOB )SQL" TS_GLOB R"SQL()
);
CREATE TABLE builds (
  id INTEGER PRIMARY KEY,
  version TEXT NOT NULL CHECK (version <> ''),
  git_commit TEXT NOT NULL CHECK (git_commit <> ''),
  build_type TEXT NOT NULL CHECK (build_type <> ''),
  compiler TEXT NOT NULL CHECK (compiler <> ''),
  UNIQUE (version, git_commit, build_type, compiler)
);
CREATE TABLE protocols (
  id INTEGER PRIMARY KEY,
  version INTEGER NOT NULL CHECK (version >= 1),
  hash TEXT NOT NULL UNIQUE CHECK )SQL" HEX64("hash") R"SQL(,
  canonical_json TEXT NOT NULL CHECK (canonical_json <> '')
);
CREATE TABLE request_sets (
  id INTEGER PRIMARY KEY,
  set_hash TEXT NOT NULL UNIQUE CHECK )SQL" HEX64("set_hash") R"SQL(,
  scenario TEXT NOT NULL CHECK (scenario <> ''),
  size_class TEXT NOT NULL CHECK (size_class IN ('gpu', 'small', 'custom')),
  seed INTEGER NOT NULL,
  num_requests INTEGER NOT NULL CHECK (num_requests >= 1)
);
CREATE TABLE registrations (
  id INTEGER PRIMARY KEY,
  created_at TEXT NOT NULL CHECK (created_at GLOB )SQL" TS_GLOB R"SQL(),
  arm_a_config TEXT NOT NULL CHECK (arm_a_config <> ''),
  arm_b_config TEXT NOT NULL CHECK (arm_b_config <> ''),
  scenario TEXT NOT NULL CHECK (scenario <> ''),
  size_class TEXT NOT NULL CHECK (size_class IN ('gpu', 'small', 'custom')),
  metric TEXT NOT NULL CHECK (metric <> ''),
  direction TEXT NOT NULL CHECK (direction IN ('higher', 'lower')),
  min_effect REAL NOT NULL CHECK (min_effect >= 0 AND min_effect < 1),
  delta REAL NOT NULL CHECK (delta > 0 AND delta < 1),
  pairs INTEGER NOT NULL CHECK (pairs >= 5),
  seeds TEXT NOT NULL CHECK (json_valid(seeds) AND json_type(seeds) = 'array' AND json_array_length(seeds) >= 1),
  rule TEXT NOT NULL CHECK (rule <> ''),
  protocol_id INTEGER NOT NULL REFERENCES protocols(id),
  registration_hash TEXT NOT NULL CHECK )SQL" HEX64("registration_hash") R"SQL(
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  machine_id INTEGER NOT NULL REFERENCES machines(id),
  build_id INTEGER NOT NULL REFERENCES builds(id),
  protocol_id INTEGER NOT NULL REFERENCES protocols(id),
  request_set_id INTEGER NOT NULL REFERENCES request_sets(id),
  registration_id INTEGER REFERENCES registrations(id),
  arm TEXT CHECK (arm IN ('A', 'B')),
  pair_index INTEGER CHECK (pair_index >= 0),
  scenario TEXT NOT NULL CHECK (scenario <> ''),
  size_class TEXT NOT NULL CHECK (size_class IN ('gpu', 'small', 'custom')),
  target_engine TEXT NOT NULL CHECK (target_engine <> ''),
  engine_config TEXT NOT NULL CHECK (engine_config <> ''),
  engine_config_hash TEXT NOT NULL CHECK )SQL" HEX64("engine_config_hash") R"SQL(,
  model_identity TEXT NOT NULL CHECK (model_identity <> ''),
  seed INTEGER NOT NULL,
  effective_settings TEXT NOT NULL CHECK (effective_settings <> ''),
  started_at TEXT NOT NULL CHECK (started_at GLOB )SQL" TS_GLOB R"SQL(),
  ended_at TEXT NOT NULL CHECK (ended_at GLOB )SQL" TS_GLOB R"SQL(),
  valid INTEGER NOT NULL CHECK (valid IN (0, 1)),
  validity_json TEXT NOT NULL CHECK (validity_json <> ''),
  gate_status TEXT NOT NULL CHECK (gate_status IN ('pass', 'fail', 'not_run')),
  objective REAL CHECK (objective IS NULL OR objective > 0),
  CHECK (ended_at >= started_at),
  CHECK (valid = 0 OR objective IS NOT NULL),
  CHECK ((registration_id IS NULL) = (arm IS NULL) AND (registration_id IS NULL) = (pair_index IS NULL)),
  UNIQUE (registration_id, pair_index, arm)
);
CREATE INDEX runs_by_registration ON runs(registration_id);
CREATE TABLE requests (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  idx INTEGER NOT NULL CHECK (idx >= 0),
  profile INTEGER NOT NULL CHECK (profile >= 0),
  request_hash TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status <> ''),
  input_tokens INTEGER NOT NULL,
  output_requested INTEGER NOT NULL,
  output_server INTEGER NOT NULL,
  output_local INTEGER NOT NULL,
  scheduled_ns INTEGER NOT NULL,
  sent_ns INTEGER NOT NULL,
  first_token_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  PRIMARY KEY (run_id, profile, idx)
) WITHOUT ROWID;
CREATE TABLE metrics (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  name TEXT NOT NULL CHECK (name <> ''),
  value REAL NOT NULL,
  unit TEXT NOT NULL,
  UNIQUE (run_id, name)
);
CREATE TABLE scores (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  baseline_run_id INTEGER NOT NULL REFERENCES runs(id),
  baseline_name TEXT NOT NULL CHECK (baseline_name <> ''),
  value REAL NOT NULL CHECK (value > 0)
);
CREATE TABLE readouts (
  id INTEGER PRIMARY KEY,
  registration_id INTEGER NOT NULL REFERENCES registrations(id),
  registration_hash TEXT NOT NULL,
  created_at TEXT NOT NULL CHECK (created_at GLOB )SQL" TS_GLOB R"SQL(),
  verdict TEXT NOT NULL CHECK (verdict IN ('better', 'worse', 'equivalent', 'inconclusive', 'noisy')),
  ratio REAL, ci_lo REAL, ci_hi REAL, boot_lo REAL, boot_hi REAL, cv_a REAL, cv_b REAL,
  cv_cap REAL NOT NULL CHECK (cv_cap > 0 AND cv_cap <= 0.05),
  pairs INTEGER NOT NULL CHECK (pairs >= 0),
  more_pairs_needed INTEGER NOT NULL,
  reason TEXT NOT NULL CHECK (reason <> '')
);
CREATE TABLE anchors (
  id INTEGER PRIMARY KEY,
  source TEXT NOT NULL CHECK (source <> ''),
  hardware TEXT NOT NULL CHECK (hardware <> ''),
  engine TEXT NOT NULL CHECK (engine <> ''),
  model TEXT NOT NULL CHECK (model <> ''),
  scenario TEXT NOT NULL CHECK (scenario <> ''),
  metric TEXT NOT NULL CHECK (metric <> ''),
  value REAL NOT NULL,
  unit TEXT NOT NULL CHECK (unit <> ''),
  status TEXT NOT NULL CHECK (status IN ('published', 'uncertain')),
  note TEXT NOT NULL
);

-- §6: a run without provenance. The existence checks repeat the foreign keys because SQLite
-- enforces foreign keys only on connections that turn them on; triggers hold for every writer.
CREATE TRIGGER runs_require_provenance BEFORE INSERT ON runs
WHEN NEW.machine_id IS NULL OR NEW.build_id IS NULL OR NEW.protocol_id IS NULL OR NEW.request_set_id IS NULL
  OR coalesce(NEW.scenario, '') = '' OR coalesce(NEW.size_class, '') = ''
  OR coalesce(NEW.target_engine, '') = '' OR coalesce(NEW.engine_config, '') = ''
  OR coalesce(length(NEW.engine_config_hash), 0) <> 64 OR coalesce(NEW.model_identity, '') = ''
  OR NEW.seed IS NULL OR coalesce(NEW.effective_settings, '') = ''
  OR NEW.started_at IS NULL OR NEW.ended_at IS NULL OR coalesce(NEW.validity_json, '') = ''
  OR NOT EXISTS (SELECT 1 FROM machines WHERE id = NEW.machine_id)
  OR NOT EXISTS (SELECT 1 FROM builds WHERE id = NEW.build_id)
  OR NOT EXISTS (SELECT 1 FROM protocols WHERE id = NEW.protocol_id)
  OR NOT EXISTS (SELECT 1 FROM request_sets WHERE id = NEW.request_set_id)
BEGIN
  SELECT RAISE(ABORT, 'run without provenance: existing machine, build, protocol and request set, scenario, size class, target engine, engine config and its hash, model identity, seed, effective settings, start/end times and validity are all required');
END;

-- §3: the request set a run names must be the one of its scenario. (SQLite does not define the
-- order of triggers; the guard leaves an empty scenario to the provenance message.)
CREATE TRIGGER runs_request_set_matches BEFORE INSERT ON runs
WHEN coalesce(NEW.scenario, '') <> '' AND EXISTS (SELECT 1 FROM request_sets rs WHERE rs.id = NEW.request_set_id
             AND (rs.scenario <> NEW.scenario OR rs.size_class <> NEW.size_class))
BEGIN
  SELECT RAISE(ABORT, 'run: its scenario/size class differ from its request set''s');
END;

-- §5: runs of a registered comparison start after the registration and match it.
CREATE TRIGGER runs_after_registration BEFORE INSERT ON runs
WHEN NEW.registration_id IS NOT NULL AND NEW.started_at <=
     (SELECT created_at FROM registrations WHERE id = NEW.registration_id)
BEGIN
  SELECT RAISE(ABORT, 'run of a registered comparison started before its registration');
END;
CREATE TRIGGER runs_match_registration BEFORE INSERT ON runs
WHEN NEW.registration_id IS NOT NULL AND EXISTS (SELECT 1 FROM registrations r WHERE r.id = NEW.registration_id
     AND (r.scenario <> NEW.scenario OR r.size_class <> NEW.size_class OR r.protocol_id <> NEW.protocol_id))
BEGIN
  SELECT RAISE(ABORT, 'run of a registered comparison: scenario, size class or protocol differ from the registration');
END;
CREATE TRIGGER runs_one_machine_per_comparison BEFORE INSERT ON runs
WHEN NEW.registration_id IS NOT NULL AND EXISTS (SELECT 1 FROM runs WHERE registration_id = NEW.registration_id
     AND machine_id <> NEW.machine_id)
BEGIN
  SELECT RAISE(ABORT, 'runs of one comparison on two machine fingerprints');
END;
CREATE TRIGGER runs_pair_same_inputs BEFORE INSERT ON runs
WHEN NEW.registration_id IS NOT NULL AND EXISTS (SELECT 1 FROM runs WHERE registration_id = NEW.registration_id
     AND pair_index = NEW.pair_index AND (request_set_id <> NEW.request_set_id OR seed <> NEW.seed))
BEGIN
  SELECT RAISE(ABORT, 'both arms of a pair must use the same request set and seed');
END;

-- §1: a run that fails a gate scores as the baseline (1.0); a score compares like with like.
CREATE TRIGGER scores_failed_gate BEFORE INSERT ON scores
WHEN NEW.value <> 1.0 AND (SELECT gate_status FROM runs WHERE id = NEW.run_id) = 'fail'
BEGIN
  SELECT RAISE(ABORT, 'score from a run that failed a gate: such a run scores 1.0 (the baseline)');
END;
CREATE TRIGGER scores_same_conditions BEFORE INSERT ON scores
WHEN EXISTS (SELECT 1 FROM runs r, runs b WHERE r.id = NEW.run_id AND b.id = NEW.baseline_run_id
             AND (r.machine_id <> b.machine_id OR r.size_class <> b.size_class OR r.request_set_id <> b.request_set_id))
BEGIN
  SELECT RAISE(ABORT, 'score: the run and its baseline differ in machine fingerprint, size class or request set');
END;
CREATE TRIGGER scores_noisy_or_invalid BEFORE INSERT ON scores
WHEN NEW.value <> 1.0 AND EXISTS (SELECT 1 FROM runs WHERE id IN (NEW.run_id, NEW.baseline_run_id) AND valid = 0)
BEGIN
  SELECT RAISE(ABORT, 'score from an invalid run: only 1.0 may be recorded');
END;

-- §5: a readout needs a prior, unchanged registration; its runs all start after it.
CREATE TRIGGER readouts_registration_unchanged BEFORE INSERT ON readouts
WHEN NEW.registration_hash IS NOT (SELECT registration_hash FROM registrations WHERE id = NEW.registration_id)
BEGIN
  SELECT RAISE(ABORT, 'readout: its registration is missing or changed (registration hash differs)');
END;
CREATE TRIGGER readouts_after_registration BEFORE INSERT ON readouts
WHEN NEW.created_at <= (SELECT created_at FROM registrations WHERE id = NEW.registration_id)
  OR EXISTS (SELECT 1 FROM runs r JOIN registrations g ON g.id = r.registration_id
             WHERE r.registration_id = NEW.registration_id AND r.started_at <= g.created_at)
BEGIN
  SELECT RAISE(ABORT, 'readout: the registration is not earlier than the readout and all of its runs');
END;
CREATE TRIGGER readouts_one_machine BEFORE INSERT ON readouts
WHEN (SELECT count(DISTINCT machine_id) FROM runs WHERE registration_id = NEW.registration_id) > 1
BEGIN
  SELECT RAISE(ABORT, 'readout: runs of one comparison on two machine fingerprints');
END;
-- §4: a verdict needs the registered number of valid pairs, and no NOISY arm. The CV is
-- recomputed here from the stored objectives of the valid runs, not taken from the writer:
-- CV > cap  <=>  sample variance > cap^2 * mean^2.
CREATE TRIGGER readouts_enough_pairs BEFORE INSERT ON readouts
WHEN NEW.verdict IN ('better', 'worse', 'equivalent') AND (
  (SELECT count(*) FROM runs WHERE registration_id = NEW.registration_id AND arm = 'A' AND valid = 1)
    < (SELECT pairs FROM registrations WHERE id = NEW.registration_id)
  OR (SELECT count(*) FROM runs WHERE registration_id = NEW.registration_id AND arm = 'B' AND valid = 1)
    < (SELECT pairs FROM registrations WHERE id = NEW.registration_id))
BEGIN
  SELECT RAISE(ABORT, 'readout: a verdict needs the registered number of valid pairs');
END;
CREATE TRIGGER readouts_no_noisy_arm BEFORE INSERT ON readouts
WHEN NEW.verdict IN ('better', 'worse', 'equivalent') AND (
  NEW.cv_a IS NULL OR NEW.cv_b IS NULL OR NEW.cv_a > NEW.cv_cap OR NEW.cv_b > NEW.cv_cap
  OR EXISTS (SELECT 1 FROM (SELECT count(*) AS n, avg(objective) AS m, sum(objective * objective) AS s2
                            FROM runs WHERE registration_id = NEW.registration_id AND valid = 1 GROUP BY arm)
             WHERE n < 2 OR (s2 - n * m * m) / (n - 1) > NEW.cv_cap * NEW.cv_cap * m * m))
BEGIN
  SELECT RAISE(ABORT, 'readout: a verdict derived from a NOISY arm (cross-run CV above the cap) is refused');
END;
)SQL";
  s += append_only(
      "machines",
      "EXISTS (SELECT 1 FROM machines WHERE id = NEW.id OR fingerprint_hash = NEW.fingerprint_hash)");
  s += append_only("machine_ceilings", "EXISTS (SELECT 1 FROM machine_ceilings WHERE id = NEW.id)");
  s += append_only("builds", "EXISTS (SELECT 1 FROM builds WHERE id = NEW.id)");
  s += append_only("protocols", "EXISTS (SELECT 1 FROM protocols WHERE id = NEW.id OR hash = NEW.hash)");
  s += append_only("request_sets",
                   "EXISTS (SELECT 1 FROM request_sets WHERE id = NEW.id OR set_hash = NEW.set_hash)");
  s += append_only("registrations", "EXISTS (SELECT 1 FROM registrations WHERE id = NEW.id)");
  s += append_only("runs", "EXISTS (SELECT 1 FROM runs WHERE id = NEW.id)");
  // requests is the bulk table: keyed by (run, profile, idx) without a rowid, so an insert writes
  // one b-tree and the REPLACE guard is one key lookup.
  s += append_only(
      "requests",
      "EXISTS (SELECT 1 FROM requests WHERE run_id = NEW.run_id AND profile = NEW.profile AND idx = "
      "NEW.idx)");
  s += append_only("metrics",
                   "EXISTS (SELECT 1 FROM metrics WHERE id = NEW.id) OR EXISTS (SELECT 1 FROM metrics WHERE "
                   "run_id = NEW.run_id AND name = NEW.name)");
  s += append_only("scores", "EXISTS (SELECT 1 FROM scores WHERE id = NEW.id)");
  s += append_only("readouts", "EXISTS (SELECT 1 FROM readouts WHERE id = NEW.id)");
  s += append_only("anchors", "EXISTS (SELECT 1 FROM anchors WHERE id = NEW.id)");
  return s;
}

// Migration 2: tuning studies and their trials (`plumb tune`). A study stores everything needed to
// resume it; a trial row is written when the trial finishes, in one transaction with its run (if
// the engine started), so a killed study loses only the trial in flight. Trial indexes are dense:
// the database refuses an index other than the study's trial count, so a resumed study can neither
// skip nor repeat a finished trial.
std::string migration_2() {
  std::string s = R"SQL(
CREATE TABLE studies (
  id INTEGER PRIMARY KEY,
  created_at TEXT NOT NULL CHECK (created_at GLOB )SQL" TS_GLOB R"SQL(),
  name TEXT NOT NULL CHECK (name <> ''),
  adapter TEXT NOT NULL CHECK (adapter <> ''),
  space_json TEXT NOT NULL CHECK (json_valid(space_json)),
  strategy TEXT NOT NULL CHECK (strategy <> ''),
  strategy_seed INTEGER NOT NULL,
  scenario TEXT NOT NULL CHECK (scenario <> ''),
  size_class TEXT NOT NULL CHECK (size_class IN ('gpu', 'small', 'custom')),
  dev_seed INTEGER NOT NULL,
  eval_seed INTEGER NOT NULL,
  budget_trials INTEGER NOT NULL CHECK (budget_trials >= -1),
  budget_seconds REAL NOT NULL CHECK (budget_seconds >= -1),
  options_json TEXT NOT NULL CHECK (json_valid(options_json)),
  protocol_id INTEGER NOT NULL REFERENCES protocols(id),
  machine_id INTEGER NOT NULL REFERENCES machines(id),
  CHECK (dev_seed <> eval_seed)
);
CREATE TABLE trials (
  id INTEGER PRIMARY KEY,
  study_id INTEGER NOT NULL REFERENCES studies(id),
  idx INTEGER NOT NULL CHECK (idx >= 0),
  stage TEXT NOT NULL CHECK (stage IN ('full', 'screen')),
  config_json TEXT NOT NULL CHECK (json_valid(config_json)),
  config_hash TEXT NOT NULL CHECK )SQL" HEX64("config_hash") R"SQL(,
  status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'startup_failed', 'crashed', 'timeout', 'error')),
  feasible INTEGER NOT NULL CHECK (feasible IN (0, 1)),
  objective REAL CHECK (objective IS NULL OR objective > 0),
  failure TEXT NOT NULL,
  run_id INTEGER REFERENCES runs(id),
  rationale TEXT NOT NULL CHECK (rationale <> ''),
  notes TEXT NOT NULL,
  metrics_json TEXT NOT NULL CHECK (json_valid(metrics_json)),
  started_at TEXT NOT NULL CHECK (started_at GLOB )SQL" TS_GLOB R"SQL(),
  ended_at TEXT NOT NULL CHECK (ended_at GLOB )SQL" TS_GLOB R"SQL(),
  elapsed_s REAL NOT NULL CHECK (elapsed_s >= 0),
  CHECK (ended_at >= started_at),
  CHECK (feasible = 0 OR (status = 'ok' AND objective IS NOT NULL AND run_id IS NOT NULL)),
  CHECK (feasible = 1 OR failure <> ''),
  UNIQUE (study_id, idx)
);
CREATE INDEX trials_by_study ON trials(study_id, idx);
CREATE TRIGGER trials_dense_index BEFORE INSERT ON trials
WHEN NEW.idx <> (SELECT count(*) FROM trials WHERE study_id = NEW.study_id)
BEGIN
  SELECT RAISE(ABORT, 'trial: its index must equal the study''s number of finished trials (no gap, no repeat)');
END;
CREATE TRIGGER trials_feasible_run_valid BEFORE INSERT ON trials
WHEN NEW.feasible = 1 AND NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id AND valid = 1)
BEGIN
  SELECT RAISE(ABORT, 'trial: a feasible trial needs a valid run');
END;
)SQL";
  s += append_only("studies", "EXISTS (SELECT 1 FROM studies WHERE id = NEW.id)");
  s += append_only("trials", "EXISTS (SELECT 1 FROM trials WHERE id = NEW.id)");
  return s;
}

// Migration 3: the ledger proves its results (docs/protocol.md "The database validator").
//
// A run becomes usable (by a trial, a readout or a score) only when it is sealed: a row in `seals`
// whose insertion the triggers below allow only when the run's per-request rows back what it
// states. The seal also carries a hash chain: content_hash (SHA-256 of the run's canonical content,
// computed by ledger.cpp at seal time), prev_hash (the previous seal's hash; 64 zeros for the first)
// and hash = SHA-256 over both. The database checks the linkage (prev_hash is the chain head, seq
// is dense); `plumb ledger verify` recomputes every hash from the rows.
//
// What a seal checks, from the rows alone (tolerance: a stated figure agrees when
// |stated - recomputed| <= 1e-6 * |recomputed|, i.e. six significant digits):
// - a valid run has, in each of its profiles, exactly its request set's number of rows and at least
//   the protocol's minimum of completed ones (read from the run's own protocol row: the scenario
//   and size class's min_completed; a custom workload needs one); a protocol scenario (A-D, gpu or
//   small) must be defined by that protocol, with the profiles it defines;
// - every stated headline metric (ttft_p50_ms, tpot_p50_ms, request_throughput, with the "p<i>."
//   prefix of profile i when there are several) equals what the rows give, by the definitions of
//   docs/metrics.md (percentiles: linear interpolation between closest ranks, Hyndman-Fan type 7);
// - a valid run's objective equals the scenario's objective recomputed from the rows (C: the cube
//   of the objective against the product of the three profiles' req/s; D: the cube against the
//   product of its three ingredients), for protocol scenarios; its "objective" metric, if stated,
//   equals it.

// SQL for what a run's rows give, for run `r` and profile `p` (SQL expressions). Times are
// nanoseconds, -1 where the event did not happen; "ok" rows are the completed requests.
std::string where_ok(const std::string& r, const std::string& p) {
  return "run_id = " + r + " AND profile = " + p + " AND status = 'ok'";
}
// The median of `v` over the rows selected by `cond`: type 7 at p = 0.5, i.e. the middle value, or
// the mean of the two middle values.
std::string median(const std::string& v, const std::string& cond) {
  std::string n = "(SELECT count(*) FROM requests WHERE " + cond + ")";
  return "(SELECT avg(v) FROM (SELECT " + v + " AS v FROM requests WHERE " + cond +
         " ORDER BY v LIMIT 2 - (" + n + " % 2) OFFSET (" + n + " - 1) / 2))";
}
std::string ttft_p50(const std::string& r, const std::string& p) {
  return median("(first_token_ns - sent_ns) / 1e6",
                where_ok(r, p) + " AND first_token_ns >= 0 AND sent_ns >= 0");
}
// TPOT = (end - first token) / (n - 1), n = the server's completion tokens when reported, else the
// local count; requests with n >= 2.
std::string tpot_p50(const std::string& r, const std::string& p) {
  std::string n = "(CASE WHEN output_server >= 0 THEN output_server ELSE output_local END)";
  return median("(end_ns - first_token_ns) / 1e6 / (" + n + " - 1)",
                where_ok(r, p) + " AND " + n + " >= 2 AND first_token_ns >= 0 AND end_ns >= 0");
}
// Steady-window request throughput: completed requests ending in (first completion, last send],
// over that window in seconds; undefined (NULL) with fewer than two completed or an empty window.
std::string steady_rps(const std::string& r, const std::string& p) {
  std::string fc = "(SELECT min(end_ns) FROM requests WHERE " + where_ok(r, p) + ")";
  std::string ls =
      "(SELECT max(sent_ns) FROM requests WHERE run_id = " + r + " AND profile = " + p + " AND sent_ns >= 0)";
  std::string n = "(SELECT count(*) FROM requests WHERE " + where_ok(r, p) + ")";
  return "(CASE WHEN " + n + " >= 2 AND " + ls + " > " + fc + " THEN (SELECT count(*) FROM requests WHERE " +
         where_ok(r, p) + " AND end_ns > " + fc + " AND end_ns <= " + ls + ") / ((" + ls + " / 1e9) - (" +
         fc + " / 1e9)) END)";
}
// A stated figure agrees with the recomputed one (NULL recomputed never agrees). The recomputed
// figure is a subquery of its own so that it is evaluated once.
std::string agree(const std::string& stated, const std::string& computed) {
  return "EXISTS (SELECT 1 FROM (SELECT " + computed + " AS c LIMIT 1) WHERE c IS NOT NULL AND abs((" +
         stated + ") - c) <= 1e-6 * abs(c))";
}
// The protocol's definition of the sealed run's scenario and size class (JSON text), or NULL.
const char* kScenarioJson =
    "(SELECT s.value FROM runs r JOIN protocols pr ON pr.id = r.protocol_id, "
    "json_each(pr.canonical_json, '$.scenarios') s WHERE r.id = NEW.run_id "
    "AND json_extract(s.value, '$.id') = r.scenario AND json_extract(s.value, '$.size_class') = "
    "r.size_class)";

// Every stated headline metric of the sealed run agrees with its rows: "<kind>" is profile 0's,
// "p<i>.<kind>" profile i's (the protocol has at most three profiles; a headline metric of a
// fourth is refused). SQLite admits no outer column in LIMIT/OFFSET, so the profile is a literal.
std::string figures_agree() {
  const std::string R = "NEW.run_id";
  struct Kind {
    const char* name;
    std::string (*of)(const std::string&, const std::string&);
  };
  const Kind kinds[] = {
      {"ttft_p50_ms", ttft_p50}, {"tpot_p50_ms", tpot_p50}, {"request_throughput", steady_rps}};
  std::string s = "1";
  for (const Kind& k : kinds) {
    for (int p = -1; p < 3; ++p) {
      std::string name = (p < 0 ? std::string() : "p" + std::to_string(p) + ".") + k.name;
      std::string prof = std::to_string(std::max(p, 0));
      s += "\n  AND NOT EXISTS (SELECT 1 FROM metrics WHERE run_id = NEW.run_id AND name = '" + name +
           "' AND NOT " + agree("value", k.of(R, prof)) + ")";
    }
    s += std::string(
             "\n  AND NOT EXISTS (SELECT 1 FROM metrics WHERE run_id = NEW.run_id AND name GLOB 'p[0-9]*.") +
         k.name + "' AND CAST(substr(name, 2, instr(name, '.') - 2) AS INTEGER) > 2)";
  }
  s += "\n  AND NOT EXISTS (SELECT 1 FROM metrics WHERE run_id = NEW.run_id AND name = 'objective' AND value "
       "<> "
       "(SELECT objective FROM runs WHERE id = NEW.run_id))";
  return s;
}

std::string migration_3() {
  const std::string R = "NEW.run_id";
  const std::string sj = kScenarioJson;
  const std::string obj = "(SELECT objective FROM runs WHERE id = NEW.run_id)";
  const std::string obj3 = "(" + obj + " * " + obj + " * " + obj + ")";
  std::string s =
      R"SQL(
CREATE TABLE seals (
  seq INTEGER PRIMARY KEY CHECK (seq >= 0),
  run_id INTEGER NOT NULL UNIQUE REFERENCES runs(id),
  content_hash TEXT NOT NULL CHECK )SQL" HEX64("content_hash") R"SQL(,
  prev_hash TEXT NOT NULL CHECK )SQL" HEX64("prev_hash") R"SQL(,
  hash TEXT NOT NULL CHECK )SQL" HEX64("hash") R"SQL(,
  sealed_at TEXT NOT NULL CHECK (sealed_at GLOB )SQL" TS_GLOB R"SQL()
);
-- SQLite fires the triggers of one event newest first: these are created in reverse order of the
-- checks, so the first rule a seal breaks is the one it names.
CREATE TRIGGER seals_objective_agrees BEFORE INSERT ON seals
WHEN (SELECT valid FROM runs WHERE id = NEW.run_id) = 1 AND CASE json_extract()SQL" +
      sj + R"SQL(, '$.objective')
  WHEN 'inv_median_ttft' THEN NOT )SQL" +
      agree(obj, "(1000.0 / " + ttft_p50(R, "0") + ")") + R"SQL(
  WHEN 'inv_median_tpot' THEN NOT )SQL" +
      agree(obj, "(1000.0 / " + tpot_p50(R, "0") + ")") + R"SQL(
  WHEN 'general_geomean' THEN NOT )SQL" +
      agree(obj3, "((1000.0 / " + ttft_p50(R, "0") + ") * (1000.0 / " + tpot_p50(R, "0") + ") * " +
                      steady_rps(R, "0") + ")") +
      R"SQL(
  WHEN 'geomean_req_per_s' THEN json_array_length()SQL" +
      sj + R"SQL(, '$.profiles') <> 3 OR NOT )SQL" +
      agree(obj3, "(" + steady_rps(R, "0") + " * " + steady_rps(R, "1") + " * " + steady_rps(R, "2") + ")") +
      R"SQL(
  ELSE 0 END
BEGIN
  SELECT RAISE(ABORT, 'seal: the run''s objective disagrees with the one its per-request rows give');
END;
CREATE TRIGGER seals_figures_agree BEFORE INSERT ON seals
WHEN NOT ()SQL" +
      figures_agree() + R"SQL()
BEGIN
  SELECT RAISE(ABORT, 'seal: a stated figure (TTFT p50, TPOT p50, request throughput or objective) disagrees with the run''s per-request rows');
END;
CREATE TRIGGER seals_valid_run_has_rows BEFORE INSERT ON seals
WHEN (SELECT valid FROM runs WHERE id = NEW.run_id) = 1 AND (
  NOT EXISTS (SELECT 1 FROM requests WHERE run_id = NEW.run_id)
  OR (SELECT max(profile) + 1 FROM requests WHERE run_id = NEW.run_id)
     <> (SELECT count(DISTINCT profile) FROM requests WHERE run_id = NEW.run_id)
  OR (SELECT count(DISTINCT profile) FROM requests WHERE run_id = NEW.run_id)
     <> coalesce(json_array_length()SQL" +
      sj + R"SQL(, '$.profiles'), (SELECT count(DISTINCT profile) FROM requests WHERE run_id = NEW.run_id))
  OR EXISTS (SELECT 1 FROM (SELECT DISTINCT profile AS p FROM requests WHERE run_id = NEW.run_id) x
             WHERE (SELECT count(*) FROM requests WHERE run_id = NEW.run_id AND profile = x.p)
                   <> (SELECT rs.num_requests FROM runs r JOIN request_sets rs ON rs.id = r.request_set_id
                       WHERE r.id = NEW.run_id)
                OR (SELECT count(*) FROM requests WHERE run_id = NEW.run_id AND profile = x.p AND status = 'ok')
                   < coalesce(json_extract()SQL" +
      sj + R"SQL(, '$.min_completed'), 1)))
BEGIN
  SELECT RAISE(ABORT, 'seal: a valid run needs its per-request rows: in every profile one row per request of its set, and at least the protocol''s minimum of completed requests');
END;
CREATE TRIGGER seals_protocol_scenario BEFORE INSERT ON seals
WHEN EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id AND valid = 1 AND scenario IN ('A', 'B', 'C', 'D')
             AND size_class IN ('gpu', 'small')) AND )SQL" +
      sj + R"SQL( IS NULL
BEGIN
  SELECT RAISE(ABORT, 'seal: the run''s protocol row does not define its scenario and size class');
END;
CREATE TRIGGER seals_chain_linked BEFORE INSERT ON seals
WHEN NEW.seq IS NOT (SELECT count(*) FROM seals)
  OR NEW.prev_hash IS NOT coalesce((SELECT hash FROM seals WHERE seq = NEW.seq - 1), ')SQL" +
      std::string(64, '0') + R"SQL(')
BEGIN
  SELECT RAISE(ABORT, 'seal: not linked to the chain head (seq must be the number of seals, prev_hash the last seal''s hash)');
END;
CREATE TRIGGER seals_run_exists BEFORE INSERT ON seals
WHEN NOT EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id)
BEGIN
  SELECT RAISE(ABORT, 'seal: no such run');
END;

-- A sealed run's rows are closed. (A row over an existing key is left to the append-only message.)
CREATE TRIGGER requests_closed_by_seal BEFORE INSERT ON requests
WHEN EXISTS (SELECT 1 FROM seals WHERE run_id = NEW.run_id)
  AND NOT EXISTS (SELECT 1 FROM requests WHERE run_id = NEW.run_id AND profile = NEW.profile AND idx = NEW.idx)
BEGIN
  SELECT RAISE(ABORT, 'requests: the run is sealed; its rows are closed');
END;
CREATE TRIGGER metrics_closed_by_seal BEFORE INSERT ON metrics
WHEN EXISTS (SELECT 1 FROM seals WHERE run_id = NEW.run_id)
  AND NOT EXISTS (SELECT 1 FROM metrics WHERE id = NEW.id OR (run_id = NEW.run_id AND name = NEW.name))
BEGIN
  SELECT RAISE(ABORT, 'metrics: the run is sealed; its rows are closed');
END;

-- Only sealed runs are used.
CREATE TRIGGER trials_run_sealed BEFORE INSERT ON trials
WHEN NEW.run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM seals WHERE run_id = NEW.run_id)
BEGIN
  SELECT RAISE(ABORT, 'trial: its run is not sealed (a run is usable only once its per-request rows back it)');
END;
CREATE TRIGGER trials_objective_is_runs BEFORE INSERT ON trials
WHEN NEW.feasible = 1 AND EXISTS (SELECT 1 FROM runs WHERE id = NEW.run_id AND valid = 1) AND NOT )SQL" +
      agree("NEW.objective", "(SELECT objective FROM runs WHERE id = NEW.run_id)") + R"SQL(
BEGIN
  SELECT RAISE(ABORT, 'trial: a feasible trial''s objective must be its run''s');
END;
CREATE TRIGGER scores_runs_sealed BEFORE INSERT ON scores
WHEN (SELECT count(*) FROM seals WHERE run_id IN (NEW.run_id, NEW.baseline_run_id))
     < (CASE WHEN NEW.run_id = NEW.baseline_run_id THEN 1 ELSE 2 END)
BEGIN
  SELECT RAISE(ABORT, 'score: the run or its baseline is not sealed (a run is usable only once its per-request rows back it)');
END;
CREATE TRIGGER readouts_runs_sealed BEFORE INSERT ON readouts
WHEN EXISTS (SELECT 1 FROM runs WHERE registration_id = NEW.registration_id
             AND NOT EXISTS (SELECT 1 FROM seals WHERE run_id = runs.id))
BEGIN
  SELECT RAISE(ABORT, 'readout: a run of the comparison is not sealed (a run is usable only once its per-request rows back it)');
END;

-- The schema's own record is append-only too: without it no plumb can tell which schema a file has.
CREATE TRIGGER schema_version_no_update BEFORE UPDATE ON schema_version
BEGIN
  SELECT RAISE(ABORT, 'schema_version is append-only: recorded rows cannot be changed or deleted');
END;
CREATE TRIGGER schema_version_no_delete BEFORE DELETE ON schema_version
BEGIN
  SELECT RAISE(ABORT, 'schema_version is append-only: recorded rows cannot be changed or deleted');
END;
)SQL";
  s += append_only("seals", "EXISTS (SELECT 1 FROM seals WHERE seq = NEW.seq OR run_id = NEW.run_id)");
  return s;
}

// Migration 4: runs of a subset of their request set (`--request-limit`, `--parts`). A subset run
// names its slice's own request set; run_subsets says what it was cut from. Such a run is never a
// verdict input: a readout over a comparison with one, or a score of one, is refused. A valid
// subset run is sealed against the slice's own minimum of completed requests (the protocol's rule,
// n - floor(n / 100), applied to the slice's n), so the seal triggers of migration 3 from
// seals_valid_run_has_rows on are recreated with that one change, in the same order (SQLite fires
// the newest first, so the first rule a seal breaks is still the one it names).
std::string migration_4() {
  const std::string sj = kScenarioJson;
  const std::string m3 = migration_3();
  const size_t from = m3.find("CREATE TRIGGER seals_valid_run_has_rows");
  const size_t to = m3.find("\n-- A sealed run's rows are closed.");
  std::string seals = m3.substr(from, to - from);
  const std::string old_min = "< coalesce(json_extract(" + sj + ", '$.min_completed'), 1)";
  const std::string new_min =
      "< coalesce((SELECT num_requests - num_requests / 100 FROM run_subsets WHERE run_id = NEW.run_id), "
      "json_extract(" +
      sj + ", '$.min_completed'), 1)";
  seals.replace(seals.find(old_min), old_min.size(), new_min);
  std::string s = R"SQL(
CREATE TABLE run_subsets (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id),
  kind TEXT NOT NULL CHECK (kind IN ('limit', 'part')),
  full_set_hash TEXT NOT NULL CHECK )SQL" HEX64("full_set_hash") R"SQL(,
  full_requests INTEGER NOT NULL CHECK (full_requests >= 1),
  first_idx INTEGER NOT NULL CHECK (first_idx >= 0),
  num_requests INTEGER NOT NULL CHECK (num_requests >= 1),
  part INTEGER NOT NULL,
  parts INTEGER NOT NULL,
  CHECK (first_idx + num_requests <= full_requests),
  CHECK ((kind = 'limit' AND first_idx = 0 AND part = -1 AND parts = -1 AND num_requests < full_requests)
      OR (kind = 'part' AND parts >= 2 AND part >= 0 AND part < parts))
);
CREATE INDEX run_subsets_by_set ON run_subsets(full_set_hash);
CREATE TRIGGER run_subsets_fit_run BEFORE INSERT ON run_subsets
WHEN NOT EXISTS (SELECT 1 FROM runs r JOIN request_sets s ON s.id = r.request_set_id WHERE r.id = NEW.run_id
                 AND s.num_requests = NEW.num_requests AND s.set_hash <> NEW.full_set_hash)
  OR EXISTS (SELECT 1 FROM seals WHERE run_id = NEW.run_id)
BEGIN
  SELECT RAISE(ABORT, 'run_subsets: the run must exist, be unsealed, and name the slice''s own request set (num_requests rows, not the whole set)');
END;
CREATE TRIGGER readouts_no_subset_runs BEFORE INSERT ON readouts
WHEN EXISTS (SELECT 1 FROM runs r JOIN run_subsets u ON u.run_id = r.id WHERE r.registration_id = NEW.registration_id)
BEGIN
  SELECT RAISE(ABORT, 'readout: runs of the comparison measured only a subset of their request sets (--request-limit); a subset is not a verdict: register and run the comparison again without --request-limit');
END;
CREATE TRIGGER scores_no_subset_runs BEFORE INSERT ON scores
WHEN EXISTS (SELECT 1 FROM run_subsets WHERE run_id IN (NEW.run_id, NEW.baseline_run_id))
BEGIN
  SELECT RAISE(ABORT, 'score: the run or its baseline measured only a subset of its request set (--request-limit or --part); a subset is not a verdict');
END;
DROP TRIGGER seals_run_exists;
DROP TRIGGER seals_chain_linked;
DROP TRIGGER seals_protocol_scenario;
DROP TRIGGER seals_valid_run_has_rows;
)SQL";
  s += seals;
  s += "\n";
  s += append_only("run_subsets", "EXISTS (SELECT 1 FROM run_subsets WHERE run_id = NEW.run_id)");
  return s;
}

}  // namespace

const std::vector<std::string>& migrations() {
  static const std::vector<std::string> m{migration_1(), migration_2(), migration_3(), migration_4()};
  return m;
}

}  // namespace plumb::ledger
