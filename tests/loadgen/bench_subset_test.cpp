// End to end: `plumb bench --request-limit` and `--parts/--part` against the real `plumb serve` that
// plumb starts itself, recorded in a real SQLite ledger (docs/protocol.md "Runs of a subset"). No
// timing assertions: whether a run is VALID depends on the machine, so each run's own verdict is
// read back and only its consistency is checked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/subprocess.h"
#include "ledger/ledger.h"

namespace plumb {
namespace {

struct Out {
  int code = -1;
  std::string out, err;
};

class BenchSubset : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "plumb_bench_subset_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    db_ = dir_ + "/plumb.db";
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  Out bench(std::vector<std::string> args) {
    SpawnOptions o;
    o.argv = {PLUMB_BINARY, "bench"};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.stdout_path = dir_ + "/out";
    o.stderr_path = dir_ + "/err";
    auto p = Subprocess::spawn(o);
    EXPECT_TRUE(p.ok());
    if (!p.ok()) return {};
    ExitInfo e = p->wait();
    Out r{e.exited ? e.exit_code : -1, read_file(o.stdout_path).value(), read_file(o.stderr_path).value()};
    // The launched server's log directory is plumb bench's own: tidy up.
    std::smatch m;
    if (std::regex_search(r.err, m, std::regex("\\(pid [0-9]+, log ([^)]+)\\)")))
      std::filesystem::remove_all(std::filesystem::path(m[1].str()).parent_path());
    return r;
  }
  std::string dir_, db_;
};

// The request hashes of the saved whole set (--save-requests writes the whole set, not the slice).
std::vector<std::string> saved_hashes(const std::string& path) {
  std::vector<std::string> out;
  auto text = read_file(path);
  EXPECT_TRUE(text.ok());
  if (!text.ok()) return out;
  size_t at = 0;
  while (at < text->size()) {
    size_t nl = text->find('\n', at);
    if (nl == std::string::npos) nl = text->size();
    auto line = json::parse(text->substr(at, nl - at));
    if (line.ok()) out.emplace_back(line->as_object().at("hash").as_string());
    at = nl + 1;
  }
  return out;
}

std::vector<std::string> run_hashes(ledger::Ledger& l, int64_t run_id) {
  std::vector<std::string> out;
  auto t = l.dump("requests", run_id);
  EXPECT_TRUE(t.ok());
  if (!t.ok()) return out;
  size_t col = 0;
  for (size_t c = 0; c < t->columns.size(); ++c)
    if (t->columns[c] == "request_hash") col = c;
  for (const auto& row : t->rows) out.push_back(row[col].s);
  return out;
}

TEST_F(BenchSubset, LimitedRunIsRecordedAsLimitedAndNeverAVerdict) {
  std::string j = dir_ + "/r.json", whole = dir_ + "/whole.jsonl";
  Out o = bench({"--scenario", "A", "--size", "small", "--seed", "21", "--request-limit", "4", "--ledger",
                 db_, "--json", j, "--save-requests", whole, "--quiet"});
  ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
  EXPECT_NE(o.err.find("--request-limit: measuring the first 4 of the set's 32 requests"), std::string::npos)
      << o.err;
  EXPECT_NE(o.out.find("(limited to 4 of 32 requests, not a verdict)"), std::string::npos) << o.out;
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const auto& obj = v->as_object();
  EXPECT_FALSE(obj.at("verdict_eligible").as_bool());
  const auto& sub = obj.at("subset").as_object();
  EXPECT_EQ(sub.at("kind").as_string(), "limit");
  EXPECT_EQ(sub.at("requests").as_int64(), 4);
  EXPECT_EQ(sub.at("whole_requests").as_int64(), 32);
  const auto& prof = obj.at("profiles").as_array()[0].as_object();
  EXPECT_EQ(prof.at("counts").at("requests").as_int64(), 4);
  EXPECT_NE(prof.at("request_set_hash").as_string(), sub.at("whole_set_hash").as_string());

  auto l = ledger::Ledger::open(db_);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto runs = (*l)->list_runs();
  ASSERT_TRUE(runs.ok() && runs->size() == 1u);
  const auto& r = (*runs)[0];
  EXPECT_TRUE(r.sealed);
  EXPECT_EQ(r.valid, o.code == 0);
  EXPECT_EQ(r.requests, 4);
  auto u = (*l)->subset_of(r.id);
  ASSERT_TRUE(u.ok() && u->has_value());
  EXPECT_EQ((*u)->kind, "limit");
  EXPECT_EQ((*u)->num_requests, 4);
  EXPECT_EQ((*u)->full_requests, 32);
  EXPECT_EQ((*u)->full_set_hash, sub.at("whole_set_hash").as_string());
  // The slice is the whole set's first four requests, byte for byte.
  auto all = saved_hashes(whole);
  ASSERT_EQ(all.size(), 32u);
  EXPECT_EQ(run_hashes(**l, r.id), std::vector<std::string>(all.begin(), all.begin() + 4));
  auto settings = (*l)->row("runs", r.id);
  ASSERT_TRUE(settings.ok());
  std::string eff;
  for (size_t c = 0; c < settings->columns.size(); ++c)
    if (settings->columns[c] == "effective_settings") eff = settings->rows[0][c].s;
  EXPECT_NE(eff.find("\"request_limit\":4"), std::string::npos) << eff;
}

TEST_F(BenchSubset, PartsCoverTheWholeSetAndTheLedgerListsThem) {
  // The synthetic engine of plumb serve (fixed delays) keeps three launches short.
  const std::string serve = "--engine synthetic --ttft-ms 5 --itl-ms 1";
  std::string whole = dir_ + "/whole.jsonl";
  std::vector<int64_t> ids;
  for (int k = 1; k <= 3; ++k) {
    Out o = bench({"--serve-args", serve, "--scenario", "A", "--size", "small", "--seed", "21", "--parts",
                   "3", "--part", std::to_string(k), "--ledger", db_, "--save-requests", whole, "--quiet"});
    ASSERT_TRUE(o.code == 0 || o.code == 1) << o.err;
    EXPECT_NE(o.out.find("(part " + std::to_string(k) + " of 3"), std::string::npos) << o.out;
    std::string missing = k == 1   ? "missing: 2, 3"
                          : k == 2 ? "missing: 3"
                                   : "missing: none (every part is in)";
    EXPECT_NE(o.err.find(missing), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("recorded the whole run as run 4") != std::string::npos, k == 3) << o.err;
    EXPECT_NE(o.err.find(" as a subset run"), std::string::npos) << o.err;
    ids.push_back(int64_t(k));
  }
  auto l = ledger::Ledger::open(db_);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  // The three parts, in order, are the whole set: 32 requests as 10, 11 and 11.
  auto all = saved_hashes(whole);
  ASSERT_EQ(all.size(), 32u);
  std::vector<std::string> joined;
  std::vector<int64_t> sizes;
  for (int64_t id : ids) {
    auto u = (*l)->subset_of(id);
    ASSERT_TRUE(u.ok() && u->has_value()) << id;
    EXPECT_EQ((*u)->kind, "part");
    EXPECT_EQ((*u)->part, id - 1);
    EXPECT_EQ((*u)->parts, 3);
    EXPECT_EQ((*u)->first_idx, int64_t(joined.size()));
    auto h = run_hashes(**l, id);
    sizes.push_back(int64_t(h.size()));
    joined.insert(joined.end(), h.begin(), h.end());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{10, 11, 11}));
  EXPECT_EQ(joined, all);

  // With the last part in, the whole run was assembled: run 4, a run of the whole set (no subset
  // row), its rows the parts' rows at their places, sealed, valid only if every part was.
  auto runs = (*l)->list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 4u);
  bool parts_valid = true;
  const ledger::RunSummary* whole_run = nullptr;
  for (const auto& r : *runs) {
    if (r.id == 4)
      whole_run = &r;
    else
      parts_valid = parts_valid && r.valid;
  }
  ASSERT_NE(whole_run, nullptr);
  EXPECT_TRUE(whole_run->sealed);
  EXPECT_EQ(whole_run->requests, 32);
  EXPECT_EQ(whole_run->valid, parts_valid);
  auto u = (*l)->subset_of(4);
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->has_value());
  EXPECT_EQ(run_hashes(**l, 4), all);
  auto row = (*l)->row("runs", 4);
  ASSERT_TRUE(row.ok());
  std::string eff;
  int64_t set_id = 0;
  for (size_t c = 0; c < row->columns.size(); ++c) {
    if (row->columns[c] == "effective_settings") eff = row->rows[0][c].s;
    if (row->columns[c] == "request_set_id") set_id = row->rows[0][c].i;
  }
  EXPECT_NE(eff.find("\"assembled_from_parts\":[1,2,3]"), std::string::npos) << eff;
  auto set = (*l)->row("request_sets", set_id);
  ASSERT_TRUE(set.ok());
  auto part1 = (*l)->subset_of(1);
  ASSERT_TRUE(part1.ok() && part1->has_value());
  for (size_t c = 0; c < set->columns.size(); ++c) {
    if (set->columns[c] == "set_hash") {
      EXPECT_EQ(set->rows[0][c].s, (*part1)->full_set_hash);
    }
    if (set->columns[c] == "num_requests") {
      EXPECT_EQ(set->rows[0][c].i, 32);
    }
  }
  auto rep = (*l)->verify();
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());
}

// A strawman that cannot honour the output length: plumb serve --debug-eos-after 0.4 ends every
// request after 40% of max_tokens, as a server that ignores ignore_eos ends at its EOS. The run is
// INVALID (never a verdict), but when the short outputs are all it broke it is scored per token:
// TTFT, TPOT and ITL shown as valid, throughput and objective flagged as not comparable.
TEST_F(BenchSubset, ServerThatEndsEarlyIsScoredPerTokenOnly) {
  std::string j = dir_ + "/r.json", html = dir_ + "/r.html";
  Out o = bench({"--serve-args", "--debug-eos-after 0.4", "--scenario", "A", "--size", "small", "--seed",
                 "21", "--request-limit", "4", "--json", j, "--html", html, "--quiet"});
  EXPECT_EQ(o.code, 1) << o.err;  // INVALID: never a verdict
  auto v = json::parse_file(j);
  ASSERT_TRUE(v.ok()) << v.status().to_string() << o.err;
  const auto& obj = v->as_object();
  EXPECT_FALSE(obj.at("valid").as_bool());
  EXPECT_FALSE(obj.at("verdict_eligible").as_bool());
  const auto& prof = obj.at("profiles").as_array()[0].as_object();
  // The output fraction is at most the debug flag's, ceil(0.4 * max_tokens) / max_tokens with
  // max_tokens 51..64: with ignore_eos off, the model may also reach its EOS sooner.
  double frac = prof.at("tokens").at("min_output_fraction").as_double();
  EXPECT_GT(frac, 0.0);
  EXPECT_LT(frac, 0.42);
  // The scoring follows from the constraints: per token only when the short outputs are all that
  // failed (on a loaded machine the send lag may fail too: then none).
  bool only_outputs = true;
  for (const auto& c : prof.at("validity").at("constraints").as_array())
    if (c.at("verdict").as_string() == "fail" && c.at("name").as_string() != "min_output_fraction")
      only_outputs = false;
  EXPECT_EQ(obj.at("scoring").as_string(), only_outputs ? "per_token_only" : "none") << o.out;
  EXPECT_EQ(prof.at("scoring").as_string(), obj.at("scoring").as_string());
  if (only_outputs) {
    EXPECT_NE(o.out.find("TTFT, TPOT and ITL valid; E2E, throughput and objective not comparable"),
              std::string::npos)
        << o.out;
    auto page = read_file(html);
    ASSERT_TRUE(page.ok());
    EXPECT_NE(page->find("throughput and objective not comparable"), std::string::npos);
  }
  // Against the same server without the flag, nothing is cut short.
  Out honest = bench(
      {"--scenario", "A", "--size", "small", "--seed", "21", "--request-limit", "4", "--json", j, "--quiet"});
  ASSERT_TRUE(honest.code == 0 || honest.code == 1) << honest.err;
  auto h = json::parse_file(j);
  ASSERT_TRUE(h.ok());
  EXPECT_GE(h->as_object().at("profiles").as_array()[0].at("tokens").at("min_output_fraction").as_double(),
            0.98);
}

TEST_F(BenchSubset, BadSubsetFlagsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--parts", "3"}, "--parts N and --part K go together"},
      {{"--parts", "3", "--part", "4"}, "give --parts >= 2 and --part from 1 to --parts"},
      {{"--parts", "1", "--part", "1"}, "give --parts >= 2"},
      {{"--parts", "2", "--part", "1", "--request-limit", "3"}, "exclude each other"},
      {{"--request-limit", "32"}, "is not smaller than the request set (32 requests)"},
      {{"--parts", "40", "--part", "1"}, "give 2 to 32"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"--target", "null", "--scenario", "A", "--size", "small", "--quiet"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Out o = bench(args);
    EXPECT_EQ(o.code, 2) << c.says << ": " << o.err;
    EXPECT_NE(o.err.find(c.says), std::string::npos) << o.err;
  }
}

}  // namespace
}  // namespace plumb
