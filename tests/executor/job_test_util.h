// For tests that run plumb commands as jobs (--executor local|slurm) and read their job journals:
// a fresh scratch directory per test, the test run's Slurm cluster, a journal's events, and the
// Slurm jobs a test leaves behind cancelled. Header-only; test code only.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/subprocess.h"

namespace plumb::testing {

// Why a cluster test skips when scripts/test.sh did not start a cluster.
inline constexpr const char* kNoSlurmCluster =
    "PLUMB_TEST_SLURM is not set, so there is no Slurm cluster to submit to "
    "(scripts/test.sh starts a throwaway one with scripts/slurm_test_cluster.sh and sets it)";

// The slurm.conf of the test run's cluster (PLUMB_TEST_SLURM), "" when there is none.
inline std::string test_slurm_conf() {
  const char* conf = std::getenv("PLUMB_TEST_SLURM");
  return conf ? std::string(conf) : std::string();
}

// TempDir()/<prefix>_<pid>_<test name>, emptied and created.
inline std::string fresh_test_dir(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::string dir =
      (fs::path(::testing::TempDir()) / (prefix + "_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
          .lexically_normal()
          .string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A job journal's lines (one JSON object each) whose "event" is `event`; every line for "".
inline std::vector<json::object> journal_events(const std::string& path, const std::string& event = "") {
  std::vector<json::object> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    auto o = json::parse_object(line);
    if (o.ok() && (event.empty() || json::string_at(*o, "event").value_or("") == event)) out.push_back(*o);
  }
  return out;
}

// The job ids of the journal's "submitted" events, in order.
inline std::vector<std::string> submitted_job_ids(const std::string& journal) {
  std::vector<std::string> ids;
  for (const auto& o : journal_events(journal, "submitted"))
    ids.push_back(json::string_at(o, "job_id").value_or(""));
  return ids;
}

// scancel every job the journal says was submitted (a test's leftovers; finished ones are no error).
inline void cancel_submitted(const std::string& slurm_conf, const std::string& journal) {
  if (slurm_conf.empty()) return;
  for (const auto& id : submitted_job_ids(journal))
    run_capture({"env", "SLURM_CONF=" + slurm_conf, "scancel", id});
}

}  // namespace plumb::testing
