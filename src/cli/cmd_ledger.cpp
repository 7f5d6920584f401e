// `plumb ledger runs|show|export|verify|migrate`: query, export, verify and copy the results
// database. --ledger takes a file or a postgresql:// URL (the shared ledger).
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/file.h"
#include "core/json.h"
#include "ledger/copy.h"
#include "ledger/ledger.h"

namespace plumb::cli {
namespace {

struct LedgerArgs {
  std::string path = ledger::kDefaultPath;
  int64_t limit = 50;
  int64_t id = 0;
  std::string format = "csv";
  std::string table = "runs";
  int64_t run = 0;
  std::string out;
  std::string from, to;  // migrate
};

// Opens an existing ledger; a query never creates a database file as a side effect. (A PostgreSQL
// ledger is opened as is: an empty database gets the schema, which a query then finds empty.)
Result<std::unique_ptr<ledger::Ledger>> open_existing(const std::string& path) {
  if (ledger::is_postgres_url(path)) return ledger::Ledger::open(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return not_found("no ledger at '" + path + "' (pass --ledger FILE; runs are recorded by plumb bench)");
  return ledger::Ledger::open(path);
}

int fail(const Status& s) {
  std::cerr << "plumb ledger: " << s.to_string() << "\n";
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitError;
}

std::string fmt_opt(const std::optional<double>& v) {
  if (!v) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", *v);
  return b;
}

std::string cell_text(const ledger::Cell& c) {
  switch (c.type) {
    case ledger::Cell::Type::kNull:
      return "";
    case ledger::Cell::Type::kInt:
      return std::to_string(c.i);
    case ledger::Cell::Type::kReal: {
      char b[40];
      std::snprintf(b, sizeof b, "%.17g", c.d);
      return b;
    }
    case ledger::Cell::Type::kText:
      return c.s;
  }
  return "";
}

// RFC 4180: quote a field that holds a comma, quote, CR or LF; double the quotes inside.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"') o += '"';
    o += ch;
  }
  return o + "\"";
}

std::string to_csv(const ledger::Table& t) {
  std::string o;
  for (size_t i = 0; i < t.columns.size(); ++i) o += (i ? "," : "") + csv_field(t.columns[i]);
  o += "\n";
  for (const auto& row : t.rows) {
    for (size_t i = 0; i < row.size(); ++i) o += (i ? "," : "") + csv_field(cell_text(row[i]));
    o += "\n";
  }
  return o;
}

json::value cell_json(const ledger::Cell& c) {
  switch (c.type) {
    case ledger::Cell::Type::kNull:
      return nullptr;
    case ledger::Cell::Type::kInt:
      return c.i;
    case ledger::Cell::Type::kReal:
      return c.d;
    case ledger::Cell::Type::kText:
      return json::value(c.s);
  }
  return nullptr;
}

json::value to_json(const std::string& name, const ledger::Table& t) {
  json::array rows;
  for (const auto& row : t.rows) {
    json::object o;
    for (size_t i = 0; i < row.size(); ++i) o[t.columns[i]] = cell_json(row[i]);
    rows.push_back(std::move(o));
  }
  return json::object{{"schema_version", 1}, {"table", name}, {"rows", std::move(rows)}};
}

int cmd_verify(const LedgerArgs& a) {
  struct stat st {};
  if (!ledger::is_postgres_url(a.path) && ::stat(a.path.c_str(), &st) != 0)
    return fail(not_found("no ledger at '" + a.path + "' (pass --ledger FILE)"));
  // Read-only and without the check on open, so that a ledger open() refuses can be examined.
  auto l = ledger::Ledger::open_for_inspection(a.path);
  if (!l.ok()) return fail(l.status());
  auto rep = (*l)->verify();
  if (!rep.ok()) return fail(rep.status());
  std::printf("ledger      %s\n", ledger::redact_url(a.path).c_str());
  std::printf("schema      v%lld (this plumb: v%lld)\n", (long long)rep->schema_version,
              (long long)ledger::Ledger::kSchemaVersion);
  std::printf("runs        %lld, sealed %lld, unsealed %zu\n", (long long)rep->runs, (long long)rep->seals,
              rep->unsealed_runs.size());
  std::printf("chain head  %s\n", rep->chain_head.c_str());
  if (!rep->unsealed_runs.empty()) {
    std::string ids;
    for (size_t i = 0; i < rep->unsealed_runs.size() && i < 20; ++i)
      ids += (i ? " " : "") + std::to_string(rep->unsealed_runs[i]);
    if (rep->unsealed_runs.size() > 20) ids += " ...";
    std::printf(
        "unsealed    %s (stored, but no trial, readout or score may use them: their rows do not back "
        "them, or they were written without a seal)\n",
        ids.c_str());
  }
  if (rep->ok()) {
    std::printf("verdict     OK: the validator is schema v%lld's and every sealed run hashes to its seal\n",
                (long long)rep->schema_version);
    return kExitOk;
  }
  std::printf("verdict     FAILED: %zu finding%s\n", rep->problems.size(),
              rep->problems.size() == 1 ? "" : "s");
  for (const auto& p : rep->problems) std::printf("  - %s\n", p.c_str());
  std::printf(
      "The file was changed outside plumb. Restore it from a copy; otherwise keep it for inspection and "
      "record "
      "new results in a new ledger (--ledger NEW.db).\n");
  return kExitFailed;
}

int cmd_runs(const LedgerArgs& a) {
  auto l = open_existing(a.path);
  if (!l.ok()) return fail(l.status());
  auto runs = (*l)->list_runs(a.limit);
  if (!runs.ok()) return fail(runs.status());
  std::printf("%-6s %-24s %-4s %-6s %-10s %-5s %-7s %-12s %-10s %-8s %s\n", "id", "started_at", "scn",
              "class", "engine", "valid", "gate", "objective", "comparison", "requests", "sealed");
  for (const auto& r : *runs) {
    std::string cmp = r.registration_id ? std::to_string(*r.registration_id) + "/" + r.arm : "exploratory";
    std::printf("%-6lld %-24s %-4s %-6s %-10s %-5s %-7s %-12s %-10s %-8lld %s\n", (long long)r.id,
                r.started_at.c_str(), r.scenario.c_str(), r.size_class.c_str(), r.target_engine.c_str(),
                r.valid ? "yes" : "NO", r.gate_status.c_str(), fmt_opt(r.objective).c_str(), cmp.c_str(),
                (long long)r.requests, r.sealed ? "yes" : "NO");
  }
  if (runs->empty()) std::printf("(no runs)\n");
  return kExitOk;
}

void print_row(const std::string& title, const ledger::Table& t) {
  std::printf("%s\n", title.c_str());
  for (size_t i = 0; i < t.columns.size(); ++i)
    std::printf("  %-20s %s\n", t.columns[i].c_str(), cell_text(t.rows[0][i]).c_str());
}

int64_t cell_int(const ledger::Table& t, const std::string& col) {
  for (size_t i = 0; i < t.columns.size(); ++i)
    if (t.columns[i] == col && t.rows[0][i].type == ledger::Cell::Type::kInt) return t.rows[0][i].i;
  return 0;
}

int cmd_show(const LedgerArgs& a) {
  auto l = open_existing(a.path);
  if (!l.ok()) return fail(l.status());
  auto& led = **l;
  auto run = led.row("runs", a.id);
  if (!run.ok()) return fail(run.status());
  print_row("run " + std::to_string(a.id), *run);
  auto machine = led.row("machines", cell_int(*run, "machine_id"));
  if (machine.ok()) print_row("machine", *machine);
  auto build = led.row("builds", cell_int(*run, "build_id"));
  if (build.ok()) print_row("build", *build);
  auto metrics = led.metrics_for(a.id);
  if (!metrics.ok()) return fail(metrics.status());
  std::printf("metrics\n");
  for (const auto& m : *metrics) std::printf("  %-28s %.6g %s\n", m.name.c_str(), m.value, m.unit.c_str());
  auto reqs = led.dump("requests", a.id);
  if (reqs.ok())
    std::printf("requests: %zu stored (plumb ledger export --table requests --run %lld)\n", reqs->rows.size(),
                (long long)a.id);
  return kExitOk;
}

int cmd_export(const LedgerArgs& a) {
  if (a.format != "csv" && a.format != "json") return fail(invalid_argument("--format must be csv or json"));
  auto l = open_existing(a.path);
  if (!l.ok()) return fail(l.status());
  auto t = (*l)->dump(a.table, a.run);
  if (!t.ok()) return fail(t.status());
  auto head = (*l)->chain_head();
  if (!head.ok()) return fail(head.status());
  std::string text;
  if (a.format == "csv") {
    text = to_csv(*t);
    std::fprintf(stderr, "ledger chain head %s\n", head->c_str());
  } else {
    json::value j = to_json(a.table, *t);
    j.as_object()["chain_head"] = *head;
    text = json::dump_pretty(j) + "\n";
  }
  if (a.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  Status s = write_file_atomic(a.out, text);
  return s.ok() ? kExitOk : fail(s);
}

int cmd_migrate(const LedgerArgs& a) {
  // The source is read without the check on open: every row is judged by the destination's validator,
  // so a damaged file can still be copied, minus what the destination refuses.
  struct stat st {};
  if (!ledger::is_postgres_url(a.from) && ::stat(a.from.c_str(), &st) != 0)
    return fail(not_found("no ledger at '" + a.from + "'"));
  auto from = ledger::Ledger::open_for_inspection(a.from);
  if (!from.ok()) return fail(from.status());
  auto to = ledger::Ledger::open(a.to);
  if (!to.ok()) return fail(to.status());
  auto rep = ledger::copy_ledger(**from, **to);
  if (!rep.ok()) return fail(rep.status());
  int64_t total = 0;
  for (const auto& [table, n] : rep->copied) {
    std::printf("copied  %-18s %lld\n", table.c_str(), (long long)n);
    total += n;
  }
  for (const auto& [table, n] : rep->already)
    std::printf("already %-18s %lld (in the destination before; not copied again)\n", table.c_str(),
                (long long)n);
  if (rep->copied.empty())
    std::printf("copied  nothing (%s)\n", rep->already.empty() ? "the source holds no rows"
                                                               : "the destination holds every row already");
  auto head = (*to)->chain_head();
  if (head.ok()) std::printf("destination chain head %s\n", head->c_str());
  if (rep->refused.empty()) {
    std::printf("refused none: all %lld rows were admitted by the destination's validator\n",
                (long long)total);
    return kExitOk;
  }
  std::printf("refused %zu row%s (not copied):\n", rep->refused.size(), rep->refused.size() == 1 ? "" : "s");
  for (const auto& r : rep->refused) std::printf("  - %s\n", r.c_str());
  return kExitFailed;
}

void setup(CLI::App& root) {
  auto args = std::make_shared<LedgerArgs>();
  auto* cmd = root.add_subcommand(
      "ledger", "Query, export and verify the results database (runs, requests, comparisons, seals)");
  cmd->add_option("--ledger", args->path, "ledger database file, or postgresql://user@host/db (shared)")
      ->capture_default_str();
  cmd->require_subcommand(1);
  cmd->fallthrough();

  auto* runs = cmd->add_subcommand("runs", "List recorded runs, newest first");
  runs->add_option("--limit", args->limit, "at most this many (0: all)")->capture_default_str();
  runs->callback([args] { set_exit_code(cmd_runs(*args)); });

  auto* show = cmd->add_subcommand("show", "Show one run: provenance, validity, metrics");
  show->add_option("id", args->id, "run id")->required();
  show->callback([args] { set_exit_code(cmd_show(*args)); });

  auto* exp = cmd->add_subcommand("export", "Export a table as CSV or JSON (schema_version 1)");
  exp->add_option("--format", args->format, "csv|json")->capture_default_str();
  exp->add_option(
         "--table", args->table,
         "runs|requests|metrics|machines|machine_ceilings|builds|protocols|request_sets|registrations|"
         "readouts|scores|anchors|studies|trials|seals")
      ->capture_default_str();
  exp->add_option("--run", args->run, "only this run's rows (requests, metrics)");
  exp->add_option("--out", args->out, "write to this file instead of stdout");
  exp->callback([args] { set_exit_code(cmd_export(*args)); });

  auto* ver = cmd->add_subcommand(
      "verify", "Check the ledger: its validator, its schema_version rows, its protocols and its seal chain");
  ver->footer(
      "A run is usable (by a trial, a readout or a score) only once sealed: the database admits the seal\n"
      "only when the run's per-request rows back what it states (enough rows and completed requests for its\n"
      "scenario, and TTFT p50, TPOT p50, req/s and the objective as its rows give them). Each seal holds a\n"
      "SHA-256 over the run's content (run row, the rows it refers to, its per-request rows, its metrics)\n"
      "and the previous seal's hash: a chain whose last hash, the chain head, identifies the ledger's "
      "history.\n\n"
      "verify recomputes all of it, so it finds what the triggers cannot stop: a dropped or rewritten\n"
      "trigger (PRAGMA writable_schema), deleted schema_version rows, a protocol row that is not what its\n"
      "hash says, an edited, inserted or deleted row of a sealed run, a deleted or forged seal. It opens "
      "the\n"
      "file read-only, also when plumb's check on open refuses it. Exit 0: OK; 1: findings (listed).\n"
      "Compare the printed chain head with a copy's, or with the one in a report (plumb tune --json,\n"
      "plumb ledger export --format json), to tell whether two ledgers hold the same sealed history.\n\n"
      "Example:\n"
      "  plumb ledger verify --ledger plumb.db\n"
      "Details: docs/protocol.md, \"The database validator\" (seals, the hash chain, the check on open)");
  ver->callback([args] { set_exit_code(cmd_verify(*args)); });

  auto* mig = cmd->add_subcommand("migrate", "Copy a ledger into another (a local file into the shared one)");
  mig->add_option("from", args->from, "source ledger: FILE.db or postgresql://...")->required();
  mig->add_option("to", args->to, "destination ledger: postgresql://... or FILE.db")->required();
  mig->footer(
      "Copies every row with its provenance (machine, build, protocol, request set, registration) through\n"
      "the destination's validator, as new rows: ids are the destination's, and each run is sealed into its\n"
      "chain. A run not sealed in the source is not copied; a row the destination refuses is listed with\n"
      "the reason. Copying is idempotent: rows the destination already holds (an earlier migrate of the\n"
      "same file) are counted as 'already' and not copied again, so migrating a file that grew copies only\n"
      "its new rows. Exit 0: all copied; 1: some refused.\n\n"
      "Example:\n"
      "  plumb ledger migrate plumb.db postgresql://plumb@db.example/plumb\n"
      "Details: docs/ledger.md");
  mig->callback([args] { set_exit_code(cmd_migrate(*args)); });
}

PLUMB_COMMAND(60, setup);

}  // namespace
}  // namespace plumb::cli
