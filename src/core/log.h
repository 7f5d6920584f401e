// Logging: spdlog to stderr (and optionally a file). Use plumb::log::info("model loaded: {} layers", n).
// Key=value style in messages ("event=run_start run_id=42") keeps logs greppable and parseable.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace plumb::log {

// level: "trace", "debug", "info", "warn", "error", "off". file: also append to this file if set.
void init(const std::string& level = "info", const std::string& file = "");

using spdlog::debug;
using spdlog::error;
using spdlog::info;
using spdlog::trace;
using spdlog::warn;

}  // namespace plumb::log
