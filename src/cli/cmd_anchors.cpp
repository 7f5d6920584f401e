// `plumb anchors`: the shipped table of externally published figures (data/anchors/anchors.json)
// and this machine's measured ceilings from the ledger (docs/protocol.md §8).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/json.h"
#include "core/shipped.h"
#include "ledger/ledger.h"
#include "protocol/provenance.h"

namespace plumb::cli {
namespace {

struct AnchorsArgs {
  std::string file;
  std::string ledger_path = ledger::kDefaultPath;
  bool as_json = false;
};

std::string str(const json::object& o, const char* k) { return json::string_at(o, k).value_or(""); }

int run_anchors(const AnchorsArgs& a) {
  std::string path = a.file;
  if (path.empty()) {
    // The shipped table (core/shipped.h's search).
    auto shipped = find_shipped_file(Shipped::kData, "anchors/anchors.json");
    if (!shipped.ok()) {
      std::cerr << "plumb anchors: " << shipped.status().message() << "; or pass --file\n";
      return kExitError;
    }
    path = *shipped;
  }
  auto doc = json::parse_file(path);
  if (!doc.ok() || !doc->is_object() || !doc->as_object().contains("anchors") ||
      !doc->as_object().at("anchors").is_array()) {
    std::cerr << "plumb anchors: "
              << (doc.ok() ? "'" + path + "' has no anchors array" : doc.status().to_string()) << "\n";
    return kExitError;
  }
  const json::array& rows = doc->as_object().at("anchors").as_array();

  // This machine's ceilings, if `plumb machine` stored them; the ledger is only read.
  json::array ceilings;
  auto m = protocol::capture_machine();
  struct stat st {};
  if (m.ok() && (ledger::is_postgres_url(a.ledger_path) || ::stat(a.ledger_path.c_str(), &st) == 0)) {
    auto l = ledger::Ledger::open(a.ledger_path);
    if (l.ok()) {
      auto id = (*l)->find_machine(m->hash());
      if (id.ok() && id->has_value()) {
        auto cs = (*l)->ceilings_for(**id);
        if (cs.ok())
          for (const auto& c : *cs)
            ceilings.push_back(json::object{
                {"name", c.name}, {"value", c.value}, {"unit", c.unit}, {"measured_at", c.measured_at}});
      }
    }
  }

  if (a.as_json) {
    json::object out{
        {"schema_version", 1}, {"file", path}, {"anchors", rows}, {"machine_ceilings", ceilings}};
    std::printf("%s\n", json::dump_pretty(out).c_str());
    return kExitOk;
  }
  std::printf("published anchors (%s)\n", path.c_str());
  for (const auto& v : rows) {
    if (!v.is_object()) continue;
    const json::object& o = v.as_object();
    double value = json::number_at(o, "value").value_or(0.0);
    std::printf("- %s | %s | %s | %s\n    %s = %g %s  [%s]\n    source: %s\n", str(o, "engine").c_str(),
                str(o, "model").c_str(), str(o, "hardware").c_str(), str(o, "scenario").c_str(),
                str(o, "metric").c_str(), value, str(o, "unit").c_str(), str(o, "status").c_str(),
                str(o, "source").c_str());
  }
  std::printf("\nthis machine's ceilings");
  if (ceilings.empty()) {
    std::printf(": not measured yet (run `plumb machine --ledger %s`)\n",
                ledger::redact_url(a.ledger_path).c_str());
  } else {
    std::printf(" (%s)\n", ledger::redact_url(a.ledger_path).c_str());
    for (const auto& c : ceilings) {
      const json::object& o = c.as_object();
      std::printf("  %-18s %10.2f %s  (measured %s)\n", str(o, "name").c_str(), o.at("value").as_double(),
                  str(o, "unit").c_str(), str(o, "measured_at").c_str());
    }
  }
  return kExitOk;
}

void setup(CLI::App& root) {
  auto a = std::make_shared<AnchorsArgs>();
  auto* cmd =
      root.add_subcommand("anchors", "Published external figures, and this machine's measured ceilings");
  cmd->add_option("--file", a->file, "anchors table (default: the shipped data/anchors/anchors.json)");
  cmd->add_option("--ledger", a->ledger_path, "ledger to read this machine's ceilings from")
      ->capture_default_str();
  cmd->add_flag("--json", a->as_json, "print JSON");
  cmd->callback([a] { set_exit_code(run_anchors(*a)); });
}

PLUMB_COMMAND(75, setup);

}  // namespace
}  // namespace plumb::cli
