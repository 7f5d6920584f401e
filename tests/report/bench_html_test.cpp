// `plumb bench --html`: the real binary writes the report of a run against the in-process null
// target, and headless Chromium renders it. Checks: the page parses and renders with no error and
// no blocked or attempted fetch, the report's figures are present in the rendered DOM
// (latency CDFs, TTFT/TPOT per request over time, throughput over time, per-request timeline), and
// the validity table is there. Skips with a message when Chromium is not installed
// (scripts/setup.sh installs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/subprocess.h"

namespace plumb {
namespace {

namespace fs = std::filesystem;

std::string find_chromium() {
  if (const char* e = std::getenv("PLUMB_CHROMIUM"); e && *e) return e;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    size_t start = 0;
    while (start <= p.size()) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      fs::path cand = fs::path(p.substr(start, end - start)) / name;
      if (::access(cand.c_str(), X_OK) == 0) return cand.string();
      start = end + 1;
    }
  }
  return "";
}

struct Out {
  int code = -1;
  std::string out, err;
};

Out run(const std::vector<std::string>& argv, const std::string& base) {
  SpawnOptions o;
  o.argv = argv;
  o.stdout_path = base + ".out";
  o.stderr_path = base + ".err";
  auto p = Subprocess::spawn(o);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return {};
  ExitInfo e = p->wait();
  auto out = read_file(o.stdout_path);
  auto err = read_file(o.stderr_path);
  return {e.exited ? e.exit_code : -1, out.ok() ? *out : "", err.ok() ? *err : ""};
}

int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

class BenchHtml : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("plumb_bench_html_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(BenchHtml, ReportRendersInHeadlessChromiumWithEveryFigure) {
  std::string html = (dir_ / "report.html").string();
  Out b = run(
      {PLUMB_BINARY, "bench", "--target", "null", "--input-len", "16", "--output-len", "12", "--num-prompts",
       "40", "--arrival", "poisson", "--request-rate", "400", "--seed", "5", "--html", html, "--quiet"},
      (dir_ / "bench").string());
  ASSERT_TRUE(b.code == 0 || b.code == 1) << b.err;
  auto text = read_file(html);
  ASSERT_TRUE(text.ok()) << text.status().to_string();

  // The file itself: self-contained, no script.
  EXPECT_EQ(text->find("<script"), std::string::npos);
  EXPECT_NE(text->find("default-src 'none'"), std::string::npos);
  EXPECT_NE(text->find("Validity (docs/protocol.md §3)"), std::string::npos);
  EXPECT_NE(text->find("<td>error_rate</td>"), std::string::npos);

  std::string chromium = find_chromium();
  if (chromium.empty())
    GTEST_SKIP() << "Chromium is not installed (no chromium, chromium-browser or google-chrome on PATH, "
                    "PLUMB_CHROMIUM unset): install it with scripts/setup.sh to render the report";

  // Render with no network at all: any attempted fetch would fail and be logged.
  std::vector<std::string> common = {chromium,
                                     "--headless",
                                     "--no-sandbox",
                                     "--disable-gpu",
                                     "--no-first-run",
                                     "--user-data-dir=" + (dir_ / "profile").string(),
                                     "--host-resolver-rules=MAP * ~NOTFOUND",
                                     "--enable-logging=stderr",
                                     "--v=0"};
  std::vector<std::string> dump = common;
  dump.push_back("--dump-dom");
  dump.push_back("file://" + html);
  Out d = run(dump, (dir_ / "chromium-dom").string());
  ASSERT_EQ(d.code, 0) << d.err;
  const std::string& dom = d.out;
  ASSERT_NE(dom.find("<h1>plumb bench: custom workload</h1>"), std::string::npos) << dom.substr(0, 2000);
  // A rendered page: no CSP violation, no failed load, no console error.
  EXPECT_EQ(d.err.find("Refused to"), std::string::npos) << d.err;
  EXPECT_EQ(d.err.find("net::ERR_"), std::string::npos) << d.err;
  EXPECT_EQ(d.err.find("CONSOLE"), std::string::npos) << d.err;

  // The report's figures, each drawn (an <svg>, not a no-data note) with points.
  struct Fig {
    std::string kind, title;
  } figs[] = {{"cdf", "TTFT distribution (CDF)"},
              {"cdf", "TPOT distribution (CDF)"},
              {"cdf", "Inter-chunk gaps (ITL) distribution (CDF)"},
              {"cdf", "E2E latency distribution (CDF)"},
              {"histogram", "TTFT histogram"},
              {"scatter", "TTFT of each request over the run"},
              {"scatter", "TPOT of each request over the run"},
              {"line", "Completed requests per second over time"},
              {"line", "Output tokens per second over time (completed requests)"},
              {"timeline", "Per-request timeline"}};
  for (const auto& f : figs) {
    std::regex re("<figure class=\"chart\" id=\"fig-\\d+\" data-kind=\"" + f.kind +
                  "\" data-points=\"([1-9]\\d*)\">\\s*<figcaption>" +
                  std::regex_replace(f.title, std::regex(R"([()])"), R"(\$&)") + "</figcaption>\\s*<svg");
    EXPECT_TRUE(std::regex_search(dom, re)) << f.kind << ": " << f.title;
  }
  EXPECT_EQ(count(dom, "<figure"), count(dom, "<svg"));
  EXPECT_EQ(dom.find("class=\"nodata\""), std::string::npos);
  // 40 requests: 40 TTFT points and 40 timeline spans.
  EXPECT_NE(dom.find("data-kind=\"timeline\" data-points=\"40\""), std::string::npos);
  EXPECT_NE(dom.find("data-kind=\"scatter\" data-points=\"40\""), std::string::npos);

  // And it paints: a screenshot is written.
  std::string png = (dir_ / "report.png").string();
  std::vector<std::string> shot = common;
  shot.push_back("--screenshot=" + png);
  shot.push_back("--window-size=1000,3000");
  shot.push_back("file://" + html);
  Out s = run(shot, (dir_ / "chromium-shot").string());
  ASSERT_EQ(s.code, 0) << s.err;
  ASSERT_TRUE(fs::exists(png)) << s.err;
  EXPECT_GT(fs::file_size(png), 10'000u);
}

}  // namespace
}  // namespace plumb
