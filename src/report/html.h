// report/: self-contained HTML pages for plumb's results (bench, tune, evaluate).
//
// A page is one HTML file that opens offline: inline CSS, charts as inline SVG, no script, no
// external fetch (the page carries a Content-Security-Policy that forbids any), readable with
// JavaScript off. Hovering a chart point shows its value through SVG <title> elements.
//
// Contract:
// - Every user string (titles, labels, cell text, series names, provenance values) is HTML-escaped
//   by the library; callers pass plain text, never markup.
// - Non-finite values (NaN, ±inf) are never drawn: such points are dropped and the chart says how
//   many; in tables a non-finite number prints as "n/a" (format_number).
// - A chart with no finite point renders a "no data" note inside its figure, not an empty SVG.
// - Output is deterministic: the same calls give byte-identical HTML (no timestamps, no random
//   ids; numbers printed with a fixed format, independent of the C++ locale).
// - Each chart is a <figure class="chart" data-kind="line|scatter|histogram|cdf|bar|timeline"
//   data-points="N"> (N = finite points drawn), so tests and tools can find them.
//
// Typical use (what `plumb bench --html` and `plumb tune --html` do):
//
//   report::Page page("plumb tune: study 3");
//   page.provenance({{"plumb", "0.1 abc123"}, {"machine", fp}});
//   page.heading("Convergence");
//   page.line_chart({.title = "Best objective so far", .x = {"trial"}, .y = {"objective"},
//                    .series = {{.name = "best", .x = xs, .y = ys}}});
//   page.table({.caption = "Trials", .header = {"trial", "objective", "status"},
//               .rows = {{"1", report::format_number(0.42), report::Cell::pass("ok")}}});
//   Status st = page.write("tune.html");
//
// Thread safety: a Page is a plain value; use one per thread.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace plumb::report {

// Escapes & < > " ' for use in HTML text and attribute values.
std::string escape_html(std::string_view text);

// A number for humans: up to `digits` significant digits (printf %.{digits}g in the C locale),
// "n/a" when not finite. Deterministic.
std::string format_number(double v, int digits = 4);

// One table cell: plain text and an optional style (pass/fail/warn colour a verdict).
struct Cell {
  enum class Style { kPlain, kPass, kFail, kWarn, kMuted };
  std::string text;
  Style style = Style::kPlain;
  Cell() = default;
  Cell(std::string t) : text(std::move(t)) {}  // NOLINT: implicit on purpose (table literals)
  Cell(const char* t) : text(t) {}             // NOLINT
  Cell(std::string t, Style s) : text(std::move(t)), style(s) {}
  static Cell pass(std::string t) { return {std::move(t), Style::kPass}; }
  static Cell fail(std::string t) { return {std::move(t), Style::kFail}; }
  static Cell warn(std::string t) { return {std::move(t), Style::kWarn}; }
  static Cell muted(std::string t) { return {std::move(t), Style::kMuted}; }
};

struct Table {
  std::string caption;                  // shown above the table; may be empty
  std::vector<std::string> header;      // column names
  std::vector<std::vector<Cell>> rows;  // short rows are padded with empty cells
  std::string empty_note = "no rows";   // shown instead of an empty table body
};

struct Axis {
  std::string label;            // e.g. "TTFT (ms)"
  std::optional<double> min{};  // force the axis range (default: from the data, with a margin)
  std::optional<double> max{};
};

// A series of (x, y) points; x and y have equal length (extra elements of the longer are ignored).
struct Series {
  std::string name;  // legend entry; empty: no legend entry
  std::vector<double> x;
  std::vector<double> y;
  std::vector<bool> highlight;  // scatter: highlighted points (larger, outlined); may be shorter/empty
};

// Line chart, e.g. a convergence curve or throughput over time. Points are joined in the given
// order; a non-finite point is dropped (the line joins its neighbours). step: draw as a staircase
// (value holds until the next x), e.g. "best so far".
struct LineChart {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  bool step = false;
  bool markers = false;  // draw a dot at every point
  std::string note;      // caption under the chart
};

// Scatter chart, e.g. the Pareto front of TTFT vs throughput with the front highlighted, or TTFT
// of each request against its send time. connect_highlighted: join the highlighted points, sorted
// by x, with a line (a front).
struct ScatterChart {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  bool connect_highlighted = false;
  std::string note;
};

// Distributions of raw values, e.g. latency samples, drawn as a histogram (counts per bin, one
// set of bars per distribution, overlaid translucent) or as an empirical CDF (a step curve per
// distribution, y from 0 to 1). A CDF of more than 1000 values is drawn through 1000 evenly spaced
// order statistics (exact at those ranks, always including the minimum and the maximum).
struct Distribution {
  std::string name;
  std::vector<double> values;
};
struct DistributionChart {
  enum class Kind { kHistogram, kCdf };
  Kind kind = Kind::kCdf;
  std::string title;
  Axis x;  // the value axis; y is "requests" (histogram) or "fraction ≤ x" (CDF)
  std::vector<Distribution> distributions;
  int bins = 30;  // histogram only; clamped to [1, 200]
  std::string note;
};

// Bars with optional error bars, e.g. speedups with 95% CIs. lo/hi NaN: no error bar.
struct Bar {
  std::string label;
  double value = 0.0;
  double lo = std::numeric_limits<double>::quiet_NaN();
  double hi = std::numeric_limits<double>::quiet_NaN();
  Cell::Style style = Cell::Style::kPlain;  // kPass/kFail/kWarn colour the bar
};
struct BarChart {
  std::string title;
  Axis y;
  std::vector<Bar> bars;
  std::optional<double> reference{};  // a dashed horizontal line, e.g. 1.0 for "no speedup"
  std::string note;
};

// A timeline: one horizontal span per row (e.g. each request from send to end, with a mark at its
// first token), rows top to bottom in the given order. A span with a non-finite start or end is
// dropped; a non-finite mark is not drawn.
struct Span {
  std::string label;  // shown on hover
  double start = 0.0;
  double mark = std::numeric_limits<double>::quiet_NaN();  // e.g. first token; NaN: none
  double end = 0.0;
  Cell::Style style = Cell::Style::kPlain;  // kFail draws the span red (a failed request)
};
struct TimelineChart {
  std::string title;
  Axis x;               // time axis
  std::string y_label;  // e.g. "request (set order)"
  std::vector<Span> spans;
  std::string note;
};

// SVG fragments (an <svg> element, or a "no data" paragraph), usable outside a Page.
std::string render(const LineChart& c);
std::string render(const ScatterChart& c);
std::string render(const DistributionChart& c);
std::string render(const BarChart& c);
std::string render(const TimelineChart& c);

class Page {
 public:
  explicit Page(std::string title);

  // A definition list of where the result came from (plumb version, machine, protocol, seeds...).
  void provenance(const std::vector<std::pair<std::string, std::string>>& items);
  void heading(std::string_view text);    // a section heading (<h2>)
  void paragraph(std::string_view text);  // a paragraph of plain text
  void note(std::string_view text);       // a highlighted remark (e.g. "run INVALID: ...")
  void table(const Table& t);
  void line_chart(const LineChart& c);
  void scatter_chart(const ScatterChart& c);
  void distribution_chart(const DistributionChart& c);
  void bar_chart(const BarChart& c);
  void timeline_chart(const TimelineChart& c);

  // The whole document.
  std::string html() const;
  // Writes html() atomically; an error names the path.
  Status write(const std::string& path) const;

 private:
  void figure(std::string_view kind, std::string_view title, int points, const std::string& body,
              std::string_view note);
  std::string title_;
  std::string body_;
  int figures_ = 0;
};

}  // namespace plumb::report
