#include "core/json.h"

#include <algorithm>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

namespace plumb::json {

namespace {

// Boost.JSON's own handler, but a number with a fraction or an exponent is converted from its text
// with std::from_chars, which rounds correctly. Boost 1.81's parser has no precise mode (added in
// 1.83): it can miss a 17-digit double, or a large exponent, by one ulp, so a number plumb printed
// (shortest round-trip form) could read back as another number and a content hash taken over the
// canonical JSON would not survive writing and reading a file.
struct PreciseHandler {
  static constexpr std::size_t max_object_size = boost::json::object::max_size();
  static constexpr std::size_t max_array_size = boost::json::array::max_size();
  static constexpr std::size_t max_key_size = boost::json::string::max_size();
  static constexpr std::size_t max_string_size = boost::json::string::max_size();
  using ec_t = boost::json::error_code;
  using sv = boost::json::string_view;

  boost::json::value_stack st;
  std::string number;  // the parts of a number split across writes

  bool on_document_begin(ec_t&) { return true; }
  bool on_document_end(ec_t&) { return true; }
  bool on_object_begin(ec_t&) { return true; }
  bool on_object_end(std::size_t n, ec_t&) {
    st.push_object(n);
    return true;
  }
  bool on_array_begin(ec_t&) { return true; }
  bool on_array_end(std::size_t n, ec_t&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(sv s, std::size_t, ec_t&) {
    st.push_chars(s);
    return true;
  }
  bool on_key(sv s, std::size_t, ec_t&) {
    st.push_key(s);
    return true;
  }
  bool on_string_part(sv s, std::size_t, ec_t&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(sv s, std::size_t, ec_t&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(sv s, ec_t&) {
    number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t i, sv, ec_t&) {
    number.clear();
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, sv, ec_t&) {
    number.clear();
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, sv s, ec_t&) {
    // The whole number is `s` unless it was split across writes (then the parts are in `number`).
    if (!number.empty()) number.append(s.data(), s.size());
    const std::string_view text = number.empty() ? std::string_view(s.data(), s.size()) : number;
    double exact = 0;
    auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), exact);
    // Out of range (an overflow Boost also reads as infinity, or an underflow to zero): keep Boost's.
    if (err == std::errc() && end == text.data() + text.size()) d = exact;
    number.clear();
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, ec_t&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(ec_t&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(sv, ec_t&) { return true; }
  bool on_comment(sv, ec_t&) { return true; }
};

}  // namespace

Result<value> parse(std::string_view text) {
  boost::json::parse_options opt;
  opt.max_depth = 64;
  boost::json::basic_parser<PreciseHandler> p(opt);
  p.handler().st.reset();
  boost::json::error_code ec;
  std::size_t n = p.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size()) ec = boost::json::error::extra_data;
  if (ec) return invalid_argument("invalid JSON: " + ec.message());
  return p.handler().st.release();
}

Result<object> parse_object(std::string_view text) {
  PLUMB_ASSIGN_OR_RETURN(value v, parse(text));
  if (!v.is_object()) return invalid_argument("expected a JSON object at the top level");
  return std::move(v.as_object());
}

Result<value> parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse(ss.str());
  if (!r.ok()) return r.status().with_context(path);
  return r;
}

std::string dump(const value& v) { return boost::json::serialize(v); }

namespace {
void pretty(std::string& out, const value& v, int indent) {
  auto pad = [&](int n) { out.append(size_t(n) * 2, ' '); };
  if (v.is_object()) {
    const auto& o = v.as_object();
    if (o.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    size_t i = 0;
    for (const auto& kv : o) {
      pad(indent + 1);
      out += boost::json::serialize(value(kv.key()));
      out += ": ";
      pretty(out, kv.value(), indent + 1);
      if (++i < o.size()) out += ",";
      out += "\n";
    }
    pad(indent);
    out += "}";
  } else if (v.is_array()) {
    const auto& a = v.as_array();
    if (a.empty()) {
      out += "[]";
      return;
    }
    out += "[\n";
    for (size_t i = 0; i < a.size(); ++i) {
      pad(indent + 1);
      pretty(out, a[i], indent + 1);
      if (i + 1 < a.size()) out += ",";
      out += "\n";
    }
    pad(indent);
    out += "]";
  } else {
    out += boost::json::serialize(v);
  }
}

void canon(std::string& out, const value& v) {
  if (v.is_object()) {
    const auto& o = v.as_object();
    std::vector<const boost::json::key_value_pair*> kvs;
    kvs.reserve(o.size());
    for (const auto& kv : o) kvs.push_back(&kv);
    std::sort(kvs.begin(), kvs.end(), [](auto* a, auto* b) { return a->key() < b->key(); });
    out += '{';
    for (size_t i = 0; i < kvs.size(); ++i) {
      if (i) out += ',';
      out += boost::json::serialize(value(kvs[i]->key()));
      out += ':';
      canon(out, kvs[i]->value());
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    const auto& a = v.as_array();
    for (size_t i = 0; i < a.size(); ++i) {
      if (i) out += ',';
      canon(out, a[i]);
    }
    out += ']';
  } else {
    out += boost::json::serialize(v);
  }
}
}  // namespace

std::string dump_pretty(const value& v) {
  std::string out;
  pretty(out, v, 0);
  return out;
}

std::string canonical(const value& v) {
  std::string out;
  canon(out, v);
  return out;
}

Result<std::optional<std::string>> opt_string(const object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return std::optional<std::string>{};
  if (!it->value().is_string()) return invalid_argument("field '" + std::string(key) + "' must be a string");
  return std::optional<std::string>(std::string(it->value().as_string()));
}

Result<std::optional<int64_t>> opt_int(const object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return std::optional<int64_t>{};
  const auto& v = it->value();
  if (v.is_int64()) return std::optional<int64_t>(v.as_int64());
  if (v.is_uint64() && v.as_uint64() <= uint64_t(INT64_MAX))
    return std::optional<int64_t>(int64_t(v.as_uint64()));
  // A double holding an integer (e.g. 64.0). The range check comes first: converting 1e300 or NaN
  // to int64_t is undefined behaviour. 2^63 itself is out of range; -2^63 is in.
  if (v.is_double()) {
    const double d = v.as_double();
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == std::trunc(d))
      return std::optional<int64_t>(int64_t(d));
  }
  return invalid_argument("field '" + std::string(key) + "' must be an integer");
}

Result<std::optional<double>> opt_double(const object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return std::optional<double>{};
  const auto& v = it->value();
  if (v.is_double()) return std::optional<double>(v.as_double());
  if (v.is_int64()) return std::optional<double>(double(v.as_int64()));
  if (v.is_uint64()) return std::optional<double>(double(v.as_uint64()));
  return invalid_argument("field '" + std::string(key) + "' must be a number");
}

std::optional<double> number_at(const object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || !it->value().is_number()) return std::nullopt;
  return it->value().to_number<double>();
}

std::optional<std::string> string_at(const object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || !it->value().is_string()) return std::nullopt;
  return std::string(it->value().as_string());
}

value number_or_null(double v) { return std::isfinite(v) ? value(v) : value(nullptr); }

value number_or_null(const std::optional<double>& v) { return v ? number_or_null(*v) : value(nullptr); }

Result<std::optional<bool>> opt_bool(const object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return std::optional<bool>{};
  if (!it->value().is_bool()) return invalid_argument("field '" + std::string(key) + "' must be a boolean");
  return std::optional<bool>(it->value().as_bool());
}

}  // namespace plumb::json
