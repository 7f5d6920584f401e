// The OpenAI request layer (server/api.h): a /v1/completions or /v1/chat/completions body to a
// backend request with its sampling parameters, against the shipped model's tokenizer and chat
// template. Invariants: an accepted request is one the backend can run (prompt ids inside the
// vocabulary, prompt + max_tokens inside the context, sampling parameters that validate, finite
// temperature and top_p); a refused one is a 400 or 404 with a non-empty message and a JSON body.
#include <cmath>
#include <memory>
#include <string>

#include "core/json.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "fuzz/fuzz_target.h"
#include "server/api.h"

namespace {

struct Model {
  std::unique_ptr<plumb::engine::Tokenizer> tok;
  std::unique_ptr<plumb::engine::ChatTemplate> tmpl;
};

const Model& model() {
  static const Model m = [] {
    Model r;
    auto tok = plumb::engine::Tokenizer::load(PLUMB_SOURCE_DIR "/models/plumb-tiny");
    if (!tok.ok()) {
      std::fprintf(stderr, "fuzz_openai_request: %s\n", tok.status().message().c_str());
      std::abort();
    }
    r.tok = std::move(tok).value();
    auto tmpl = plumb::engine::ChatTemplate::for_tokenizer(*r.tok);
    if (tmpl.ok()) r.tmpl = std::make_unique<plumb::engine::ChatTemplate>(std::move(tmpl).value());
    return r;
  }();
  return m;
}

}  // namespace

PLUMB_FUZZ_TARGET(openai_request) {
  using namespace plumb::server;
  plumb::fuzz::Reader in(input);
  uint8_t mode = in.byte();
  const Model& m = model();
  ParseContext ctx;
  ctx.tokenizer = m.tok.get();
  ctx.chat_template = m.tmpl.get();
  ctx.served_model = "plumb-tiny";
  // 512: the shipped model's context; the other value is what /tokenize passes.
  ctx.max_context = (mode & 2) ? INT64_MAX / 4 : 512;
  ctx.eos_ids = m.tok->eos_ids();
  bool chat = (mode & 1) != 0;
  auto parsed = parse_completion(in.rest(), chat, ctx);
  if (const auto* e = std::get_if<ApiError>(&parsed)) {
    if (e->status != 400 && e->status != 404) return "refused with status " + std::to_string(e->status);
    if (e->message.empty()) return "refused without a message";
    auto body = plumb::json::parse(e->body());
    if (!body.ok() || !body->is_object() || !body->as_object().contains("error")) {
      return "the error body is not an OpenAI error object";
    }
    return "";
  }
  const CompletionRequest& r = std::get<CompletionRequest>(parsed);
  if (r.chat != chat) return "chat flag not kept";
  if (r.prompt_ids.empty()) return "accepted an empty prompt";
  for (int32_t id : r.prompt_ids) {
    if (id < 0 || id >= m.tok->vocab_size()) return "accepted a prompt id outside the vocabulary";
  }
  const auto& s = r.sampling;
  if (!s.validate().ok())
    return "accepted sampling parameters that do not validate: " + s.validate().message();
  if (!std::isfinite(s.temperature) || !std::isfinite(s.top_p))
    return "accepted a non-finite temperature or top_p";
  if (s.max_tokens < 1) return "accepted max_tokens < 1";
  if (int64_t(r.prompt_ids.size()) + s.max_tokens > ctx.max_context)
    return "prompt + max_tokens exceed the context";
  if (r.top_logprobs < 0 || r.top_logprobs > 20) return "top_logprobs outside [0, 20]";
  for (const std::string& stop : r.stop) {
    if (stop.empty()) return "an empty stop string was kept";
  }
  return "";
}
