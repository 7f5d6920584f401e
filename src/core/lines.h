// Line-oriented text (JSON Lines files, request sets, datasets): one walk over the lines that
// every reader shares.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace plumb {

// Calls fn(line, line_no) for each line of text (split at '\n', without the '\n') that is not blank
// (not only spaces, tabs or CRs); line_no counts every line, blank ones too, from 1. Stops after
// the first call that returns false.
void for_each_nonblank_line(std::string_view text, const std::function<bool(std::string_view, size_t)>& fn);

}  // namespace plumb
