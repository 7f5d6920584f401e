// Multiple-choice items (MMLU-Pro JSONL: question, options A-J, answer), the prompt formats
// plumb-tiny was trained on (data/README.md), and answer extraction from a model's output.
//
// Extraction rules, in order (docs/architecture.md "## Gates"):
//  1. An explicit statement: "answer is (X)" / "answer is X" / "Answer: X" / "Answer: (X)"
//     (case-insensitive words; X a letter within the item's options, either case). If the text
//     states different letters this way, the output is ambiguous: no answer.
//  2. Otherwise a leading letter: the trimmed text starts with X or "(X" followed by the end or a
//     non-alphanumeric character (" b)", "B", "C. 449", "C because ..." -> C).
//  3. Otherwise the only standalone upper-case option letter anywhere in the text.
//  With rule 2 or 3, any other standalone upper-case option letter in the text makes it ambiguous
//  ("A or B" -> none). No answer is counted wrong. Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plumb::gates {

struct McItem {
  std::string id;                    // question_id as text ("" when absent; then the line number)
  std::string question;              // the question text
  std::vector<std::string> options;  // 2..10 options, A.. in order
  int answer_index = 0;              // index of the correct option
};

// Reads MMLU-Pro-format JSONL: per line an object with "question" (string), "options" (2..10
// strings) and "answer" (a letter) and/or "answer_index" (int); when both are present they must
// agree. Blank lines are skipped. InvalidArgument naming the line on any bad line; NotFound if the
// file is missing; InvalidArgument for an empty set.
Result<std::vector<McItem>> parse_mc_jsonl(std::string_view text);
Result<std::vector<McItem>> load_mc_jsonl(const std::string& path);

// "Question: {q}\nOptions:\nA. {o0}\n...\nAnswer:" (the model answers " B").
std::string completion_prompt(const McItem& item);
// User message for chat models: "Question: {q}\nOptions:\nA. ...\nAnswer with the letter of the
// correct option." (the model answers "The answer is (B).").
std::string chat_prompt(const McItem& item);

// The extracted option index (0 = A), or nullopt when the output states none or is ambiguous.
std::optional<int> extract_answer(std::string_view output, int num_options);

}  // namespace plumb::gates
