// `plumb ledger runs|show|export`: query and export the results database.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/file.h"
#include "core/json.h"
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
};

// Opens an existing ledger; a query never creates a database as a side effect.
Result<std::unique_ptr<ledger::Ledger>> open_existing(const std::string& path) {
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

int cmd_runs(const LedgerArgs& a) {
  auto l = open_existing(a.path);
  if (!l.ok()) return fail(l.status());
  auto runs = (*l)->list_runs(a.limit);
  if (!runs.ok()) return fail(runs.status());
  std::printf("%-6s %-24s %-4s %-6s %-10s %-5s %-7s %-12s %-10s %s\n", "id", "started_at", "scn", "class",
              "engine", "valid", "gate", "objective", "comparison", "requests");
  for (const auto& r : *runs) {
    std::string cmp = r.registration_id ? std::to_string(*r.registration_id) + "/" + r.arm : "exploratory";
    std::printf("%-6lld %-24s %-4s %-6s %-10s %-5s %-7s %-12s %-10s %lld\n", (long long)r.id,
                r.started_at.c_str(), r.scenario.c_str(), r.size_class.c_str(), r.target_engine.c_str(),
                r.valid ? "yes" : "NO", r.gate_status.c_str(), fmt_opt(r.objective).c_str(), cmp.c_str(),
                (long long)r.requests);
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
  std::string text = a.format == "csv" ? to_csv(*t) : json::dump_pretty(to_json(a.table, *t)) + "\n";
  if (a.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  Status s = write_file_atomic(a.out, text);
  return s.ok() ? kExitOk : fail(s);
}

void setup(CLI::App& root) {
  auto args = std::make_shared<LedgerArgs>();
  auto* cmd =
      root.add_subcommand("ledger", "Query and export the results database (runs, requests, comparisons)");
  cmd->add_option("--ledger", args->path, "ledger database file")->capture_default_str();
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
         "readouts|scores|anchors")
      ->capture_default_str();
  exp->add_option("--run", args->run, "only this run's rows (requests, metrics)");
  exp->add_option("--out", args->out, "write to this file instead of stdout");
  exp->callback([args] { set_exit_code(cmd_export(*args)); });
}

PLUMB_COMMAND(60, setup);

}  // namespace
}  // namespace plumb::cli
