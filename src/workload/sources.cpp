#include "workload/sources.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "core/file.h"
#include "core/json.h"
#include "core/lines.h"

namespace plumb::workload {

Result<int64_t> count_words(std::string_view text) {
  int64_t n = 0;
  bool in = false;
  for (char c : text) {
    bool sp = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!sp && !in) ++n;
    in = !sp;
  }
  return n;
}

int64_t length_floor(int64_t L) { return (4 * L + 4) / 5; }

Result<std::vector<int64_t>> sample_lengths(uint64_t seed, std::string_view dimension, int64_t L, size_t n) {
  if (L < 1)
    return invalid_argument(std::string(dimension) + " length must be >= 1, got " + std::to_string(L));
  Rng rng(derive_seed(seed, dimension));
  std::vector<int64_t> out;
  out.reserve(n);
  const int64_t lo = length_floor(L);
  for (size_t i = 0; i < n; ++i) out.push_back(rng.uniform_int(lo, L));
  return out;
}

Result<std::vector<int64_t>> sample_lengths(uint64_t seed, std::string_view dimension, int64_t L, size_t n,
                                            double ratio) {
  if (ratio == kDefaultRangeRatio) return sample_lengths(seed, dimension, L, n);
  if (!(ratio > 0.0 && ratio <= 1.0))
    return invalid_argument(std::string(dimension) + " range ratio must be in (0, 1], got " +
                            std::to_string(ratio));
  if (L < 1)
    return invalid_argument(std::string(dimension) + " length must be >= 1, got " + std::to_string(L));
  Rng rng(derive_seed(seed, dimension));
  std::vector<int64_t> out;
  out.reserve(n);
  const int64_t lo = std::clamp<int64_t>(int64_t(std::ceil(ratio * double(L))), 1, L);
  for (size_t i = 0; i < n; ++i) out.push_back(rng.uniform_int(lo, L));
  return out;
}

namespace {
// Common English words: most tokenizers count each as one token, so documents grow predictably.
constexpr std::array<std::string_view, 96> kWords = {
    "the",    "of",     "and",    "to",      "in",      "is",     "that",   "for",    "it",     "as",
    "was",    "with",   "be",     "by",      "on",      "not",    "he",     "this",   "are",    "or",
    "his",    "from",   "at",     "which",   "but",     "have",   "an",     "had",    "they",   "you",
    "were",   "their",  "one",    "all",     "we",      "can",    "her",    "has",    "there",  "been",
    "if",     "more",   "when",   "will",    "would",   "who",    "so",     "no",     "time",   "people",
    "water",  "river",  "system", "model",   "number",  "world",  "house",  "light",  "city",   "paper",
    "market", "garden", "music",  "history", "energy",  "school", "road",   "field",  "window", "story",
    "small",  "large",  "early",  "young",   "green",   "simple", "strong", "quiet",  "open",   "clear",
    "made",   "found",  "built",  "moved",   "called",  "given",  "taken",  "turned", "kept",   "held",
    "under",  "over",   "after",  "before",  "between", "around"};

Result<int64_t> checked_count(const TokenCounter& count, std::string_view text) {
  auto r = count(text);
  if (!r.ok()) return r.status().with_context("counting tokens");
  if (*r < 0) return internal_error("token counter returned a negative count");
  return r;
}
}  // namespace

Result<Document> synthetic_document(Rng& rng, int64_t target, const TokenCounter& count) {
  if (target < 1) return invalid_argument("document length must be >= 1 token");
  if (!count) return invalid_argument("synthetic documents need a token counter");
  std::string text;
  std::vector<size_t> ends;  // ends[k] = byte length of the first k+1 words
  auto add_words = [&](size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (!text.empty()) text += ' ';
      text += kWords[rng.next_u64() % kWords.size()];
      ends.push_back(text.size());
    }
  };
  add_words(size_t(target));
  PLUMB_ASSIGN_OR_RETURN(int64_t n, checked_count(count, text));
  while (n < target) {
    if (ends.size() > size_t(target) * 64)
      return internal_error("token counter does not grow with the text; cannot reach " +
                            std::to_string(target));
    add_words(ends.size());
    PLUMB_ASSIGN_OR_RETURN(n, checked_count(count, text));
  }
  if (n == target) return Document{std::move(text), n};
  // Largest k (words) with count(prefix of k words) <= target; count(all) > target.
  size_t lo = 0, hi = ends.size();  // invariant: prefix(lo) fits (or lo == 0), prefix(hi) does not
  int64_t lo_tokens = 0;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    PLUMB_ASSIGN_OR_RETURN(int64_t m, checked_count(count, std::string_view(text).substr(0, ends[mid - 1])));
    if (m <= target) {
      lo = mid;
      lo_tokens = m;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) {  // a single word is already over budget: keep one word anyway
    text.resize(ends[0]);
    PLUMB_ASSIGN_OR_RETURN(int64_t one, checked_count(count, text));
    return Document{std::move(text), one};
  }
  text.resize(ends[lo - 1]);
  return Document{std::move(text), lo_tokens};
}

namespace {
Request make_request(std::string content, int64_t max_tokens, const SyntheticSpec& spec) {
  Request r;
  if (spec.chat) {
    r.messages.push_back({"user", std::move(content)});
  } else {
    r.prompt = std::move(content);
  }
  r.max_tokens = max_tokens;
  r.temperature = spec.temperature;
  r.ignore_eos = spec.ignore_eos;
  return r;
}

Status check_spec(const SyntheticSpec& spec) {
  if (spec.input_len < 1) return invalid_argument("input_len must be >= 1");
  if (spec.output_len < 1) return invalid_argument("output_len must be >= 1");
  if (spec.template_overhead_tokens < 0) return invalid_argument("template_overhead_tokens must be >= 0");
  if (!(spec.temperature >= 0.0)) return invalid_argument("temperature must be >= 0");
  return Status::Ok();
}

struct Lengths {
  std::vector<int64_t> in, out;
};
Result<Lengths> draw_lengths(const SyntheticSpec& spec) {
  Lengths l;
  if (spec.fixed_lengths) {
    l.in.assign(spec.num_requests, spec.input_len);
    l.out.assign(spec.num_requests, spec.output_len);
    return l;
  }
  PLUMB_ASSIGN_OR_RETURN(
      l.in, sample_lengths(spec.seed, "input_len", spec.input_len, spec.num_requests, spec.range_ratio));
  PLUMB_ASSIGN_OR_RETURN(
      l.out, sample_lengths(spec.seed, "output_len", spec.output_len, spec.num_requests, spec.range_ratio));
  return l;
}
}  // namespace

Result<std::vector<Request>> synthetic_requests(const SyntheticSpec& spec, const TokenCounter& count) {
  PLUMB_RETURN_IF_ERROR(check_spec(spec));
  PLUMB_ASSIGN_OR_RETURN(Lengths len, draw_lengths(spec));
  Rng doc_rng(derive_seed(spec.seed, "document"));
  std::vector<Request> out;
  out.reserve(spec.num_requests);
  for (size_t i = 0; i < spec.num_requests; ++i) {
    int64_t target = std::max<int64_t>(1, len.in[i] - spec.template_overhead_tokens);
    auto doc = synthetic_document(doc_rng, target, count);
    if (!doc.ok()) return doc.status().with_context("request " + std::to_string(i));
    Request r = make_request(std::move(doc->text), len.out[i], spec);
    r.prompt_tokens = doc->tokens + spec.template_overhead_tokens;
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<Request>> shared_prefix_requests(const SharedPrefixSpec& spec, const TokenCounter& count) {
  PLUMB_RETURN_IF_ERROR(check_spec(spec.base));
  if (spec.prefix_len < 1) return invalid_argument("prefix_len must be >= 1");
  if (spec.num_prefixes < 1) return invalid_argument("num_prefixes must be >= 1");
  Rng prefix_rng(derive_seed(spec.base.seed, "prefix"));
  std::vector<Document> prefixes;
  for (size_t p = 0; p < spec.num_prefixes; ++p) {
    auto doc = synthetic_document(prefix_rng, spec.prefix_len, count);
    if (!doc.ok()) return doc.status().with_context("prefix " + std::to_string(p));
    prefixes.push_back(std::move(doc).value());
  }
  PLUMB_ASSIGN_OR_RETURN(Lengths len, draw_lengths(spec.base));
  Rng doc_rng(derive_seed(spec.base.seed, "document"));
  std::vector<Request> out;
  out.reserve(spec.base.num_requests);
  for (size_t i = 0; i < spec.base.num_requests; ++i) {
    const Document& prefix = prefixes[i % prefixes.size()];
    auto suffix = synthetic_document(doc_rng, len.in[i], count);
    if (!suffix.ok()) return suffix.status().with_context("request " + std::to_string(i));
    Request r = make_request(prefix.text + "\n\n" + suffix->text, len.out[i], spec.base);
    r.prompt_tokens = prefix.tokens + suffix->tokens + spec.base.template_overhead_tokens;
    out.push_back(std::move(r));
  }
  return out;
}

Result<SourceFormat> parse_source_format(std::string_view name) {
  if (name == "generic") return SourceFormat::kGeneric;
  if (name == "longbench") return SourceFormat::kLongBench;
  if (name == "sharegpt") return SourceFormat::kShareGpt;
  return invalid_argument("unknown dataset format '" + std::string(name) +
                          "' (expected generic, longbench or sharegpt)");
}

std::string longbench_prompt(std::string_view context, std::string_view question, std::string_view a,
                             std::string_view b, std::string_view c, std::string_view d) {
  std::string s = "Please read the following text and answer the question below.\n\n<text>\n";
  s += context;
  s += "\n</text>\n\nWhat is the correct answer to this question: ";
  s += question;
  s += "\nChoices:\n(A) ";
  s += a;
  s += "\n(B) ";
  s += b;
  s += "\n(C) ";
  s += c;
  s += "\n(D) ";
  s += d;
  s += "\n\nFormat your response as follows: \"The correct answer is (insert answer here)\".";
  return s;
}

namespace {
Result<std::string> required_string(const json::object& o, std::string_view key) {
  PLUMB_ASSIGN_OR_RETURN(auto v, json::opt_string(o, key));
  if (!v) return invalid_argument("missing string field '" + std::string(key) + "'");
  return std::move(*v);
}

// A generic item: the request's own fields, with the defaults filled in.
Status parse_generic(const json::object& o, Request& r) {
  json::object fields = o;
  fields["max_tokens"] = r.max_tokens;
  fields["temperature"] = r.temperature;
  fields["ignore_eos"] = r.ignore_eos;
  if (r.max_tokens < 1) return invalid_argument("missing 'max_tokens' (and no default output length given)");
  PLUMB_ASSIGN_OR_RETURN(r, from_json(fields));
  return Status::Ok();
}

// A LongBench-v2 item: its context, question and four choices as one user prompt.
Status parse_longbench(const json::object& o, Request& r) {
  PLUMB_ASSIGN_OR_RETURN(std::string context, required_string(o, "context"));
  PLUMB_ASSIGN_OR_RETURN(std::string question, required_string(o, "question"));
  PLUMB_ASSIGN_OR_RETURN(std::string a, required_string(o, "choice_A"));
  PLUMB_ASSIGN_OR_RETURN(std::string b, required_string(o, "choice_B"));
  PLUMB_ASSIGN_OR_RETURN(std::string c, required_string(o, "choice_C"));
  PLUMB_ASSIGN_OR_RETURN(std::string d, required_string(o, "choice_D"));
  r.messages.push_back({"user", longbench_prompt(context, question, a, b, c, d)});
  if (r.max_tokens < 1)
    return invalid_argument("no output length: give max_tokens (a default) for LongBench items");
  return Status::Ok();
}

// A ShareGPT item: the first human turn and the reply after it (whose length is the output length
// when no default is given); false when it has no usable pair (the item is skipped).
Result<bool> parse_sharegpt(const json::object& o, const TokenCounter& count, Request& r) {
  auto it = o.find("conversations");
  if (it == o.end() || !it->value().is_array())
    return invalid_argument("missing array field 'conversations'");
  const auto& turns = it->value().as_array();
  std::optional<std::string> human, reply;
  for (size_t t = 0; t < turns.size(); ++t) {
    if (!turns[t].is_object())
      return invalid_argument("conversation turn " + std::to_string(t) + " is not an object");
    const auto& turn = turns[t].as_object();
    PLUMB_ASSIGN_OR_RETURN(auto from, json::opt_string(turn, "from"));
    PLUMB_ASSIGN_OR_RETURN(auto value, json::opt_string(turn, "value"));
    if (!from || !value)
      return invalid_argument("conversation turn " + std::to_string(t) + " needs string 'from' and 'value'");
    if (!human) {
      if (*from == "human" || *from == "user") human = *value;
    } else {
      reply = *value;
      break;
    }
  }
  if (!human || !reply || human->empty()) return false;
  r.messages.push_back({"user", *human});
  if (r.max_tokens < 1) {
    if (!count)
      return invalid_argument("ShareGPT output lengths need a token counter or a default max_tokens");
    PLUMB_ASSIGN_OR_RETURN(int64_t n, checked_count(count, *reply));
    if (n < 1) return false;
    r.max_tokens = n;
  }
  return true;
}

// Parses one item; an empty optional means "skip" (ShareGPT without a usable turn pair).
Result<std::optional<Request>> parse_item(const json::object& o, const SourceOptions& opts,
                                          const TokenCounter& count) {
  Request r;
  r.ignore_eos = opts.ignore_eos;
  PLUMB_ASSIGN_OR_RETURN(auto temperature, json::opt_double(o, "temperature"));
  r.temperature = temperature.value_or(opts.temperature);
  PLUMB_ASSIGN_OR_RETURN(auto max_tokens, json::opt_int(o, "max_tokens"));
  r.max_tokens = max_tokens.value_or(opts.max_tokens);
  switch (opts.format) {
    case SourceFormat::kGeneric:
      PLUMB_RETURN_IF_ERROR(parse_generic(o, r));
      break;
    case SourceFormat::kLongBench:
      PLUMB_RETURN_IF_ERROR(parse_longbench(o, r));
      break;
    case SourceFormat::kShareGpt: {
      PLUMB_ASSIGN_OR_RETURN(bool usable, parse_sharegpt(o, count, r));
      if (!usable) return std::optional<Request>{};
      break;
    }
  }
  PLUMB_RETURN_IF_ERROR(validate(r));
  if (count) {
    std::string_view content =
        r.prompt ? std::string_view(*r.prompt) : std::string_view(r.messages.back().content);
    PLUMB_ASSIGN_OR_RETURN(r.prompt_tokens, checked_count(count, content));
  }
  return std::optional<Request>(std::move(r));
}

Status add_item(const json::value& v, const SourceOptions& opts, const TokenCounter& count,
                SourceResult& out) {
  if (!v.is_object()) return invalid_argument("expected a JSON object");
  PLUMB_ASSIGN_OR_RETURN(auto item, parse_item(v.as_object(), opts, count));
  if (item) {
    out.requests.push_back(std::move(*item));
  } else {
    ++out.skipped;
  }
  return Status::Ok();
}
}  // namespace

Result<SourceResult> parse_source(std::string_view text, const SourceOptions& opts,
                                  const TokenCounter& count) {
  SourceResult out;
  auto full = [&] { return opts.limit > 0 && out.requests.size() >= opts.limit; };
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') {
    PLUMB_ASSIGN_OR_RETURN(json::value v, json::parse(text));
    const auto& arr = v.as_array();
    for (size_t i = 0; i < arr.size() && !full(); ++i) {
      Status s = add_item(arr[i], opts, count, out);
      if (!s.ok()) return s.with_context("element " + std::to_string(i));
    }
  } else {
    Status st;
    for_each_nonblank_line(text, [&](std::string_view line, size_t line_no) {
      auto v = json::parse(line);
      Status s = v.ok() ? add_item(*v, opts, count, out) : v.status();
      if (!s.ok()) st = s.with_context("line " + std::to_string(line_no));
      return st.ok() && !full();
    });
    PLUMB_RETURN_IF_ERROR(st);
  }
  if (out.requests.empty()) return invalid_argument("dataset has no usable requests");
  return out;
}

Result<SourceResult> load_source(const std::string& path, const SourceOptions& opts,
                                 const TokenCounter& count) {
  PLUMB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto r = parse_source(text, opts, count);
  if (!r.ok()) return r.status().with_context(path);
  return r;
}

}  // namespace plumb::workload
