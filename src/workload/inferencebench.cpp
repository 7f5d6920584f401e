#include "workload/inferencebench.h"

#include <cmath>
#include <limits>
#include <set>

#include "core/file.h"
#include "core/json.h"
#include "core/lines.h"

namespace plumb::workload {
namespace {

// Errors name the field by its path in the file ("synthetic.input_len", "profiles[2].pattern").
Status field_error(const std::string& field, const std::string& what) {
  return invalid_argument("field '" + field + "' " + what);
}

Result<std::optional<int64_t>> int_field(const json::object& o, std::string_view key, const std::string& path,
                                         int64_t min) {
  auto v = json::opt_int(o, key);
  if (!v.ok()) return field_error(path, "must be an integer");
  if (*v && **v < min)
    return field_error(path, "must be >= " + std::to_string(min) + ", got " + std::to_string(**v));
  return *v;
}

Result<std::optional<double>> number_field(const json::object& o, std::string_view key,
                                           const std::string& path) {
  auto v = json::opt_double(o, key);
  if (!v.ok()) return field_error(path, "must be a number");
  if (*v && !std::isfinite(**v)) return field_error(path, "must be finite");
  return *v;
}

Result<std::optional<bool>> bool_field(const json::object& o, std::string_view key, const std::string& path) {
  auto v = json::opt_bool(o, key);
  if (!v.ok()) return field_error(path, "must be true or false");
  return *v;
}

Result<std::optional<std::string>> string_field(const json::object& o, std::string_view key,
                                                const std::string& path) {
  auto v = json::opt_string(o, key);
  if (!v.ok()) return field_error(path, "must be a string");
  return *v;
}

Result<IbProfile> parse_profile(const json::value& v, const std::string& path) {
  if (!v.is_object()) return field_error(path, "must be an object");
  const auto& o = v.as_object();
  IbProfile p;
  PLUMB_ASSIGN_OR_RETURN(auto pattern, string_field(o, "pattern", path + ".pattern"));
  // IB's runner defaults a missing pattern to burst.
  std::string pat = pattern.value_or("burst");
  if (pat == "burst") {
    p.pattern = ArrivalKind::kBurst;
  } else if (pat == "poisson") {
    p.pattern = ArrivalKind::kPoisson;
  } else if (pat == "constant") {
    p.pattern = ArrivalKind::kConstant;
  } else {
    return field_error(path + ".pattern", "must be burst, poisson or constant, got '" + pat + "'");
  }
  PLUMB_ASSIGN_OR_RETURN(auto name, string_field(o, "name", path + ".name"));
  p.name = name && !name->empty() ? *name : pat;
  PLUMB_ASSIGN_OR_RETURN(auto rate, number_field(o, "rate_per_s", path + ".rate_per_s"));
  if (p.pattern != ArrivalKind::kBurst) {
    if (!rate) return field_error(path + ".rate_per_s", "is required for pattern '" + pat + "'");
    if (!(*rate > 0.0)) return field_error(path + ".rate_per_s", "must be > 0, got " + std::to_string(*rate));
    p.rate_per_s = *rate;
  }
  PLUMB_ASSIGN_OR_RETURN(auto conc, int_field(o, "concurrency", path + ".concurrency", 1));
  if (conc) {
    if (*conc > std::numeric_limits<int>::max()) return field_error(path + ".concurrency", "is too large");
    p.concurrency = int(*conc);
  }
  PLUMB_ASSIGN_OR_RETURN(p.num_requests, int_field(o, "num_requests", path + ".num_requests", 1));
  return p;
}

// The "synthetic" object: input and output lengths, the range ratio and ignore_eos.
Status parse_synthetic(const json::object& syn, IbScenario& s) {
  PLUMB_ASSIGN_OR_RETURN(auto in, int_field(syn, "input_len", "synthetic.input_len", 1));
  s.input_len = in.value_or(s.input_len);
  PLUMB_ASSIGN_OR_RETURN(auto out, int_field(syn, "output_len", "synthetic.output_len", 1));
  s.output_len = out.value_or(s.output_len);
  PLUMB_ASSIGN_OR_RETURN(auto ratio, number_field(syn, "range_ratio", "synthetic.range_ratio"));
  // IB's runner replaces an out-of-range ratio by 0.8 without a word; plumb refuses it.
  if (ratio && !(*ratio > 0.0 && *ratio <= 1.0))
    return field_error("synthetic.range_ratio", "must be in (0, 1], got " + std::to_string(*ratio));
  s.range_ratio = ratio.value_or(s.range_ratio);
  PLUMB_ASSIGN_OR_RETURN(auto eos, bool_field(syn, "ignore_eos", "synthetic.ignore_eos"));
  s.ignore_eos = eos.value_or(true);
  s.ignore_eos_given = eos.has_value();
  return Status::Ok();
}

// "profiles" (an array, names distinct) or "profile" (one), else IB's runner's default burst
// profile; every profile's num_requests, when given, must be the scenario's.
Status parse_profiles(const json::object& o, IbScenario& s) {
  auto many = o.find("profiles");
  auto one = o.find("profile");
  const bool has_many = many != o.end() && !many->value().is_null();
  const bool has_one = one != o.end() && !one->value().is_null();
  if (has_many && has_one) return field_error("profiles", "and 'profile' are both given: keep one");
  if (has_many) {
    if (!many->value().is_array() || many->value().as_array().empty())
      return field_error("profiles", "must be a non-empty array");
    const auto& arr = many->value().as_array();
    std::set<std::string> names;
    for (size_t i = 0; i < arr.size(); ++i) {
      std::string path = "profiles[" + std::to_string(i) + "]";
      PLUMB_ASSIGN_OR_RETURN(auto p, parse_profile(arr[i], path));
      // IB's metrics JSON is keyed by profile name: a repeated name would overwrite a profile.
      if (!names.insert(p.name).second)
        return field_error(path + ".name", "repeats the name '" + p.name + "' of an earlier profile");
      s.profiles.push_back(std::move(p));
    }
  } else if (has_one) {
    PLUMB_ASSIGN_OR_RETURN(auto p, parse_profile(one->value(), "profile"));
    s.profiles.push_back(std::move(p));
  } else {
    // IB's runner: {"name": "default", "pattern": "burst"}.
    s.profiles.push_back(IbProfile{.name = "default"});
  }
  // plumb runs every profile over the one request set of the scenario.
  for (size_t i = 0; i < s.profiles.size(); ++i) {
    const auto& p = s.profiles[i];
    if (p.num_requests && *p.num_requests != s.num_requests) {
      std::string path =
          (has_many ? "profiles[" + std::to_string(i) + "]" : std::string("profile")) + ".num_requests";
      return field_error(path, "(" + std::to_string(*p.num_requests) + ") differs from num_requests (" +
                                   std::to_string(s.num_requests) +
                                   "): plumb runs every profile over the scenario's one request set");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<IbScenario> parse_ib_scenario(std::string_view text) {
  auto parsed = json::parse_object(text);
  if (!parsed.ok()) return parsed.status().with_context("scenario file is not a JSON object");
  const json::object& o = *parsed;
  IbScenario s;
  PLUMB_ASSIGN_OR_RETURN(auto id, string_field(o, "scenario_id", "scenario_id"));
  s.scenario_id = id.value_or("");
  PLUMB_ASSIGN_OR_RETURN(auto name, string_field(o, "name", "name"));
  s.name = name.value_or("");
  PLUMB_ASSIGN_OR_RETURN(auto max_new, int_field(o, "max_new_tokens", "max_new_tokens", 1));
  s.max_new_tokens = max_new.value_or(s.max_new_tokens);
  PLUMB_ASSIGN_OR_RETURN(auto n, int_field(o, "num_requests", "num_requests", 1));
  s.num_requests = n.value_or(s.num_requests);
  PLUMB_ASSIGN_OR_RETURN(auto temp, number_field(o, "temperature", "temperature"));
  if (temp && *temp < 0.0) return field_error("temperature", "must be >= 0, got " + std::to_string(*temp));
  s.temperature = temp.value_or(s.temperature);
  PLUMB_ASSIGN_OR_RETURN(auto conc, int_field(o, "concurrency", "concurrency", 1));
  if (conc) {
    if (*conc > std::numeric_limits<int>::max()) return field_error("concurrency", "is too large");
    s.concurrency = int(*conc);
  }
  s.output_len = s.max_new_tokens;
  if (auto it = o.find("synthetic"); it != o.end() && !it->value().is_null()) {
    if (!it->value().is_object()) return field_error("synthetic", "must be an object");
    PLUMB_RETURN_IF_ERROR(parse_synthetic(it->value().as_object(), s));
  }
  PLUMB_RETURN_IF_ERROR(parse_profiles(o, s));
  return s;
}

Result<IbScenario> read_ib_scenario(const std::string& path) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto s = parse_ib_scenario(text);
  if (!s.ok()) return s.status().with_context(path);
  return s;
}

Result<IbConcurrency> parse_ib_concurrency(std::string_view s) {
  if (s == "declared") return IbConcurrency::kDeclared;
  if (s == "runner") return IbConcurrency::kRunner;
  return invalid_argument("unknown concurrency rule '" + std::string(s) + "' (expected declared or runner)");
}

int ib_profile_concurrency(const IbScenario& s, size_t profile, IbConcurrency rule) {
  const auto& p = s.profiles.at(profile);
  if (p.concurrency) return *p.concurrency;
  if (rule == IbConcurrency::kDeclared && s.concurrency) return *s.concurrency;
  return 1;
}

std::vector<ArrivalSpec> ib_arrivals(const IbScenario& s, uint64_t seed, IbConcurrency rule) {
  std::vector<ArrivalSpec> out;
  for (size_t i = 0; i < s.profiles.size(); ++i) {
    ArrivalSpec a;
    a.kind = s.profiles[i].pattern;
    a.rate = s.profiles[i].rate_per_s;
    a.max_concurrency = ib_profile_concurrency(s, i, rule);
    a.seed = seed;
    a.seed_dimension = s.profiles.size() > 1 ? "arrival/" + std::to_string(i) : "arrival";
    out.push_back(std::move(a));
  }
  return out;
}

SyntheticSpec ib_synthetic_spec(const IbScenario& s, uint64_t seed) {
  SyntheticSpec spec;
  spec.seed = seed;
  spec.num_requests = size_t(s.num_requests);
  spec.input_len = s.input_len;
  spec.output_len = s.output_len;
  spec.range_ratio = s.range_ratio;
  spec.temperature = s.temperature;
  spec.ignore_eos = s.ignore_eos;
  return spec;
}

IbRequestDefaults ib_request_defaults(const IbScenario& s) {
  // IB's request-file reader falls back to synthetic.ignore_eos with its own default false.
  return {.max_new_tokens = s.max_new_tokens,
          .temperature = s.temperature,
          .ignore_eos = s.ignore_eos_given && s.ignore_eos};
}

bool looks_like_ib_requests(std::string_view text) {
  bool ib = false;
  for_each_nonblank_line(text, [&](std::string_view line, size_t) {
    auto obj = json::parse_object(line);
    ib = obj.ok() && !obj->contains("hash") && !obj->contains("max_tokens") && !obj->contains("prompt");
    return false;  // the first non-blank line decides
  });
  return ib;
}

namespace {

// "messages": a non-empty array of {role, content}.
Status parse_ib_messages(const json::object& o, Request& r) {
  auto mit = o.find("messages");
  if (mit == o.end() || mit->value().is_null()) return field_error("messages", "is missing");
  if (!mit->value().is_array() || mit->value().as_array().empty())
    return field_error("messages", "must be a non-empty array");
  const auto& msgs = mit->value().as_array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    std::string path = "messages[" + std::to_string(i) + "]";
    if (!msgs[i].is_object()) return field_error(path, "must be an object");
    PLUMB_ASSIGN_OR_RETURN(auto role, string_field(msgs[i].as_object(), "role", path + ".role"));
    PLUMB_ASSIGN_OR_RETURN(auto content, string_field(msgs[i].as_object(), "content", path + ".content"));
    if (!role || role->empty()) return field_error(path + ".role", "is missing");
    if (!content) return field_error(path + ".content", "is missing");
    r.messages.push_back({*role, *content});
  }
  return Status::Ok();
}

// IB's identifiers of a request: content_hash, sample_id (or _id) and target_input_token_count.
Status parse_ib_meta(const json::object& o, IbRequestMeta& meta) {
  PLUMB_ASSIGN_OR_RETURN(auto hash, string_field(o, "content_hash", "content_hash"));
  meta.content_hash = hash.value_or("");
  // IB reads sample_id (or _id) with str(): numbers are ids too.
  for (const char* key : {"sample_id", "_id"}) {
    auto it = o.find(key);
    if (it == o.end() || it->value().is_null()) continue;
    meta.sample_id = it->value().is_string() ? std::string(it->value().as_string()) : json::dump(it->value());
    if (!meta.sample_id.empty()) break;
  }
  PLUMB_ASSIGN_OR_RETURN(auto target,
                         int_field(o, "target_input_token_count", "target_input_token_count", 0));
  meta.target_input_token_count = target.value_or(-1);
  return Status::Ok();
}

Result<Request> parse_ib_line(const json::object& o, const IbRequestDefaults& d, IbRequestMeta& meta,
                              bool& defaulted) {
  Request r;
  PLUMB_RETURN_IF_ERROR(parse_ib_messages(o, r));
  PLUMB_ASSIGN_OR_RETURN(auto max_new, int_field(o, "max_new_tokens", "max_new_tokens", 1));
  if (!max_new && o.contains("max_tokens"))
    return field_error("max_tokens",
                       "is plumb's name: an InferenceBench request file gives 'max_new_tokens' (IB's runner "
                       "would ignore 'max_tokens'); a plumb request set carries a 'hash' on every line");
  PLUMB_ASSIGN_OR_RETURN(auto temp, number_field(o, "temperature", "temperature"));
  if (temp && *temp < 0.0) return field_error("temperature", "must be >= 0, got " + std::to_string(*temp));
  PLUMB_ASSIGN_OR_RETURN(auto eos, bool_field(o, "ignore_eos", "ignore_eos"));
  defaulted = !max_new || !temp || !eos;
  r.max_tokens = max_new.value_or(d.max_new_tokens);
  r.temperature = temp.value_or(d.temperature);
  r.ignore_eos = eos.value_or(d.ignore_eos);
  PLUMB_ASSIGN_OR_RETURN(auto in_tokens, int_field(o, "input_token_count", "input_token_count", 0));
  r.prompt_tokens = in_tokens.value_or(-1);
  PLUMB_RETURN_IF_ERROR(parse_ib_meta(o, meta));
  PLUMB_RETURN_IF_ERROR(validate(r));
  return r;
}

}  // namespace

Result<IbRequestFile> parse_ib_requests(std::string_view text, const IbRequestDefaults& defaults) {
  IbRequestFile f;
  std::vector<Request> requests;
  PLUMB_RETURN_IF_ERROR(for_each_jsonl_object(text, [&](const json::object& obj, size_t) -> Status {
    IbRequestMeta meta;
    bool defaulted = false;
    PLUMB_ASSIGN_OR_RETURN(auto req, parse_ib_line(obj, defaults, meta, defaulted));
    f.ib_hashes += !meta.content_hash.empty();
    f.defaulted += defaulted;
    f.meta.push_back(std::move(meta));
    requests.push_back(std::move(req));
    return Status();
  }));
  if (requests.empty()) return invalid_argument("request file has no requests");
  PLUMB_ASSIGN_OR_RETURN(f.set, make_request_set(std::move(requests)));
  return f;
}

Result<IbRequestFile> read_ib_requests(const std::string& path, const IbRequestDefaults& defaults) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto f = parse_ib_requests(text, defaults);
  if (!f.ok()) return f.status().with_context(path);
  return f;
}

}  // namespace plumb::workload
