// The chat template renderer (engine/tokenizer/chat_template.h): the template text from
// tokenizer_config.json (which selects the family and its variant details), BOS/EOS strings and the
// messages all come from the input. Invariants: a rendering is deterministic, and a conversation
// that renders also renders without the generation prompt, as a prefix of the one with it.
#include <string>
#include <vector>

#include "engine/tokenizer/chat_template.h"
#include "fuzz/fuzz_target.h"

PLUMB_FUZZ_TARGET(chat_template) {
  using plumb::engine::ChatFamily;
  using plumb::engine::ChatMessage;
  plumb::fuzz::Reader in(input);
  uint8_t mode = in.byte();
  plumb::engine::ChatTemplateOptions opt;
  static constexpr ChatFamily kFamilies[] = {ChatFamily::kLlama3, ChatFamily::kChatML, ChatFamily::kLlama2,
                                             ChatFamily::kMistral, ChatFamily::kZephyr};
  if (mode % 6 != 5) opt.family = kFamilies[mode % 6];
  opt.enable_thinking = (mode & 0x40) == 0;
  opt.date_string = "26 Jul 2024";  // never today's date: the rendering must not depend on the clock
  // Fields separated by 0x1F: template text, bos, eos, then role, content, role, content, ...
  std::string_view text = in.field('\x1f');
  std::string bos(in.field('\x1f'));
  std::string eos(in.field('\x1f'));
  std::vector<ChatMessage> msgs;
  while (!in.done() && msgs.size() < 64) {
    ChatMessage m;
    m.role = std::string(in.field('\x1f'));
    m.content = std::string(in.field('\x1f'));
    msgs.push_back(std::move(m));
  }
  auto tmpl = plumb::engine::ChatTemplate::create(text, bos, eos, opt);
  if (!tmpl.ok()) return "";
  auto with = tmpl->apply(msgs, true);
  auto again = tmpl->apply(msgs, true);
  if (with.ok() != again.ok() || (with.ok() && *with != *again))
    return "two renderings of one conversation differ";
  auto without = tmpl->apply(msgs, false);
  if (with.ok() != without.ok()) return "the generation prompt changes whether the conversation renders";
  if (with.ok() && !with->starts_with(*without)) {
    return "the rendering without the generation prompt is not a prefix of the one with it";
  }
  return "";
}
