#include "server/api.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

#include "net/sse.h"

namespace plumb::server {

std::string ApiError::body() const {
  json::object e;
  e["message"] = message;
  e["type"] = type;
  if (param.empty()) {
    e["param"] = nullptr;
  } else {
    e["param"] = param;
  }
  if (code.empty()) {
    e["code"] = nullptr;
  } else {
    e["code"] = code;
  }
  json::object o;
  o["error"] = std::move(e);
  return json::dump(o);
}

ApiError bad_request(std::string message, std::string param) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

namespace {

// Field access that turns a Status into a 400 naming the field.
template <typename T>
std::optional<ApiError> take(Result<std::optional<T>> r, std::optional<T>& out, std::string_view field) {
  if (!r.ok()) return bad_request(r.status().message(), std::string(field));
  out = *r;
  return std::nullopt;
}

// A token-id array: every element an integer.
std::optional<std::vector<int32_t>> as_ids(const json::value& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<int32_t> ids;
  for (const auto& e : v.as_array()) {
    if (e.is_int64() && e.as_int64() >= INT32_MIN && e.as_int64() <= INT32_MAX) {
      ids.push_back(int32_t(e.as_int64()));
    } else if (e.is_uint64() && e.as_uint64() <= uint64_t(INT32_MAX)) {
      ids.push_back(int32_t(e.as_uint64()));
    } else {
      return std::nullopt;
    }
  }
  return ids;
}

std::optional<ApiError> parse_prompt(const json::object& o, const ParseContext& ctx, CompletionRequest& r) {
  auto it = o.find("prompt");
  if (it == o.end() || it->value().is_null()) return bad_request("field 'prompt' is required", "prompt");
  const json::value& p = it->value();
  if (p.is_string()) {
    r.prompt_text = std::string(p.as_string());
    r.prompt_ids = ctx.tokenizer->encode(r.prompt_text, true);
    return std::nullopt;
  }
  if (p.is_array()) {
    const auto& a = p.as_array();
    if (a.empty()) return bad_request("field 'prompt' must not be empty", "prompt");
    if (auto ids = as_ids(p)) {
      r.prompt_ids = std::move(*ids);
      r.prompt_text = ctx.tokenizer->decode(r.prompt_ids);
      return std::nullopt;
    }
    if (a.size() != 1) {
      return bad_request(
          "only one prompt per request is supported (n=1); got a list of " + std::to_string(a.size()),
          "prompt");
    }
    if (a[0].is_string()) {
      r.prompt_text = std::string(a[0].as_string());
      r.prompt_ids = ctx.tokenizer->encode(r.prompt_text, true);
      return std::nullopt;
    }
    if (auto ids = as_ids(a[0])) {
      r.prompt_ids = std::move(*ids);
      r.prompt_text = ctx.tokenizer->decode(r.prompt_ids);
      return std::nullopt;
    }
  }
  return bad_request("field 'prompt' must be a string, a list of one string, or a list of token ids",
                     "prompt");
}

std::optional<ApiError> parse_messages(const json::object& o, const ParseContext& ctx, CompletionRequest& r) {
  auto it = o.find("messages");
  if (it == o.end() || !it->value().is_array() || it->value().as_array().empty()) {
    return bad_request("field 'messages' must be a non-empty list of {role, content}", "messages");
  }
  std::vector<engine::ChatMessage> msgs;
  size_t i = 0;
  for (const auto& m : it->value().as_array()) {
    // The OpenAI API names a message's field as "messages.[i].field".
    const std::string at = "messages.[" + std::to_string(i++) + "]";
    if (!m.is_object()) return bad_request(at + " must be an object {role, content}", at);
    const auto& mo = m.as_object();
    auto role = mo.find("role");
    if (role == mo.end() || !role->value().is_string()) {
      return bad_request(at + " needs a string 'role'", at + ".role");
    }
    engine::ChatMessage cm;
    cm.role = std::string(role->value().as_string());
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool") {
      return bad_request(at + ".role '" + cm.role + "' is not one of 'system', 'user', 'assistant', 'tool'",
                         at + ".role");
    }
    // A message without text (missing, null, an empty list of parts) would render as an empty turn
    // the client did not write; tool calls, the one place OpenAI allows it, are not supported.
    auto content = mo.find("content");
    if (content == mo.end() || content->value().is_null()) {
      return bad_request(at + " needs 'content' (a string or a list of text parts)", at + ".content");
    }
    if (content->value().is_string()) {
      cm.content = std::string(content->value().as_string());
    } else if (content->value().is_array()) {
      if (content->value().as_array().empty()) {
        return bad_request(at + ".content must not be an empty list", at + ".content");
      }
      // [{"type": "text", "text": ...}, ...]: text parts only.
      for (const auto& part : content->value().as_array()) {
        if (!part.is_object()) return bad_request("message content parts must be objects", at + ".content");
        auto type = part.as_object().find("type");
        auto text = part.as_object().find("text");
        if (type == part.as_object().end() || !type->value().is_string() ||
            type->value().as_string() != "text" || text == part.as_object().end() ||
            !text->value().is_string()) {
          return bad_request("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
                             at + ".content");
        }
        cm.content += std::string(text->value().as_string());
      }
    } else {
      return bad_request(at + ".content must be a string or a list of text parts", at + ".content");
    }
    msgs.push_back(std::move(cm));
  }
  if (!ctx.chat_template) {
    return bad_request("this model has no chat template; use /v1/completions", "messages");
  }
  auto rendered = ctx.chat_template->apply(msgs, true);
  if (!rendered.ok()) return bad_request(rendered.status().message(), "messages");
  // The templates put BOS in the text themselves.
  r.prompt_ids = ctx.tokenizer->encode(*rendered, false);
  return std::nullopt;
}

bool is_null(const json::value& v) { return v.is_null(); }
bool null_or_false(const json::value& v) { return v.is_null() || (v.is_bool() && !v.as_bool()); }
bool null_or_true(const json::value& v) { return v.is_null() || (v.is_bool() && v.as_bool()); }
bool null_or_empty(const json::value& v) {
  return v.is_null() || (v.is_array() && v.as_array().empty()) || (v.is_object() && v.as_object().empty()) ||
         (v.is_string() && v.as_string().empty());
}
bool null_or_number(const json::value& v, double neutral) {
  if (v.is_null()) return true;
  if (v.is_int64()) return double(v.as_int64()) == neutral;
  if (v.is_uint64()) return double(v.as_uint64()) == neutral;
  return v.is_double() && v.as_double() == neutral;
}
bool null_or_one(const json::value& v) { return null_or_number(v, 1.0); }
bool null_or_zero(const json::value& v) { return null_or_number(v, 0.0); }
bool no_tool_choice(const json::value& v) {
  return v.is_null() || (v.is_string() && (v.as_string() == "none" || v.as_string() == "auto"));
}
bool text_format(const json::value& v) {
  if (v.is_null()) return true;
  if (!v.is_object()) return false;
  auto t = v.as_object().find("type");
  return t != v.as_object().end() && t->value().is_string() && t->value().as_string() == "text";
}
bool text_modalities(const json::value& v) {
  if (v.is_null()) return true;
  if (!v.is_array()) return false;
  for (const auto& m : v.as_array()) {
    if (!m.is_string() || m.as_string() != "text") return false;
  }
  return true;
}

// Known fields (OpenAI's and vLLM's extensions) that change the output and that plumb does not
// implement. Present with anything but their neutral value, they are refused with a 400 naming the
// field: never a 200 that ignored what the client asked for. docs/serving.md lists them.
enum class Scope : uint8_t { kBoth, kChat, kCompletions };
struct RefusedField {
  const char* name;
  bool (*neutral)(const json::value&);
  Scope scope;
  const char* what;  // what plumb does not do
};
constexpr RefusedField kRefused[] = {
    {"response_format", text_format, Scope::kBoth, "structured output (only {\"type\": \"text\"})"},
    {"tools", null_or_empty, Scope::kChat, "tool calling"},
    {"tool_choice", no_tool_choice, Scope::kChat, "tool calling"},
    {"functions", null_or_empty, Scope::kChat, "function calling"},
    {"function_call", no_tool_choice, Scope::kChat, "function calling"},
    {"best_of", null_or_one, Scope::kCompletions, "best_of > 1"},
    {"suffix", null_or_empty, Scope::kCompletions, "insertion (suffix)"},
    {"min_p", null_or_zero, Scope::kBoth, "min_p sampling"},
    {"use_beam_search", null_or_false, Scope::kBoth, "beam search"},
    {"length_penalty", null_or_one, Scope::kBoth, "beam search (length_penalty)"},
    {"include_stop_str_in_output", null_or_false, Scope::kBoth, "keeping the stop string in the output"},
    {"allowed_token_ids", null_or_empty, Scope::kBoth, "restricting the vocabulary"},
    {"bad_words", null_or_empty, Scope::kBoth, "banned words"},
    {"guided_json", is_null, Scope::kBoth, "guided decoding"},
    {"guided_regex", is_null, Scope::kBoth, "guided decoding"},
    {"guided_choice", is_null, Scope::kBoth, "guided decoding"},
    {"guided_grammar", is_null, Scope::kBoth, "guided decoding"},
    {"structured_outputs", is_null, Scope::kBoth, "structured output"},
    {"prompt_logprobs", is_null, Scope::kBoth, "prompt_logprobs (use echo with logprobs on /v1/completions)"},
    {"truncate_prompt_tokens", is_null, Scope::kBoth, "prompt truncation"},
    {"spaces_between_special_tokens", null_or_true, Scope::kBoth, "spaces_between_special_tokens: false"},
    {"echo", null_or_false, Scope::kChat, "echo on chat completions"},
    {"continue_final_message", null_or_false, Scope::kChat, "continuing the final message"},
    {"add_generation_prompt", null_or_true, Scope::kChat, "add_generation_prompt: false"},
    {"chat_template", is_null, Scope::kChat, "a client-supplied chat template"},
    {"chat_template_kwargs", null_or_empty, Scope::kChat, "chat template arguments"},
    {"documents", null_or_empty, Scope::kChat, "documents in the template"},
    {"modalities", text_modalities, Scope::kChat, "output modalities other than text"},
    {"audio", is_null, Scope::kChat, "audio output"},
    {"reasoning_effort", is_null, Scope::kChat, "reasoning effort"},
    {"web_search_options", is_null, Scope::kChat, "web search"},
};

std::optional<ApiError> refuse_unimplemented(const json::object& o, bool chat) {
  for (const RefusedField& f : kRefused) {
    if (f.scope == (chat ? Scope::kCompletions : Scope::kChat)) continue;
    auto it = o.find(f.name);
    if (it == o.end() || f.neutral(it->value())) continue;
    return bad_request(std::string("'") + f.name +
                           "' is not supported by this server: plumb does not implement " + f.what +
                           "; remove the field",
                       f.name);
  }
  return std::nullopt;
}

// logit_bias: {"token id": bias}, ids in the vocabulary, biases in [-100, 100] (OpenAI's bounds).
std::optional<ApiError> parse_logit_bias(const json::object& o, int32_t vocab,
                                         std::vector<std::pair<int32_t, float>>& out) {
  auto it = o.find("logit_bias");
  if (it == o.end() || it->value().is_null()) return std::nullopt;
  if (!it->value().is_object()) {
    return bad_request("field 'logit_bias' must be an object {\"token id\": bias}", "logit_bias");
  }
  for (const auto& kv : it->value().as_object()) {
    const std::string key(kv.key());
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10 &&
                  std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoll(key);
    if (!digits || id >= vocab) {
      return bad_request(
          "logit_bias key '" + key + "' is not a token id in [0, " + std::to_string(vocab) + ")",
          "logit_bias");
    }
    const json::value& v = kv.value();
    double b = v.is_int64()    ? double(v.as_int64())
               : v.is_uint64() ? double(v.as_uint64())
               : v.is_double() ? v.as_double()
                               : NAN;
    if (!(b >= -100.0 && b <= 100.0)) {
      return bad_request("logit_bias values must be numbers in [-100, 100] (token " + key + ")",
                         "logit_bias");
    }
    out.emplace_back(int32_t(id), float(b));
  }
  return std::nullopt;
}

// stop_token_ids (vLLM): token ids in the vocabulary that end the output whether or not ignore_eos
// is set (SamplingParams::ends_sequence); at most kMaxStopTokenIds of them.
constexpr size_t kMaxStopTokenIds = 256;
std::optional<ApiError> parse_stop_token_ids(const json::object& o, int32_t vocab,
                                             std::vector<int32_t>& out) {
  auto it = o.find("stop_token_ids");
  if (it == o.end() || it->value().is_null()) return std::nullopt;
  const char* field = "stop_token_ids";
  if (!it->value().is_array())
    return bad_request("field 'stop_token_ids' must be an array of token ids", field);
  const auto& a = it->value().as_array();
  if (a.size() > kMaxStopTokenIds)
    return bad_request("stop_token_ids holds " + std::to_string(a.size()) + " ids; at most " +
                           std::to_string(kMaxStopTokenIds) + " are accepted",
                       field);
  // An integer past INT64_MAX parses as uint64: past the vocabulary anyway, so refused with the rest.
  for (const auto& v : a) {
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() >= vocab)
      return bad_request("stop_token_ids must be token ids in [0, " + std::to_string(vocab) + ")", field);
    out.push_back(int32_t(v.as_int64()));
  }
  return std::nullopt;
}

// The request's fields as sent, before defaults; each is checked on its own as it is read.
struct RequestFields {
  std::optional<int64_t> max_tokens, max_completion_tokens, top_k, seed, min_tokens;
  std::optional<double> temperature, top_p, presence_penalty, frequency_penalty, repetition_penalty;
  std::optional<bool> stream, ignore_eos, skip_special;
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<int32_t> stop_token_ids;
};

// 'model' names the served model when given (404 otherwise); r.model keeps what was sent.
std::optional<ApiError> parse_model(const json::object& o, const ParseContext& ctx, CompletionRequest& r) {
  if (auto it = o.find("model"); it != o.end() && it->value().is_null()) {
    return bad_request("field 'model' must be a string (the served model's id), not null", "model");
  }
  std::optional<std::string> model;
  if (auto e = take(json::opt_string(o, "model"), model, "model")) return *e;
  r.model = model.value_or("");
  if (model && *model != ctx.served_model) {
    ApiError e;
    e.status = 404;
    e.message = "The model '" + *model + "' does not exist; this server serves '" + ctx.served_model + "'.";
    e.param = "model";
    e.code = "model_not_found";
    return e;
  }
  return std::nullopt;
}

// n, the token budgets and the sampling numbers, each in its documented range.
std::optional<ApiError> parse_sampling_fields(const json::object& o, RequestFields& f) {
  std::optional<int64_t> n;
  if (auto e = take(json::opt_int(o, "n"), n, "n")) return *e;
  if (n && *n != 1) return bad_request("only n=1 is supported", "n");
  if (auto e = take(json::opt_int(o, "max_tokens"), f.max_tokens, "max_tokens")) return *e;
  if (auto e =
          take(json::opt_int(o, "max_completion_tokens"), f.max_completion_tokens, "max_completion_tokens")) {
    return *e;
  }
  if (auto e = take(json::opt_double(o, "temperature"), f.temperature, "temperature")) return *e;
  // OpenAI's bound (and what makes sense: far above 2 every token is equally likely).
  if (f.temperature && !(*f.temperature >= 0.0 && *f.temperature <= 2.0)) {
    return bad_request("temperature must be in [0, 2], got " + json::dump(json::value(*f.temperature)),
                       "temperature");
  }
  if (auto e = take(json::opt_double(o, "top_p"), f.top_p, "top_p")) return *e;
  if (f.top_p && !(*f.top_p > 0.0 && *f.top_p <= 1.0)) {
    return bad_request("top_p must be in (0, 1], got " + json::dump(json::value(*f.top_p)), "top_p");
  }
  if (auto e = take(json::opt_double(o, "presence_penalty"), f.presence_penalty, "presence_penalty"))
    return *e;
  if (f.presence_penalty && !(*f.presence_penalty >= -2.0 && *f.presence_penalty <= 2.0)) {
    return bad_request("presence_penalty must be in [-2, 2]", "presence_penalty");
  }
  if (auto e = take(json::opt_double(o, "frequency_penalty"), f.frequency_penalty, "frequency_penalty"))
    return *e;
  if (f.frequency_penalty && !(*f.frequency_penalty >= -2.0 && *f.frequency_penalty <= 2.0)) {
    return bad_request("frequency_penalty must be in [-2, 2]", "frequency_penalty");
  }
  if (auto e = take(json::opt_double(o, "repetition_penalty"), f.repetition_penalty, "repetition_penalty")) {
    return *e;
  }
  if (f.repetition_penalty && !(*f.repetition_penalty > 0.0 && *f.repetition_penalty <= 1e6)) {
    return bad_request("repetition_penalty must be > 0 (1 = off)", "repetition_penalty");
  }
  return std::nullopt;
}

// min_tokens, logit_bias, stop_token_ids, top_k, seed and the flags.
std::optional<ApiError> parse_token_fields(const json::object& o, const ParseContext& ctx, RequestFields& f) {
  if (auto e = take(json::opt_int(o, "min_tokens"), f.min_tokens, "min_tokens")) return *e;
  if (f.min_tokens && *f.min_tokens < 0) return bad_request("min_tokens must be >= 0", "min_tokens");
  if (auto e = parse_logit_bias(o, ctx.tokenizer->vocab_size(), f.logit_bias)) return *e;
  if (auto e = parse_stop_token_ids(o, ctx.tokenizer->vocab_size(), f.stop_token_ids)) return *e;
  if (auto e = take(json::opt_int(o, "top_k"), f.top_k, "top_k")) return *e;
  if (auto e = take(json::opt_int(o, "seed"), f.seed, "seed")) return *e;
  if (auto e = take(json::opt_bool(o, "stream"), f.stream, "stream")) return *e;
  if (auto e = take(json::opt_bool(o, "ignore_eos"), f.ignore_eos, "ignore_eos")) return *e;
  if (auto e = take(json::opt_bool(o, "skip_special_tokens"), f.skip_special, "skip_special_tokens"))
    return *e;
  return std::nullopt;
}

// Chat: logprobs is a bool and top_logprobs a count; completions: logprobs is the count, with echo.
std::optional<ApiError> parse_logprobs(const json::object& o, bool chat, CompletionRequest& r) {
  if (chat) {
    std::optional<bool> logprobs_bool;
    std::optional<int64_t> top_logprobs;
    if (auto e = take(json::opt_bool(o, "logprobs"), logprobs_bool, "logprobs")) return *e;
    if (auto e = take(json::opt_int(o, "top_logprobs"), top_logprobs, "top_logprobs")) return *e;
    if (top_logprobs && (*top_logprobs < 0 || *top_logprobs > 20)) {
      return bad_request("top_logprobs must be in [0, 20]", "top_logprobs");
    }
    if (top_logprobs && !logprobs_bool.value_or(false)) {
      return bad_request("top_logprobs needs logprobs: true", "top_logprobs");
    }
    r.want_logprobs = logprobs_bool.value_or(false);
    r.top_logprobs = int32_t(top_logprobs.value_or(0));
    return std::nullopt;
  }
  std::optional<int64_t> logprobs_int;
  std::optional<bool> echo;
  if (auto e = take(json::opt_int(o, "logprobs"), logprobs_int, "logprobs")) return *e;
  if (logprobs_int && (*logprobs_int < 0 || *logprobs_int > 20)) {
    return bad_request("logprobs must be an integer in [0, 20]", "logprobs");
  }
  if (auto e = take(json::opt_bool(o, "echo"), echo, "echo")) return *e;
  r.want_logprobs = logprobs_int.has_value();
  r.top_logprobs = int32_t(logprobs_int.value_or(0));
  r.echo = echo.value_or(false);
  r.prompt_logprobs = r.echo && r.want_logprobs;
  return std::nullopt;
}

// stop: a string or a list of strings.
std::optional<ApiError> parse_stop(const json::object& o, CompletionRequest& r) {
  auto it = o.find("stop");
  if (it == o.end() || it->value().is_null()) return std::nullopt;
  if (it->value().is_string()) {
    r.stop.emplace_back(it->value().as_string());
  } else if (it->value().is_array()) {
    for (const auto& s : it->value().as_array()) {
      if (!s.is_string()) return bad_request("field 'stop' must be a string or a list of strings", "stop");
      r.stop.emplace_back(s.as_string());
    }
  } else {
    return bad_request("field 'stop' must be a string or a list of strings", "stop");
  }
  // An empty stop string would match before the first token: the client meant something else.
  if (std::find(r.stop.begin(), r.stop.end(), std::string()) != r.stop.end()) {
    return bad_request("stop strings must not be empty", "stop");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_stream_options(const json::object& o, CompletionRequest& r) {
  auto it = o.find("stream_options");
  if (it == o.end() || it->value().is_null()) return std::nullopt;
  if (!it->value().is_object())
    return bad_request("field 'stream_options' must be an object", "stream_options");
  std::optional<bool> usage;
  if (auto e = take(json::opt_bool(it->value().as_object(), "include_usage"), usage,
                    "stream_options.include_usage")) {
    return *e;
  }
  r.include_usage = usage.value_or(false);
  return std::nullopt;
}

// The prompt or the messages, tokenized into r.prompt_ids: not empty, every id in the vocabulary.
std::optional<ApiError> parse_input(const json::object& o, bool chat, const ParseContext& ctx,
                                    CompletionRequest& r) {
  if (auto e = chat ? parse_messages(o, ctx, r) : parse_prompt(o, ctx, r)) return *e;
  if (r.prompt_ids.empty()) return bad_request("the prompt is empty", chat ? "messages" : "prompt");
  int32_t vocab = ctx.tokenizer->vocab_size();
  for (int32_t id : r.prompt_ids) {
    if (id < 0 || id >= vocab) {
      return bad_request(
          "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
          "prompt");
    }
  }
  return std::nullopt;
}

// The completion's token budget: max_completion_tokens, else max_tokens, else the endpoint's
// default; it must fit the context beside the prompt.
std::optional<ApiError> resolve_max_tokens(const RequestFields& f, bool chat, const ParseContext& ctx,
                                           const CompletionRequest& r, int64_t& max_gen) {
  int64_t prompt_len = int64_t(r.prompt_ids.size());
  std::optional<int64_t> mt = f.max_completion_tokens ? f.max_completion_tokens : f.max_tokens;
  const char* mt_name = f.max_completion_tokens ? "max_completion_tokens" : "max_tokens";
  if (mt && *mt < 1) return bad_request(std::string(mt_name) + " must be >= 1", mt_name);
  if (mt) {
    max_gen = *mt;
  } else if (chat) {
    max_gen = ctx.max_context - prompt_len;  // as vLLM: the rest of the context
  } else {
    max_gen = 16;  // the OpenAI default for completions
  }
  // Compared as max_gen > room, never as a sum: max_tokens may be as large as INT64_MAX.
  if (std::max<int64_t>(max_gen, 1) <= ctx.max_context - prompt_len) return std::nullopt;
  std::string total = max_gen > INT64_MAX - prompt_len ? "more than " + std::to_string(INT64_MAX)
                                                       : std::to_string(prompt_len + max_gen);
  ApiError e =
      bad_request("This model's maximum context length is " + std::to_string(ctx.max_context) +
                      " tokens. However, you requested " + total + " tokens (" + std::to_string(prompt_len) +
                      " in the " + (chat ? "messages" : "prompt") + ", " + std::to_string(max_gen) +
                      " for the completion). Please reduce the length of the " +
                      (chat ? "messages" : "prompt") + " or the completion.",
                  chat ? "messages" : "prompt");
  e.code = "context_length_exceeded";
  return e;
}

// r.sampling from the fields and their defaults, then SamplingParams::validate's verdict, its
// message naming the field it refused.
std::optional<ApiError> fill_sampling(RequestFields& f, int64_t max_gen, const ParseContext& ctx,
                                      CompletionRequest& r) {
  auto& s = r.sampling;
  s.temperature = float(f.temperature.value_or(1.0));
  s.top_p = float(f.top_p.value_or(1.0));
  s.top_k = int32_t(std::clamp<int64_t>(f.top_k.value_or(0), -1, INT32_MAX));
  if (f.top_k && *f.top_k < -1) return bad_request("top_k must be >= 0 (or -1 for off)", "top_k");
  if (s.top_k < 0) s.top_k = 0;
  if (f.seed) {
    s.seed = uint64_t(*f.seed);
    r.seeded = true;
  }
  s.max_tokens = int32_t(max_gen);
  s.ignore_eos = f.ignore_eos.value_or(false);
  if (ctx.debug_eos_after > 0) {
    s.ignore_eos = false;
    s.max_tokens = std::max<int32_t>(1, int32_t(std::ceil(ctx.debug_eos_after * double(max_gen))));
  }
  r.skip_special_tokens = f.skip_special.value_or(true);
  s.eos_ids = ctx.eos_ids;
  s.stop_token_ids = std::move(f.stop_token_ids);
  s.logprobs = r.want_logprobs ? r.top_logprobs : -1;
  s.logit_bias = std::move(f.logit_bias);
  s.presence_penalty = float(f.presence_penalty.value_or(0.0));
  s.frequency_penalty = float(f.frequency_penalty.value_or(0.0));
  s.repetition_penalty = float(f.repetition_penalty.value_or(1.0));
  if (f.min_tokens && *f.min_tokens > max_gen) {
    return bad_request("min_tokens (" + std::to_string(*f.min_tokens) + ") must not exceed max_tokens (" +
                           std::to_string(max_gen) + ")",
                       "min_tokens");
  }
  s.min_tokens = int32_t(f.min_tokens.value_or(0));
  r.min_tokens = s.min_tokens;
  if (Status st = s.validate(); !st.ok()) {
    const std::string& msg = st.message();
    std::string param;
    for (const char* name : {"temperature", "top_p", "max_tokens", "logit_bias", "presence_penalty",
                             "frequency_penalty", "repetition_penalty", "min_tokens"}) {
      if (msg.find(std::string("'") + name + "'") != std::string::npos) {
        param = name;
        break;
      }
    }
    return bad_request(msg, param);
  }
  return std::nullopt;
}

}  // namespace

// The first error in this order wins: model, unimplemented fields, sampling and token fields, logprobs,
// stop, stream_options, the prompt, the token budget, the sampling parameters as a whole.
std::variant<CompletionRequest, ApiError> parse_completion(std::string_view body, bool chat,
                                                           const ParseContext& ctx) {
  auto parsed = json::parse(body);
  if (!parsed.ok()) return bad_request("the body is not valid JSON: " + parsed.status().message());
  if (!parsed->is_object()) return bad_request("the body must be a JSON object");
  const json::object& o = parsed->as_object();
  CompletionRequest r;
  r.chat = chat;
  RequestFields f;
  if (auto e = parse_model(o, ctx, r)) return *e;
  if (auto e = refuse_unimplemented(o, chat)) return *e;
  if (auto e = parse_sampling_fields(o, f)) return *e;
  if (auto e = parse_token_fields(o, ctx, f)) return *e;
  if (auto e = parse_logprobs(o, chat, r)) return *e;
  if (auto e = parse_stop(o, r)) return *e;
  if (auto e = parse_stream_options(o, r)) return *e;
  if (auto e = parse_input(o, chat, ctx, r)) return *e;
  int64_t max_gen = 0;
  if (auto e = resolve_max_tokens(f, chat, ctx, r, max_gen)) return *e;
  if (auto e = fill_sampling(f, max_gen, ctx, r)) return *e;
  r.stream = f.stream.value_or(false);
  return r;
}

// --- TextAssembler ---

namespace {
// Largest n <= len such that s[0, n) does not end inside a UTF-8 sequence.
size_t utf8_floor(const std::string& s, size_t len) {
  size_t n = len;
  size_t back = 0;
  while (n > 0 && back < 4 && (static_cast<unsigned char>(s[n - 1]) & 0xC0) == 0x80) {
    --n;
    ++back;
  }
  if (n == 0) return len;
  unsigned char lead = static_cast<unsigned char>(s[n - 1]);
  size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return (back + 1 >= need) ? len : n - 1;
}

// Cuts text at the earliest stop string that appears in the part not yet returned (from
// `emitted`, or overlapping it by up to max_stop - 1 bytes); true when one did.
bool cut_at_stop(std::string& text, size_t emitted, size_t max_stop, const std::vector<std::string>& stops) {
  size_t from = emitted >= max_stop ? emitted - max_stop + 1 : 0;
  size_t best = std::string::npos;
  for (const auto& s : stops) best = std::min(best, text.find(s, from));
  if (best == std::string::npos) return false;
  text.resize(std::max(best, emitted));
  return true;
}
}  // namespace

LogprobEntry logprob_entry(const engine::Tokenizer& tok, const scheduler::TokenLogprob& lp) {
  LogprobEntry e;
  int32_t id = lp.token;
  e.token = tok.decode(std::span<const int32_t>(&id, 1));
  e.logprob = lp.logprob;
  for (const auto& [alt, l] : lp.top) {
    int32_t a = alt;
    e.top.emplace_back(tok.decode(std::span<const int32_t>(&a, 1)), l);
  }
  return e;
}

TextAssembler::TextAssembler(const engine::Tokenizer& tokenizer, std::vector<std::string> stop,
                             bool want_logprobs, bool skip_special_tokens, int64_t min_tokens)
    : tok_(tokenizer),
      decoder_(tokenizer, skip_special_tokens),
      stop_(std::move(stop)),
      want_logprobs_(want_logprobs),
      min_tokens_(min_tokens) {
  for (const auto& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

std::string TextAssembler::push(const std::vector<int32_t>& tokens,
                                const std::vector<scheduler::TokenLogprob>& logprobs) {
  if (stopped_) return {};
  for (size_t i = 0; i < tokens.size() && !stopped_; ++i) {
    text_ += decoder_.push(tokens[i]);
    tokens_++;
    if (want_logprobs_ && i < logprobs.size()) logprobs_.push_back(logprob_entry(tok_, logprobs[i]));
    if (!stop_.empty() && tokens_ >= min_tokens_ && cut_at_stop(text_, emitted_, max_stop_, stop_))
      stopped_ = true;
  }
  return release(stopped_);
}

std::string TextAssembler::finish() {
  if (!stopped_) {
    text_ += decoder_.flush();
    if (!stop_.empty() && tokens_ >= min_tokens_ && cut_at_stop(text_, emitted_, max_stop_, stop_))
      stopped_ = true;
  }
  return release(true);
}

std::string TextAssembler::release(bool final) {
  size_t upto = text_.size();
  if (!final && max_stop_ > 0) {
    // Hold back what could be the start of a stop string.
    upto = text_.size() >= max_stop_ - 1 ? text_.size() - (max_stop_ - 1) : 0;
    upto = std::max(upto, emitted_);
    upto = utf8_floor(text_, upto);
    upto = std::max(upto, emitted_);
  }
  std::string out = text_.substr(emitted_, upto - emitted_);
  emitted_ = upto;
  return out;
}

std::vector<LogprobEntry> TextAssembler::take_logprobs() {
  std::vector<LogprobEntry> out;
  out.swap(logprobs_);
  return out;
}

// --- JSON pieces ---

namespace {
json::array bytes_of(const std::string& s) {
  json::array a;
  for (unsigned char c : s) a.push_back(int64_t(c));
  return a;
}
}  // namespace

json::value chat_logprobs_json(const std::vector<LogprobEntry>& entries) {
  json::array content;
  for (const auto& e : entries) {
    json::object o;
    o["token"] = e.token;
    o["logprob"] = double(e.logprob.value_or(0.0f));
    o["bytes"] = bytes_of(e.token);
    json::array top;
    for (const auto& [t, l] : e.top) {
      json::object a;
      a["token"] = t;
      a["logprob"] = double(l);
      a["bytes"] = bytes_of(t);
      top.push_back(std::move(a));
    }
    o["top_logprobs"] = std::move(top);
    content.push_back(std::move(o));
  }
  json::object out;
  out["content"] = std::move(content);
  return out;
}

json::value completion_logprobs_json(const std::vector<LogprobEntry>& entries, int64_t text_offset0) {
  json::array tokens, token_logprobs, top_logprobs, offsets;
  int64_t off = text_offset0;
  for (const auto& e : entries) {
    tokens.push_back(json::value(e.token));
    if (e.logprob) {
      token_logprobs.push_back(double(*e.logprob));
    } else {
      token_logprobs.push_back(nullptr);
    }
    if (!e.logprob) {
      top_logprobs.push_back(nullptr);
    } else {
      json::object top;
      for (const auto& [t, l] : e.top) {
        if (!top.contains(t)) top[t] = double(l);
      }
      top_logprobs.push_back(std::move(top));
    }
    offsets.push_back(off);
    off += int64_t(e.token.size());
  }
  json::object o;
  o["tokens"] = std::move(tokens);
  o["token_logprobs"] = std::move(token_logprobs);
  o["top_logprobs"] = std::move(top_logprobs);
  o["text_offset"] = std::move(offsets);
  return o;
}

json::object chunk_base(const ChunkHeader& h) {
  json::object o;
  o["id"] = h.id;
  o["object"] = h.chat ? "chat.completion.chunk" : "text_completion";
  o["created"] = h.created;
  o["model"] = h.model;
  return o;
}

json::object piece_chunk(const ChunkHeader& h, std::string_view text, json::value logprobs) {
  json::object o = chunk_base(h);
  json::object choice;
  choice["index"] = 0;
  if (h.chat) {
    json::object delta;
    delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = nullptr;
  json::array choices;
  choices.push_back(std::move(choice));
  o["choices"] = std::move(choices);
  return o;
}

PieceFrame::PieceFrame(const ChunkHeader& h) {
  // Serialize the chunk around a placeholder text and cut there. The text is the last string before
  // the fixed tail (logprobs, finish_reason), so the last occurrence is the text's even if a header
  // field contained the same bytes.
  constexpr std::string_view kPlaceholder = "\x01plumb-piece\x01";
  const std::string whole = net::sse_format_data(json::dump(piece_chunk(h, kPlaceholder, nullptr)));
  const std::string mark =
      boost::json::serialize(boost::json::string_view(kPlaceholder.data(), kPlaceholder.size()));
  const size_t at = whole.rfind(mark);
  prefix_ = whole.substr(0, at);
  suffix_ = whole.substr(at + mark.size());
}

std::string PieceFrame::event(std::string_view text) const {
  const std::string quoted = boost::json::serialize(boost::json::string_view(text.data(), text.size()));
  std::string out;
  out.reserve(prefix_.size() + quoted.size() + suffix_.size());
  out += prefix_;
  out += quoted;
  out += suffix_;
  return out;
}

json::object timings_json(const scheduler::RequestTimings& t, int64_t completion_tokens) {
  json::object o;
  o["queue_ms"] = t.queue_ms();
  o["prefill_ms"] = t.prefill_ms();
  o["decode_ms"] = t.decode_ms();
  o["prompt_tokens"] = t.prompt_tokens;
  o["completion_tokens"] = completion_tokens;
  o["cached_prompt_tokens"] = t.cached_prompt_tokens;
  o["preemptions"] = t.preemptions;
  return o;
}

}  // namespace plumb::server
