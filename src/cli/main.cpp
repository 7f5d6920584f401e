// The `plumb` binary: a thin shell over the modules. Every subcommand lives in its own cmd_*.cpp.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "core/log.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "plumb_build_info.h"

namespace plumb::cli {
namespace {
std::vector<std::pair<int, CommandSetup>>& registry() {
  static std::vector<std::pair<int, CommandSetup>> r;
  return r;
}
int g_exit_code = kExitOk;
}  // namespace

CommandRegistrar::CommandRegistrar(int order, CommandSetup setup) { registry().emplace_back(order, setup); }
void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

}  // namespace plumb::cli

namespace {

int run_main(int argc, char** argv) {
  using namespace plumb::cli;
  std::signal(SIGPIPE, SIG_IGN);
  plumb::stop_child_groups_on_fatal_signals();  // Ctrl-C must not orphan launched servers
  plumb::keep_multicast_off();                  // every engine and job plumb starts inherits it
  CLI::App app{
      "plumb: measure, compare, gate and tune LLM inference servers, with numbers that can be trusted.\n"
      "Every job also runs out of the box on plumb's own reference engine and shipped model.\n"
      "Run 'plumb <command> --help' for what a command does and its flags."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("plumb ") + PLUMB_VERSION + " (" + PLUMB_GIT_COMMIT + ", " +
                                        PLUMB_BUILD_TYPE + ", " + PLUMB_COMPILER + ")");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")->capture_default_str();
  app.parse_complete_callback([&] { plumb::log::init(log_level); });

  auto& reg = plumb::cli::registry();
  std::stable_sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : reg) setup(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  return exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  // Errors travel as Status; an exception reaching here is a bug, reported rather than aborting.
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plumb: internal error: %s (please report it)\n", e.what());
    return plumb::cli::kExitError;
  }
}
