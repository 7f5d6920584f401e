// The built-in search spaces (src/tune/spaces/*.toml), compiled in by CMake.
#pragma once

#include <span>
#include <string_view>

namespace plumb::tune {

struct BuiltinSpaceSource {
  std::string_view name;  // file stem = the adapter it tunes, e.g. "vllm"
  std::string_view text;  // file contents (TOML)
};
std::span<const BuiltinSpaceSource> builtin_space_sources();

}  // namespace plumb::tune
