// InferenceBench's scenario files and request files (workload/inferencebench.h). The input's first
// byte picks the parser (even: scenario JSON; odd: request JSONL) and the rest is the file.
// Invariants: an accepted scenario has at least one profile, lengths and counts >= 1, range_ratio in
// (0, 1], a positive rate for every poisson/constant profile, and arrival specs (one per profile)
// whose concurrency is >= 1 under both rules; an accepted request file has one metadata entry per
// request, every request validates, and the set survives to_jsonl -> parse_jsonl with its set hash.
#include <string>

#include "fuzz/fuzz_target.h"
#include "workload/inferencebench.h"
#include "workload/request.h"

PLUMB_FUZZ_TARGET(inferencebench) {
  namespace wl = plumb::workload;
  if (input.empty()) return "";
  const bool requests = (static_cast<unsigned char>(input[0]) & 1) != 0;
  const std::string_view text = input.substr(1);
  if (!requests) {
    auto s = wl::parse_ib_scenario(text);
    if (!s.ok()) return "";
    if (s->profiles.empty()) return "an accepted scenario has no profile";
    if (s->input_len < 1 || s->output_len < 1 || s->num_requests < 1 || s->max_new_tokens < 1)
      return "an accepted scenario has a length or count below 1";
    if (!(s->range_ratio > 0 && s->range_ratio <= 1))
      return "an accepted scenario has range_ratio outside (0, 1]";
    for (const auto& p : s->profiles)
      if (p.pattern != wl::ArrivalKind::kBurst && !(p.rate_per_s > 0))
        return "an accepted poisson/constant profile has no positive rate";
    for (auto rule : {wl::IbConcurrency::kDeclared, wl::IbConcurrency::kRunner}) {
      if (wl::ib_arrivals(*s, 1, rule).size() != s->profiles.size())
        return "arrival specs are not one per profile";
      for (size_t i = 0; i < s->profiles.size(); ++i)
        if (wl::ib_profile_concurrency(*s, i, rule) < 1) return "a profile's concurrency is below 1";
    }
    return "";
  }
  auto f = wl::parse_ib_requests(text, wl::IbRequestDefaults{});
  if (!f.ok()) return "";
  if (f->meta.size() != f->set.requests.size()) return "request metadata is not one entry per request";
  for (const auto& r : f->set.requests)
    if (!wl::validate(r).ok()) return "an accepted IB request does not validate";
  if (!f->set.requests.empty()) {
    auto back = wl::parse_jsonl(wl::to_jsonl(f->set));
    if (!back.ok()) return "an IB request set written by plumb is refused: " + back.status().message();
    if (back->set_hash != f->set.set_hash) return "an IB request set reads back with another set hash";
  }
  return "";
}
