// Engine adapters: how to start an inference server from plumb's parameter names.
//
// An adapter is a TOML file (format in docs/architecture.md, "## launch"; the built-in ones live in
// src/launch/adapters/ and are compiled into the binary):
//   name = "vllm"
//   command = ["vllm", "serve", "{model}", "--port", "{port}"]   # argv template
//   health_url = "http://{host}:{port}/health"                    # GET answers 200 when ready
//   readiness_timeout_s = 900                                     # > 0
//   log_file = "vllm-{port}.log"                                  # stdout+stderr of the engine
//   [env]       KEY = "value with {placeholders}"
//   [defaults]  param = value                                     # used when the config omits it
//   [[flags]]   param = "max_num_seqs"  flag = "--max-num-seqs"  type = "int"
// Flag entries map one plumb parameter to the engine's real flag. type is int | float | bool |
// string | args. Values become two argv tokens ("--flag", "value"), or one ("--flag=value") with
// joined = true. Booleans: bool_style = "switch" (default) emits `flag` when true and `false_flag`
// when false (either may be absent: SGLang's radix cache has only --disable-radix-cache);
// bool_style = "value" emits "flag=true" / "flag=false". type = "args" takes an array of strings
// appended verbatim at the end (an escape hatch for flags the adapter does not map).
//
// Placeholders "{name}" in command, health_url, log_file and env values are replaced by the
// parameter's value; {port} is always available (the launch port). A parameter consumed by a
// placeholder is not also emitted as a flag. Flags are emitted in the adapter's [[flags]] order.
//
// Thread-safety: pure functions over values.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace plumb::launch {

// A parameter value as given in a configuration file (TOML scalar or array of strings).
using ParamValue = std::variant<bool, int64_t, double, std::string, std::vector<std::string>>;
using Params = std::map<std::string, ParamValue>;

// A value as JSON: bool, integer, number, string, or an array of strings.
json::value param_to_json(const ParamValue& v);

// The text a value takes on a command line: ints in decimal, floats in the shortest form that
// round-trips ("0.9", "1e-05"), bools "true"/"false", arrays joined by spaces.
std::string format_value(const ParamValue& v);

enum class ParamType { kInt, kFloat, kBool, kString, kArgs };

struct FlagSpec {
  std::string param;                    // plumb's parameter name, e.g. "max_num_seqs"
  std::string flag;                     // the engine's flag, e.g. "--max-num-seqs"; may be empty for bools
  std::string false_flag;               // bools with the "switch" style: emitted when false (may be empty)
  ParamType type = ParamType::kString;  // what values the parameter accepts
  bool bool_as_value = false;           // bools: "flag=true|false" instead of a switch
  bool joined = false;                  // non-bools: "flag=value" as one token
};

struct Adapter {
  std::string name;                                     // e.g. "vllm"
  std::vector<std::string> command;                     // argv template, command[0] the program
  std::string health_url;                               // template; GET -> 200 means ready
  std::chrono::milliseconds readiness_timeout{60'000};  // how long start-up may take
  std::string log_file;                                 // template; relative to the launch directory
  std::map<std::string, std::string> env;               // templates, added to the environment
  Params defaults;                                      // parameter values used when not given
  std::vector<FlagSpec> flags;                          // in emission order
};

// Parses an adapter. InvalidArgument naming the field for a missing/ill-typed field, an unknown
// type or bool_style, an empty command, a duplicate param or a non-positive timeout.
Result<Adapter> parse_adapter(std::string_view toml_text, std::string_view source_name = "adapter");
// NotFound if the file is missing; otherwise as parse_adapter.
Result<Adapter> load_adapter_file(const std::string& path);
// The built-in adapters: "plumb", "vllm", "sglang", "llamacpp". NotFound listing them otherwise.
Result<Adapter> builtin_adapter(std::string_view name);
std::vector<std::string> builtin_adapter_names();
// The TOML text of a built-in adapter (for `--print`-style output and docs); NotFound as above.
Result<std::string> builtin_adapter_text(std::string_view name);
// A built-in name, or else a path to an adapter TOML file.
Result<Adapter> resolve_adapter(const std::string& name_or_path);

// What to run: the rendered command for one launch.
struct LaunchSpec {
  std::string adapter;                                  // adapter name
  std::vector<std::string> argv;                        // argv[0] is the program (PATH lookup if no '/')
  std::map<std::string, std::string> env;               // added to the parent's environment
  std::string health_url;                               // fully rendered
  std::string host;                                     // host of health_url (the port is checked there)
  uint16_t port = 0;                                    // the launch port
  std::chrono::milliseconds readiness_timeout{60'000};  // from the adapter
  std::string log_file;                                 // rendered (relative paths: to the launch dir)
};

// Renders an adapter with parameters (given values override [defaults]) for `port`.
// InvalidArgument for a parameter the adapter neither maps nor uses in a placeholder (listing the
// ones it knows), a value of the wrong type (an int is accepted where a float is expected), a
// placeholder with no value, or a port of 0.
Result<LaunchSpec> render(const Adapter& adapter, const Params& params, uint16_t port);

// An engine configuration file (what `plumb compare` arms and tuner trials use):
//   adapter = "plumb"            # built-in name or a path (relative to the config file)
//   [params]
//   engine = "synthetic"
//   max_num_seqs = 8
struct EngineConfig {
  std::string adapter;  // as written
  Adapter resolved;     // the adapter it names
  Params params;        // the [params] table
};
Result<EngineConfig> parse_engine_config(std::string_view toml_text, const std::string& base_dir = ".");
Result<EngineConfig> load_engine_config(const std::string& path);
// Canonical JSON {"adapter": <adapter name>, "params": {sorted}} (no port): what is hashed and stored.
std::string engine_config_json(const EngineConfig& c);

}  // namespace plumb::launch
