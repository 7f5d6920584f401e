// The built-in adapter TOML files (src/launch/adapters/*.toml), compiled in by CMake.
#pragma once

#include <span>
#include <string_view>

namespace plumb::launch {

struct BuiltinAdapterSource {
  std::string_view name;  // file stem, e.g. "vllm"
  std::string_view toml;  // file contents
};
std::span<const BuiltinAdapterSource> builtin_adapter_sources();

}  // namespace plumb::launch
