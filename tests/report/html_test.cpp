// report/: escaping, number formatting, non-finite values, empty series, determinism, and the
// page's offline guarantees (no script, no external reference).
#include "report/html.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <regex>

#include "core/file.h"

namespace plumb::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + needle.size())) ++n;
  return n;
}

TEST(Escape, EveryMarkupCharacter) {
  EXPECT_EQ(escape_html("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(escape_html(""), "");
  EXPECT_EQ(escape_html("plain ünïcode"), "plain ünïcode");
}

TEST(FormatNumber, FiniteAndNot) {
  EXPECT_EQ(format_number(1.23456), "1.235");
  EXPECT_EQ(format_number(1234567.0), "1.235e+06");
  EXPECT_EQ(format_number(0.1 + 0.2), "0.3");
  EXPECT_EQ(format_number(-0.0), "0");
  EXPECT_EQ(format_number(kNaN), "n/a");
  EXPECT_EQ(format_number(kInf), "n/a");
  EXPECT_EQ(format_number(-kInf), "n/a");
  EXPECT_EQ(format_number(2.5, 6), "2.5");
}

TEST(Page, UserStringsAreEscapedEverywhere) {
  const std::string evil = "<script>alert('x')</script>&";
  Page p(evil);
  p.provenance({{evil, evil}});
  p.heading(evil);
  p.paragraph(evil);
  p.note(evil);
  p.table({.caption = evil, .header = {evil}, .rows = {{Cell(evil), Cell::fail(evil)}}});
  p.line_chart({.title = evil,
                .x = {evil},
                .y = {evil},
                .series = {{.name = evil, .x = {1, 2}, .y = {3, 4}}},
                .markers = true,
                .note = evil});
  p.scatter_chart({.title = evil, .x = {evil}, .y = {evil}, .series = {{.name = evil, .x = {1}, .y = {2}}}});
  p.distribution_chart({.kind = DistributionChart::Kind::kHistogram,
                        .title = evil,
                        .x = {evil},
                        .distributions = {{evil, {1, 2, 3}}}});
  p.distribution_chart({.title = evil, .x = {evil}, .distributions = {{evil, {1, 2, 3}}}});
  p.bar_chart({.title = evil, .y = {evil}, .bars = {{.label = evil, .value = 2, .lo = 1, .hi = 3}}});
  std::string h = p.html();
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("alert('x')"), std::string::npos);
  EXPECT_GT(count(h, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;"), 20);
}

TEST(Page, IsSelfContained) {
  Page p("t");
  p.line_chart({.title = "c", .series = {{.name = "s", .x = {0, 1, 2}, .y = {1, 4, 9}}}});
  std::string h = p.html();
  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(h.find("Content-Security-Policy"), std::string::npos);
  EXPECT_NE(h.find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  EXPECT_EQ(h.find("src=\"http"), std::string::npos);
  EXPECT_EQ(h.find("url("), std::string::npos);
  // The only http URL allowed is the SVG namespace identifier (not fetched).
  std::regex url("https?://[^\"]+");
  for (auto it = std::sregex_iterator(h.begin(), h.end(), url); it != std::sregex_iterator(); ++it)
    EXPECT_EQ(it->str(), "http://www.w3.org/2000/svg");
}

TEST(Charts, NonFinitePointsAreDroppedAndCounted) {
  Page p("t");
  p.line_chart({.title = "c", .series = {{.name = "s", .x = {0, 1, 2, 3}, .y = {1, kNaN, kInf, 9}}}});
  std::string h = p.html();
  EXPECT_NE(h.find("data-points=\"2\""), std::string::npos);
  EXPECT_NE(h.find("2 non-finite values were left out."), std::string::npos);
  size_t a = h.find("<svg"), b = h.find("</svg>");
  ASSERT_NE(a, std::string::npos);
  std::string svg = h.substr(a, b - a);
  EXPECT_FALSE(std::regex_search(svg, std::regex("[^a-z](nan|inf)[^a-z]", std::regex::icase))) << svg;
}

TEST(Charts, EmptyOrAllNonFiniteGivesNoDataNote) {
  LineChart empty{.title = "empty", .series = {{.name = "s"}}};
  std::string r = render(empty);
  EXPECT_EQ(r.find("<svg"), std::string::npos);
  EXPECT_NE(r.find("class=\"nodata\""), std::string::npos);

  DistributionChart nan_only{.title = "d", .distributions = {{"x", {kNaN, kNaN}}}};
  r = render(nan_only);
  EXPECT_EQ(r.find("<svg"), std::string::npos);
  EXPECT_NE(r.find("2 values were not finite"), std::string::npos);

  EXPECT_EQ(render(BarChart{.title = "b"}).find("<svg"), std::string::npos);
  EXPECT_EQ(render(ScatterChart{.title = "s"}).find("<svg"), std::string::npos);
  EXPECT_EQ(render(BarChart{.bars = {{.label = "x", .value = kNaN}}}).find("<svg"), std::string::npos);

  Page p("t");
  p.line_chart(empty);
  EXPECT_NE(p.html().find("data-kind=\"line\" data-points=\"0\""), std::string::npos);
}

TEST(Charts, SinglePointAndConstantDataStillDraw) {
  std::string r = render(LineChart{.series = {{.x = {5}, .y = {5}}}});
  EXPECT_NE(r.find("<svg"), std::string::npos);
  EXPECT_NE(r.find("<circle"), std::string::npos);  // one point: a dot, not a polyline
  EXPECT_EQ(r.find("nan"), std::string::npos);
  r = render(
      DistributionChart{.kind = DistributionChart::Kind::kHistogram, .distributions = {{"c", {3, 3, 3}}}});
  EXPECT_EQ(count(r, "<rect x="), 2);  // the frame and one bar holding all three
  EXPECT_NE(r.find(": 3</title>"), std::string::npos);
}

TEST(Charts, MismatchedSeriesLengthsUseTheShorter) {
  std::string r = render(ScatterChart{.series = {{.x = {1, 2, 3}, .y = {1, 2}}}});
  EXPECT_EQ(count(r, "<circle"), 2);
}

TEST(Charts, HistogramCountsEveryValue) {
  std::vector<double> v;
  for (int i = 0; i < 100; ++i) v.push_back(i);
  std::string r = render(
      DistributionChart{.kind = DistributionChart::Kind::kHistogram, .distributions = {{"", v}}, .bins = 10});
  std::regex tip(R"(\): (\d+)</title>)");
  int total = 0, bars = 0;
  for (auto it = std::sregex_iterator(r.begin(), r.end(), tip); it != std::sregex_iterator(); ++it) {
    total += std::stoi((*it)[1]);
    ++bars;
  }
  EXPECT_EQ(total, 100);
  EXPECT_EQ(bars, 10);
}

TEST(Charts, CdfEndsAtOne) {
  std::string r = render(DistributionChart{.x = {.label = "ms"}, .distributions = {{"a", {1, 2, 2, 4}}}});
  // y=1 is the top of the plot area (kTop = 14): the last vertex of the step curve.
  std::regex last(R"(,14\.0"><title>a: 4 values, median 2</title>)");
  EXPECT_TRUE(std::regex_search(r, last)) << r;
}

TEST(Charts, ScatterHighlightAndFront) {
  std::string r = render(ScatterChart{
      .series = {{.name = "trials", .x = {1, 2, 3}, .y = {3, 1, 2}, .highlight = {true, false, true}}},
      .connect_highlighted = true});
  EXPECT_EQ(count(r, "stroke=\"#000\""), 2);
  EXPECT_EQ(count(r, "stroke-dasharray=\"4 3\""), 1);
}

TEST(Charts, BarsWithErrorBarsAndReference) {
  std::string r = render(BarChart{.y = {.label = "speedup"},
                                  .bars = {{.label = "A", .value = 1.5, .lo = 1.2, .hi = 1.8},
                                           {.label = "B", .value = 0.9},
                                           {.label = "C", .value = kNaN}},
                                  .reference = 1.0});
  EXPECT_NE(r.find("<title>A: 1.5 [1.2, 1.8]</title>"), std::string::npos);
  EXPECT_NE(r.find("<title>B: 0.9</title>"), std::string::npos);
  EXPECT_EQ(r.find(">C<"), std::string::npos);
  EXPECT_NE(r.find("1 non-finite value was left out."), std::string::npos);
  EXPECT_NE(r.find("<title>reference 1</title>"), std::string::npos);
}

TEST(Page, TablePadsShortRowsAndNotesEmptyTables) {
  Page p("t");
  p.table({.header = {"a", "b", "c"}, .rows = {{"1"}}});
  p.table({.header = {"a"}, .empty_note = "nothing ran"});
  std::string h = p.html();
  EXPECT_NE(h.find("<tr><td>1</td><td></td><td></td></tr>"), std::string::npos);
  EXPECT_NE(h.find("nothing ran"), std::string::npos);
}

TEST(Page, DeterministicAndWritten) {
  auto build = [] {
    Page p("same");
    p.provenance({{"k", "v"}});
    p.line_chart(
        {.title = "c", .series = {{.name = "s", .x = {0, 0.5, 1}, .y = {0.1, 0.2, 0.3}}}, .step = true});
    p.distribution_chart({.distributions = {{"a", {0.3, 0.1, 0.2}}}});
    return p.html();
  };
  EXPECT_EQ(build(), build());
  auto dir = std::filesystem::temp_directory_path() / ("plumb_report_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Page p("w");
  ASSERT_TRUE(p.write((dir / "r.html").string()).ok());
  auto back = read_file((dir / "r.html").string());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, p.html());
  Status bad = p.write((dir / "missing" / "r.html").string());
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("r.html"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::report

namespace plumb::report {
namespace {

TEST(Charts, TimelineDrawsSpansMarksAndFailures) {
  TimelineChart t{.title = "requests",
                  .x = {.label = "s"},
                  .spans = {{.label = "r0", .start = 0, .mark = 0.5, .end = 2},
                            {.label = "r1", .start = 1, .end = 1.5, .style = Cell::Style::kFail},
                            {.label = "r2", .start = kNaN, .end = 3}}};
  std::string r = render(t);
  EXPECT_NE(r.find("<title>r0: 0 to 2, mark 0.5</title>"), std::string::npos);
  EXPECT_NE(r.find("stroke=\"#c62828\""), std::string::npos);
  EXPECT_EQ(r.find("r2"), std::string::npos);
  EXPECT_NE(r.find("1 non-finite value was left out."), std::string::npos);
  EXPECT_EQ(render(TimelineChart{}).find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace plumb::report

namespace plumb::report {
namespace {

TEST(Charts, LargeCdfIsDrawnThroughBoundedOrderStatistics) {
  std::vector<double> v;
  for (int i = 0; i < 100000; ++i) v.push_back(double((i * 7919) % 100000));
  Page p("t");
  p.distribution_chart({.distributions = {{"big", v}}});
  std::string h = p.html();
  EXPECT_NE(h.find("data-points=\"100000\""), std::string::npos);
  size_t a = h.find("<polyline"), b = h.find("\"><title>big", a);
  ASSERT_NE(a, std::string::npos);
  std::string poly = h.substr(a, b - a);
  EXPECT_LE(count(poly, ","), 2 * 1000 + 1);
  EXPECT_GE(count(poly, ","), 2 * 1000);
  EXPECT_TRUE(poly.size() > 10 && poly.substr(poly.size() - 5) == ",14.0") << poly.substr(poly.size() - 20);
}

}  // namespace
}  // namespace plumb::report
