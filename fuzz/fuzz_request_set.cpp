// plumb's own request-set JSONL (workload/request.h): each line's fields (from_json) and the whole
// file with its content hashes (parse_jsonl). A fuzzer cannot forge SHA-256, so each line is also
// fed to from_json directly, the step parse_jsonl takes before it checks the hash. Invariants: an
// accepted request validates and survives to_json -> from_json with the same content hash; an
// accepted set is written and read back to the same set hash; a set made of accepted lines is
// written and read back whole.
#include <string>
#include <vector>

#include "core/json.h"
#include "fuzz/fuzz_target.h"
#include "workload/request.h"

PLUMB_FUZZ_TARGET(request_set) {
  namespace wl = plumb::workload;
  std::vector<wl::Request> accepted;
  std::string_view text = input;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    auto obj = plumb::json::parse_object(line);
    if (!obj.ok()) continue;
    auto req = wl::from_json(*obj);
    if (!req.ok()) continue;
    if (!wl::validate(*req).ok()) return "from_json accepted a request that does not validate";
    auto back = wl::from_json(wl::to_json(*req));
    if (!back.ok()) return "to_json of an accepted request is refused: " + back.status().message();
    if (wl::content_hash(*back) != wl::content_hash(*req))
      return "a request changes through to_json/from_json";
    accepted.push_back(std::move(req).value());
  }
  auto set = wl::parse_jsonl(input);
  if (set.ok()) {
    auto again = wl::parse_jsonl(wl::to_jsonl(*set));
    if (!again.ok() || again->set_hash != set->set_hash) return "a parsed set does not survive to_jsonl";
  }
  if (!accepted.empty()) {
    auto made = wl::make_request_set(accepted);
    if (!made.ok()) return "accepted requests do not make a set: " + made.status().message();
    auto read = wl::parse_jsonl(wl::to_jsonl(*made));
    if (!read.ok()) return "a written set is refused: " + read.status().message();
    if (read->set_hash != made->set_hash) return "a written set reads back with another set hash";
  }
  return "";
}
