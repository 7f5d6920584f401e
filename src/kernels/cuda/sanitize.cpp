#include "kernels/cuda/sanitize.h"

#include <cstdlib>
#include <regex>

#include "core/subprocess.h"

namespace plumb::kernels::cuda {
namespace {

const std::vector<std::string> kTools = {"memcheck", "racecheck", "initcheck", "synccheck"};

// The report lines compute-sanitizer prefixes, without the prefix; continuation lines (indented
// after the prefix) are skipped.
std::vector<std::string> report_lines(std::string_view log) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < log.size()) {
    size_t end = log.find('\n', at);
    if (end == std::string_view::npos) end = log.size();
    std::string_view line = log.substr(at, end - at);
    at = end + 1;
    constexpr std::string_view kPrefix = "========= ";
    if (!line.starts_with(kPrefix)) continue;
    line.remove_prefix(kPrefix.size());
    if (line.empty() || line.front() == ' ') continue;
    out.emplace_back(line);
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> parse_sanitizers(std::string_view list) {
  std::vector<std::string> out;
  if (list == "none") return out;
  size_t at = 0;
  while (at <= list.size()) {
    size_t comma = list.find(',', at);
    if (comma == std::string_view::npos) comma = list.size();
    const std::string tool(list.substr(at, comma - at));
    bool known = false;
    for (const auto& t : kTools) known = known || t == tool;
    if (!known) {
      return invalid_argument("--sanitizers: '" + tool +
                              "' is not a compute-sanitizer tool plumb runs: give none, or a comma-separated "
                              "list of memcheck, racecheck, initcheck, synccheck");
    }
    out.push_back(tool);
    at = comma + 1;
  }
  return out;
}

Result<std::string> find_compute_sanitizer() {
  if (const char* env = std::getenv("PLUMB_COMPUTE_SANITIZER"); env != nullptr && *env != '\0') {
    std::string p = find_executable(env);
    if (!p.empty()) return p;
    return not_found(std::string("PLUMB_COMPUTE_SANITIZER=") + env + " is not an executable");
  }
  if (std::string p = find_executable("compute-sanitizer"); !p.empty()) return p;
  if (std::string p = find_executable("/usr/local/cuda/bin/compute-sanitizer"); !p.empty()) return p;
  return not_found(
      "compute-sanitizer was not found (looked at $PLUMB_COMPUTE_SANITIZER, PATH and "
      "/usr/local/cuda/bin): install the CUDA toolkit's compute-sanitizer, or screen without it "
      "with --sanitizers none (the record then says no sanitizer ran)");
}

SanitizerReport parse_sanitizer_log(std::string_view tool, std::string_view log) {
  SanitizerReport r;
  r.tool = std::string(tool);
  static const std::regex kError(R"(ERROR SUMMARY: (\d+) errors?)");
  static const std::regex kRace(
      R"(RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\))");
  for (const std::string& line : report_lines(log)) {
    std::smatch m;
    if (std::regex_search(line, m, kRace)) {
      r.completed = true;
      r.errors = std::stoll(m[1]);
      r.warnings = std::stoll(m[2]);
    } else if (std::regex_search(line, m, kError)) {
      r.completed = true;
      if (tool != "racecheck") r.errors = std::stoll(m[1]);  // racecheck's own summary counts its hazards
    } else if (r.first.empty() && (line.starts_with("Error") || line.starts_with("Invalid") ||
                                   line.starts_with("Uninitialized") || line.starts_with("Barrier"))) {
      r.first = line;
    }
  }
  if (!r.completed && r.first.empty())
    r.first = "no summary line: the run under " + r.tool + " did not finish";
  return r;
}

json::object to_json(const SanitizerReport& r) {
  return {{"tool", r.tool},
          {"completed", r.completed},
          {"errors", r.errors},
          {"warnings", r.warnings},
          {"first", r.first}};
}

SanitizerReport sanitizer_report_from_json(const json::object& o) {
  SanitizerReport r;
  r.tool = json::string_at(o, "tool").value_or("");
  if (auto* c = o.if_contains("completed"); c && c->is_bool()) r.completed = c->as_bool();
  r.errors = int64_t(json::number_at(o, "errors").value_or(0));
  r.warnings = int64_t(json::number_at(o, "warnings").value_or(0));
  r.first = json::string_at(o, "first").value_or("");
  return r;
}

}  // namespace plumb::kernels::cuda
