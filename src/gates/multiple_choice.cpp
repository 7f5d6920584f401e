#include "gates/multiple_choice.h"

#include <fmt/format.h>

#include <cctype>
#include <optional>
#include <set>

#include "core/file.h"
#include "core/json.h"
#include "core/lines.h"

namespace plumb::gates {

namespace {

// The answer of an item with n options: 'answer' (a letter) and/or 'answer_index', which must agree.
// The error is the reason alone (the caller names the line).
Result<int> parse_answer(const json::object& o, int n) {
  std::optional<int> from_letter, from_index;
  auto a = json::opt_string(o, "answer");
  if (!a.ok()) return invalid_argument(a.status().message());
  if (*a) {
    const std::string& s = **a;
    if (s.size() != 1 || s[0] < 'A' || s[0] >= 'A' + n)
      return invalid_argument(
          fmt::format("'answer' must be one letter A..{}, got \"{}\"", char('A' + n - 1), s));
    from_letter = s[0] - 'A';
  }
  auto ai = json::opt_int(o, "answer_index");
  if (!ai.ok()) return invalid_argument(ai.status().message());
  if (*ai) {
    if (**ai < 0 || **ai >= n)
      return invalid_argument(fmt::format("'answer_index' {} is outside 0..{}", **ai, n - 1));
    from_index = int(**ai);
  }
  if (!from_letter && !from_index)
    return invalid_argument("field 'answer' (a letter) or 'answer_index' is required");
  if (from_letter && from_index && *from_letter != *from_index)
    return invalid_argument("'answer' and 'answer_index' disagree");
  return from_letter ? *from_letter : *from_index;
}

// One non-blank line of the set; the error is the reason alone (the caller names the line).
Result<McItem> parse_item(std::string_view line, int line_no) {
  auto parsed = json::parse_object(line);
  if (!parsed.ok()) return invalid_argument("not a JSON object: " + parsed.status().message());
  const json::object& o = *parsed;
  McItem item;
  auto q = json::opt_string(o, "question");
  if (!q.ok()) return invalid_argument(q.status().message());
  if (!*q || (*q)->empty()) return invalid_argument("field 'question' (a non-empty string) is required");
  item.question = **q;
  if (!o.contains("options") || !o.at("options").is_array())
    return invalid_argument("field 'options' (a list) is required");
  for (const auto& v : o.at("options").as_array()) {
    if (!v.is_string()) return invalid_argument("every option must be a string");
    item.options.emplace_back(v.as_string());
  }
  int n = int(item.options.size());
  if (n < 2 || n > 10) return invalid_argument(fmt::format("{} options; 2..10 (A-J) are supported", n));
  PLUMB_ASSIGN_OR_RETURN(item.answer_index, parse_answer(o, n));
  if (o.contains("question_id")) {
    const auto& id = o.at("question_id");
    item.id = id.is_string() ? std::string(id.as_string()) : json::dump(id);
  } else {
    item.id = std::to_string(line_no);
  }
  return item;
}

}  // namespace

Result<std::vector<McItem>> parse_mc_jsonl(std::string_view text) {
  std::vector<McItem> items;
  Status st;
  for_each_nonblank_line(text, [&](std::string_view line, size_t line_no) {
    auto item = parse_item(line, int(line_no));
    if (!item.ok()) {
      st = Status(Code::kInvalidArgument,
                  fmt::format("multiple-choice line {}: {}", line_no, item.status().message()));
      return false;
    }
    items.push_back(std::move(*item));
    return true;
  });
  PLUMB_RETURN_IF_ERROR(st);
  if (items.empty()) return Status(Code::kInvalidArgument, "the multiple-choice set has no items");
  return items;
}

Result<std::vector<McItem>> load_mc_jsonl(const std::string& path) {
  auto text = read_file(path);
  if (!text.ok()) return text.status();
  auto items = parse_mc_jsonl(*text);
  if (!items.ok()) return Status(items.status().code(), path + ": " + items.status().message());
  return items;
}

namespace {
std::string question_block(const McItem& item) {
  std::string s = "Question: " + item.question + "\nOptions:\n";
  for (size_t i = 0; i < item.options.size(); ++i)
    s += fmt::format("{}. {}\n", char('A' + i), item.options[i]);
  return s;
}

bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// The option index of the letter at text[i], if it stands alone: an upper-case option letter not
// followed by a letter or digit; a lower-case one only inside "(x" or before ")", "." or the end,
// so that words like "a" do not count.
std::optional<int> letter_at(std::string_view text, size_t i, bool after_paren, int n) {
  if (i >= text.size()) return std::nullopt;
  char c = text[i];
  bool end = i + 1 >= text.size();
  char next = end ? '\0' : text[i + 1];
  if (!end && is_alnum(next)) return std::nullopt;
  if (c >= 'A' && c < 'A' + n) return c - 'A';
  if (c >= 'a' && c < 'a' + n && (after_paren || end || next == ')' || next == '.')) return c - 'a';
  return std::nullopt;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Letters stated explicitly: after "answer is" or "answer:" (optional spaces and one "(").
std::set<int> explicit_letters(std::string_view text, int n) {
  std::set<int> found;
  std::string lo = lower(text);
  for (std::string_view key : {std::string_view("answer is"), std::string_view("answer:")}) {
    size_t p = 0;
    while ((p = lo.find(key, p)) != std::string::npos) {
      size_t i = p + key.size();
      p = i;
      while (i < lo.size() && lo[i] == ' ') ++i;
      bool paren = i < lo.size() && lo[i] == '(';
      if (paren) ++i;
      if (auto idx = letter_at(text, i, paren, n)) found.insert(*idx);
    }
  }
  return found;
}

// Standalone upper-case option letters (not part of a word).
std::set<int> standalone_letters(std::string_view text, int n) {
  std::set<int> found;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c < 'A' || c >= 'A' + n) continue;
    bool left = i == 0 || !is_alnum(text[i - 1]);
    bool right = i + 1 >= text.size() || !is_alnum(text[i + 1]);
    if (left && right) found.insert(c - 'A');
  }
  return found;
}
}  // namespace

std::string completion_prompt(const McItem& item) { return question_block(item) + "Answer:"; }

std::string chat_prompt(const McItem& item) {
  return question_block(item) + "Answer with the letter of the correct option.";
}

std::optional<int> extract_answer(std::string_view output, int num_options) {
  if (num_options < 1 || num_options > 10) return std::nullopt;
  std::set<int> stated = explicit_letters(output, num_options);
  if (stated.size() == 1) return *stated.begin();
  if (stated.size() > 1) return std::nullopt;
  std::set<int> loose = standalone_letters(output, num_options);
  size_t b = output.find_first_not_of(" \t\r\n");
  if (b != std::string_view::npos) {
    bool paren = output[b] == '(';
    if (auto idx = letter_at(output, paren ? b + 1 : b, paren, num_options)) {
      loose.erase(*idx);
      if (loose.empty()) return idx;
      return std::nullopt;
    }
  }
  if (loose.size() == 1) return *loose.begin();
  return std::nullopt;
}

}  // namespace plumb::gates
