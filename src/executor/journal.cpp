// The job journal (journal.h): append, replay, and the checks a restarted controller makes.
#include "executor/journal.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
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

std::string unique_scheduler_name(const std::string& key) {
  std::random_device rd;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", unsigned(rd()));
  return key + "-" + hex;
}

Result<std::string> submit_journaled(Executor& e, const std::string& journal, JobSpec& spec,
                                     json::object intent) {
  spec.scheduler_name = unique_scheduler_name(spec.name);
  intent["event"] = "submitting";
  intent["key"] = spec.name;
  intent["job_name"] = spec.scheduler_name;
  intent["executor"] = e.kind();
  PLUMB_RETURN_IF_ERROR(journal_append(journal, std::move(intent)));
  auto id = e.submit(spec);
  if (!id.ok()) {
    // Closed now, so a restart does not look for a job the executor said it did not take.
    (void)journal_append(journal, {{"event", "not_submitted"},
                                   {"key", spec.name},
                                   {"job_name", spec.scheduler_name},
                                   {"detail", id.status().to_string()}});
    return id.status();
  }
  if (const char* die = std::getenv(kTestDieAfterSubmit); die && std::string(die) == "1") {
    std::fprintf(stderr,
                 "PLUMB_TEST_DIE_AFTER_SUBMIT: exiting after submitting job %s, before journaling it\n",
                 id->c_str());
    std::fflush(nullptr);
    ::_exit(kDieAfterSubmitExit);
  }
  return id;
}

std::vector<json::object> unconfirmed_submissions(const std::vector<json::object>& events) {
  std::vector<json::object> out;
  for (size_t i = 0; i < events.size(); ++i) {
    if (json::string_at(events[i], "event").value_or("") != "submitting") continue;
    const std::string key = json::string_at(events[i], "key").value_or("");
    bool closed = false;
    for (size_t k = i + 1; k < events.size() && !closed; ++k) {
      const std::string ev = json::string_at(events[k], "event").value_or("");
      closed = (ev == "submitted" || ev == "not_submitted") &&
               json::string_at(events[k], "key").value_or("") == key;
    }
    if (!closed) out.push_back(events[i]);
  }
  return out;
}

Result<std::optional<std::string>> resolve_submission(Executor& e, const std::string& journal,
                                                      const json::object& submitting) {
  const std::string key = json::string_at(submitting, "key").value_or("");
  const std::string name = json::string_at(submitting, "job_name").value_or("");
  std::optional<std::string> id;
  if (!name.empty()) {
    PLUMB_ASSIGN_OR_RETURN(id, e.find_by_name(name));
  }
  if (!id)
    PLUMB_RETURN_IF_ERROR(
        journal_append(journal, {{"event", "not_submitted"}, {"key", key}, {"job_name", name}}));
  return id;
}

}  // namespace plumb::executor
