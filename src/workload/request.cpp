#include "workload/request.h"

#include <cmath>

#include "core/file.h"
#include "core/lines.h"
#include "core/sha256.h"

namespace plumb::workload {

json::object hashed_fields(const Request& r) {
  json::object o;
  o["ignore_eos"] = r.ignore_eos;
  o["max_tokens"] = r.max_tokens;
  if (r.prompt) {
    o["prompt"] = *r.prompt;
  } else {
    json::array msgs;
    for (const auto& m : r.messages) {
      json::object mo;
      mo["content"] = m.content;
      mo["role"] = m.role;
      msgs.emplace_back(std::move(mo));
    }
    o["messages"] = std::move(msgs);
  }
  o["temperature"] = r.temperature;
  return o;
}

std::string content_hash(const Request& r) { return sha256_hex(json::canonical(hashed_fields(r))); }

json::object to_json(const Request& r) {
  json::object o;
  o["hash"] = content_hash(r);
  json::object h = hashed_fields(r);
  for (auto& kv : h) o[kv.key()] = kv.value();
  o["stream"] = r.stream;
  if (r.prompt_tokens >= 0) o["prompt_tokens"] = r.prompt_tokens;
  return o;
}

Status validate(const Request& r) {
  if (r.prompt && !r.messages.empty()) return invalid_argument("request has both 'prompt' and 'messages'");
  if (!r.prompt && r.messages.empty()) return invalid_argument("request has neither 'prompt' nor 'messages'");
  if (r.max_tokens < 1)
    return invalid_argument("'max_tokens' must be >= 1, got " + std::to_string(r.max_tokens));
  if (!(r.temperature >= 0.0) || !std::isfinite(r.temperature))
    return invalid_argument("'temperature' must be a finite number >= 0");
  for (const auto& m : r.messages) {
    if (m.role.empty()) return invalid_argument("a message has an empty 'role'");
  }
  return Status::Ok();
}

Result<Request> from_json(const json::object& o) {
  Request r;
  auto mit = o.find("messages");
  if (mit != o.end() && !mit->value().is_null()) {
    if (!mit->value().is_array()) return invalid_argument("field 'messages' must be an array");
    for (const auto& mv : mit->value().as_array()) {
      if (!mv.is_object()) return invalid_argument("each of 'messages' must be an object");
      PLUMB_ASSIGN_OR_RETURN(auto role, json::opt_string(mv.as_object(), "role"));
      PLUMB_ASSIGN_OR_RETURN(auto content, json::opt_string(mv.as_object(), "content"));
      if (!role) return invalid_argument("a message lacks 'role'");
      if (!content) return invalid_argument("a message lacks a string 'content'");
      r.messages.push_back({*role, *content});
    }
  }
  PLUMB_ASSIGN_OR_RETURN(r.prompt, json::opt_string(o, "prompt"));
  PLUMB_ASSIGN_OR_RETURN(auto max_tokens, json::opt_int(o, "max_tokens"));
  if (!max_tokens) return invalid_argument("missing 'max_tokens'");
  r.max_tokens = *max_tokens;
  PLUMB_ASSIGN_OR_RETURN(auto temperature, json::opt_double(o, "temperature"));
  r.temperature = temperature.value_or(0.0);
  PLUMB_ASSIGN_OR_RETURN(auto ignore_eos, json::opt_bool(o, "ignore_eos"));
  r.ignore_eos = ignore_eos.value_or(true);
  PLUMB_ASSIGN_OR_RETURN(auto stream, json::opt_bool(o, "stream"));
  r.stream = stream.value_or(true);
  PLUMB_ASSIGN_OR_RETURN(auto prompt_tokens, json::opt_int(o, "prompt_tokens"));
  r.prompt_tokens = prompt_tokens.value_or(-1);
  PLUMB_RETURN_IF_ERROR(validate(r));
  return r;
}

std::string set_hash_of(const std::vector<std::string>& hashes) {
  Sha256 h;
  for (const auto& s : hashes) h.update(s);
  return h.hex_digest();
}

Result<RequestSet> make_request_set(std::vector<Request> requests) {
  RequestSet set;
  set.hashes.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Status s = validate(requests[i]);
    if (!s.ok()) return s.with_context("request " + std::to_string(i));
    set.hashes.push_back(content_hash(requests[i]));
  }
  set.requests = std::move(requests);
  set.set_hash = set_hash_of(set.hashes);
  return set;
}

std::string to_jsonl(const RequestSet& set) {
  std::string out;
  for (const auto& r : set.requests) {
    out += json::dump(to_json(r));
    out += '\n';
  }
  return out;
}

Status for_each_jsonl_object(std::string_view text,
                             const std::function<Status(const json::object& obj, size_t line_no)>& fn) {
  Status st;
  for_each_nonblank_line(text, [&](std::string_view line, size_t line_no) {
    auto where = "line " + std::to_string(line_no);
    auto obj = json::parse_object(line);
    st = obj.ok() ? fn(*obj, line_no).with_context(where) : obj.status().with_context(where);
    return st.ok();
  });
  return st;
}

Result<RequestSet> parse_jsonl(std::string_view text, size_t* hashes_computed) {
  RequestSet set;
  PLUMB_RETURN_IF_ERROR(for_each_jsonl_object(text, [&](const json::object& obj, size_t) -> Status {
    PLUMB_ASSIGN_OR_RETURN(auto req, from_json(obj));
    PLUMB_ASSIGN_OR_RETURN(auto claimed, json::opt_string(obj, "hash"));
    std::string actual = content_hash(req);
    if (!claimed && hashes_computed != nullptr) {
      ++*hashes_computed;
      claimed = actual;
    }
    if (!claimed) return invalid_argument("missing 'hash'");
    if (*claimed != actual)
      return corrupt("content hash mismatch (file says " + *claimed + ", content hashes to " + actual +
                     "); the request was edited or the file is damaged");
    set.hashes.push_back(std::move(actual));
    set.requests.push_back(std::move(req));
    return Status();
  }));
  if (set.requests.empty()) return invalid_argument("request set is empty");
  set.set_hash = set_hash_of(set.hashes);
  return set;
}

Status write_request_set(const std::string& path, const RequestSet& set) {
  return write_file_atomic(path, to_jsonl(set));
}

Result<RequestSet> read_request_set(const std::string& path, size_t* hashes_computed) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto r = parse_jsonl(text, hashes_computed);
  if (!r.ok()) return r.status().with_context(path);
  return r;
}

}  // namespace plumb::workload
