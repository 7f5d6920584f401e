#include "gates/checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>

#include "core/random.h"
#include "core/sha256.h"
#include "net/http_client.h"
#include "protocol/protocol.h"
#include "stats/stats.h"

namespace plumb::gates {

OpenAiClient::OpenAiClient(Endpoint ep, std::chrono::milliseconds timeout)
    : ep_(std::move(ep)), timeout_(timeout) {
  while (!ep_.url.empty() && ep_.url.back() == '/') ep_.url.pop_back();
  resolved_ = !ep_.model.empty();
}

Result<json::object> OpenAiClient::post_timed(const std::string& path, json::object body, double* seconds) {
  if (!ep_.model.empty() && !body.contains("model")) body["model"] = ep_.model;
  auto t0 = std::chrono::steady_clock::now();
  auto r = net::http_request(ep_.url + path, "POST", json::dump(body), timeout_);
  auto t1 = std::chrono::steady_clock::now();
  if (seconds) *seconds = std::chrono::duration<double>(t1 - t0).count();
  if (!r.ok())
    return Status(r.status().code(), fmt::format("POST {}{}: {}", ep_.url, path, r.status().message()));
  if (r->status != 200)
    return Status(Code::kFailedPrecondition,
                  fmt::format("POST {}{}: HTTP {}: {}", ep_.url, path, r->status, r->body.substr(0, 300)));
  auto o = json::parse_object(r->body);
  if (!o.ok())
    return Status(Code::kCorrupt, fmt::format("POST {}{}: reply is not a JSON object", ep_.url, path));
  return o;
}

Result<json::object> OpenAiClient::post(const std::string& path, json::object body) {
  return post_timed(path, std::move(body), nullptr);
}

Result<std::string> OpenAiClient::get(const std::string& path) {
  auto r = net::http_request(ep_.url + path, "GET", {}, timeout_);
  if (!r.ok())
    return Status(r.status().code(), fmt::format("GET {}{}: {}", ep_.url, path, r.status().message()));
  if (r->status == 404) return Status(Code::kNotFound, fmt::format("GET {}{}: 404", ep_.url, path));
  if (r->status != 200)
    return Status(Code::kFailedPrecondition, fmt::format("GET {}{}: HTTP {}", ep_.url, path, r->status));
  return r->body;
}

Status OpenAiClient::resolve_model() {
  if (resolved_) return Status::Ok();
  auto body = get("/v1/models");
  if (!body.ok()) return body.status();
  auto o = json::parse_object(*body);
  if (o.ok() && o->contains("data") && o->at("data").is_array() && !o->at("data").as_array().empty()) {
    const auto& first = o->at("data").as_array()[0];
    if (first.is_object() && first.as_object().contains("id") && first.as_object().at("id").is_string())
      ep_.model = std::string(first.as_object().at("id").as_string());
  }
  resolved_ = true;
  return Status::Ok();
}

std::vector<std::string> fresh_prompts(uint64_t seed, int count, int words) {
  static const char* kWords[] = {
      "the",   "river", "blue",   "city",  "seven", "quiet", "garden", "stone", "light",  "north", "apple",
      "table", "small", "green",  "house", "cloud", "story", "three",  "walks", "bright", "under", "old",
      "cat",   "red",   "window", "road",  "sings", "eight", "warm",   "tree",  "little", "sun",   "near",
      "dog",   "paper", "happy",  "moon",  "five",  "over",  "number", "lake",  "yellow", "bird",  "morning"};
  constexpr int kN = int(sizeof(kWords) / sizeof(kWords[0]));
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    Rng rng(derive_seed(seed, fmt::format("gate_prompt/{}", i)));
    std::string p;
    for (int w = 0; w < words; ++w) {
      if (w) p += ' ';
      p += kWords[rng.uniform_int(0, kN - 1)];
    }
    out.push_back(std::move(p));
  }
  return out;
}

namespace {
// choices[0] of a completion reply.
Result<const json::object*> first_choice(const json::object& reply) {
  if (!reply.contains("choices") || !reply.at("choices").is_array() ||
      reply.at("choices").as_array().empty() || !reply.at("choices").as_array()[0].is_object())
    return Status(Code::kCorrupt, "reply has no choices[0]");
  return &reply.at("choices").as_array()[0].as_object();
}

std::string choice_text(const json::object& c) {
  if (c.contains("text") && c.at("text").is_string()) return std::string(c.at("text").as_string());
  if (c.contains("message") && c.at("message").is_object()) {
    const auto& m = c.at("message").as_object();
    if (m.contains("content") && m.at("content").is_string()) return std::string(m.at("content").as_string());
  }
  return {};
}

std::optional<int64_t> usage_field(const json::object& reply, const char* key) {
  if (!reply.contains("usage") || !reply.at("usage").is_object()) return std::nullopt;
  const auto& u = reply.at("usage").as_object();
  if (!u.contains(key) || !u.at(key).is_int64()) return std::nullopt;
  return u.at(key).as_int64();
}

json::object completion_body(const std::string& prompt, int max_tokens) {
  json::object b;
  b["prompt"] = prompt;
  b["max_tokens"] = max_tokens;
  b["temperature"] = 0.0;
  return b;
}

// Tokens of text by the server's /tokenize: a prompt as completions encode it (special tokens
// added as the server's default does), generated text without them.
Result<int64_t> count_tokens(OpenAiClient& c, const std::string& text, bool as_prompt) {
  json::object b;
  b["prompt"] = text;
  if (!as_prompt) b["add_special_tokens"] = false;
  auto r = c.post("/tokenize", std::move(b));
  if (!r.ok()) return r.status();
  if (r->contains("count") && r->at("count").is_int64()) return r->at("count").as_int64();
  if (r->contains("tokens") && r->at("tokens").is_array()) return int64_t(r->at("tokens").as_array().size());
  return Status(Code::kCorrupt, "/tokenize reply has neither 'count' nor 'tokens'");
}
}  // namespace

Result<PromptLogprobs> prompt_logprobs(OpenAiClient& client, const std::string& prompt, int top_k) {
  json::object b = completion_body(prompt, 1);
  b["echo"] = true;
  b["logprobs"] = top_k;
  auto r = client.post("/v1/completions", std::move(b));
  if (!r.ok()) return r.status();
  auto c = first_choice(*r);
  if (!c.ok()) return c.status();
  auto pt = usage_field(*r, "prompt_tokens");
  if (!(*c)->contains("logprobs")) return Status(Code::kCorrupt, "reply has no logprobs");
  const auto& lp = (*c)->at("logprobs");
  int64_t n = pt.value_or(-1);
  if (n < 0) {
    // No usage: all positions but the generated one.
    if (lp.is_object() && lp.as_object().contains("tokens") && lp.as_object().at("tokens").is_array())
      n = std::max<int64_t>(0, int64_t(lp.as_object().at("tokens").as_array().size()) - 1);
  }
  return parse_completion_logprobs(lp, n);
}

Result<McResult> mc_accuracy(OpenAiClient& client, const std::vector<McItem>& items,
                             const std::string& format, int max_tokens) {
  if (format != "completion" && format != "chat")
    return Status(Code::kInvalidArgument, "format must be 'completion' or 'chat', got '" + format + "'");
  PLUMB_RETURN_IF_ERROR(client.resolve_model());
  McResult m;
  for (const auto& item : items) {
    json::object b;
    std::string path;
    if (format == "completion") {
      b = completion_body(completion_prompt(item), max_tokens);
      b["stop"] = json::array{"\n"};
      path = "/v1/completions";
    } else {
      json::object msg;
      msg["role"] = "user";
      msg["content"] = chat_prompt(item);
      b["messages"] = json::array{msg};
      b["max_tokens"] = max_tokens + 8;
      b["temperature"] = 0.0;
      path = "/v1/chat/completions";
    }
    auto r = client.post(path, std::move(b));
    if (!r.ok()) return r.status();
    auto c = first_choice(*r);
    if (!c.ok()) return c.status();
    auto ans = extract_answer(choice_text(**c), int(item.options.size()));
    m.items++;
    if (!ans)
      m.unanswered++;
    else if (*ans == item.answer_index)
      m.correct++;
  }
  m.accuracy = m.items ? double(m.correct) / double(m.items) : 0;
  return m;
}

std::vector<Constraint> fidelity_constraints(OpenAiClient& target, OpenAiClient& reference, uint64_t seed,
                                             int prompts, int words, int top_k, const FidelityBounds& b,
                                             FidelityStats* stats) {
  const char* kFix =
      "the candidate does not compute the reference model's distribution: check the weights, quantization "
      "and precision it serves (or a response cache / canned output in front of it)";
  std::vector<Constraint> out;
  std::vector<PromptLogprobs> ref, cand;
  std::string err;
  for (const auto& p : fresh_prompts(derive_seed(seed, "fidelity"), prompts, words)) {
    auto r = prompt_logprobs(reference, p, top_k);
    if (!r.ok()) {
      err = "reference: " + r.status().message();
      break;
    }
    auto c = prompt_logprobs(target, p, top_k);
    if (!c.ok()) {
      err = "target: " + c.status().message();
      break;
    }
    ref.push_back(std::move(*r));
    cand.push_back(std::move(*c));
  }
  if (!err.empty()) {
    std::string fix = std::string(kFix) + "; teacher-forced logprobs failed: " + err;
    out.push_back(check("fidelity_top1_agreement", std::nan(""), ">=", b.min_top1_agreement, fix));
    out.push_back(check("fidelity_mean_kl", std::nan(""), "<=", b.max_mean_kl, fix));
    out.push_back(check("fidelity_token_match", std::nan(""), ">=", b.min_token_match, fix));
    return out;
  }
  auto s = compare_fidelity(ref, cand);
  if (!s.ok()) {
    out.push_back(check("fidelity_top1_agreement", std::nan(""), ">=", b.min_top1_agreement,
                        std::string(kFix) + "; " + s.status().message()));
    out.push_back(check("fidelity_mean_kl", std::nan(""), "<=", b.max_mean_kl, std::string(kFix)));
    out.push_back(check("fidelity_token_match", 0, ">=", b.min_token_match, std::string(kFix)));
    return out;
  }
  if (stats) *stats = *s;
  std::string detail = fmt::format(
      "{} prompts, {} positions, top-{} lists, strict top-1 {:.4f}, {} disjoint, max KL {:.4g}", s->prompts,
      s->positions, top_k, s->strict_top1_agreement, s->disjoint_positions, s->max_kl);
  out.push_back(
      check("fidelity_top1_agreement", s->top1_agreement, ">=", b.min_top1_agreement, kFix, detail));
  out.push_back(
      check("fidelity_mean_kl", s->mean_kl, "<=", b.max_mean_kl, kFix, "nats, lower bound over top-k"));
  out.push_back(check(
      "fidelity_token_match", s->token_match, ">=", b.min_token_match,
      "the candidate tokenizes prompts differently: it serves a different tokenizer or model",
      fmt::format("{} length mismatches, {} token mismatches", s->length_mismatches, s->token_mismatches)));
  return out;
}

Result<GateResult> run_quality(OpenAiClient& target, OpenAiClient* reference, const QualityOptions& opt,
                               McResult* target_mc, McResult* reference_mc) {
  if (opt.items.empty()) return Status(Code::kInvalidArgument, "quality gate: empty multiple-choice set");
  if (!(opt.tau > 0 && opt.tau <= 1))
    return Status(Code::kInvalidArgument, "quality gate: tau must be in (0, 1]");
  if (!reference && !opt.baseline_accuracy)
    return Status(Code::kInvalidArgument,
                  "quality gate: needs a reference server or a known baseline accuracy");
  GateResult g;
  g.gate = "quality";
  auto t = mc_accuracy(target, opt.items, opt.format);
  if (!t.ok()) return Status(t.status().code(), "target: " + t.status().message());
  if (target_mc) *target_mc = *t;
  double baseline = 0;
  std::string source;
  if (opt.baseline_accuracy) {
    baseline = *opt.baseline_accuracy;
    source = "baseline given";
  } else {
    PLUMB_RETURN_IF_ERROR(reference->resolve_model());
    auto r = mc_accuracy(*reference, opt.items, opt.format);
    if (!r.ok()) return Status(r.status().code(), "reference: " + r.status().message());
    if (reference_mc) *reference_mc = *r;
    baseline = r->accuracy;
    source = fmt::format("baseline {}/{} measured on the reference", r->correct, r->items);
  }
  g.constraints.push_back(
      check("accuracy", t->accuracy, ">=", opt.tau * baseline,
            "the candidate answers fewer questions correctly than tau x the reference: use a less aggressive "
            "quantization/precision or fix the serving configuration",
            fmt::format("{}/{} correct, {} unanswered, {} format; bound = tau {} x baseline {:.4f} ({})",
                        t->correct, t->items, t->unanswered, opt.format, opt.tau, baseline, source)));
  if (reference && opt.fidelity_prompts > 0) {
    PLUMB_RETURN_IF_ERROR(target.resolve_model());
    PLUMB_RETURN_IF_ERROR(reference->resolve_model());
    for (auto& c : fidelity_constraints(target, *reference, opt.seed, opt.fidelity_prompts,
                                        opt.fidelity_words, opt.top_logprobs, opt.bounds))
      g.constraints.push_back(std::move(c));
  } else {
    g.constraints.push_back(not_evaluated("fidelity", "no reference server to compare logprobs with"));
  }
  return g;
}

HarnessHashes hash_harness(const std::vector<std::string>& paths) {
  HarnessHashes h;
  h.protocol_hash = protocol::protocol_hash();
  for (const auto& p : paths) {
    auto d = sha256_file(p);
    h.files.emplace_back(p, d.ok() ? *d : std::string("missing"));
  }
  return h;
}

HarnessChange harness_changes(const HarnessHashes& before, const HarnessHashes& after) {
  HarnessChange c;
  auto add = [&](const std::string& what) {
    ++c.changed;
    c.which += (c.which.empty() ? "" : ", ") + what;
  };
  for (size_t i = 0; i < before.files.size() && i < after.files.size(); ++i)
    if (after.files[i].second != before.files[i].second) add(before.files[i].first);
  if (after.protocol_hash != before.protocol_hash) add("protocol");
  return c;
}

std::optional<double> prometheus_sum(const std::string& text, const std::string& suffix) {
  std::istringstream in(text);
  std::string line;
  std::optional<double> sum;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) continue;
    std::string name = line.substr(0, name_end);
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    size_t vpos = line.find(name_end < line.size() && line[name_end] == '{' ? '}' : ' ', name_end);
    if (vpos == std::string::npos) continue;
    std::istringstream vs(line.substr(vpos + 1));
    double v = 0;
    if (vs >> v) sum = sum.value_or(0) + v;
  }
  return sum;
}

namespace {

// A failed request to the system under test, named as the target's.
Status target_error(const Status& s) { return Status(s.code(), "target: " + s.message()); }

// A greedy ignore_eos completion on the target, timed into *secs.
Result<json::object> timed_generation(OpenAiClient& target, const std::string& prompt, int max_tokens,
                                      double* secs) {
  json::object b = completion_body(prompt, max_tokens);
  b["ignore_eos"] = true;
  return target.post_timed("/v1/completions", std::move(b), secs);
}

// p with its last word changed: the same length and the same prefix.
std::string last_word_changed(const std::string& p) {
  auto sp = p.rfind(' ');
  size_t cut = sp == std::string::npos ? 0 : sp + 1;
  return p.substr(0, cut) + (p.substr(cut) == "stone" ? "cloud" : "stone");
}

// 1. Fidelity of the target's logprobs to the reference's.
void add_fidelity(OpenAiClient& target, OpenAiClient* reference, const IntegrityOptions& opt, GateResult& g) {
  if (reference && opt.fidelity_prompts > 0) {
    for (auto& c : fidelity_constraints(target, *reference, opt.seed, opt.fidelity_prompts,
                                        opt.fidelity_words, opt.top_logprobs, opt.bounds))
      g.constraints.push_back(std::move(c));
  } else {
    g.constraints.push_back(not_evaluated("fidelity", "no reference server to compare logprobs with"));
  }
}

// 2a. Repeated vs fresh prompts: a response cache answers exact repeats far faster; canned
// responses give every prompt the same output.
Status add_repeat_checks(OpenAiClient& target, const IntegrityOptions& opt, GateResult& g) {
  auto warm = fresh_prompts(derive_seed(opt.seed, "warmup"), 1, opt.cache_words);
  double s = 0;
  auto w = timed_generation(target, warm[0], opt.cache_max_tokens, &s);
  if (!w.ok()) return target_error(w.status());
  auto prompts = fresh_prompts(derive_seed(opt.seed, "cache"), opt.cache_prompts, opt.cache_words);
  // Honest prefix caching must not look like response caching, so both timed requests see the
  // same cache state: each prompt p is first sent untimed (it fills the prefix cache), then a
  // "fresh" variant of p with only its last word changed (same length; every full KV block but
  // the last is a prefix-cache hit, exactly as for a repeat) and then the exact repeat of p are
  // timed back to back. Only a server that caches responses answers the repeat much faster.
  // The statistic is the median of the per-pair ratios.
  std::vector<double> ratios, fresh_t, repeat_t;
  std::set<std::string> greedy_outputs;
  for (const auto& p : prompts) {
    double s0 = 0, sf = 0, sr = 0;
    auto r = timed_generation(target, p, opt.cache_max_tokens, &s0);
    if (!r.ok()) return target_error(r.status());
    auto c = first_choice(*r);
    if (c.ok()) greedy_outputs.insert(choice_text(**c));
    auto rf = timed_generation(target, last_word_changed(p), opt.cache_max_tokens, &sf);
    if (!rf.ok()) return target_error(rf.status());
    auto rr = timed_generation(target, p, opt.cache_max_tokens, &sr);
    if (!rr.ok()) return target_error(rr.status());
    fresh_t.push_back(sf);
    repeat_t.push_back(sr);
    if (sf > 0) ratios.push_back(sr / sf);
  }
  double mf = stats::median(fresh_t), mr = stats::median(repeat_t);
  g.constraints.push_back(check("repeat_time_ratio", stats::median(ratios), ">=", opt.min_repeat_time_ratio,
                                "exact repeats are answered far faster than fresh prompts of the same "
                                "shape: more than prefix caching can "
                                "explain (a response cache); disable it",
                                fmt::format("median of E2E(repeat)/E2E(fresh) over {} pairs; medians "
                                            "{:.2f} / {:.2f} ms; {} ignore_eos tokens",
                                            ratios.size(), mr * 1e3, mf * 1e3, opt.cache_max_tokens)));
  g.constraints.push_back(check(
      "prompt_dependent_outputs", double(greedy_outputs.size()), ">=",
      double(std::min<size_t>(2, prompts.size())), "different prompts got the same output: canned responses",
      fmt::format("distinct greedy outputs of {} different prompts", prompts.size())));
  return Status::Ok();
}

// 2b. One prompt sampled at temperature 1 with different seeds must not give one output.
Status add_sampled_check(OpenAiClient& target, const IntegrityOptions& opt, GateResult& g) {
  auto sp = fresh_prompts(derive_seed(opt.seed, "sampled"), 1, opt.cache_words);
  std::set<std::string> sampled;
  for (int k = 0; k < opt.sample_seeds; ++k) {
    json::object b = completion_body(sp[0], opt.cache_max_tokens);
    b["ignore_eos"] = true;
    b["temperature"] = 1.0;
    b["seed"] = int64_t(derive_seed(opt.seed, fmt::format("sample/{}", k)) >> 33);
    auto r = target.post("/v1/completions", std::move(b));
    if (!r.ok()) return target_error(r.status());
    auto c = first_choice(*r);
    if (c.ok()) sampled.insert(choice_text(**c));
  }
  g.constraints.push_back(
      check("sampled_repeats_distinct", double(sampled.size()), ">=", double(std::min(2, opt.sample_seeds)),
            "the same prompt sampled at temperature 1 with different seeds gave identical "
            "outputs: responses are cached or canned regardless of the seed",
            fmt::format("distinct outputs of {} seeds", opt.sample_seeds)));
  return Status::Ok();
}

// The work-accounting requests' tallies: usage against the tokens delivered and re-counted.
struct Accounting {
  int64_t n = 0, usage_prompt_ok = 0, usage_completion_ok = 0, sum_delivered = 0, sum_prompt = 0;
  double min_delivered_ratio = 1e300, max_text_err = 0;
  std::string recount_err;  // the local re-count failed ("" when it did not)
};

// Tokens delivered in a completion choice: its logprob entries, -1 when it has none.
int64_t delivered_tokens(const json::object& choice) {
  if (!choice.contains("logprobs") || !choice.at("logprobs").is_object()) return -1;
  const auto& lo = choice.at("logprobs").as_object();
  if (!lo.contains("tokens") || !lo.at("tokens").is_array()) return -1;
  return int64_t(lo.at("tokens").as_array().size());
}

// Sends the accounting requests and tallies each; stops at the first failed re-count.
Result<Accounting> tally_accounting(OpenAiClient& target, OpenAiClient& counter,
                                    const IntegrityOptions& opt) {
  Accounting a;
  auto prompts = fresh_prompts(derive_seed(opt.seed, "accounting"), opt.accounting_requests, opt.cache_words);
  for (const auto& p : prompts) {
    json::object b = completion_body(p, opt.accounting_max_tokens);
    b["ignore_eos"] = true;
    b["logprobs"] = 1;
    auto r = target.post("/v1/completions", std::move(b));
    if (!r.ok()) return target_error(r.status());
    auto c = first_choice(*r);
    if (!c.ok()) return target_error(c.status());
    std::string text = choice_text(**c);
    int64_t delivered = delivered_tokens(**c);
    auto local_prompt = count_tokens(counter, p, true);
    auto local_text = count_tokens(counter, text, false);
    if (!local_prompt.ok() || !local_text.ok()) {
      a.recount_err = !local_prompt.ok() ? local_prompt.status().message() : local_text.status().message();
      break;
    }
    if (delivered < 0) delivered = *local_text;
    auto up = usage_field(*r, "prompt_tokens");
    auto uc = usage_field(*r, "completion_tokens");
    a.n++;
    a.sum_delivered += delivered;
    a.sum_prompt += *local_prompt;
    if (up && *up == *local_prompt) a.usage_prompt_ok++;
    if (uc && *uc == delivered) a.usage_completion_ok++;
    a.min_delivered_ratio =
        std::min(a.min_delivered_ratio, double(delivered) / double(opt.accounting_max_tokens));
    double denom = double(std::max<int64_t>(1, uc.value_or(delivered)));
    a.max_text_err =
        std::max(a.max_text_err, std::fabs(double(*local_text) - double(uc.value_or(delivered))) / denom);
  }
  return a;
}

// usage against the local re-count and the tokens delivered.
void add_usage_checks(const Accounting& a, bool by_reference, const IntegrityOptions& opt, GateResult& g) {
  const int64_t n = a.n;
  std::string how =
      by_reference ? "re-counted by the reference's /tokenize" : "re-counted by the target's /tokenize";
  g.constraints.push_back(check("usage_prompt_tokens_match",
                                n ? double(a.usage_prompt_ok) / double(n) : std::nan(""), ">=", 1.0,
                                "usage.prompt_tokens differs from the local re-count of the prompt",
                                fmt::format("{}/{} requests, {}", a.usage_prompt_ok, n, how)));
  g.constraints.push_back(check("usage_completion_tokens_match",
                                n ? double(a.usage_completion_ok) / double(n) : std::nan(""), ">=", 1.0,
                                "usage.completion_tokens differs from the tokens delivered (logprob "
                                "entries): usage is inflated or wrong",
                                fmt::format("{}/{} requests", a.usage_completion_ok, n)));
  g.constraints.push_back(check("delivered_length_ratio", n ? a.min_delivered_ratio : std::nan(""), ">=", 1.0,
                                "fewer tokens delivered than requested with ignore_eos: the server stops "
                                "early or ignores ignore_eos",
                                fmt::format("min delivered/requested over {} requests of max_tokens {}", n,
                                            opt.accounting_max_tokens)));
  g.constraints.push_back(check("text_recount_error", n ? a.max_text_err : std::nan(""),
                                "<=", opt.text_recount_tolerance,
                                "the returned text re-tokenizes to far fewer/more tokens than usage "
                                "claims: truncated or padded output",
                                fmt::format("max |tokens(text) - usage| / usage, {}", how)));
}

// A /metrics counter's move between two scrapes against the work sent. `kind` names the counter
// ("generation", "prompt") and `unit` the work in the evidence ("delivered", "prompt tokens").
Constraint metrics_delta_check(const std::string& kind, const Result<std::string>& before,
                               const Result<std::string>& after, int64_t sent, const std::string& unit,
                               double tolerance) {
  const std::string name = "metrics_" + kind + "_tokens_error";
  const std::string series = kind + "_tokens_total";
  std::optional<double> v0, v1;
  if (before.ok() && after.ok()) {
    v0 = prometheus_sum(*before, series);
    v1 = prometheus_sum(*after, series);
  }
  if (!v0 || !v1) return not_evaluated(name, "the target exposes no *" + series + " counter on /metrics");
  double d = *v1 - *v0;
  double err = sent > 0 ? std::fabs(d - double(sent)) / double(sent) : std::nan("");
  return check(name, err, "<=", tolerance,
               "/metrics " + kind + "-token counter moved differently from the work sent",
               fmt::format("delta {} vs {} {}", d, sent, unit));
}

// 3. Work accounting, bracketed by /metrics scrapes.
Status add_accounting_checks(OpenAiClient& target, OpenAiClient& counter, bool by_reference,
                             const IntegrityOptions& opt, GateResult& g) {
  auto before = target.get("/metrics");
  PLUMB_ASSIGN_OR_RETURN(auto a, tally_accounting(target, counter, opt));
  if (!a.recount_err.empty()) {
    g.constraints.push_back(
        not_evaluated("work_accounting", "local re-count through /tokenize failed: " + a.recount_err));
    return Status::Ok();
  }
  add_usage_checks(a, by_reference, opt, g);
  auto after = target.get("/metrics");
  g.constraints.push_back(
      metrics_delta_check("generation", before, after, a.sum_delivered, "delivered", opt.metrics_tolerance));
  g.constraints.push_back(
      metrics_delta_check("prompt", before, after, a.sum_prompt, "prompt tokens", opt.metrics_tolerance));
  return Status::Ok();
}

// 4. Plausibility against the roofline: a single stream's decode rate (tokens / E2E, which
// under-states the decode rate, so the check is conservative) vs bandwidth / bytes per step.
Status add_roofline_check(OpenAiClient& target, const IntegrityOptions& opt, GateResult& g) {
  if (opt.bandwidth_gbs <= 0 || opt.weight_bytes <= 0) {
    g.constraints.push_back(not_evaluated(
        "decode_rate_over_roofline",
        "no machine bandwidth or model weight size: pass --bandwidth-gbs/--weight-bytes or record ceilings "
        "(plumb machine) in the ledger"));
    return Status::Ok();
  }
  auto p = fresh_prompts(derive_seed(opt.seed, "roofline"), 1, opt.cache_words);
  double secs = 0;
  auto r = timed_generation(target, p[0], opt.accounting_max_tokens, &secs);
  if (!r.ok()) return target_error(r.status());
  int64_t toks = usage_field(*r, "completion_tokens").value_or(opt.accounting_max_tokens);
  int64_t ctx = usage_field(*r, "prompt_tokens").value_or(0) + toks;
  double bytes = opt.weight_bytes + opt.kv_bytes_per_token * double(ctx) / 2;
  double ceiling = opt.bandwidth_gbs * 1e9 / bytes;
  double rate = secs > 0 ? double(toks) / secs : std::nan("");
  g.constraints.push_back(
      check("decode_rate_over_roofline", rate / ceiling, "<=", 1.0,
            "one stream decodes faster than memory bandwidth allows: the work is not done "
            "(cached, skipped) or the machine data is wrong",
            fmt::format("{:.1f} tok/s vs ceiling {:.1f} tok/s ({} GB/s, {:.3g} bytes/step)", rate, ceiling,
                        opt.bandwidth_gbs, bytes)));
  return Status::Ok();
}

// 5. Harness integrity: the files hashed before the run, hashed again now.
void add_harness_check(const IntegrityOptions& opt, GateResult& g) {
  if (opt.harness_before.files.empty() && opt.harness_before.protocol_hash.empty()) {
    g.constraints.push_back(not_evaluated("harness_files_changed", "no hashes were taken before the run"));
    return;
  }
  std::vector<std::string> paths;
  for (const auto& [p, h] : opt.harness_before.files) paths.push_back(p);
  HarnessChange ch = harness_changes(opt.harness_before, hash_harness(paths));
  g.constraints.push_back(
      check("harness_files_changed", double(ch.changed), "==", 0,
            "plumb's binary, protocol or datasets changed during the run: " + ch.which +
                "; run the system under test without write access to them",
            fmt::format("{} files + protocol hash checked", opt.harness_before.files.size())));
}

}  // namespace

Result<GateResult> run_integrity(OpenAiClient& target, OpenAiClient* reference, const IntegrityOptions& opt) {
  GateResult g;
  g.gate = "integrity";
  PLUMB_RETURN_IF_ERROR(target.resolve_model());
  if (reference) PLUMB_RETURN_IF_ERROR(reference->resolve_model());
  OpenAiClient& counter = reference ? *reference : target;
  add_fidelity(target, reference, opt, g);
  PLUMB_RETURN_IF_ERROR(add_repeat_checks(target, opt, g));
  PLUMB_RETURN_IF_ERROR(add_sampled_check(target, opt, g));
  PLUMB_RETURN_IF_ERROR(add_accounting_checks(target, counter, reference != nullptr, opt, g));
  PLUMB_RETURN_IF_ERROR(add_roofline_check(target, opt, g));
  add_harness_check(opt, g);
  return g;
}

}  // namespace plumb::gates
