#include "launch/adapter.h"

#include <toml++/toml.h>

#include <charconv>
#include <filesystem>
#include <set>

#include "core/file.h"
#include "core/json.h"
#include "launch/builtin_adapters.h"

namespace plumb::launch {
namespace {

std::string type_name(ParamType t) {
  switch (t) {
    case ParamType::kInt:
      return "int";
    case ParamType::kFloat:
      return "float";
    case ParamType::kBool:
      return "bool";
    case ParamType::kString:
      return "string";
    case ParamType::kArgs:
      return "args";
  }
  return "?";
}

Result<ParamType> parse_type(std::string_view s) {
  if (s == "int") return ParamType::kInt;
  if (s == "float") return ParamType::kFloat;
  if (s == "bool") return ParamType::kBool;
  if (s == "string") return ParamType::kString;
  if (s == "args") return ParamType::kArgs;
  return invalid_argument("unknown type '" + std::string(s) + "' (int, float, bool, string, args)");
}

Result<ParamValue> to_param(const toml::node& n, const std::string& where) {
  if (auto b = n.as_boolean()) return ParamValue{b->get()};
  if (auto i = n.as_integer()) return ParamValue{int64_t(i->get())};
  if (auto d = n.as_floating_point()) return ParamValue{d->get()};
  if (auto s = n.as_string()) return ParamValue{s->get()};
  if (auto a = n.as_array()) {
    std::vector<std::string> out;
    for (const auto& el : *a) {
      auto s2 = el.as_string();
      if (!s2) return invalid_argument(where + ": arrays must hold strings only");
      out.push_back(s2->get());
    }
    return ParamValue{std::move(out)};
  }
  return invalid_argument(where + ": must be a bool, integer, float, string or array of strings");
}

Result<Params> to_params(const toml::table* t, const std::string& where) {
  Params out;
  if (!t) return out;
  for (const auto& [k, v] : *t) {
    PLUMB_ASSIGN_OR_RETURN(auto p, to_param(v, where + "." + std::string(k.str())));
    out.emplace(std::string(k.str()), std::move(p));
  }
  return out;
}

Result<toml::table> parse_toml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, std::string(source));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return invalid_argument(std::string(source) + ":" + std::to_string(b.line) + ":" +
                            std::to_string(b.column) + ": invalid TOML: " + std::string(e.description()));
  }
}

Result<std::string> req_string(const toml::table& t, std::string_view key, std::string_view src) {
  auto n = t.get(key);
  if (!n) return invalid_argument(std::string(src) + ": missing field '" + std::string(key) + "'");
  auto s = n->as_string();
  if (!s) return invalid_argument(std::string(src) + ": field '" + std::string(key) + "' must be a string");
  return s->get();
}

Result<std::string> opt_string(const toml::table& t, std::string_view key, std::string_view src) {
  auto n = t.get(key);
  if (!n) return std::string();
  auto s = n->as_string();
  if (!s) return invalid_argument(std::string(src) + ": field '" + std::string(key) + "' must be a string");
  return s->get();
}

// Replaces each "{name}" with its value; `used` collects the names consumed.
Result<std::string> substitute(const std::string& tmpl, const std::map<std::string, std::string>& values,
                               std::set<std::string>* used, std::string_view what) {
  std::string out;
  size_t i = 0;
  while (i < tmpl.size()) {
    size_t open = tmpl.find('{', i);
    if (open == std::string::npos) {
      out.append(tmpl, i, std::string::npos);
      break;
    }
    size_t close = tmpl.find('}', open);
    if (close == std::string::npos)
      return invalid_argument(std::string(what) + ": unclosed '{' in \"" + tmpl + "\"");
    out.append(tmpl, i, open - i);
    std::string name = tmpl.substr(open + 1, close - open - 1);
    auto it = values.find(name);
    if (it == values.end())
      return invalid_argument(std::string(what) + ": placeholder {" + name + "} in \"" + tmpl +
                              "\" has no value (give parameter '" + name + "')");
    out += it->second;
    if (used) used->insert(name);
    i = close + 1;
  }
  return out;
}

// "{a}{b}" -> {"a", "b"}: the placeholder names of a template.
void collect_placeholders(const std::string& tmpl, std::set<std::string>& out) {
  size_t i = 0;
  while ((i = tmpl.find('{', i)) != std::string::npos) {
    size_t close = tmpl.find('}', i);
    if (close == std::string::npos) return;
    out.insert(tmpl.substr(i + 1, close - i - 1));
    i = close + 1;
  }
}

Status check_type(const FlagSpec& f, const ParamValue& v) {
  bool ok = false;
  switch (f.type) {
    case ParamType::kInt:
      ok = std::holds_alternative<int64_t>(v);
      break;
    case ParamType::kFloat:
      ok = std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
      break;
    case ParamType::kBool:
      ok = std::holds_alternative<bool>(v);
      break;
    case ParamType::kString:
      ok = std::holds_alternative<std::string>(v);
      break;
    case ParamType::kArgs:
      ok = std::holds_alternative<std::vector<std::string>>(v);
      break;
  }
  if (ok) return Status::Ok();
  return invalid_argument(
      "parameter '" + f.param + "' must be " +
      (f.type == ParamType::kArgs ? std::string("an array of strings") : "a " + type_name(f.type)) +
      ", got " + format_value(v));
}

// host of "http://host:port/path" (brackets removed for IPv6).
std::string url_host(const std::string& url) {
  size_t s = url.find("://");
  size_t start = s == std::string::npos ? 0 : s + 3;
  if (start < url.size() && url[start] == '[') {
    size_t e = url.find(']', start);
    return url.substr(start + 1, e == std::string::npos ? std::string::npos : e - start - 1);
  }
  size_t end = url.find_first_of(":/", start);
  return url.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

json::value param_json(const ParamValue& v) {
  return std::visit(
      [](const auto& x) -> json::value {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          json::array a;
          for (const auto& s : x) a.emplace_back(s);
          return a;
        } else {
          return json::value(x);
        }
      },
      v);
}

}  // namespace

json::value param_to_json(const ParamValue& v) { return param_json(v); }

std::string format_value(const ParamValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          char buf[64];
          auto r = std::to_chars(buf, buf + sizeof buf, x);
          return std::string(buf, r.ptr);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return x;
        } else {
          std::string out;
          for (const auto& s : x) out += (out.empty() ? "" : " ") + s;
          return out;
        }
      },
      v);
}

namespace {

Status parse_command(const toml::table& t, const std::string& src, Adapter& a) {
  auto cmd = t.get_as<toml::array>("command");
  if (!cmd) return invalid_argument(src + ": missing field 'command' (an array of strings)");
  for (const auto& el : *cmd) {
    auto s = el.as_string();
    if (!s) return invalid_argument(src + ": field 'command' must be an array of strings");
    a.command.push_back(s->get());
  }
  if (a.command.empty() || a.command[0].empty()) return invalid_argument(src + ": field 'command' is empty");
  return Status::Ok();
}

Status parse_readiness_timeout(const toml::table& t, const std::string& src, Adapter& a) {
  auto n = t.get("readiness_timeout_s");
  if (!n) return Status::Ok();
  double s = 0;
  if (auto i = n->as_integer())
    s = double(i->get());
  else if (auto d = n->as_floating_point())
    s = d->get();
  else
    return invalid_argument(src + ": field 'readiness_timeout_s' must be a number");
  if (!(s > 0)) return invalid_argument(src + ": field 'readiness_timeout_s' must be > 0");
  a.readiness_timeout = std::chrono::milliseconds(int64_t(s * 1000));
  return Status::Ok();
}

Status parse_env(const toml::table& t, const std::string& src, Adapter& a) {
  auto n = t.get("env");
  if (!n) return Status::Ok();
  auto et = n->as_table();
  if (!et) return invalid_argument(src + ": field 'env' must be a table");
  for (const auto& [k, v] : *et) {
    auto s = v.as_string();
    if (!s) return invalid_argument(src + ": env." + std::string(k.str()) + " must be a string");
    a.env[std::string(k.str())] = s->get();
  }
  return Status::Ok();
}

// The mapping rules a flag must meet: a bool needs a flag to print, every other non-args type one
// flag.
Status check_flag_spec(const FlagSpec& f, const std::string& where) {
  if (f.type == ParamType::kBool) {
    if (f.flag.empty() && f.false_flag.empty())
      return invalid_argument(where + ": a bool needs 'flag' or 'false_flag'");
    if (f.bool_as_value && f.flag.empty())
      return invalid_argument(where + ": bool_style \"value\" needs 'flag'");
  } else if (f.type != ParamType::kArgs && f.flag.empty()) {
    return invalid_argument(where + ": missing field 'flag'");
  }
  return Status::Ok();
}

Result<FlagSpec> parse_flag(const toml::table& ft, const std::string& where) {
  FlagSpec f;
  PLUMB_ASSIGN_OR_RETURN(f.param, req_string(ft, "param", where));
  PLUMB_ASSIGN_OR_RETURN(f.flag, opt_string(ft, "flag", where));
  PLUMB_ASSIGN_OR_RETURN(f.false_flag, opt_string(ft, "false_flag", where));
  PLUMB_ASSIGN_OR_RETURN(std::string type, req_string(ft, "type", where));
  auto pt = parse_type(type);
  if (!pt.ok()) return pt.status().with_context(where);
  f.type = *pt;
  PLUMB_ASSIGN_OR_RETURN(std::string style, opt_string(ft, "bool_style", where));
  if (style == "value")
    f.bool_as_value = true;
  else if (!style.empty() && style != "switch")
    return invalid_argument(where + ": bool_style must be \"switch\" or \"value\", got \"" + style + "\"");
  if (auto j = ft.get("joined")) {
    auto jb = j->as_boolean();
    if (!jb) return invalid_argument(where + ": field 'joined' must be a bool");
    f.joined = jb->get();
  }
  PLUMB_RETURN_IF_ERROR(check_flag_spec(f, where));
  return f;
}

Status parse_flags(const toml::table& t, const std::string& src, Adapter& a) {
  auto n = t.get("flags");
  if (!n) return Status::Ok();
  auto arr = n->as_array();
  if (!arr) return invalid_argument(src + ": field 'flags' must be an array of tables ([[flags]])");
  std::set<std::string> seen;
  for (size_t i = 0; i < arr->size(); ++i) {
    auto ft = (*arr)[i].as_table();
    std::string where = src + ": flags[" + std::to_string(i) + "]";
    if (!ft) return invalid_argument(where + " must be a table");
    PLUMB_ASSIGN_OR_RETURN(FlagSpec f, parse_flag(*ft, where));
    if (!seen.insert(f.param).second)
      return invalid_argument(where + ": parameter '" + f.param + "' is mapped twice");
    a.flags.push_back(std::move(f));
  }
  return Status::Ok();
}

}  // namespace

Result<Adapter> parse_adapter(std::string_view toml_text, std::string_view source_name) {
  PLUMB_ASSIGN_OR_RETURN(toml::table t, parse_toml(toml_text, source_name));
  std::string src(source_name);
  Adapter a;
  PLUMB_ASSIGN_OR_RETURN(a.name, req_string(t, "name", src));
  src = "adapter '" + a.name + "'";
  PLUMB_RETURN_IF_ERROR(parse_command(t, src, a));
  PLUMB_ASSIGN_OR_RETURN(a.health_url, req_string(t, "health_url", src));
  PLUMB_ASSIGN_OR_RETURN(a.log_file, opt_string(t, "log_file", src));
  if (a.log_file.empty()) a.log_file = a.name + "-{port}.log";
  PLUMB_RETURN_IF_ERROR(parse_readiness_timeout(t, src, a));
  PLUMB_RETURN_IF_ERROR(parse_env(t, src, a));
  if (auto n = t.get("defaults"); n && !n->is_table())
    return invalid_argument(src + ": field 'defaults' must be a table");
  PLUMB_ASSIGN_OR_RETURN(a.defaults, to_params(t.get_as<toml::table>("defaults"), src + ": defaults"));
  PLUMB_RETURN_IF_ERROR(parse_flags(t, src, a));
  return a;
}

Result<Adapter> load_adapter_file(const std::string& path) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_adapter(text, path);
}

std::vector<std::string> builtin_adapter_names() {
  std::vector<std::string> out;
  for (const auto& b : builtin_adapter_sources()) out.emplace_back(b.name);
  return out;
}

Result<std::string> builtin_adapter_text(std::string_view name) {
  for (const auto& b : builtin_adapter_sources())
    if (b.name == name) return std::string(b.toml);
  std::string known;
  for (const auto& n : builtin_adapter_names()) known += (known.empty() ? "" : ", ") + n;
  return not_found("no built-in adapter '" + std::string(name) + "' (built-in: " + known + ")");
}

Result<Adapter> builtin_adapter(std::string_view name) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, builtin_adapter_text(name));
  return parse_adapter(text, "builtin:" + std::string(name));
}

Result<Adapter> resolve_adapter(const std::string& name_or_path) {
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".toml") == std::string::npos)
    return builtin_adapter(name_or_path);
  return load_adapter_file(name_or_path);
}

namespace {

// The names that appear as {placeholders} in the command, health URL, log file or env.
std::set<std::string> adapter_placeholders(const Adapter& adapter) {
  std::set<std::string> placeholders;
  for (const auto& c : adapter.command) collect_placeholders(c, placeholders);
  collect_placeholders(adapter.health_url, placeholders);
  collect_placeholders(adapter.log_file, placeholders);
  for (const auto& [k, v] : adapter.env) collect_placeholders(v, placeholders);
  return placeholders;
}

// Parameters that appear as placeholders are consumed there; every other one needs a flag of its
// type.
Status check_params(const Adapter& adapter, const Params& all, const std::set<std::string>& placeholders) {
  std::map<std::string, const FlagSpec*> by_param;
  for (const auto& f : adapter.flags) by_param[f.param] = &f;
  for (const auto& [k, v] : all) {
    if (placeholders.count(k)) continue;
    if (!by_param.count(k)) {
      std::string known;
      for (const auto& f : adapter.flags) known += (known.empty() ? "" : ", ") + f.param;
      for (const auto& p : placeholders)
        if (p != "port") known += (known.empty() ? "" : ", ") + p;
      return invalid_argument("adapter '" + adapter.name + "' has no parameter '" + k + "' (known: " + known +
                              ")");
    }
    auto st = check_type(*by_param[k], v);
    if (!st.ok()) return st.with_context("adapter '" + adapter.name + "'");
  }
  return Status::Ok();
}

// Appends the flags of every set parameter not consumed by a placeholder, in the adapter's order;
// args-typed values go after all flags.
void append_flags(const Adapter& adapter, const Params& all, const std::set<std::string>& placeholders,
                  std::vector<std::string>& argv) {
  std::vector<std::string> trailing;
  for (const auto& f : adapter.flags) {
    auto it = all.find(f.param);
    if (it == all.end() || placeholders.count(f.param)) continue;
    const ParamValue& v = it->second;
    if (f.type == ParamType::kArgs) {
      for (const auto& x : std::get<std::vector<std::string>>(v)) trailing.push_back(x);
    } else if (f.type == ParamType::kBool) {
      bool b = std::get<bool>(v);
      if (f.bool_as_value)
        argv.push_back(f.flag + "=" + (b ? "true" : "false"));
      else if (b && !f.flag.empty())
        argv.push_back(f.flag);
      else if (!b && !f.false_flag.empty())
        argv.push_back(f.false_flag);
    } else if (f.joined) {
      argv.push_back(f.flag + "=" + format_value(v));
    } else {
      argv.push_back(f.flag);
      argv.push_back(format_value(v));
    }
  }
  for (auto& x : trailing) argv.push_back(std::move(x));
}

}  // namespace

Result<LaunchSpec> render(const Adapter& adapter, const Params& params, uint16_t port) {
  if (port == 0) return invalid_argument("render: port must be > 0");
  Params all = adapter.defaults;
  for (const auto& [k, v] : params) all[k] = v;
  if (all.count("port"))
    return invalid_argument("parameter 'port' is set by the launcher, not the configuration");

  std::map<std::string, std::string> values;
  for (const auto& [k, v] : all) values[k] = format_value(v);
  values["port"] = std::to_string(port);

  std::set<std::string> placeholders = adapter_placeholders(adapter);
  PLUMB_RETURN_IF_ERROR(check_params(adapter, all, placeholders));

  LaunchSpec s;
  s.adapter = adapter.name;
  s.port = port;
  s.readiness_timeout = adapter.readiness_timeout;
  std::string what = "adapter '" + adapter.name + "'";
  for (const auto& c : adapter.command) {
    PLUMB_ASSIGN_OR_RETURN(std::string arg, substitute(c, values, nullptr, what));
    s.argv.push_back(std::move(arg));
  }
  append_flags(adapter, all, placeholders, s.argv);
  PLUMB_ASSIGN_OR_RETURN(s.health_url, substitute(adapter.health_url, values, nullptr, what));
  s.host = url_host(s.health_url);
  PLUMB_ASSIGN_OR_RETURN(s.log_file, substitute(adapter.log_file, values, nullptr, what));
  for (const auto& [k, v] : adapter.env) {
    PLUMB_ASSIGN_OR_RETURN(s.env[k], substitute(v, values, nullptr, what));
  }
  return s;
}

Result<EngineConfig> parse_engine_config(std::string_view toml_text, const std::string& base_dir) {
  PLUMB_ASSIGN_OR_RETURN(toml::table t, parse_toml(toml_text, "engine config"));
  EngineConfig c;
  PLUMB_ASSIGN_OR_RETURN(c.adapter, req_string(t, "adapter", "engine config"));
  for (const auto& [k, v] : t) {
    std::string key(k.str());
    if (key != "adapter" && key != "params")
      return invalid_argument("engine config: unknown field '" + key + "' (adapter, [params])");
  }
  if (auto n = t.get("params"); n && !n->is_table())
    return invalid_argument("engine config: field 'params' must be a table");
  PLUMB_ASSIGN_OR_RETURN(c.params, to_params(t.get_as<toml::table>("params"), "engine config: params"));
  std::string ref = c.adapter;
  bool is_path = ref.find('/') != std::string::npos || ref.find(".toml") != std::string::npos;
  if (is_path && !ref.empty() && ref[0] != '/') ref = (std::filesystem::path(base_dir) / ref).string();
  auto a = resolve_adapter(ref);
  if (!a.ok()) return a.status().with_context("engine config");
  c.resolved = std::move(a).value();
  return c;
}

Result<EngineConfig> load_engine_config(const std::string& path) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto c = parse_engine_config(text, std::filesystem::path(path).parent_path().string());
  if (!c.ok()) return c.status().with_context(path);
  return c;
}

std::string engine_config_json(const EngineConfig& c) {
  json::object params;
  for (const auto& [k, v] : c.params) params[k] = param_to_json(v);
  json::object o{{"adapter", c.resolved.name}, {"params", params}};
  return json::canonical(o);
}

}  // namespace plumb::launch
