#include "gates/fidelity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace plumb::gates {

Result<PromptLogprobs> parse_completion_logprobs(const json::value& logprobs, int64_t prompt_tokens) {
  auto bad = [](const std::string& why) { return Status(Code::kInvalidArgument, "logprobs: " + why); };
  if (!logprobs.is_object()) return bad("not an object (did the server honour echo + logprobs?)");
  const auto& o = logprobs.as_object();
  if (!o.contains("tokens") || !o.at("tokens").is_array()) return bad("'tokens' (a list) is missing");
  if (!o.contains("top_logprobs") || !o.at("top_logprobs").is_array())
    return bad("'top_logprobs' (a list) is missing");
  const auto& toks = o.at("tokens").as_array();
  const auto& tops = o.at("top_logprobs").as_array();
  if (prompt_tokens < 0 || int64_t(toks.size()) < prompt_tokens || int64_t(tops.size()) < prompt_tokens)
    return bad(fmt::format("{} tokens / {} top_logprobs entries for a {}-token prompt", toks.size(),
                           tops.size(), prompt_tokens));
  PromptLogprobs out;
  for (int64_t i = 0; i < prompt_tokens; ++i) {
    PositionLogprobs p;
    if (!toks[i].is_string()) return bad(fmt::format("tokens[{}] is not a string", i));
    p.token = std::string(toks[i].as_string());
    const auto& t = tops[i];
    if (t.is_object()) {
      for (const auto& kv : t.as_object()) {
        if (!kv.value().is_number()) return bad(fmt::format("top_logprobs[{}] holds a non-number", i));
        p.top.emplace_back(std::string(kv.key()), kv.value().to_number<double>());
      }
      std::stable_sort(p.top.begin(), p.top.end(), [](auto& a, auto& b) { return a.second > b.second; });
    } else if (!t.is_null()) {
      return bad(fmt::format("top_logprobs[{}] is neither an object nor null", i));
    }
    out.positions.push_back(std::move(p));
  }
  return out;
}

namespace {
constexpr double kFloor = 1e-12;
double term(double p, double q) { return p <= 0 ? 0.0 : p * std::log(p / std::max(q, kFloor)); }
}  // namespace

double position_kl(const std::vector<std::pair<std::string, double>>& ref,
                   const std::vector<std::pair<std::string, double>>& cand) {
  if (ref.empty() || cand.empty()) return 0;
  std::map<std::string, double> q;
  for (const auto& [tok, lp] : cand) q.emplace(tok, std::exp(lp));
  double kl = 0, p_shared = 0, q_shared = 0;
  bool any = false;
  for (const auto& [tok, lp] : ref) {
    auto it = q.find(tok);
    if (it == q.end()) continue;
    double p = std::exp(lp);
    kl += term(p, it->second);
    p_shared += p;
    q_shared += it->second;
    any = true;
  }
  if (any)
    return std::max(0.0, kl + term(std::max(1.0 - p_shared, kFloor), std::max(1.0 - q_shared, kFloor)));
  // Disjoint lists: the reference's top token has q <= the smallest listed candidate probability.
  double p = std::min(1.0, std::exp(ref.front().second));
  double q_up = std::exp(cand.back().second);
  for (const auto& c : cand) q_up = std::min(q_up, std::exp(c.second));
  if (q_up >= p) return 0;
  return std::max(0.0, term(p, q_up) + term(1.0 - p, 1.0 - q_up));
}

Result<FidelityStats> compare_fidelity(const std::vector<PromptLogprobs>& reference,
                                       const std::vector<PromptLogprobs>& candidate, double tie_nats) {
  if (reference.size() != candidate.size())
    return Status(Code::kInvalidArgument,
                  fmt::format("fidelity: {} reference prompts vs {} candidate prompts", reference.size(),
                              candidate.size()));
  FidelityStats s;
  s.prompts = int64_t(reference.size());
  int64_t agree = 0, strict_agree = 0, ref_positions = 0, matched = 0;
  double kl_sum = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const auto& r = reference[i].positions;
    const auto& c = candidate[i].positions;
    ref_positions += int64_t(r.size());
    if (r.size() != c.size()) {
      s.length_mismatches++;
      continue;
    }
    for (size_t j = 0; j < r.size(); ++j) {
      if (r[j].token != c[j].token) {
        s.token_mismatches++;
        continue;
      }
      matched++;
      if (r[j].top.empty() || c[j].top.empty()) continue;
      s.positions++;
      const auto& want = r[j].top.front();
      const std::string& got = c[j].top.front().first;
      if (want.first == got) {
        agree++;
        strict_agree++;
      } else {
        for (const auto& [t, lp] : r[j].top)
          if (t == got && want.second - lp <= tie_nats) agree++;
      }
      std::map<std::string, bool> seen;
      bool shared = false;
      for (const auto& [t, lp] : c[j].top) seen[t] = true;
      for (const auto& [t, lp] : r[j].top) shared = shared || seen.count(t) > 0;
      if (!shared) s.disjoint_positions++;
      double kl = position_kl(r[j].top, c[j].top);
      kl_sum += kl;
      s.max_kl = std::max(s.max_kl, kl);
    }
  }
  s.token_match = ref_positions > 0 ? double(matched) / double(ref_positions) : 0;
  if (s.positions == 0)
    return Status(Code::kInvalidArgument,
                  fmt::format("fidelity: no comparable position ({} prompts, {} length mismatches, {} token "
                              "mismatches); is the candidate the same model and tokenizer?",
                              s.prompts, s.length_mismatches, s.token_mismatches));
  s.top1_agreement = double(agree) / double(s.positions);
  s.strict_top1_agreement = double(strict_agree) / double(s.positions);
  s.mean_kl = kl_sum / double(s.positions);
  return s;
}

}  // namespace plumb::gates
