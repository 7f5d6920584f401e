// Chat template families against outputs derived by hand from the real Jinja templates (quoted in
// part below: the markers and literals the renderer reads).
#include "engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <vector>

namespace plumb::engine {
namespace {

using Msgs = std::vector<ChatMessage>;

// Llama-3.0-Instruct.
constexpr const char* kLlama30 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% "
    "endif %}";
// Llama-3.1-Instruct (excerpt).
constexpr const char* kLlama31 =
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n"
    "{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}";
// Qwen2.5-Instruct (excerpt).
constexpr const char* kQwen25 =
    "{%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] "
    "+ "
    "'<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba "
    "Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}";
// Qwen3 (excerpt).
constexpr const char* kQwen3 =
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + "
    "'<|im_end|>\\n' }}"
    "{%- endif %}{%- if '</think>' in content %}{%- endif %}";
// Llama-2-chat.
constexpr const char* kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}...{% if loop.index0 == 0 and system_message != false %}{% set "
    "content = "
    "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}...{{ bos_token + '[INST] ' "
    "+ "
    "content.strip() + ' [/INST]' }}";
// Mistral-7B-Instruct-v0.1.
constexpr const char* kMistral1 =
    "{{ bos_token }}{% for message in messages %}...{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
    "eos_token}}";
// Mistral-7B-Instruct-v0.2 (later revision).
constexpr const char* kMistral2 =
    "{{- bos_token }}{%- if loop.first and system_message is defined %}{{- ' [INST] ' + system_message + "
    "'\\n\\n' + message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] + ' "
    "[/INST]' }}";
// Mistral-7B-Instruct-v0.3 (excerpt).
constexpr const char* kMistral3 =
    "{{- bos_token }}{%- if loop.last and system_message is defined %}{{- \"[INST] \" + system_message + "
    "\"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}{%- else %}{{- \"[INST] \" + message[\"content\"] + "
    "\"[/INST]\" }}{%- endif %}{%- elif message[\"role\"] == \"assistant\" %}{{- \" \" + "
    "message[\"content\"]|trim + eos_token}}";
// TinyLlama-1.1B-Chat.
constexpr const char* kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
    "message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + "
    "eos_token }}\n{% endif %}";

std::string render(const char* tmpl, const Msgs& msgs, bool gen, std::string bos = "<s>",
                   std::string eos = "</s>", ChatTemplateOptions opts = {}) {
  auto t = ChatTemplate::create(tmpl, bos, eos, opts);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return {};
  auto r = t->apply(msgs, gen);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

TEST(ChatTemplate, DetectsFamilies) {
  auto family = [](const char* tmpl) { return ChatTemplate::create(tmpl, "", "").value().family(); };
  EXPECT_EQ(family(kLlama30), ChatFamily::kLlama3);
  EXPECT_EQ(family(kLlama31), ChatFamily::kLlama3);
  EXPECT_EQ(family(kQwen25), ChatFamily::kChatML);
  EXPECT_EQ(family(kLlama2), ChatFamily::kLlama2);
  EXPECT_EQ(family(kMistral1), ChatFamily::kMistral);
  EXPECT_EQ(family(kZephyr), ChatFamily::kZephyr);
}

TEST(ChatTemplate, UnknownTemplateNeedsAnOverride) {
  auto r = ChatTemplate::create("{{ messages }}", "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unrecognized chat_template"), std::string::npos);
  auto empty = ChatTemplate::create("", "", "");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no chat_template"), std::string::npos);
  ChatTemplateOptions o;
  o.family = ChatFamily::kChatML;
  EXPECT_EQ(render("{{ messages }}", {{"user", "Hi"}}, true, "", "", o),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(parse_chat_family("mistral").value(), ChatFamily::kMistral);
  EXPECT_FALSE(parse_chat_family("jinja").ok());
}

TEST(ChatTemplate, Llama30TrimsAndPutsBosInTheText) {
  EXPECT_EQ(render(kLlama30, {{"system", "Be brief. "}, {"user", "\n Hi \n"}}, true, "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render(kLlama30, {{"user", "Hi"}}, false, "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(ChatTemplate, Llama31SystemBlockWithDate) {
  EXPECT_EQ(render(kLlama31, {{"user", "Hi"}}, true, "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  ChatTemplateOptions o;
  o.date_string = "02 Dec 2026";
  EXPECT_EQ(render(kLlama31, {{"system", " Sys "}, {"user", "Hi"}, {"assistant", "Yo"}}, false, "B", "", o),
            "B<|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 02 Dec 2026\n\nSys<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>");
}

TEST(ChatTemplate, ChatMLDefaultSystemPrompt) {
  EXPECT_EQ(
      render(kQwen25, {{"user", "Hi"}}, true),
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(kQwen25, {{"system", "S"}, {"user", " Hi "}, {"assistant", "A"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n Hi "
            "<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
}

TEST(ChatTemplate, Qwen3ThinkBlocks) {
  EXPECT_EQ(render(kQwen3, {{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ChatTemplateOptions o;
  o.enable_thinking = false;
  EXPECT_EQ(render(kQwen3, {{"user", "Hi"}}, true, "", "", o),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Earlier assistant turns lose their reasoning; the last one after the last user turn keeps a block.
  EXPECT_EQ(
      render(
          kQwen3,
          {{"user", "Q1"}, {"assistant", "<think>\nr1\n</think>\n\nA1"}, {"user", "Q2"}, {"assistant", "A2"}},
          false),
      "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n");
}

TEST(ChatTemplate, Llama2SystemAndAlternation) {
  EXPECT_EQ(render(kLlama2, {{"system", "S"}, {"user", " Hi "}, {"assistant", " Yo "}, {"user", "Q"}}, true),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\n Hi [/INST] Yo </s><s>[INST] Q [/INST]");
  auto t = ChatTemplate::create(kLlama2, "<s>", "</s>").value();
  Msgs bad = {{"user", "a"}, {"user", "b"}};
  auto r = t.apply(bad, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("alternate"), std::string::npos);
}

TEST(ChatTemplate, MistralVariants) {
  EXPECT_EQ(render(kMistral1, {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Q"}}, true),
            "<s>[INST] Hi [/INST]Yo</s>[INST] Q [/INST]");
  auto v1 = ChatTemplate::create(kMistral1, "<s>", "</s>").value();
  Msgs with_system = {{"system", "S"}, {"user", "Hi"}};
  EXPECT_FALSE(v1.apply(with_system, true).ok());
  EXPECT_EQ(render(kMistral2, with_system, true), "<s> [INST] S\n\nHi [/INST]");
  EXPECT_EQ(render(kMistral2, {{"user", "Hi"}, {"assistant", "Yo"}}, true), "<s> [INST] Hi [/INST] Yo</s>");
}

TEST(ChatTemplate, MistralV3SystemGoesToTheLastUserTurn) {
  EXPECT_EQ(render(kMistral3, {{"system", "S"}, {"user", "Hi"}, {"assistant", " Yo "}, {"user", "Q"}}, true),
            "<s>[INST] Hi[/INST] Yo</s>[INST] S\n\nQ[/INST]");
  // Ending on an assistant turn, the system message appears nowhere (as in the real template).
  EXPECT_EQ(render(kMistral3, {{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}}, false),
            "<s>[INST] Hi[/INST] Yo</s>");
}

TEST(ChatTemplate, Zephyr) {
  EXPECT_EQ(render(kZephyr, {{"system", "S"}, {"user", "Hi"}}, true),
            "<|system|>\nS</s>\n<|user|>\nHi</s>\n<|assistant|>\n");
}

}  // namespace
}  // namespace plumb::engine
