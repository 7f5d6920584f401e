// Chat templates without Jinja: the family is detected from tokenizer_config.json's chat_template
// text and rendered by hand-written code that reproduces the real templates' output exactly for
// plain text messages (no tools, no images).
//
// Families and the markers that select them (first match wins; an explicit family overrides):
//   llama3  "<|start_header_id|>"  Llama-3.0 (no system block) or Llama-3.1/3.2 (system block with
//                                  "Cutting Knowledge Date" and "Today Date"); content is trimmed.
//   chatml  "<|im_start|>"         Qwen2/2.5, SmolLM (default system prompt taken from the template
//                                  when it has one) and Qwen3 (<think> handling of the last turn).
//   llama2  "[INST]" and "<<SYS>>" Llama-2 chat; roles must alternate user/assistant.
//   mistral "[INST]"               Mistral-Instruct v0.1 style; v0.2 style (" [INST] " with the system
//                                  message prepended to the first user turn); v0.3 style ("[/INST]"
//                                  without a space, system message prepended to the last message when
//                                  it is a user turn, assistant content trimmed).
//   zephyr  "<|user|>"             TinyLlama-Chat / Zephyr.
//
// BOS: like the real templates, llama3/llama2/mistral put bos_token in the rendered text itself, so
// encode the rendered text with add_special_tokens = false (as transformers' apply_chat_template does).
// Encoding it with add_special_tokens = true would add a second BOS.
//
// Thread safety: a ChatTemplate is immutable; apply() may run concurrently.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plumb::engine {

class Tokenizer;

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant" (chatml and zephyr accept any role)
  std::string content;  // plain text
};

enum class ChatFamily { kLlama3, kChatML, kLlama2, kMistral, kZephyr };

std::string_view chat_family_name(ChatFamily f);
// "llama3", "chatml", "llama2", "mistral", "zephyr"; InvalidArgument listing them otherwise.
Result<ChatFamily> parse_chat_family(std::string_view name);

struct ChatTemplateOptions {
  // Use this family whatever the template text says (needed when the text is empty or unknown).
  std::optional<ChatFamily> family;
  // Llama-3.1+ "Today Date: ..." line. Empty: the template's own default, i.e. today's date (UTC,
  // "%d %b %Y") for templates that call strftime_now (Llama-3.2), else the literal date_string the
  // template sets ("26 Jul 2024" in Llama-3.1).
  std::string date_string;
  // Qwen3: false renders "<think>\n\n</think>\n\n" after the generation prompt.
  bool enable_thinking = true;
};

class ChatTemplate {
 public:
  // template_text: tokenizer_config.json's chat_template. InvalidArgument when no family is
  // detected and none is given.
  static Result<ChatTemplate> create(std::string_view template_text, std::string bos_token,
                                     std::string eos_token, ChatTemplateOptions options = {});
  // From a loaded tokenizer's chat_template, bos_token and eos_token.
  static Result<ChatTemplate> for_tokenizer(const Tokenizer& tokenizer, ChatTemplateOptions options = {});

  ChatFamily family() const { return family_; }

  // The prompt text. InvalidArgument where the real template raises (llama2/mistral roles out of
  // order, a role the family does not support).
  Result<std::string> apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  ChatFamily family_ = ChatFamily::kChatML;
  std::string bos_, eos_;
  ChatTemplateOptions options_;
  // Variant details read from the template text.
  bool llama31_system_block_ = false;
  std::string llama3_date_;
  std::optional<std::string> default_system_;  // chatml
  bool qwen3_ = false;
  bool mistral_v2_ = false;  // " [INST] " with the system message folded into the first user turn
  bool mistral_v3_ = false;  // "[INST] ...[/INST]", system message folded into the last user turn
};

// Convenience: ChatTemplate::for_tokenizer(tokenizer).apply(messages, add_generation_prompt).
Result<std::string> apply_chat_template(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                        bool add_generation_prompt, ChatTemplateOptions options = {});

}  // namespace plumb::engine
