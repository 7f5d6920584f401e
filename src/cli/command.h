// How a subcommand joins the `plumb` binary: each cmd_<name>.cpp defines a setup function that adds
// its CLI11 subcommand and registers it with PLUMB_COMMAND. The subcommand's callback sets the
// process exit code through set_exit_code(); it never calls exit() itself.
#pragma once

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace plumb::cli {

using CommandSetup = void (*)(CLI::App& root);

// order: position in `plumb --help` (lower first).
struct CommandRegistrar {
  CommandRegistrar(int order, CommandSetup setup);
};

void set_exit_code(int code);
int exit_code();

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // the job ran and its verdict is negative (gate failed, run invalid)
inline constexpr int kExitUsage = 2;   // bad flags or input
inline constexpr int kExitError = 3;   // could not do the job (I/O, server unreachable, ...)

// The exit code for a failed Status: bad input (InvalidArgument, NotFound) is a usage error,
// anything else means the job could not be done.
inline int exit_for(const Status& s) {
  return s.code() == Code::kInvalidArgument || s.code() == Code::kNotFound ? kExitUsage : kExitError;
}

// A step that could not do the job: whatever caused it, the command exits with kExitError
// (exit_for) and prints `message`.
inline Status job_error(std::string message) { return {Code::kUnavailable, std::move(message)}; }

}  // namespace plumb::cli

#define PLUMB_COMMAND(order, fn) \
  static ::plumb::cli::CommandRegistrar PLUMB_CONCAT(plumb_cmd_, __LINE__)(order, fn)
