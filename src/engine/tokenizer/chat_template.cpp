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

Result<std::string> ChatTemplate::apply(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt) const {
  std::string out;
  switch (family_) {
    case ChatFamily::kLlama3: {
      auto turn = [&](const ChatMessage& m) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + py_strip(m.content) + "<|eot_id|>";
      };
      if (llama31_system_block_) {
        out += bos_;
        size_t first = 0;
        std::string system;
        if (!messages.empty() && messages[0].role == "system") {
          system = py_strip(messages[0].content);
          first = 1;
        }
        out += "<|start_header_id|>system<|end_header_id|>\n\n";
        out += "Cutting Knowledge Date: December 2023\n";
        out += "Today Date: " + llama3_date_ + "\n\n";
        out += system + "<|eot_id|>";
        for (size_t i = first; i < messages.size(); ++i) {
          if (messages[i].role == "ipython" || messages[i].role == "tool") {
            return invalid_argument("llama3 chat template: tool messages are not supported");
          }
          turn(messages[i]);
        }
      } else {
        for (size_t i = 0; i < messages.size(); ++i) {
          if (i == 0) out += bos_;
          turn(messages[i]);
        }
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    }

    case ChatFamily::kChatML: {
      bool has_system = !messages.empty() && messages[0].role == "system";
      if (!has_system && default_system_) out += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
      // Qwen3: the index of the last user turn; assistant turns after it keep a <think> block.
      size_t last_query = messages.empty() ? 0 : messages.size() - 1;
      if (qwen3_) {
        for (size_t i = messages.size(); i-- > 0;) {
          const std::string& c = messages[i].content;
          bool tool_resp = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
          if (messages[i].role == "user" && !tool_resp) {
            last_query = i;
            break;
          }
        }
      }
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (!qwen3_ || m.role != "assistant") {
          out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
          continue;
        }
        std::string content = m.content, reasoning;
        if (size_t p = content.find("</think>"); p != std::string::npos) {
          std::string before = strip_chars(content.substr(0, p), '\n', false, true);
          size_t open = before.rfind("<think>");
          reasoning =
              strip_chars(open == std::string::npos ? before : before.substr(open + 7), '\n', true, false);
          content = strip_chars(content.substr(content.rfind("</think>") + 8), '\n', true, false);
        }
        bool last = i + 1 == messages.size();
        if (i > last_query && (last || !reasoning.empty())) {
          out += "<|im_start|>assistant\n<think>\n" + strip_chars(reasoning, '\n', true, true) +
                 "\n</think>\n\n" + strip_chars(content, '\n', true, false);
        } else {
          out += "<|im_start|>assistant\n" + content;
        }
        out += "<|im_end|>\n";
      }
      if (add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        if (qwen3_ && !options_.enable_thinking) out += "<think>\n\n</think>\n\n";
      }
      return out;
    }

    case ChatFamily::kLlama2:
    case ChatFamily::kMistral: {
      size_t first = 0;
      std::optional<std::string> system;
      if (!messages.empty() && messages[0].role == "system") {
        if (family_ == ChatFamily::kMistral && !mistral_v2_ && !mistral_v3_) {
          return invalid_argument("mistral chat template: only user and assistant roles are supported");
        }
        system = messages[0].content;
        first = 1;
      }
      if (family_ == ChatFamily::kMistral) out += bos_;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        size_t k = i - first;
        if ((m.role == "user") != (k % 2 == 0)) {
          return invalid_argument(
              std::string(chat_family_name(family_)) +
              " chat template: conversation roles must alternate user/assistant/user/...");
        }
        if (m.role != "user" && m.role != "assistant") {
          return invalid_argument(std::string(chat_family_name(family_)) + " chat template: role '" + m.role +
                                  "' is not supported");
        }
        if (family_ == ChatFamily::kLlama2) {
          std::string content = m.content;
          if (k == 0 && system) content = "<<SYS>>\n" + *system + "\n<</SYS>>\n\n" + content;
          if (m.role == "user") {
            out += bos_ + "[INST] " + py_strip(content) + " [/INST]";
          } else {
            out += " " + py_strip(content) + " " + eos_;
          }
        } else if (mistral_v3_) {
          // v0.3: the system message goes into the user turn only when that turn is the last message.
          if (m.role == "user") {
            bool last = i + 1 == messages.size();
            out += last && system ? "[INST] " + *system + "\n\n" + m.content + "[/INST]"
                                  : "[INST] " + m.content + "[/INST]";
          } else {
            out += " " + py_strip(m.content) + eos_;
          }
        } else if (mistral_v2_) {
          if (m.role == "user") {
            out += k == 0 && system ? " [INST] " + *system + "\n\n" + m.content + " [/INST]"
                                    : " [INST] " + m.content + " [/INST]";
          } else {
            out += " " + m.content + eos_;
          }
        } else {
          out += m.role == "user" ? "[INST] " + m.content + " [/INST]" : m.content + eos_;
        }
      }
      return out;
    }

    case ChatFamily::kZephyr: {
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user" || m.role == "system" || m.role == "assistant") {
          out += "<|" + m.role + "|>\n" + m.content + eos_ + "\n";
        }
        if (i + 1 == messages.size() && add_generation_prompt) out += "<|assistant|>\n";
      }
      return out;
    }
  }
  return internal_error("unhandled chat family");
}

Result<std::string> apply_chat_template(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                        bool add_generation_prompt, ChatTemplateOptions options) {
  PLUMB_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::for_tokenizer(tokenizer, std::move(options)));
  return t.apply(messages, add_generation_prompt);
}

}  // namespace plumb::engine
