// The job journal (journal.h): append, replay, and the checks a restarted controller makes.
#include "executor/journal.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/file.h"

namespace plumb::executor {

Status journal_append(const std::string& path, json::object event) {
  event["at"] = utc_timestamp_now();
  std::ofstream f(path, std::ios::app);
  f << json::dump(event) << "\n";
  f.flush();
  if (!f) return io_error("cannot append to the job journal " + path);
  return Status::Ok();
}

std::vector<json::object> journal_read(const std::string& path) {
  std::vector<json::object> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    auto o = json::parse_object(line);
    if (o.ok()) out.push_back(std::move(*o));
  }
  return out;
}

std::vector<JournaledJob> journal_jobs(const std::vector<json::object>& events) {
  std::vector<JournaledJob> jobs;
  std::map<std::string, size_t> at;
  for (const auto& e : events) {
    std::string key = json::string_at(e, "key").value_or("");
    if (json::string_at(e, "event").value_or("") == "submitted") {
      at[key] = jobs.size();
      jobs.push_back(JournaledJob{key, json::string_at(e, "job_id").value_or(""), e, e});
    } else if (auto it = at.find(key); it != at.end()) {
      jobs[it->second].last = e;
    }
  }
  return jobs;
}

Status check_journal_identity(const std::string& path, const std::vector<json::object>& events,
                              const json::object& identity, const std::string& remedy) {
  for (const auto& e : events) {
    const std::string event = json::string_at(e, "event").value_or("");
    if (event != "submitted" && event != "submitting") continue;
    const auto* id = e.if_contains("identity");
    std::string key = json::string_at(e, "key").value_or("?");
    if (!id || !id->is_object())
      return invalid_argument("the job journal " + path + " names job " + key +
                              " without the arguments it was submitted for (written by an older plumb); " +
                              remedy);
    for (const auto& [field, want] : identity) {
      const auto* got = id->as_object().if_contains(field);
      if (got && *got == want) continue;
      return invalid_argument("the job journal " + path + " was written for another run: job " + key +
                              " has " + std::string(field) + " " + (got ? json::dump(*got) : "(none)") +
                              ", this run " + json::dump(want) + "; " + remedy);
    }
  }
  return Status::Ok();
}

namespace {

// n of "<prefix><n>[-<more>][.out|.sbatch]"; -1 when the name is not one. "-<more>" (no dot) is
// what follows the number in tune's keys (s1-j<n>-a<attempt>).
int attempt_of(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t end = prefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == prefix.size() || end - prefix.size() > 6) return -1;
  std::string rest = name.substr(end);
  if (!rest.empty() && rest[0] == '-') {
    size_t dot = rest.find('.');
    rest = dot == std::string::npos ? "" : rest.substr(dot);
  }
  if (!rest.empty() && rest != ".out" && rest != ".sbatch") return -1;
  return std::stoi(name.substr(prefix.size(), end - prefix.size()));
}

}  // namespace

int next_attempt(const std::vector<json::object>& events, const std::string& dir, const std::string& prefix) {
  int last = -1;
  for (const auto& e : events)
    last = std::max(last, attempt_of(json::string_at(e, "key").value_or(""), prefix));
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = f.path().filename().string();
    if (name.size() > 4 && (name.ends_with(".out") || name.ends_with(".sbatch")))
      last = std::max(last, attempt_of(name, prefix));
  }
  return last + 1;
}

}  // namespace plumb::executor
