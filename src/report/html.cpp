#include "report/html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/file.h"

namespace plumb::report {
namespace {

// Chart geometry (SVG user units; the SVG scales to the page width through its viewBox).
constexpr double kW = 720, kH = 340;
constexpr double kLeft = 76, kRight = 16, kTop = 14, kBottom = 56;
constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;

// A CDF of more values than this is drawn through this many order statistics (the plot is ~630
// units wide, so more steps would not show).
constexpr size_t kMaxCdfSteps = 1000;

// Colour-blind-friendly palette (Okabe-Ito), fixed order.
constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#D55E00",
                                    "#CC79A7", "#56B4E9", "#F0E442", "#000000"};
const char* colour(size_t i) { return kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))]; }

const char* style_colour(Cell::Style s) {
  switch (s) {
    case Cell::Style::kPass:
      return "#1a7f37";
    case Cell::Style::kFail:
      return "#c62828";
    case Cell::Style::kWarn:
      return "#b26a00";
    case Cell::Style::kMuted:
      return "#888888";
    case Cell::Style::kPlain:
      break;
  }
  return "#0072B2";
}

const char* style_class(Cell::Style s) {
  switch (s) {
    case Cell::Style::kPass:
      return "pass";
    case Cell::Style::kFail:
      return "fail";
    case Cell::Style::kWarn:
      return "warn";
    case Cell::Style::kMuted:
      return "muted";
    case Cell::Style::kPlain:
      break;
  }
  return "";
}

// Coordinates: one decimal is plenty at this size and keeps the output short and deterministic.
std::string coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

struct Range {
  double lo = 0, hi = 1;
};

// Data range plus a small margin, overridden by the axis' forced bounds; never empty.
Range make_range(double lo, double hi, const Axis& axis, bool pad) {
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (pad && hi > lo) {
    double m = (hi - lo) * 0.04;
    lo -= m;
    hi += m;
  }
  if (axis.min && std::isfinite(*axis.min)) lo = *axis.min;
  if (axis.max && std::isfinite(*axis.max)) hi = *axis.max;
  if (!(hi > lo)) {
    double m = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= m;
    hi += m;
  }
  return {lo, hi};
}

// About five ticks at 1, 2 or 5 times a power of ten.
std::vector<double> ticks(Range r) {
  double span = r.hi - r.lo;
  double raw = span / 5.0;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    step = f * mag;
    if (span / step <= 6.5) break;
  }
  std::vector<double> out;
  for (double t = std::ceil(r.lo / step) * step; t <= r.hi + step * 1e-9 && out.size() < 20; t += step)
    out.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return out;
}

struct Frame {
  Range x, y;
  double px(double v) const { return kLeft + (v - x.lo) / (x.hi - x.lo) * kPlotW; }
  double py(double v) const { return kTop + kPlotH - (v - y.lo) / (y.hi - y.lo) * kPlotH; }
};

std::string svg_open(std::string_view title) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + coord(kW) + " " + coord(kH) +
         "\" role=\"img\" aria-label=\"" + escape_html(title) + "\">\n";
}

// Grid, ticks and axis labels. x_ticks false: the caller labels x itself (bar charts).
std::string axes(const Frame& f, const std::string& xlabel, const std::string& ylabel, bool x_ticks,
                 bool y_ticks = true) {
  std::string s;
  s += "<g class=\"axes\" font-size=\"11\" fill=\"#333\">\n";
  for (double t : y_ticks ? ticks(f.y) : std::vector<double>{}) {
    double y = f.py(t);
    s += "<line x1=\"" + coord(kLeft) + "\" x2=\"" + coord(kLeft + kPlotW) + "\" y1=\"" + coord(y) +
         "\" y2=\"" + coord(y) + "\" stroke=\"#e3e3e3\"/>";
    s += "<text x=\"" + coord(kLeft - 6) + "\" y=\"" + coord(y + 4) + "\" text-anchor=\"end\">" +
         escape_html(format_number(t)) + "</text>\n";
  }
  if (x_ticks) {
    for (double t : ticks(f.x)) {
      double x = f.px(t);
      s += "<line x1=\"" + coord(x) + "\" x2=\"" + coord(x) + "\" y1=\"" + coord(kTop) + "\" y2=\"" +
           coord(kTop + kPlotH) + "\" stroke=\"#f0f0f0\"/>";
      s += "<text x=\"" + coord(x) + "\" y=\"" + coord(kTop + kPlotH + 16) + "\" text-anchor=\"middle\">" +
           escape_html(format_number(t)) + "</text>\n";
    }
  }
  s += "<rect x=\"" + coord(kLeft) + "\" y=\"" + coord(kTop) + "\" width=\"" + coord(kPlotW) +
       "\" height=\"" + coord(kPlotH) + "\" fill=\"none\" stroke=\"#999\"/>\n";
  s += "<text x=\"" + coord(kLeft + kPlotW / 2) + "\" y=\"" + coord(kH - 8) +
       "\" text-anchor=\"middle\" font-size=\"12\">" + escape_html(xlabel) + "</text>\n";
  s += "<text transform=\"translate(14 " + coord(kTop + kPlotH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" + escape_html(ylabel) + "</text>\n";
  s += "</g>\n";
  return s;
}

std::string legend(const std::vector<std::pair<std::string, const char*>>& entries) {
  std::string s;
  for (const auto& [name, c] : entries) {
    if (name.empty()) continue;
    if (s.empty()) s = "<ul class=\"legend\">";
    s += "<li><span class=\"swatch\" style=\"background:" + std::string(c) + "\"></span>" +
         escape_html(name) + "</li>";
  }
  if (!s.empty()) s += "</ul>\n";
  return s;
}

std::string no_data(int dropped) {
  std::string s = "<p class=\"nodata\">No data to plot";
  if (dropped > 0) s += " (" + std::to_string(dropped) + " values were not finite)";
  return s + ".</p>\n";
}

std::string dropped_note(int dropped) {
  if (dropped == 0) return "";
  return "<p class=\"chart-note\">" + std::to_string(dropped) + " non-finite value" +
         (dropped == 1 ? " was" : "s were") + " left out.</p>\n";
}

struct Rendered {
  std::string body;
  int points = 0;
};

struct Point {
  double x, y;
  bool hl;
};

// The finite points of a series, in order; counts the dropped ones.
std::vector<Point> finite_points(const Series& s, int& dropped) {
  std::vector<Point> out;
  size_t n = std::min(s.x.size(), s.y.size());
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
      out.push_back({s.x[i], s.y[i], i < s.highlight.size() && s.highlight[i]});
    } else {
      ++dropped;
    }
  }
  return out;
}

std::string point_title(std::string_view name, double x, double y) {
  std::string t = "<title>";
  if (!name.empty()) t += escape_html(name) + ": ";
  return t + escape_html(format_number(x, 6)) + ", " + escape_html(format_number(y, 6)) + "</title>";
}

// Shared by line and scatter charts.
Rendered render_xy(std::string_view title, const Axis& xa, const Axis& ya, const std::vector<Series>& series,
                   bool lines, bool step, bool markers, bool connect_highlighted) {
  int dropped = 0;
  std::vector<std::vector<Point>> pts;
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  int total = 0;
  for (const auto& s : series) {
    pts.push_back(finite_points(s, dropped));
    for (const auto& p : pts.back()) {
      xlo = std::min(xlo, p.x), xhi = std::max(xhi, p.x);
      ylo = std::min(ylo, p.y), yhi = std::max(yhi, p.y);
    }
    total += int(pts.back().size());
  }
  if (total == 0) return {no_data(dropped), 0};
  Frame f{make_range(xlo, xhi, xa, true), make_range(ylo, yhi, ya, true)};
  std::string s = svg_open(title);
  s += axes(f, xa.label, ya.label, true);
  s += "<g clip-path=\"none\">\n";
  std::vector<std::pair<std::string, const char*>> leg;
  for (size_t i = 0; i < series.size(); ++i) {
    const char* c = colour(i);
    leg.emplace_back(series[i].name, c);
    const auto& p = pts[i];
    if (lines && p.size() > 1) {
      s += "<polyline fill=\"none\" stroke=\"" + std::string(c) + "\" stroke-width=\"1.6\" points=\"";
      for (size_t k = 0; k < p.size(); ++k) {
        if (step && k > 0) s += coord(f.px(p[k].x)) + "," + coord(f.py(p[k - 1].y)) + " ";
        s += coord(f.px(p[k].x)) + "," + coord(f.py(p[k].y)) + (k + 1 < p.size() ? " " : "");
      }
      s += "\"/>\n";
    }
    if (connect_highlighted) {
      std::vector<Point> front;
      for (const auto& q : p)
        if (q.hl) front.push_back(q);
      std::stable_sort(front.begin(), front.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
      if (front.size() > 1) {
        s += "<polyline fill=\"none\" stroke=\"" + std::string(c) +
             "\" stroke-width=\"1.2\" stroke-dasharray=\"4 3\" points=\"";
        for (size_t k = 0; k < front.size(); ++k)
          s += coord(f.px(front[k].x)) + "," + coord(f.py(front[k].y)) + (k + 1 < front.size() ? " " : "");
        s += "\"/>\n";
      }
    }
    if (markers || !lines || p.size() == 1) {
      for (const auto& q : p) {
        s += "<circle cx=\"" + coord(f.px(q.x)) + "\" cy=\"" + coord(f.py(q.y)) + "\" r=\"" +
             (q.hl ? "5" : (lines ? "2.5" : "3")) + "\" fill=\"" + c + "\"" +
             (q.hl ? " stroke=\"#000\" stroke-width=\"1.5\"" : " fill-opacity=\"0.75\"") + ">" +
             point_title(series[i].name, q.x, q.y) + "</circle>\n";
      }
    }
  }
  s += "</g>\n</svg>\n";
  return {s + legend(leg) + dropped_note(dropped), total};
}

}  // namespace

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_number(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  digits = std::clamp(digits, 1, 17);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  std::string s = buf;
  // snprintf honours LC_NUMERIC; plumb never sets it, but keep the output locale-proof.
  std::replace(s.begin(), s.end(), ',', '.');
  if (s == "-0") s = "0";
  return s;
}

namespace {

Rendered render_line(const LineChart& c) {
  return render_xy(c.title, c.x, c.y, c.series, true, c.step, c.markers, false);
}
Rendered render_scatter(const ScatterChart& c) {
  return render_xy(c.title, c.x, c.y, c.series, false, false, true, c.connect_highlighted);
}

// A distribution chart's finite values, each sorted; how many were dropped and the range of the rest.
struct FiniteValues {
  std::vector<std::vector<double>> vals;
  double lo = INFINITY, hi = -INFINITY;
  int dropped = 0, total = 0;
};

FiniteValues finite_values(const DistributionChart& c) {
  FiniteValues fv;
  for (const auto& d : c.distributions) {
    std::vector<double> v;
    for (double x : d.values) {
      if (std::isfinite(x)) {
        v.push_back(x);
      } else {
        ++fv.dropped;
      }
    }
    std::sort(v.begin(), v.end());
    if (!v.empty()) fv.lo = std::min(fv.lo, v.front()), fv.hi = std::max(fv.hi, v.back());
    fv.total += int(v.size());
    fv.vals.push_back(std::move(v));
  }
  return fv;
}

// One step polyline per distribution: the empirical CDF.
void draw_cdf(const DistributionChart& c, const FiniteValues& fv, std::string& s,
              std::vector<std::pair<std::string, const char*>>& leg) {
  Frame f{make_range(fv.lo, fv.hi, c.x, true), Range{0.0, 1.0}};
  s += axes(f, c.x.label, "fraction of requests ≤ x", true);
  for (size_t i = 0; i < fv.vals.size(); ++i) {
    const char* col = colour(i);
    leg.emplace_back(c.distributions[i].name, col);
    const auto& v = fv.vals[i];
    if (v.empty()) continue;
    double n = double(v.size());
    s += "<polyline fill=\"none\" stroke=\"" + std::string(col) + "\" stroke-width=\"1.6\" points=\"";
    s += coord(f.px(v[0])) + "," + coord(f.py(0));
    if (v.size() <= kMaxCdfSteps) {
      for (size_t k = 0; k < v.size(); ++k) {
        // Collapse ties: one vertical step per distinct value.
        if (k + 1 < v.size() && v[k + 1] == v[k]) continue;
        s += " " + coord(f.px(v[k])) + "," + coord(f.py(double(k) / n));
        s += " " + coord(f.px(v[k])) + "," + coord(f.py(double(k + 1) / n));
      }
    } else {
      // Evenly spaced order statistics, exact at their ranks; the last one is the maximum.
      for (size_t j = 0; j < kMaxCdfSteps; ++j) {
        size_t k = j * (v.size() - 1) / (kMaxCdfSteps - 1);
        s += " " + coord(f.px(v[k])) + "," + coord(f.py(double(k) / n));
        s += " " + coord(f.px(v[k])) + "," + coord(f.py(double(k + 1) / n));
      }
    }
    s += "\"><title>" + escape_html(c.distributions[i].name) + ": " + std::to_string(v.size()) +
         " values, median " + escape_html(format_number(v[(v.size() - 1) / 2], 6)) + "</title></polyline>\n";
  }
}

// Bars of counts per bin, one translucent series per distribution.
void draw_histogram(const DistributionChart& c, const FiniteValues& fv, std::string& s,
                    std::vector<std::pair<std::string, const char*>>& leg) {
  const auto& vals = fv.vals;
  int bins = std::clamp(c.bins, 1, 200);
  Range xr = make_range(fv.lo, fv.hi, c.x, false);
  double width = (xr.hi - xr.lo) / bins;
  std::vector<std::vector<int>> counts(vals.size(), std::vector<int>(size_t(bins), 0));
  int maxc = 0;
  for (size_t i = 0; i < vals.size(); ++i) {
    for (double x : vals[i]) {
      if (x < xr.lo || x > xr.hi) continue;  // outside a forced axis range
      int b = std::clamp(int((x - xr.lo) / width), 0, bins - 1);
      maxc = std::max(maxc, ++counts[i][size_t(b)]);
    }
  }
  Frame f{xr, Range{0.0, double(std::max(maxc, 1)) * 1.05}};
  s += axes(f, c.x.label, "requests", true);
  double opacity = vals.size() > 1 ? 0.5 : 0.85;
  for (size_t i = 0; i < vals.size(); ++i) {
    const char* col = colour(i);
    leg.emplace_back(c.distributions[i].name, col);
    for (int b = 0; b < bins; ++b) {
      int n = counts[i][size_t(b)];
      if (n == 0) continue;
      double x0 = xr.lo + b * width;
      s += "<rect x=\"" + coord(f.px(x0)) + "\" y=\"" + coord(f.py(n)) + "\" width=\"" +
           coord(std::max(f.px(x0 + width) - f.px(x0) - 0.5, 0.5)) + "\" height=\"" +
           coord(f.py(0) - f.py(n)) + "\" fill=\"" + col + "\" fill-opacity=\"" + coord(opacity) +
           "\"><title>" + escape_html(c.distributions[i].name) +
           (c.distributions[i].name.empty() ? "" : ": ") + "[" + escape_html(format_number(x0, 5)) + ", " +
           escape_html(format_number(x0 + width, 5)) + "): " + std::to_string(n) + "</title></rect>\n";
    }
  }
}

Rendered render_distribution(const DistributionChart& c) {
  const FiniteValues fv = finite_values(c);
  if (fv.total == 0) return {no_data(fv.dropped), 0};
  std::vector<std::pair<std::string, const char*>> leg;
  std::string s = svg_open(c.title);
  if (c.kind == DistributionChart::Kind::kCdf) {
    draw_cdf(c, fv, s, leg);
  } else {
    draw_histogram(c, fv, s, leg);
  }
  s += "</svg>\n";
  return {s + legend(leg) + dropped_note(fv.dropped), fv.total};
}

Rendered render_bar(const BarChart& c) {
  int dropped = 0;
  std::vector<const Bar*> bars;
  double lo = 0.0, hi = -INFINITY;
  for (const auto& b : c.bars) {
    if (!std::isfinite(b.value)) {
      ++dropped;
      continue;
    }
    bars.push_back(&b);
    lo = std::min(lo, b.value), hi = std::max(hi, b.value);
    if (std::isfinite(b.lo)) lo = std::min(lo, b.lo);
    if (std::isfinite(b.hi)) hi = std::max(hi, b.hi);
  }
  if (bars.empty()) return {no_data(dropped), 0};
  if (c.reference && std::isfinite(*c.reference))
    lo = std::min(lo, *c.reference), hi = std::max(hi, *c.reference);
  Range yr = make_range(lo, hi, c.y, false);
  yr.hi += (yr.hi - yr.lo) * 0.05;
  Frame f{Range{0.0, double(bars.size())}, yr};
  std::string s = svg_open(c.title);
  s += axes(f, "", c.y.label, false);
  bool rotate = bars.size() > 8;
  double base = f.py(std::clamp(0.0, yr.lo, yr.hi));
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = *bars[i];
    double cx = f.px(double(i) + 0.5);
    double w = kPlotW / double(bars.size()) * 0.6;
    double top = f.py(b.value);
    std::string tip = escape_html(b.label) + ": " + escape_html(format_number(b.value, 5));
    if (std::isfinite(b.lo) && std::isfinite(b.hi))
      tip += " [" + escape_html(format_number(b.lo, 5)) + ", " + escape_html(format_number(b.hi, 5)) + "]";
    s += "<rect x=\"" + coord(cx - w / 2) + "\" y=\"" + coord(std::min(top, base)) + "\" width=\"" +
         coord(w) + "\" height=\"" + coord(std::fabs(base - top)) + "\" fill=\"" + style_colour(b.style) +
         "\" fill-opacity=\"0.85\"><title>" + tip + "</title></rect>\n";
    if (std::isfinite(b.lo) && std::isfinite(b.hi)) {
      double y0 = f.py(b.lo), y1 = f.py(b.hi), cap = std::min(w / 4, 8.0);
      s += "<g stroke=\"#222\" stroke-width=\"1.4\"><line x1=\"" + coord(cx) + "\" x2=\"" + coord(cx) +
           "\" y1=\"" + coord(y0) + "\" y2=\"" + coord(y1) + "\"/><line x1=\"" + coord(cx - cap) +
           "\" x2=\"" + coord(cx + cap) + "\" y1=\"" + coord(y0) + "\" y2=\"" + coord(y0) +
           "\"/><line x1=\"" + coord(cx - cap) + "\" x2=\"" + coord(cx + cap) + "\" y1=\"" + coord(y1) +
           "\" y2=\"" + coord(y1) + "\"/></g>\n";
    } else if (std::isfinite(b.lo) || std::isfinite(b.hi)) {
      ++dropped;  // half an interval is not drawn
    }
    std::string label = b.label.size() > 24 ? b.label.substr(0, 23) + "…" : b.label;
    double ly = kTop + kPlotH + 14;
    s += "<text font-size=\"11\" fill=\"#333\" " +
         (rotate
              ? "transform=\"translate(" + coord(cx) + " " + coord(ly) + ") rotate(-30)\" text-anchor=\"end\""
              : "x=\"" + coord(cx) + "\" y=\"" + coord(ly) + "\" text-anchor=\"middle\"") +
         ">" + escape_html(label) + "</text>\n";
  }
  if (c.reference && std::isfinite(*c.reference) && *c.reference >= yr.lo && *c.reference <= yr.hi) {
    double y = f.py(*c.reference);
    s += "<line x1=\"" + coord(kLeft) + "\" x2=\"" + coord(kLeft + kPlotW) + "\" y1=\"" + coord(y) +
         "\" y2=\"" + coord(y) + "\" stroke=\"#555\" stroke-dasharray=\"6 4\"><title>reference " +
         escape_html(format_number(*c.reference)) + "</title></line>\n";
  }
  s += "</svg>\n";
  return {s + dropped_note(dropped), int(bars.size())};
}

Rendered render_timeline(const TimelineChart& c) {
  int dropped = 0;
  std::vector<const Span*> spans;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& sp : c.spans) {
    if (!std::isfinite(sp.start) || !std::isfinite(sp.end)) {
      ++dropped;
      continue;
    }
    spans.push_back(&sp);
    lo = std::min({lo, sp.start, sp.end}), hi = std::max({hi, sp.start, sp.end});
  }
  if (spans.empty()) return {no_data(dropped), 0};
  double n = double(spans.size());
  Frame f{make_range(lo, hi, c.x, true), Range{0.0, n}};
  std::string s = svg_open(c.title);
  // Rows run top to bottom in the given order: no numeric y ticks.
  s += axes(f, c.x.label, c.y_label, true, false);
  double row = kPlotH / n;
  double thick = std::clamp(row * 0.7, 0.6, 8.0);
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& sp = *spans[i];
    double y = kTop + row * (double(i) + 0.5);
    const char* col = sp.style == Cell::Style::kPlain ? colour(0) : style_colour(sp.style);
    double x0 = f.px(std::min(sp.start, sp.end)), x1 = f.px(std::max(sp.start, sp.end));
    std::string tip = "<title>" + escape_html(sp.label) + (sp.label.empty() ? "" : ": ") +
                      escape_html(format_number(sp.start, 6)) + " to " +
                      escape_html(format_number(sp.end, 6));
    if (std::isfinite(sp.mark)) tip += ", mark " + escape_html(format_number(sp.mark, 6));
    tip += "</title>";
    s += "<line x1=\"" + coord(x0) + "\" x2=\"" + coord(std::max(x1, x0 + 0.8)) + "\" y1=\"" + coord(y) +
         "\" y2=\"" + coord(y) + "\" stroke=\"" + col + "\" stroke-width=\"" + coord(thick) + "\">" + tip +
         "</line>\n";
    if (std::isfinite(sp.mark) && sp.mark >= f.x.lo && sp.mark <= f.x.hi) {
      double xm = f.px(sp.mark);
      s += "<line x1=\"" + coord(xm) + "\" x2=\"" + coord(xm) + "\" y1=\"" + coord(y - thick) + "\" y2=\"" +
           coord(y + thick) + "\" stroke=\"#000\" stroke-width=\"1\"/>\n";
    }
  }
  s += "</svg>\n";
  return {s + dropped_note(dropped), int(spans.size())};
}

constexpr const char* kCss = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:980px;padding:16px 24px 48px;color:#1b1b1b;line-height:1.45}
h1{font-size:1.55em;margin:.4em 0 .2em}h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd;padding-bottom:.2em}
dl.provenance{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:.88em;background:#f6f8fa;padding:10px 14px;border-radius:6px}
dl.provenance dt{font-weight:600;color:#444}dl.provenance dd{margin:0;font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.9em}caption{text-align:left;font-weight:600;padding:4px 0}
th,td{border:1px solid #d8d8d8;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f0f2f4}
td.pass{color:#1a7f37;font-weight:600}td.fail{color:#c62828;font-weight:600}td.warn{color:#b26a00;font-weight:600}td.muted{color:#888}
p.note{background:#fff8e1;border-left:4px solid #e0a800;padding:6px 10px}
figure.chart{margin:1em 0 1.6em}figure.chart figcaption{font-weight:600;margin-bottom:4px}
figure.chart svg{width:100%;height:auto;max-width:720px;display:block;font-family:inherit}
ul.legend{list-style:none;padding:0;margin:4px 0;font-size:.85em}ul.legend li{display:inline-block;margin-right:14px}
span.swatch{display:inline-block;width:10px;height:10px;margin-right:5px;border-radius:2px}
p.nodata{color:#777;font-style:italic;border:1px dashed #bbb;padding:12px;max-width:690px}p.chart-note{font-size:.85em;color:#555;margin:2px 0}
footer{margin-top:3em;font-size:.8em;color:#777}
)";

}  // namespace

std::string render(const LineChart& c) { return render_line(c).body; }
std::string render(const ScatterChart& c) { return render_scatter(c).body; }
std::string render(const DistributionChart& c) { return render_distribution(c).body; }
std::string render(const BarChart& c) { return render_bar(c).body; }
std::string render(const TimelineChart& c) { return render_timeline(c).body; }

Page::Page(std::string title) : title_(std::move(title)) {}

void Page::provenance(const std::vector<std::pair<std::string, std::string>>& items) {
  if (items.empty()) return;
  body_ += "<dl class=\"provenance\">\n";
  for (const auto& [k, v] : items)
    body_ += "<dt>" + escape_html(k) + "</dt><dd>" + escape_html(v) + "</dd>\n";
  body_ += "</dl>\n";
}

void Page::heading(std::string_view text) { body_ += "<h2>" + escape_html(text) + "</h2>\n"; }
void Page::paragraph(std::string_view text) { body_ += "<p>" + escape_html(text) + "</p>\n"; }
void Page::note(std::string_view text) { body_ += "<p class=\"note\">" + escape_html(text) + "</p>\n"; }

void Page::table(const Table& t) {
  body_ += "<table>\n";
  if (!t.caption.empty()) body_ += "<caption>" + escape_html(t.caption) + "</caption>\n";
  if (!t.header.empty()) {
    body_ += "<thead><tr>";
    for (const auto& h : t.header) body_ += "<th>" + escape_html(h) + "</th>";
    body_ += "</tr></thead>\n";
  }
  body_ += "<tbody>\n";
  size_t width = t.header.size();
  for (const auto& r : t.rows) width = std::max(width, r.size());
  if (t.rows.empty()) {
    body_ += "<tr><td class=\"muted\" colspan=\"" + std::to_string(std::max<size_t>(width, 1)) + "\">" +
             escape_html(t.empty_note) + "</td></tr>\n";
  }
  for (const auto& r : t.rows) {
    body_ += "<tr>";
    for (size_t i = 0; i < width; ++i) {
      const Cell c = i < r.size() ? r[i] : Cell{};
      std::string cls = style_class(c.style);
      body_ += cls.empty() ? "<td>" : "<td class=\"" + cls + "\">";
      body_ += escape_html(c.text) + "</td>";
    }
    body_ += "</tr>\n";
  }
  body_ += "</tbody></table>\n";
}

void Page::figure(std::string_view kind, std::string_view title, int points, const std::string& body,
                  std::string_view note) {
  ++figures_;
  body_ += "<figure class=\"chart\" id=\"fig-" + std::to_string(figures_) + "\" data-kind=\"" +
           std::string(kind) + "\" data-points=\"" + std::to_string(points) + "\">\n";
  if (!title.empty()) body_ += "<figcaption>" + escape_html(title) + "</figcaption>\n";
  body_ += body;
  if (!note.empty()) body_ += "<p class=\"chart-note\">" + escape_html(note) + "</p>\n";
  body_ += "</figure>\n";
}

void Page::line_chart(const LineChart& c) {
  auto r = render_line(c);
  figure("line", c.title, r.points, r.body, c.note);
}
void Page::scatter_chart(const ScatterChart& c) {
  auto r = render_scatter(c);
  figure("scatter", c.title, r.points, r.body, c.note);
}
void Page::distribution_chart(const DistributionChart& c) {
  auto r = render_distribution(c);
  figure(c.kind == DistributionChart::Kind::kCdf ? "cdf" : "histogram", c.title, r.points, r.body, c.note);
}
void Page::bar_chart(const BarChart& c) {
  auto r = render_bar(c);
  figure("bar", c.title, r.points, r.body, c.note);
}

void Page::timeline_chart(const TimelineChart& c) {
  auto r = render_timeline(c);
  figure("timeline", c.title, r.points, r.body, c.note);
}

std::string Page::html() const {
  std::string s;
  s += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // No fetch of any kind: inline styles and data: images only, no script at all.
  s +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
      "img-src data:\">\n";
  s += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  s += "<title>" + escape_html(title_) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n";
  s += "<h1>" + escape_html(title_) + "</h1>\n";
  s += body_;
  s += "<footer>Written by plumb. This page is self-contained: it needs no network and no script.</footer>\n";
  s += "</body>\n</html>\n";
  return s;
}

Status Page::write(const std::string& path) const {
  Status st = write_file_atomic(path, html());
  if (!st.ok()) return Status(st.code(), "writing the HTML report " + path + ": " + st.message());
  return st;
}

}  // namespace plumb::report
