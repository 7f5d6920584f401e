#include "core/lines.h"

namespace plumb {

void for_each_nonblank_line(std::string_view text, const std::function<bool(std::string_view, size_t)>& fn) {
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (!fn(line, line_no)) return;
  }
}

}  // namespace plumb
