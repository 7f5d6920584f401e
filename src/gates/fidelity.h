// Fidelity of a candidate server to a reference: both score the same prompt teacher-forced
// (/v1/completions with echo and logprobs), and their next-token distributions are compared
// position by position.
//
// Estimator (docs/architecture.md "## Gates"). At each position where both sides report the same
// prompt token and a top-k list, let S be the tokens in both top-k lists. p and q are coarse-grained
// to S plus one "other" bucket (1 - the listed mass on S, floored at 1e-12), and
// KL(p || q) = sum over S and other of p log(p / q), in nats. Coarse-graining never increases KL,
// so this is a lower bound on the full-vocabulary KL. When S is empty, the reference's top-1 token
// t has q(t) <= the smallest probability the candidate lists, and the binary KL of p(t) against
// that upper bound is used (again a lower bound). Top-1 agreement: the candidate's most likely
// token is the reference's, or a near-tie of it (its reference log-probability within tie_nats of the
// reference's top-1: bf16 vs f32 flips such ties, 4 of 24 positions of plumb-tiny's reference
// logits, with KL ~1e-5). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace plumb::gates {

// One prompt position as a server reports it.
struct PositionLogprobs {
  std::string token;                                // the prompt token's text
  std::vector<std::pair<std::string, double>> top;  // next-token alternatives, most likely first (log p)
};

// Teacher-forced logprobs of one prompt: position i holds the distribution that predicted token i
// (top is empty where the server reports null, i.e. the first token).
struct PromptLogprobs {
  std::vector<PositionLogprobs> positions;  // one per prompt token
};

// Parses the "logprobs" object of an OpenAI /v1/completions choice ({"tokens", "token_logprobs",
// "top_logprobs":[null | {token: logprob}]}) keeping the first `prompt_tokens` positions.
// InvalidArgument when the fields are missing, of the wrong type, or shorter than prompt_tokens.
Result<PromptLogprobs> parse_completion_logprobs(const json::value& logprobs, int64_t prompt_tokens);

struct FidelityStats {
  int64_t prompts = 0;               // prompts compared
  int64_t positions = 0;             // positions with a distribution on both sides
  int64_t token_mismatches = 0;      // positions where the prompt tokens differ (different tokenizer)
  int64_t length_mismatches = 0;     // prompts tokenized to a different number of tokens
  int64_t disjoint_positions = 0;    // positions whose top-k lists share no token
  double top1_agreement = 0;         // fraction of positions with the same most likely token (or a tie)
  double strict_top1_agreement = 0;  // the same without counting near-ties
  double mean_kl = 0;                // mean KL(reference || candidate) per position, nats (lower bound)
  double max_kl = 0;                 // largest per-position KL
  double token_match = 0;            // fraction of reference positions whose token the candidate matches
};

// KL of one position (the estimator above); both lists hold log-probabilities.
double position_kl(const std::vector<std::pair<std::string, double>>& ref,
                   const std::vector<std::pair<std::string, double>>& cand);

// Compares candidate to reference over prompts in the same order. Positions are aligned by index;
// a prompt of a different token count, or a position with a different token, counts against
// token_match and is not compared. InvalidArgument if the prompt counts differ or nothing is
// comparable (then the caller reports the gate as failed, with this message).
Result<FidelityStats> compare_fidelity(const std::vector<PromptLogprobs>& reference,
                                       const std::vector<PromptLogprobs>& candidate, double tie_nats = 0.05);

// Bounds of the fidelity constraints (measured; see docs/architecture.md "## Gates").
struct FidelityBounds {
  double min_top1_agreement = 0.90;  // bf16 vs f32 plumb-tiny: 1.0; a different model: far below
  double max_mean_kl = 0.05;         // nats; bf16 vs f32 plumb-tiny: ~1e-4
  double min_token_match = 1.0;      // the same tokenizer must give the same prompt tokens
};

}  // namespace plumb::gates
