#include "engine/tokenizer/chat_template.h"

#include <ctime>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace plumb::engine {

std::string_view chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::kLlama3:
      return "llama3";
    case ChatFamily::kChatML:
      return "chatml";
    case ChatFamily::kLlama2:
      return "llama2";
    case ChatFamily::kMistral:
      return "mistral";
    case ChatFamily::kZephyr:
      return "zephyr";
  }
  return "?";
}

Result<ChatFamily> parse_chat_family(std::string_view name) {
  for (ChatFamily f : {ChatFamily::kLlama3, ChatFamily::kChatML, ChatFamily::kLlama2, ChatFamily::kMistral,
                       ChatFamily::kZephyr}) {
    if (chat_family_name(f) == name) return f;
  }
  return invalid_argument("unknown chat template family '" + std::string(name) +
                          "' (expected llama3, chatml, llama2, mistral or zephyr)");
}

namespace {

bool contains(std::string_view s, std::string_view x) { return s.find(x) != std::string_view::npos; }

// Python's str.isspace() set, which Jinja's trim and str.strip() use.
bool py_space(uint32_t cp) { return unicode::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string py_strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e) {
    size_t n = unicode::valid_sequence_length(s, b);
    if (n == 0 || !py_space(unicode::decode_at(s, b, n))) break;
    b += n;
  }
  while (e > b) {
    size_t p = e - 1;
    while (p > b && (uint8_t(s[p]) & 0xC0) == 0x80) --p;
    size_t n = unicode::valid_sequence_length(s, p);
    if (n == 0 || p + n != e || !py_space(unicode::decode_at(s, p, n))) break;
    e = p;
  }
  return std::string(s.substr(b, e - b));
}

std::string strip_chars(std::string_view s, char c, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && s[b] == c) ++b;
  }
  if (right) {
    while (e > b && s[e - 1] == c) --e;
  }
  return std::string(s.substr(b, e - b));
}

// Undoes the escapes of a Jinja string literal.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The default system prompt of a ChatML template: a single literal
// '<|im_start|>system\n<prompt><|im_end|>' with no expression inside.
std::optional<std::string> chatml_default_system(std::string_view t) {
  for (std::string_view head :
       {std::string_view("<|im_start|>system\\n"), std::string_view("<|im_start|>system\n")}) {
    for (size_t p = t.find(head); p != std::string_view::npos; p = t.find(head, p + 1)) {
      size_t start = p + head.size();
      size_t end = t.find("<|im_end|>", start);
      if (end == std::string_view::npos) continue;
      std::string_view body = t.substr(start, end - start);
      if (body.empty() || contains(body, "'") || contains(body, "\"") || contains(body, "{")) continue;
      return unescape(body);
    }
  }
  return std::nullopt;
}

std::string today_string() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  return buf;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::create(std::string_view text, std::string bos_token, std::string eos_token,
                                          ChatTemplateOptions options) {
  ChatTemplate t;
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  if (options.family) {
    t.family_ = *options.family;
  } else if (contains(text, "<|start_header_id|>")) {
    t.family_ = ChatFamily::kLlama3;
  } else if (contains(text, "<|im_start|>")) {
    t.family_ = ChatFamily::kChatML;
  } else if (contains(text, "[INST]") && contains(text, "<<SYS>>")) {
    t.family_ = ChatFamily::kLlama2;
  } else if (contains(text, "[INST]")) {
    t.family_ = ChatFamily::kMistral;
  } else if (contains(text, "<|user|>") && contains(text, "<|assistant|>")) {
    t.family_ = ChatFamily::kZephyr;
  } else if (text.empty()) {
    return invalid_argument(
        "no chat_template in tokenizer_config.json; choose a family explicitly "
        "(llama3, chatml, llama2, mistral, zephyr)");
  } else {
    return invalid_argument(
        "unrecognized chat_template (none of the llama3, chatml, llama2, mistral, zephyr "
        "markers); choose a family explicitly");
  }
  t.llama31_system_block_ = contains(text, "Cutting Knowledge Date");
  if (!options.date_string.empty()) {
    t.llama3_date_ = options.date_string;
  } else if (contains(text, "strftime_now")) {
    t.llama3_date_ = today_string();
  } else {
    t.llama3_date_ = "26 Jul 2024";
    for (std::string_view key : {"date_string = \"", "date_string = '"}) {
      size_t p = text.find(key);
      if (p == std::string_view::npos) continue;
      size_t s = p + key.size();
      size_t e = text.find(key.back(), s);
      if (e != std::string_view::npos) t.llama3_date_ = std::string(text.substr(s, e - s));
      break;
    }
  }
  t.default_system_ = chatml_default_system(text);
  t.qwen3_ = contains(text, "</think>");
  t.mistral_v2_ = contains(text, "' [INST] '") || contains(text, "\" [INST] \"");
  t.mistral_v3_ = contains(text, "+ \"[/INST]\"") || contains(text, "+ '[/INST]'");
  t.options_ = std::move(options);
  return t;
}

Result<ChatTemplate> ChatTemplate::for_tokenizer(const Tokenizer& tokenizer, ChatTemplateOptions options) {
  return create(tokenizer.chat_template(), tokenizer.bos_token(), tokenizer.eos_token(), std::move(options));
}

namespace {

// Llama 3: one header-delimited block per turn; Llama 3.1 opens with its dated system block.
Result<std::string> apply_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const std::string& bos, bool llama31_system_block,
                                 const std::string& llama3_date) {
  std::string out;
  auto turn = [&](const ChatMessage& m) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + py_strip(m.content) + "<|eot_id|>";
  };
  if (llama31_system_block) {
    out += bos;
    size_t first = 0;
    std::string system;
    if (!messages.empty() && messages[0].role == "system") {
      system = py_strip(messages[0].content);
      first = 1;
    }
    out += "<|start_header_id|>system<|end_header_id|>\n\n";
    out += "Cutting Knowledge Date: December 2023\n";
    out += "Today Date: " + llama3_date + "\n\n";
    out += system + "<|eot_id|>";
    for (size_t i = first; i < messages.size(); ++i) {
      if (messages[i].role == "ipython" || messages[i].role == "tool") {
        return invalid_argument("llama3 chat template: tool messages are not supported");
      }
      turn(messages[i]);
    }
  } else {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out += bos;
      turn(messages[i]);
    }
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Qwen3: the index of the last user turn (tool responses aside); assistant turns after it keep a
// <think> block.
size_t qwen3_last_query(std::span<const ChatMessage> messages) {
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    bool tool_resp = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (messages[i].role == "user" && !tool_resp) {
      last_query = i;
      break;
    }
  }
  return last_query;
}

// A Qwen3 assistant turn i: its reasoning split from the content, kept only after the last query.
std::string qwen3_assistant_turn(std::span<const ChatMessage> messages, size_t i, size_t last_query) {
  std::string content = messages[i].content, reasoning;
  if (size_t p = content.find("</think>"); p != std::string::npos) {
    std::string before = strip_chars(content.substr(0, p), '\n', false, true);
    size_t open = before.rfind("<think>");
    reasoning = strip_chars(open == std::string::npos ? before : before.substr(open + 7), '\n', true, false);
    content = strip_chars(content.substr(content.rfind("</think>") + 8), '\n', true, false);
  }
  bool last = i + 1 == messages.size();
  std::string out;
  if (i > last_query && (last || !reasoning.empty())) {
    out += "<|im_start|>assistant\n<think>\n" + strip_chars(reasoning, '\n', true, true) + "\n</think>\n\n" +
           strip_chars(content, '\n', true, false);
  } else {
    out += "<|im_start|>assistant\n" + content;
  }
  out += "<|im_end|>\n";
  return out;
}

// ChatML (Qwen2, Qwen3): <|im_start|>role ... <|im_end|> per turn, with a default system turn.
Result<std::string> apply_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const std::optional<std::string>& default_system, bool qwen3,
                                 bool enable_thinking) {
  std::string out;
  bool has_system = !messages.empty() && messages[0].role == "system";
  if (!has_system && default_system) out += "<|im_start|>system\n" + *default_system + "<|im_end|>\n";
  const size_t last_query = qwen3 ? qwen3_last_query(messages) : (messages.empty() ? 0 : messages.size() - 1);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (!qwen3 || m.role != "assistant") {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      continue;
    }
    out += qwen3_assistant_turn(messages, i, last_query);
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (qwen3 && !enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

// The [INST] families' settings for one rendering.
struct InstStyle {
  ChatFamily family;
  const std::string& bos;
  const std::string& eos;
  bool mistral_v2;
  bool mistral_v3;
};

// One [INST] turn: message i, the k-th after the system message.
std::string inst_turn(const InstStyle& st, std::span<const ChatMessage> messages, size_t i, size_t k,
                      const std::optional<std::string>& system) {
  const ChatMessage& m = messages[i];
  if (st.family == ChatFamily::kLlama2) {
    std::string content = m.content;
    if (k == 0 && system) content = "<<SYS>>\n" + *system + "\n<</SYS>>\n\n" + content;
    return m.role == "user" ? st.bos + "[INST] " + py_strip(content) + " [/INST]"
                            : " " + py_strip(content) + " " + st.eos;
  }
  if (st.mistral_v3) {
    // v0.3: the system message goes into the user turn only when that turn is the last message.
    if (m.role != "user") return " " + py_strip(m.content) + st.eos;
    bool last = i + 1 == messages.size();
    return last && system ? "[INST] " + *system + "\n\n" + m.content + "[/INST]"
                          : "[INST] " + m.content + "[/INST]";
  }
  if (st.mistral_v2) {
    if (m.role != "user") return " " + m.content + st.eos;
    return k == 0 && system ? " [INST] " + *system + "\n\n" + m.content + " [/INST]"
                            : " [INST] " + m.content + " [/INST]";
  }
  return m.role == "user" ? "[INST] " + m.content + " [/INST]" : m.content + st.eos;
}

// Llama 2 and Mistral: alternating user/assistant turns in [INST] blocks, the system message folded
// into a user turn.
Result<std::string> apply_inst(std::span<const ChatMessage> messages, const InstStyle& st) {
  std::string out;
  size_t first = 0;
  std::optional<std::string> system;
  if (!messages.empty() && messages[0].role == "system") {
    if (st.family == ChatFamily::kMistral && !st.mistral_v2 && !st.mistral_v3) {
      return invalid_argument("mistral chat template: only user and assistant roles are supported");
    }
    system = messages[0].content;
    first = 1;
  }
  if (st.family == ChatFamily::kMistral) out += st.bos;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    size_t k = i - first;
    if ((m.role == "user") != (k % 2 == 0)) {
      return invalid_argument(std::string(chat_family_name(st.family)) +
                              " chat template: conversation roles must alternate user/assistant/user/...");
    }
    if (m.role != "user" && m.role != "assistant") {
      return invalid_argument(std::string(chat_family_name(st.family)) + " chat template: role '" + m.role +
                              "' is not supported");
    }
    out += inst_turn(st, messages, i, k, system);
  }
  return out;
}

// Zephyr: <|role|> ... eos per turn.
Result<std::string> apply_zephyr(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const std::string& eos) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || m.role == "system" || m.role == "assistant") {
      out += "<|" + m.role + "|>\n" + m.content + eos + "\n";
    }
    if (i + 1 == messages.size() && add_generation_prompt) out += "<|assistant|>\n";
  }
  return out;
}

}  // namespace

Result<std::string> ChatTemplate::apply(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt) const {
  switch (family_) {
    case ChatFamily::kLlama3:
      return apply_llama3(messages, add_generation_prompt, bos_, llama31_system_block_, llama3_date_);
    case ChatFamily::kChatML:
      return apply_chatml(messages, add_generation_prompt, default_system_, qwen3_, options_.enable_thinking);
    case ChatFamily::kLlama2:
    case ChatFamily::kMistral:
      return apply_inst(messages, InstStyle{family_, bos_, eos_, mistral_v2_, mistral_v3_});
    case ChatFamily::kZephyr:
      return apply_zephyr(messages, add_generation_prompt, eos_);
  }
  return internal_error("unhandled chat family");
}

Result<std::string> apply_chat_template(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                        bool add_generation_prompt, ChatTemplateOptions options) {
  PLUMB_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::for_tokenizer(tokenizer, std::move(options)));
  return t.apply(messages, add_generation_prompt);
}

}  // namespace plumb::engine
