// Datasets read by `plumb bench --dataset` (workload/sources.h, parse_source): generic JSONL
// ({"messages"|"prompt", "max_tokens", "temperature"}, and InferenceBench-style lines with the
// same fields), LongBench-v2 and ShareGPT (JSONL or one JSON array). Invariant: every request a
// dataset yields is sendable, so the requests form a request set (make_request_set accepts them).
#include <string>

#include "fuzz/fuzz_target.h"
#include "workload/request.h"
#include "workload/sources.h"

PLUMB_FUZZ_TARGET(dataset) {
  namespace wl = plumb::workload;
  plumb::fuzz::Reader in(input);
  uint8_t mode = in.byte();
  wl::SourceOptions opt;
  static constexpr wl::SourceFormat kFormats[] = {wl::SourceFormat::kGeneric, wl::SourceFormat::kLongBench,
                                                  wl::SourceFormat::kShareGpt};
  opt.format = kFormats[mode % 3];
  opt.max_tokens = (mode & 4) ? 64 : 0;
  opt.temperature = (mode & 8) ? 0.7 : 0.0;
  opt.limit = (mode & 16) ? 3 : 0;
  wl::TokenCounter count;
  if (mode & 32) count = wl::count_words;
  auto parsed = wl::parse_source(in.rest(), opt, count);
  if (!parsed.ok()) return parsed.status().message().empty() ? "refused without a message" : "";
  if (parsed->requests.empty()) return "accepted a dataset with no requests";
  if (opt.limit > 0 && parsed->requests.size() > opt.limit) return "more requests than the limit";
  auto set = wl::make_request_set(parsed->requests);
  if (!set.ok()) return "a dataset yielded a request that is not sendable: " + set.status().message();
  return "";
}
