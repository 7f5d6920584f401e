#include "tune/space.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/file.h"
#include "tune/builtin_spaces.h"

namespace plumb::tune {
namespace {

using launch::ParamValue;

Result<toml::table> parse_toml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, std::string(source));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return invalid_argument(std::string(source) + ":" + std::to_string(b.line) + ":" +
                            std::to_string(b.column) + ": invalid TOML: " + std::string(e.description()));
  }
}

Result<ParamValue> to_value(const toml::node& n, const std::string& where) {
  if (auto b = n.as_boolean()) return ParamValue{b->get()};
  if (auto i = n.as_integer()) return ParamValue{int64_t(i->get())};
  if (auto d = n.as_floating_point()) return ParamValue{d->get()};
  if (auto s = n.as_string()) return ParamValue{s->get()};
  return invalid_argument(where + ": must be a bool, integer, float or string");
}

Result<ParamKind> parse_kind(std::string_view s, const std::string& where) {
  if (s == "int") return ParamKind::kInt;
  if (s == "float") return ParamKind::kFloat;
  if (s == "categorical") return ParamKind::kCategorical;
  if (s == "bool") return ParamKind::kBool;
  return invalid_argument(where + ": unknown type '" + std::string(s) + "' (int, float, categorical, bool)");
}

std::optional<double> as_number(const ParamValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  return std::nullopt;
}

// Whether x converts to int64_t without undefined behaviour: finite and in [-2^63, 2^63).
bool fits_int64(double x) {
  return std::isfinite(x) && x >= -9223372036854775808.0 && x < 9223372036854775808.0;
}

// A value checked/converted to the parameter's kind (ints: integral numbers only).
Result<ParamValue> coerce(const ParamSpec& p, const ParamValue& v, const std::string& where) {
  switch (p.kind) {
    case ParamKind::kInt: {
      if (std::holds_alternative<int64_t>(v)) return v;  // exact: not through a double (2^53 and up)
      auto x = as_number(v);
      if (!x || std::floor(*x) != *x) return invalid_argument(where + ": '" + p.name + "' takes integers");
      if (!fits_int64(*x))
        return invalid_argument(where + ": '" + p.name + "' takes integers within the 64-bit range");
      return ParamValue{int64_t(*x)};
    }
    case ParamKind::kFloat: {
      auto x = as_number(v);
      if (!x || !std::isfinite(*x)) return invalid_argument(where + ": '" + p.name + "' takes numbers");
      return ParamValue{*x};
    }
    case ParamKind::kBool:
      if (!std::holds_alternative<bool>(v))
        return invalid_argument(where + ": '" + p.name + "' takes true/false");
      return v;
    case ParamKind::kCategorical:
      if (std::holds_alternative<std::vector<std::string>>(v))
        return invalid_argument(where + ": '" + p.name + "' takes scalar values");
      return v;
  }
  return v;
}

bool same_value(const ParamValue& a, const ParamValue& b) {
  auto x = as_number(a), y = as_number(b);
  if (x && y) return *x == *y;
  return a == b;
}

Result<std::vector<ParamValue>> value_list(const toml::node& n, const ParamSpec& p,
                                           const std::string& where) {
  std::vector<ParamValue> out;
  auto* a = n.as_array();
  if (!a) return invalid_argument(where + " must be an array");
  for (size_t i = 0; i < a->size(); ++i) {
    PLUMB_ASSIGN_OR_RETURN(auto v, to_value(*a->get(i), where + "[" + std::to_string(i) + "]"));
    PLUMB_ASSIGN_OR_RETURN(v, coerce(p, v, where + "[" + std::to_string(i) + "]"));
    for (const auto& w : out)
      if (same_value(w, v)) return invalid_argument(where + ": duplicate value " + launch::format_value(v));
    out.push_back(std::move(v));
  }
  if (out.empty()) return invalid_argument(where + " must not be empty");
  return out;
}

Result<double> number_field(const toml::table& t, std::string_view key, const std::string& where) {
  auto n = t.get(key);
  if (!n)
    return invalid_argument(where + ": missing field '" + std::string(key) + "' (or give values = [...])");
  if (auto i = n->as_integer()) return double(i->get());
  if (auto d = n->as_floating_point()) return d->get();
  return invalid_argument(where + ": field '" + std::string(key) + "' must be a number");
}

// A numeric parameter's range: low, high, log, and its explicit grid or grid_points.
Status parse_range(const toml::table& t, const std::string& where, ParamSpec& p) {
  PLUMB_ASSIGN_OR_RETURN(p.low, number_field(t, "low", where));
  PLUMB_ASSIGN_OR_RETURN(p.high, number_field(t, "high", where));
  if (!std::isfinite(p.low) || !std::isfinite(p.high) || !std::isfinite(p.high - p.low))
    return invalid_argument(where + ": low, high and high - low must be finite numbers");
  if (p.low > p.high) return invalid_argument(where + ": low > high");
  if (auto lg = t.get("log")) {
    auto b = lg->as_boolean();
    if (!b) return invalid_argument(where + ": 'log' must be true or false");
    p.log = b->get();
  }
  if (p.log && p.low <= 0) return invalid_argument(where + ": log = true needs low > 0");
  if (p.kind == ParamKind::kInt && (std::floor(p.low) != p.low || std::floor(p.high) != p.high))
    return invalid_argument(where + ": an int range needs integer low and high");
  if (p.kind == ParamKind::kInt && (!fits_int64(p.low) || !fits_int64(p.high)))
    return invalid_argument(where + ": an int range must lie within the 64-bit integer range");
  if (auto* g = t.get("grid")) {
    PLUMB_ASSIGN_OR_RETURN(p.grid, value_list(*g, p, where + ": grid"));
    for (const auto& x : p.grid) {
      double d = *as_number(x);
      if (d < p.low || d > p.high)
        return invalid_argument(where + ": grid point " + launch::format_value(x) +
                                " is outside [low, high]");
    }
    std::sort(p.grid.begin(), p.grid.end(),
              [](const ParamValue& a, const ParamValue& b) { return *as_number(a) < *as_number(b); });
  }
  if (auto gp = t.get("grid_points")) {
    auto i = gp->as_integer();
    if (!i || i->get() < 2 || i->get() > 1000)
      return invalid_argument(where + ": grid_points must be in [2, 1000]");
    p.grid_points = int(i->get());
  }
  return Status::Ok();
}

// 'when': conditions on parameters declared before this one.
Status parse_when(const toml::node& w, const SearchSpace& sp, const std::string& where, ParamSpec& p) {
  auto* wt = w.as_table();
  if (!wt)
    return invalid_argument(where +
                            ": 'when' must be a table, e.g. when = { enable_chunked_prefill = true }");
  for (const auto& [k, v] : *wt) {
    std::string other(k.str());
    const ParamSpec* q = nullptr;
    for (const auto& e : sp.params)
      if (e.name == other) q = &e;
    if (!q)
      return invalid_argument(where + ": condition on '" + other +
                              "', which is not a parameter declared before this one");
    Condition c;
    c.param = other;
    if (v.is_array()) {
      PLUMB_ASSIGN_OR_RETURN(c.values, value_list(v, *q, where + ": when." + other));
    } else {
      PLUMB_ASSIGN_OR_RETURN(auto x, to_value(v, where + ": when." + other));
      PLUMB_ASSIGN_OR_RETURN(x, coerce(*q, x, where + ": when." + other));
      c.values.push_back(std::move(x));
    }
    p.when.push_back(std::move(c));
  }
  return Status::Ok();
}

Result<ParamSpec> parse_param(const toml::table& t, const SearchSpace& sp, const std::string& src,
                              size_t index) {
  ParamSpec p;
  std::string where = src + ": param[" + std::to_string(index) + "]";
  auto name = t.get_as<std::string>("name");
  if (!name) return invalid_argument(where + ": missing string field 'name'");
  p.name = name->get();
  where = src + ": param '" + p.name + "'";
  auto type = t.get_as<std::string>("type");
  if (!type) return invalid_argument(where + ": missing string field 'type' (int, float, categorical, bool)");
  PLUMB_ASSIGN_OR_RETURN(p.kind, parse_kind(type->get(), where));
  static const std::set<std::string> known{"name",        "type",   "low",     "high", "log", "grid",
                                           "grid_points", "values", "default", "when", "note"};
  for (const auto& [k, v] : t)
    if (!known.count(std::string(k.str())))
      return invalid_argument(
          where + ": unknown field '" + std::string(k.str()) +
          "' (name, type, low, high, log, grid, grid_points, values, default, when, note)");
  if (p.kind == ParamKind::kBool) {
    p.values = {ParamValue{false}, ParamValue{true}};
  } else if (auto* v = t.get("values")) {
    PLUMB_ASSIGN_OR_RETURN(p.values, value_list(*v, p, where + ": values"));
  } else if (p.kind == ParamKind::kCategorical) {
    return invalid_argument(where + ": a categorical parameter needs values = [...]");
  } else {
    PLUMB_RETURN_IF_ERROR(parse_range(t, where, p));
  }
  if (auto* d = t.get("default")) {
    PLUMB_ASSIGN_OR_RETURN(auto v, to_value(*d, where + ": default"));
    PLUMB_ASSIGN_OR_RETURN(p.default_value, coerce(p, v, where + ": default"));
  }
  if (auto* w = t.get("when")) PLUMB_RETURN_IF_ERROR(parse_when(*w, sp, where, p));
  return p;
}

std::string sources_list() {
  std::string s;
  for (const auto& n : builtin_space_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

bool in_domain(const ParamSpec& p, const ParamValue& v) {
  if (!p.values.empty()) {
    for (const auto& x : p.values)
      if (same_value(x, v)) return true;
    return false;
  }
  auto x = as_number(v);
  return x && *x >= p.low && *x <= p.high;
}

}  // namespace

std::string_view kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::kInt:
      return "int";
    case ParamKind::kFloat:
      return "float";
    case ParamKind::kCategorical:
      return "categorical";
    case ParamKind::kBool:
      return "bool";
  }
  return "?";
}

Result<SearchSpace> parse_space(std::string_view text, std::string_view source_name) {
  std::string src(source_name);
  PLUMB_ASSIGN_OR_RETURN(toml::table t, parse_toml(text, src));
  SearchSpace sp;
  auto name = t.get_as<std::string>("name");
  if (!name) return invalid_argument(src + ": missing string field 'name'");
  sp.name = name->get();
  auto adapter = t.get_as<std::string>("adapter");
  if (!adapter)
    return invalid_argument(src + ": missing string field 'adapter' (a built-in adapter or a path)");
  sp.adapter = adapter->get();
  if (auto d = t.get_as<std::string>("description")) sp.description = d->get();
  if (auto* f = t.get_as<toml::table>("fixed")) {
    for (const auto& [k, v] : *f) {
      if (auto* arr = v.as_array()) {
        std::vector<std::string> xs;
        for (const auto& el : *arr) {
          auto s = el.as_string();
          if (!s)
            return invalid_argument(src + ": fixed." + std::string(k.str()) + ": arrays must hold strings");
          xs.push_back(s->get());
        }
        sp.fixed.emplace(std::string(k.str()), ParamValue{std::move(xs)});
        continue;
      }
      PLUMB_ASSIGN_OR_RETURN(auto x, to_value(v, src + ": fixed." + std::string(k.str())));
      sp.fixed.emplace(std::string(k.str()), std::move(x));
    }
  }
  auto* params = t.get_as<toml::array>("param");
  if (!params || params->empty()) return invalid_argument(src + ": no [[param]] entries: nothing to search");
  for (size_t i = 0; i < params->size(); ++i) {
    auto* pt = params->get(i)->as_table();
    if (!pt) return invalid_argument(src + ": param[" + std::to_string(i) + "] must be a table ([[param]])");
    PLUMB_ASSIGN_OR_RETURN(auto p, parse_param(*pt, sp, src, i));
    for (const auto& e : sp.params)
      if (e.name == p.name) return invalid_argument(src + ": param '" + p.name + "' is declared twice");
    if (sp.fixed.count(p.name))
      return invalid_argument(src + ": param '" + p.name + "' is both [fixed] and searched; remove one");
    sp.params.push_back(std::move(p));
  }
  return sp;
}

Result<SearchSpace> load_space_file(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok())
    return not_found("search space file '" + path + "' cannot be read: " + text.status().message());
  return parse_space(*text, path);
}

std::vector<std::string> builtin_space_names() {
  std::vector<std::string> out;
  for (const auto& s : builtin_space_sources()) out.emplace_back(s.name);
  return out;
}

Result<std::string> builtin_space_text(std::string_view name) {
  for (const auto& s : builtin_space_sources())
    if (s.name == name) return std::string(s.text);
  return not_found("no built-in search space '" + std::string(name) + "' (built-in: " + sources_list() + ")");
}

Result<SearchSpace> builtin_space(std::string_view name) {
  PLUMB_ASSIGN_OR_RETURN(auto text, builtin_space_text(name));
  return parse_space(text, "built-in space " + std::string(name));
}

Result<SearchSpace> resolve_space(const std::string& name_or_path) {
  if (builtin_space_text(name_or_path).ok()) return builtin_space(name_or_path);
  if (!std::filesystem::exists(name_or_path))
    return not_found("--space '" + name_or_path + "' is neither a built-in space (" + sources_list() +
                     ") nor a file");
  return load_space_file(name_or_path);
}

bool is_active(const ParamSpec& p, const Config& c) {
  for (const auto& cond : p.when) {
    auto it = c.find(cond.param);
    if (it == c.end()) return false;
    bool ok = false;
    for (const auto& v : cond.values) ok = ok || same_value(v, it->second);
    if (!ok) return false;
  }
  return true;
}

Status validate_config(const SearchSpace& sp, const Config& c) {
  for (const auto& [k, v] : c) {
    bool known = false;
    for (const auto& p : sp.params) known = known || p.name == k;
    if (!known) {
      std::string names;
      for (const auto& p : sp.params) names += (names.empty() ? "" : ", ") + p.name;
      return invalid_argument("configuration: '" + k + "' is not a parameter of space '" + sp.name + "' (" +
                              names + ")");
    }
  }
  for (const auto& p : sp.params) {
    auto it = c.find(p.name);
    bool active = is_active(p, c);
    if (!active && it != c.end())
      return invalid_argument("configuration: '" + p.name +
                              "' is set but inactive (its 'when' condition fails)");
    if (active && it == c.end()) return invalid_argument("configuration: '" + p.name + "' is missing");
    if (!active) continue;
    auto v = coerce(p, it->second, "configuration");
    if (!v.ok()) return v.status();
    if (!in_domain(p, *v)) {
      std::string dom;
      if (!p.values.empty()) {
        for (const auto& x : p.values) dom += (dom.empty() ? "" : ", ") + launch::format_value(x);
        dom = "one of " + dom;
      } else {
        dom =
            "in [" +
            launch::format_value(p.kind == ParamKind::kInt ? ParamValue{int64_t(p.low)} : ParamValue{p.low}) +
            ", " +
            launch::format_value(p.kind == ParamKind::kInt ? ParamValue{int64_t(p.high)}
                                                           : ParamValue{p.high}) +
            "]";
      }
      return invalid_argument("configuration: '" + p.name + "' = " + launch::format_value(it->second) +
                              " is outside its domain (" + dom + ")");
    }
  }
  return Status::Ok();
}

std::vector<ParamValue> grid_values(const ParamSpec& p) {
  if (!p.values.empty()) return p.values;
  if (!p.grid.empty()) return p.grid;
  std::vector<ParamValue> out;
  int n = p.grid_points;
  for (int i = 0; i < n; ++i) {
    double f = n == 1 ? 0 : double(i) / double(n - 1);
    double x = p.log ? std::exp(std::log(p.low) + f * (std::log(p.high) - std::log(p.low)))
                     : p.low + f * (p.high - p.low);
    if (i == 0) x = p.low;
    if (i == n - 1) x = p.high;
    ParamValue v = p.kind == ParamKind::kInt ? ParamValue{int64_t(std::llround(x))} : ParamValue{x};
    if (out.empty() || !same_value(out.back(), v)) out.push_back(v);
  }
  return out;
}

bool is_finite(const SearchSpace& sp) {
  for (const auto& p : sp.params)
    if (p.values.empty()) return false;
  return true;
}

Result<std::vector<Config>> enumerate_grid(const SearchSpace& sp, size_t limit) {
  std::vector<Config> partial{Config{}};
  for (const auto& p : sp.params) {
    auto vals = grid_values(p);
    std::vector<Config> next;
    for (const auto& c : partial) {
      if (!is_active(p, c)) {
        next.push_back(c);
        continue;
      }
      for (const auto& v : vals) {
        Config d = c;
        d[p.name] = v;
        next.push_back(std::move(d));
        if (next.size() > limit)
          return failed_precondition("the grid of space '" + sp.name + "' has more than " +
                                     std::to_string(limit) +
                                     " points; give fewer grid points or use --strategy random|bayes");
      }
    }
    partial = std::move(next);
  }
  return partial;
}

Config sample_uniform(const SearchSpace& sp, Rng& rng) {
  Config c;
  for (const auto& p : sp.params) {
    if (!is_active(p, c)) continue;
    if (!p.values.empty()) {
      c[p.name] = p.values[size_t(rng.uniform_int(0, int64_t(p.values.size()) - 1))];
      continue;
    }
    double u = rng.uniform();
    if (p.kind == ParamKind::kInt) {
      if (p.log) {
        // Log-uniform over the integers: a real in [low - 0.5, high + 0.5) in log space, rounded.
        double lo = std::log(std::max(p.low - 0.5, 0.5)), hi = std::log(p.high + 0.5);
        int64_t x = std::llround(std::exp(lo + u * (hi - lo)));
        c[p.name] = std::clamp<int64_t>(x, int64_t(p.low), int64_t(p.high));
      } else {
        c[p.name] = rng.uniform_int(int64_t(p.low), int64_t(p.high));
      }
    } else {
      double x = p.log ? std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)))
                       : p.low + u * (p.high - p.low);
      c[p.name] = std::clamp(x, p.low, p.high);
    }
  }
  return c;
}

json::object config_to_json(const Config& c) {
  json::object o;
  for (const auto& [k, v] : c) o[k] = launch::param_to_json(v);
  return o;
}

std::string config_key(const Config& c) { return json::canonical(config_to_json(c)); }

Result<Config> config_from_json(const SearchSpace& sp, const json::object& o) {
  Config c;
  for (const auto& [k, v] : o) {
    std::string key(k);
    const ParamSpec* p = nullptr;
    for (const auto& e : sp.params)
      if (e.name == key) p = &e;
    ParamValue x;
    if (v.is_bool())
      x = v.as_bool();
    else if (v.is_int64())
      x = int64_t(v.as_int64());
    else if (v.is_uint64())
      x = int64_t(v.as_uint64());
    else if (v.is_double())
      x = v.as_double();
    else if (v.is_string())
      x = std::string(v.as_string());
    else
      return invalid_argument("configuration: '" + key + "' must be a bool, number or string");
    if (p) {
      PLUMB_ASSIGN_OR_RETURN(x, coerce(*p, x, "configuration"));
    }
    c[key] = std::move(x);
  }
  PLUMB_RETURN_IF_ERROR(validate_config(sp, c));
  return c;
}

json::object space_to_json(const SearchSpace& sp) {
  json::array ps;
  for (const auto& p : sp.params) {
    json::object o{{"name", p.name}, {"type", std::string(kind_name(p.kind))}};
    if (!p.values.empty() && p.kind != ParamKind::kBool) {
      json::array vs;
      for (const auto& v : p.values) vs.push_back(launch::param_to_json(v));
      o["values"] = vs;
    } else if (p.is_range()) {
      o["low"] = p.kind == ParamKind::kInt ? json::value(int64_t(p.low)) : json::value(p.low);
      o["high"] = p.kind == ParamKind::kInt ? json::value(int64_t(p.high)) : json::value(p.high);
      o["log"] = p.log;
    }
    if (p.default_value) o["default"] = launch::param_to_json(*p.default_value);
    if (!p.when.empty()) {
      json::object w;
      for (const auto& c : p.when) {
        json::array vs;
        for (const auto& v : c.values) vs.push_back(launch::param_to_json(v));
        w[c.param] = vs;
      }
      o["when"] = w;
    }
    ps.push_back(std::move(o));
  }
  return json::object{
      {"name", sp.name}, {"adapter", sp.adapter}, {"fixed", config_to_json(sp.fixed)}, {"params", ps}};
}

std::string config_summary(const SearchSpace& sp, const Config& c) {
  std::string s;
  for (const auto& p : sp.params) {
    auto it = c.find(p.name);
    if (it == c.end()) continue;
    s += (s.empty() ? "" : " ") + p.name + "=" + launch::format_value(it->second);
  }
  for (const auto& [k, v] : c) {
    bool declared = false;
    for (const auto& p : sp.params) declared = declared || p.name == k;
    if (!declared) s += (s.empty() ? "" : " ") + k + "=" + launch::format_value(v);
  }
  return s.empty() ? "(empty)" : s;
}

}  // namespace plumb::tune
